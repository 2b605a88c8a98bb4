/**
 * Producer side of the latency benchmark (bench/latency.ts): appends `count` events of type 100
 * at a steady `rate` events/s to queue `in` of the topology, with openQueueAppender, stamping
 * each event's payload with the time of its append (bench/lib/clock.ts hrtimeUs, float64 LE).
 * Runs as the main of a child process (cross-process case) or is called in the topology's own
 * thread (same-process case).
 *
 *   node dist/bench/latency-producer.js <topology.yaml> <rate> <count>
 *
 * Pacing: the events due by now (rate x elapsed) are appended and flushed together, then the
 * thread naps 100 µs (Atomics.wait); at 50,000 events/s that is a flush per ~5 events.
 */
import { loadTopology, openQueueAppender, type Topology } from '../index.js';
import { hrtimeUs } from './lib/clock.js';
import { isMainModule } from './lib/report.js';

const NAP_MS = 0.1;
const PAYLOAD_BYTES = 16;

/** Appends `count` stamped events at `rate`/s; returns the flushes made. */
export function produceAtRate(
  topology: Topology,
  rate: number,
  count: number,
): { flushes: number; ms: number } {
  const producer = openQueueAppender(topology, 'in');
  const payload = new Uint8Array(PAYLOAD_BYTES);
  const stamp = new DataView(payload.buffer);
  const sleeper = new Int32Array(new SharedArrayBuffer(4));
  const t0 = hrtimeUs();
  let sent = 0;
  let flushes = 0;
  try {
    while (sent < count) {
      const due = Math.min(count, Math.floor(((hrtimeUs() - t0) * rate) / 1e6));
      if (due > sent) {
        for (; sent < due; sent++) {
          stamp.setFloat64(0, hrtimeUs(), true);
          producer.appendBytes(100, `k${sent & 1023}`, payload);
        }
        producer.flush();
        flushes++;
      } else {
        Atomics.wait(sleeper, 0, 0, NAP_MS);
      }
    }
  } finally {
    producer.close();
  }
  return { flushes, ms: (hrtimeUs() - t0) / 1000 };
}

if (isMainModule(import.meta.url)) {
  const [file, rate, count] = process.argv.slice(2);
  const r = produceAtRate(loadTopology(file!), Number(rate), Number(count));
  process.stdout.write(JSON.stringify(r) + '\n');
}
