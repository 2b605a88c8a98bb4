/**
 * Child process of capture-e2e.test: runs a topology until its capture source's staging table is
 * empty, then drains (readers reach the queue ends, services finish) and exits 0. With
 * SLUICE_FAULT=after-append in the environment, a pump kills this whole process with SIGKILL
 * right after its first append, before it deletes the staged rows.
 * argv: <topology.yaml>
 */
import { loadTopology, startTopology } from 'sluice';
import { openStaging } from '../engine/cdc/index.js';

const topology = loadTopology(process.argv[2]);
const running = await startTopology(topology, {
  log: (l) => process.stderr.write(`child: ${l}\n`),
});
const staging = await openStaging(topology.capture[0]);
while ((await staging.stagedCount()) > 0) await new Promise((r) => setTimeout(r, 20));
await staging.close();
await running.stop();
process.exit(0);
