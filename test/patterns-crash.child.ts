/**
 * Crash child of the pattern conformance suite. Usage:
 *   node patterns-crash.child.js <busSpecJson> <input> <output> <groupId> <transactionalId> <crashAtBatch> [<fencing> <sessionTimeoutMs>]
 * Runs the durable pattern with the echo processor and SIGKILLs itself after the sends of batch
 * number <crashAtBatch> (1-based), before its commit: a crash between processing and commit.
 */
import { startDurable, stringCodec } from '../engine/patterns/index.js';
import { echoProcessor, openChildBus, type ChildBusSpec } from './patterns-helpers.js';

const [specJson, input, output, groupId, transactionalId, crashAtArg, fencing, sessionTimeoutMs] =
  process.argv.slice(2);
const bus = await openChildBus(JSON.parse(specJson) as ChildBusSpec);
let batches = 0;
const sub = startDurable({
  bus,
  groupId,
  topics: [input],
  transactionalId,
  codec: stringCodec,
  processor: echoProcessor(output),
  batchSizeMax: 10,
  ...(fencing ? { fencing: fencing as 'member' | 'partition' } : {}),
  ...(sessionTimeoutMs ? { sessionTimeoutMs: Number(sessionTimeoutMs) } : {}),
  faults: {
    beforeCommit: () =>
      void (++batches === Number(crashAtArg) && process.kill(process.pid, 'SIGKILL')),
  },
});
await sub.done;
