/**
 * Child of queue-retention.test.ts: one queue retention pass over the topology file argv[2]
 * (actors/queue-retention.ts, so SLUICE_RETENTION_FAULT applies), its report as JSON on stdout.
 */
import { loadTopology } from '../index.js';
import { startQueueRetention } from '../actors/queue-retention.js';

const topology = loadTopology(process.argv[2]!);
const runner = await startQueueRetention(
  topology,
  (e) => {
    throw e;
  },
  0,
);
if (!runner) throw new Error(`${topology.file}: no queue sets retention`);
process.stdout.write(JSON.stringify(runner.pass()));
runner.stop();
