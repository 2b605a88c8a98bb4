#!/usr/bin/env node
/**
 * The `sluice` command line.
 *   sluice check <topology.yaml>           validate a topology file and print its plan
 *   sluice run <topology.yaml>             run it until SIGINT/SIGTERM, then drain and exit 0
 *   sluice tail <topology.yaml> <queue>    print a queue's records as JSON lines
 */
import { Command } from 'commander';
import { ReplayProgress } from './replay-progress.js';
import { loadTopology, ConfigError } from '../engine/config/index.js';
import { startTopology } from '../index.js';
import { planTopology, partitionDir } from '../actors/index.js';
import { Tailer } from '../engine/journal/index.js';
import { EnvelopeView, decodeChange, decodeJson, EVENT_TYPE_CHANGE, EVENT_TYPE_JSON } from '../engine/codec/index.js';

const program = new Command();
program.name('sluice').description('Sluice stream-processing engine').showHelpAfterError();

program
  .command('check')
  .argument('<topology>', 'topology YAML file')
  .description('validate a topology file and print the actor groups it starts')
  .action((file: string) => {
    const t = loadTopology(file);
    const plan = planTopology(t);
    console.log(`${file}: ok (${t.queues.length} queues, ${t.services.length} services, ${t.capture.length} capture sources)`);
    for (const g of plan.groups) console.log(`  stage ${g.stage}  ${g.name}`);
  });

program
  .command('run')
  .argument('<topology>', 'topology YAML file')
  .option('--status-ms <ms>', 'print counters every <ms> milliseconds (0: never)', '5000')
  .description('run a topology until SIGINT/SIGTERM, then drain, flush, fsync and exit 0')
  .action(async (file: string, opts: { statusMs: string }) => {
    const t = loadTopology(file);
    // Replay progress (services rebuilding their state) shows as bars on a terminal while the
    // topology starts; startTopology resolves once every service is live.
    const progress = new ReplayProgress();
    let ticker: NodeJS.Timeout | null = null;
    const running = await startTopology(t, {
      onSupervisor: (sup) => {
        ticker = setInterval(() => progress.update(sup.counters()), 200);
      },
    });
    if (ticker) clearInterval(ticker);
    progress.update(running.supervisor.counters());
    progress.stop();
    console.error(`sluice: ${t.name} is up (${running.plan.groups.length} actor groups); Ctrl-C drains and stops`);
    const statusMs = Number(opts.statusMs);
    const timer = statusMs > 0 ? setInterval(() => printCounters(running.supervisor.counters()), statusMs) : null;
    let stopping = false;
    const stop = async (signal: string) => {
      if (stopping) return;
      stopping = true;
      if (timer) clearInterval(timer);
      console.error(`sluice: ${signal}: draining`);
      const result = await running.stop();
      printCounters(result.counters);
      process.exit(result.terminated.length > 0 ? 1 : 0);
    };
    process.on('SIGINT', () => void stop('SIGINT'));
    process.on('SIGTERM', () => void stop('SIGTERM'));
    running.supervisor.done.catch((e: Error) => {
      console.error(`sluice: ${e.message}`);
      process.exit(2);
    });
  });

program
  .command('tail')
  .argument('<topology>', 'topology YAML file')
  .argument('<queue>', 'queue name')
  .option('-p, --partition <n>', 'partition', '0')
  .option('-n, --limit <n>', 'records to print at most', '100')
  .description('print records of a queue partition as JSON lines')
  .action((file: string, queue: string, opts: { partition: string; limit: string }) => {
    const t = loadTopology(file);
    if (!t.queues.some((q) => q.name === queue)) throw new Error(`unknown queue "${queue}" (known: ${t.queues.map((q) => q.name).join(', ')})`);
    const tailer = Tailer.open({ dir: partitionDir(t, queue, Number(opts.partition)) });
    const view = new EnvelopeView();
    for (let i = 0; i < Number(opts.limit); i++) {
      const rec = tailer.next();
      if (!rec) break;
      view.wrap(rec.bytes, 0, rec.bytes.length);
      const value = view.type === EVENT_TYPE_CHANGE ? decodeChange(view.payload) : view.type === EVENT_TYPE_JSON ? decodeJson(view.payload) : `<${view.payload.length} bytes>`;
      console.log(JSON.stringify({ index: rec.index, type: view.type, key: view.key, eventTimeMs: view.eventTimeMs, cause: { queue: view.causeQueue, partition: view.causePartition, index: view.causeIndex }, value }));
    }
    tailer.close();
  });

function printCounters(counters: Record<string, { state: string; eventsIn: number; eventsOut: number }>): void {
  for (const [name, c] of Object.entries(counters)) console.error(`  ${name.padEnd(48)} ${c.state.padEnd(8)} in=${c.eventsIn} out=${c.eventsOut}`);
}

program.parseAsync().catch((e: unknown) => {
  if (e instanceof ConfigError) console.error(e.message);
  else console.error(`sluice: ${(e as Error).stack ?? e}`);
  process.exit(2);
});
