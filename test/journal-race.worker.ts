/**
 * Appender side of test/journal-race.test.ts: appends `records` records of 100 bytes
 * ([index u32][filler]) in flushes of 1000 (fsync 'batch': the tailer catches up during each fdatasync, so its reads meet the next write at the live end), then
 * an empty end record. workerData: { dir, records, notifier }.
 */
import { workerData } from 'node:worker_threads';
import { Appender } from '../engine/journal/index.js';

const { dir, records, notifier } = workerData as {
  dir: string;
  records: number;
  notifier: SharedArrayBuffer;
};
const a = Appender.open({ dir, fsync: 'batch', notifier, segmentBytes: 1 << 30 });
const b = Buffer.alloc(100, 0x5a);
for (let i = 0; i < records; i++) {
  b.writeUInt32LE(i, 0);
  a.append(b);
  if (i % 1000 === 999) a.flush();
}
a.append(new Uint8Array(0));
a.close();
