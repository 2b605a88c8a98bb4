/**
 * Child process of replay-crash.test: runs a topology until its service has processed every
 * input (per the newest processed record when the service writes them, else per LAST_WRITTEN
 * from the outputs' causes), then drains and exits 0. The parent kills it with SIGKILL at
 * random moments.
 * argv: <topology.yaml> <records per partition> [queues to wait for, comma-separated; default all]
 */
import { loadTopology, startTopology, partitionDir } from 'sluice';
import { computeLastWritten, openQueueLogs } from '../engine/service/index.js';
import { actorBusOf } from '../actors/index.js';
import { scanOutput } from '../engine/replay/index.js';

/** Output records looked at for the newest processed record (more than one batch's outputs). */
const PROCESSED_LOOK_MAX = 4096;
const [file, perPartition] = [process.argv[2], Number(process.argv[3])];
const waitFor = process.argv[4] ? process.argv[4].split(',') : null;
const topology = loadTopology(file);
const svc = topology.services[0];
const inputs = svc.inputs.flatMap((q) => {
  const queue = topology.queues.find((x) => x.name === q)!;
  return Array.from({ length: queue.partitions }, (_, p) => ({ queue: q, partition: p }));
});
const running = await startTopology(topology, {
  log: (l) => process.stderr.write(`child: ${l}\n`),
});
// The parent times most kills from the first input the service handles live, so they land
// mid-stream whatever the machine's load (on Kafka its readers start a second or more after the
// topology is up).
let live = false;
// On either bus: the journal's output directory, or the output topic (read_committed).
const logs = openQueueLogs(actorBusOf(topology));
for (;;) {
  if (!live && (running.supervisor.counters()[`service:${svc.name}`]?.eventsIn ?? 0) > 0) {
    live = true;
    process.stdout.write('live\n');
  }
  const t = logs.tailer({
    queue: svc.output,
    partition: 0,
    dir: partitionDir(topology, svc.output, 0),
  });
  t.moveToEnd();
  // Every batch of a service that writes processed records ends with one, so the newest is among
  // the last records: a bounded look (a service without them would be scanned to its start on
  // every poll, which on Kafka means fetching the whole output topic each time).
  let looked = 0;
  const recent = { previous: () => (looked++ < PROCESSED_LOOK_MAX ? t.previous() : null) };
  let positions = scanOutput(recent, inputs, undefined, svc.output).positions;
  t.moveToEnd();
  if (!positions) positions = Object.values(computeLastWritten(t, inputs).positions);
  t.close();
  if (
    positions.every(
      (p, n) => p === perPartition - 1 || (waitFor !== null && !waitFor.includes(inputs[n].queue)),
    )
  )
    break;
  await new Promise((r) => setTimeout(r, 20));
}
logs.close();
const result = await running.stop();
process.stdout.write(JSON.stringify({ done: true, terminated: result.terminated }) + '\n');
process.exit(0);
