/**
 * Child process of cdc-initial-load-crash.test: runs a topology (pump actors writing the journal)
 * and prints "up" once it runs; exits 0 after every initial load of its capture source is done
 * and its staging table is empty (then drained). The parent kills it with SIGKILL at random
 * moments before that. argv: <topology.yaml>
 */
import { loadTopology, startTopology } from 'sluice';
import { openStaging, readLoadProgress } from '../engine/cdc/index.js';

const topology = loadTopology(process.argv[2]!);
const running = await startTopology(topology, {
  log: (l) => process.stderr.write(`child: ${l}\n`),
});
process.stdout.write('up\n');
const staging = await openStaging(topology.capture[0]!);
for (;;) {
  const progress = await readLoadProgress(staging);
  if (progress.every((p) => p.done) && (await staging.stagedCount()) === 0) break;
  await new Promise((r) => setTimeout(r, 50));
}
await staging.close();
await running.stop();
process.exit(0);
