/**
 * Journal bus memory benchmark: resident memory of one process that writes and consumes a
 * growing history on the journal bus (engine/bus/journal), to show that memory does not grow with
 * the history (the partitions keep a bounded hot window in memory and read older records back
 * from their segment files; checkpoints truncate the transaction log).
 *
 *   node --expose-gc dist/bench/bus-memory.js
 *
 * Method: one topic of 4 partitions on a fresh directory under the OS temp directory (deleted at
 * the end), fsync 'none' (syncs do not change memory; the run stays short), the bus's default
 * hot window and checkpoint size. Up to each mark of BUS_MEMORY_MARKS (default 1,000,000 and
 * 10,000,000 records of history), transactions of 1000 records (100-byte values carrying a
 * sequence number, keys `k<i % 1000>`, round-robin over the partitions) are committed, then a
 * consumer group member reads every new record (polls of 500, a commit per poll) and checks the
 * sequence numbers (none lost, none twice, in order per partition). At each mark, after
 * `global.gc()` twice: `process.memoryUsage()` rss and heapUsed, and the directory's bytes.
 * Everything runs in one process, consumed records are dropped as they are checked.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createJournalBus, type BusConsumer } from '../engine/bus/index.js';

const PARTITIONS = 4;
const TXN_RECORDS = 1000;
const VALUE_BYTES = 100;
const MiB = 1024 * 1024;

function marks(): number[] {
  const raw = process.env.BUS_MEMORY_MARKS ?? '1000000,10000000';
  const out = raw.split(',').map((s) => Number(s.trim()));
  if (
    out.some((n, i) => !Number.isSafeInteger(n) || n < TXN_RECORDS || (i > 0 && n <= out[i - 1]))
  ) {
    throw new Error(
      `BUS_MEMORY_MARKS must be ascending integers >= ${TXN_RECORDS}, BUS_MEMORY_MARKS=${raw}`,
    );
  }
  return out;
}

function dirBytes(dir: string): number {
  let n = 0;
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    n += e.isDirectory() ? dirBytes(p) : fs.statSync(p).size;
  }
  return n;
}

function gcNow(): void {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (!gc)
    throw new Error('run with node --expose-gc: the benchmark measures memory after a full GC');
  gc();
  gc();
}

interface Mark {
  records: number;
  rssMiB: number;
  heapUsedMiB: number;
  diskMiB: number;
  writeS: number;
  readS: number;
}

async function consume(c: BusConsumer, count: number, next: number[]): Promise<void> {
  let got = 0;
  while (got < count) {
    const rs = await c.poll({ timeoutMs: 1000 });
    for (const r of rs) {
      const v = r.value!;
      const seq = ((v[0] << 24) | (v[1] << 16) | (v[2] << 8) | v[3]) >>> 0;
      if (seq !== next[r.partition])
        throw new Error(
          `partition ${r.partition}: expected seq ${next[r.partition]}, got ${seq} at offset ${r.offset}`,
        );
      next[r.partition] += PARTITIONS;
    }
    got += rs.length;
    if (rs.length > 0) await c.commit();
  }
}

async function main(): Promise<void> {
  const targets = marks();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-bench-bus-memory-'));
  const out: Mark[] = [];
  try {
    gcNow();
    const start = process.memoryUsage();
    const bus = await createJournalBus({ dir, fsync: 'none' });
    await bus.createTopics([{ name: 'mem', partitions: PARTITIONS }]);
    const producer = await bus.producer({ transactionalId: 'bench-memory' });
    const consumer = await bus.consumer({ groupId: 'bench', pollRecordsMax: 500 });
    await consumer.subscribe(['mem']);
    const next = Array.from({ length: PARTITIONS }, (_, p) => p);
    let written = 0;
    for (const target of targets) {
      const t0 = performance.now();
      const from = written;
      for (; written < target; written += TXN_RECORDS) {
        const t = await producer.begin();
        const batch = new Array(TXN_RECORDS);
        for (let i = 0; i < TXN_RECORDS; i++) {
          const seq = written + i;
          const value = bus.allocValue(VALUE_BYTES);
          value[0] = seq >>> 24;
          value[1] = seq >>> 16;
          value[2] = seq >>> 8;
          value[3] = seq;
          batch[i] = { topic: 'mem', key: `k${seq % 1000}`, value, partition: seq % PARTITIONS };
        }
        await t.send(batch);
        await t.commit();
      }
      const t1 = performance.now();
      await consume(consumer, written - from, next);
      const t2 = performance.now();
      gcNow();
      const m = process.memoryUsage();
      out.push({
        records: written,
        rssMiB: m.rss / MiB,
        heapUsedMiB: m.heapUsed / MiB,
        diskMiB: dirBytes(dir) / MiB,
        writeS: (t1 - t0) / 1000,
        readS: (t2 - t1) / 1000,
      });
      console.log(
        `${written} records: rss ${(m.rss / MiB).toFixed(1)} MiB, arrayBuffers ${(m.arrayBuffers / MiB).toFixed(1)} MiB, heapTotal ${(m.heapTotal / MiB).toFixed(1)} MiB, heapUsed ${(m.heapUsed / MiB).toFixed(1)} MiB, disk ${(dirBytes(dir) / MiB).toFixed(0)} MiB, write ${((t1 - t0) / 1000).toFixed(1)} s, read ${((t2 - t1) / 1000).toFixed(1)} s`,
      );
    }
    await bus.close();
    console.log('');
    console.log(
      `Before opening the bus: rss ${(start.rss / MiB).toFixed(1)} MiB, heapUsed ${(start.heapUsed / MiB).toFixed(1)} MiB.`,
    );
    console.log('');
    console.log(
      '| records of history (written and consumed) | rss after gc | heapUsed after gc | directory on disk | write | consume |',
    );
    console.log('| ---: | ---: | ---: | ---: | ---: | ---: |');
    for (const m of out) {
      console.log(
        `| ${m.records.toLocaleString('en-US')} | ${m.rssMiB.toFixed(1)} MiB | ${m.heapUsedMiB.toFixed(1)} MiB | ${m.diskMiB.toFixed(0)} MiB | ${m.writeS.toFixed(1)} s | ${m.readS.toFixed(1)} s |`,
      );
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

await main();
