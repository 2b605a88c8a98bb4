/**
 * The ring's own cost without a second core: one thread writes records with the ring producer
 * (batched publish) and reads them back with the consumer, against a bare loop that writes the
 * same [length][type][payload] records into a SharedArrayBuffer with no synchronization. The
 * ratio separates the ring's per-record work from the cross-core transfer that bench/ring.ts's
 * two-thread numbers also contain. Runnable: node dist/bench/ring-single.js
 */
import { createRing, RingProducer, RingConsumer } from '../engine/ring/index.js';

/** Returns a markdown table: ns/record for ring write+read and bare write, at 64 B and 1 KiB. */
export async function runRingSingleThreadBench(rounds = 5): Promise<string> {
  const rows: string[] = [
    '| record | ring write+read ns/record | bare write ns/record | ring / bare |',
    '| --- | ---: | ---: | ---: |',
  ];
  for (const size of [64, 1024]) {
    const payload = new Uint8Array(size - 8);
    const n = size === 64 ? 20_000_000 : 4_000_000;
    // One thread is producer and consumer: a batch must fit in the ring, or write() waits forever.
    const batch = Math.min(1000, Math.floor((1 << 20) / (size + 8) / 2));
    const ring: number[] = [];
    const bare: number[] = [];
    for (let r = 0; r < rounds; r++) {
      const sab = createRing(1 << 20);
      const p = new RingProducer(sab);
      const c = new RingConsumer(sab);
      let sink = 0;
      const handler = (_t: number, b: Uint8Array, off: number) => {
        sink += b[off];
      };
      let t = performance.now();
      for (let i = 0; i < n; i += batch) {
        p.beginBatch();
        for (let j = 0; j < batch; j++) p.write(1, payload);
        p.endBatch();
        while (c.read(handler, batch) > 0); // a read may stop at the wrap; drain it all
      }
      ring.push(((performance.now() - t) * 1e6) / n);
      const bytes = new Uint8Array(new SharedArrayBuffer(1 << 20));
      const i32 = new Int32Array(bytes.buffer);
      let pos = 0;
      t = performance.now();
      for (let i = 0; i < n; i++) {
        if (pos + size > bytes.length) pos = 0;
        i32[pos >> 2] = size;
        i32[(pos >> 2) + 1] = 1;
        bytes.set(payload, pos + 8);
        pos += size;
      }
      bare.push(((performance.now() - t) * 1e6) / n);
      if (sink < 0) throw new Error('unreachable');
    }
    const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
    rows.push(
      `| ${size} B | ${med(ring).toFixed(1)} | ${med(bare).toFixed(1)} | ${(med(ring) / med(bare)).toFixed(2)}x |`,
    );
  }
  return `One thread, median of ${rounds} rounds.\n\n${rows.join('\n')}\n`;
}

if (process.argv[1] && new URL(import.meta.url).pathname === process.argv[1])
  console.log(await runRingSingleThreadBench());
