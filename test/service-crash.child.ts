/**
 * Child process of service-crash.test: runs a topology until its service has written outputs
 * for every input (LAST_WRITTEN = inputs - 1 on every partition), then drains and exits 0.
 * The parent kills it with SIGKILL at random moments.
 * argv: <topology.yaml> <records per partition>
 */
import { loadTopology, startTopology, partitionDir } from 'sluice';
import { computeLastWritten } from '../engine/service/index.js';
import { Tailer } from '../engine/journal/index.js';

const [file, perPartition] = [process.argv[2], Number(process.argv[3])];
const topology = loadTopology(file);
const svc = topology.services[0];
const inputs = svc.inputs.flatMap((q) => {
  const queue = topology.queues.find((x) => x.name === q)!;
  return Array.from({ length: queue.partitions }, (_, p) => ({ queue: q, partition: p }));
});
const running = await startTopology(topology, {
  log: (l) => process.stderr.write(`child: ${l}\n`),
});
for (;;) {
  const t = Tailer.open({ dir: partitionDir(topology, svc.output, 0) });
  t.moveToEnd();
  const { positions } = computeLastWritten(t, inputs);
  t.close();
  if (Object.values(positions).every((p) => p === perPartition - 1)) break;
  await new Promise((r) => setTimeout(r, 20));
}
const result = await running.stop();
process.stdout.write(JSON.stringify({ done: true, terminated: result.terminated }) + '\n');
process.exit(0);
