/**
 * Child process of the journal bus kill -9 test. Usage:
 *   node bus-journal-crash.child.js <dir> <faultAfter> <fault> [checkpointBytes]
 * Opens the journal bus at <dir>, then commits transactions forever: transaction k sends three
 * records "t<k>" to partition 0 and three to partition 1 of topic "out", and commits the position
 * k + 1 of "in"/0 for group "g" (k starts at the committed position). After <faultAfter> commits
 * it sets SLUICE_BUS_FAULT=<fault> (when not "-"), so the next commit SIGKILLs the process inside
 * the commit; otherwise the parent kills it. Writes "committed <k>" after each commit.
 */
import fs from 'node:fs';
import { createJournalBus } from '../engine/bus/index.js';

const [dir, faultAfterArg, fault, checkpointBytesArg] = process.argv.slice(2);
const faultAfter = Number(faultAfterArg);
const bus = await createJournalBus({
  dir,
  fsync: 'none',
  ...(checkpointBytesArg
    ? { checkpointBytes: Number(checkpointBytesArg), segmentBytes: 4096 }
    : {}),
});
await bus.createTopics([
  { name: 'in', partitions: 1 },
  { name: 'out', partitions: 2 },
]);
let k = (await bus.committed('g', [{ topic: 'in', partition: 0 }]))[0] ?? 0;
const producer = await bus.producer({ transactionalId: 'crash-child' });
const enc = new TextEncoder();
for (let done = 0; ; done++) {
  if (done === faultAfter && fault !== '-') process.env.SLUICE_BUS_FAULT = fault;
  const t = await producer.begin();
  const value = enc.encode(`t${k}`);
  await t.send(
    [0, 0, 0, 1, 1, 1].map((partition) => ({ topic: 'out', key: null, value, partition })),
  );
  await t.sendOffsets('g', [{ topic: 'in', partition: 0, offset: k + 1 }]);
  await t.commit();
  fs.writeSync(1, `committed ${k}\n`);
  k++;
}
