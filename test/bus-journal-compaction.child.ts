/**
 * Child process of the kill -9 compaction test. Usage:
 *   node bus-journal-compaction.child.js <dir> <fault>
 * Creates compacted topic "kv" (1 partition, 4 KiB segments) at <dir>, sends 600 records
 * (record i: key k<i % 10>, record 0: key solo; value v<i> padded to 100 bytes), then runs a compaction with
 * SLUICE_BUS_FAULT=<fault>, which SIGKILLs the process inside it.
 */
import { createJournalBus } from '../engine/bus/index.js';

const [dir, fault] = process.argv.slice(2);
const bus = await createJournalBus({
  dir,
  fsync: 'none',
  segmentBytes: 4096,
  maintenanceIntervalMs: 0,
});
await bus.createTopics([{ name: 'kv', partitions: 1, compacted: true }]);
const p = await bus.producer();
const enc = new TextEncoder();
for (let i = 0; i < 600; i += 10) {
  await p.send(
    Array.from({ length: 10 }, (_, j) => ({
      topic: 'kv',
      key: i + j === 0 ? 'solo' : `k${(i + j) % 10}`,
      value: enc.encode(`v${i + j}`.padEnd(100, '.')),
      partition: 0,
    })),
  );
}
process.env.SLUICE_BUS_FAULT = fault;
bus.maintain();
process.stderr.write(`compaction finished without reaching the fault point ${fault}\n`);
