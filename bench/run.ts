/**
 * `npm run bench`: every benchmark in one run, printed as markdown with the machine described,
 * ready to paste into bench/RESULTS.md.
 *   node dist/bench/run.js [ring] [ring-single] [journal] [codec] [pipeline] [latency] [bus] [bank] [restart] [patterns] [pool] [ops] [triggers]  (default: all)
 * Ratios that matter (ring vs postMessage, Kafka backend vs raw kafkajs) are measured inside
 * one benchmark's run, so a noisy shared machine moves both sides together.
 */
import os from 'node:os';
import { spawn } from 'node:child_process';
import { runRingBench } from './ring.js';
import { runRingSingleThreadBench } from './ring-single.js';
import { runJournalBench } from './journal.js';
import { runCodecBench } from './codec.js';
import { runPipelineBench } from './pipeline.js';
import { runLatencyBench } from './latency.js';
import { runBusBench } from './bus.js';
import { runRestartBench } from './restart.js';
import { main as runPatternsBench } from './patterns.js';
import { runOpsOverheadBench } from './ops-overhead.js';
import { runCaptureTriggersBench } from './capture-triggers.js';
import { main as runPoolBench } from './pool.js';

/** The bank job's own summary lines (SQLite, default settings but a fixed 20 s workload). */
async function runBankBench(): Promise<string> {
  const main = new URL('../examples/bank/main.js', import.meta.url).pathname;
  const out = await new Promise<string>((resolve, reject) => {
    const p = spawn(process.execPath, [main, '--duration-s', '20', '--clients', '4'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let s = '';
    p.stdout.on('data', (b) => (s += b));
    p.stderr.on('data', (b) => (s += b));
    p.on('exit', (code) =>
      code === 0 ? resolve(s) : reject(new Error(`bank job exited ${code}:\n${s}`)),
    );
  });
  const summary = out.slice(out.indexOf('bank summary'));
  return `### Main job (bank, SQLite, scale 1, 4 clients, 20 s)\n\n\`\`\`\n${summary.trim()}\n\`\`\`\n`;
}

const suites: Record<string, () => Promise<string>> = {
  ring: () => runRingBench(),
  'ring-single': () => runRingSingleThreadBench(),
  journal: () => runJournalBench(),
  codec: () => runCodecBench(),
  pipeline: () => runPipelineBench(),
  latency: () => runLatencyBench(),
  bus: () => runBusBench(),
  bank: () => runBankBench(),
  restart: () => runRestartBench(),
  patterns: () => runPatternsBench(),
  pool: () => runPoolBench([]),
  ops: () => runOpsOverheadBench(),
  // PostgreSQL on 127.0.0.1 (SLUICE_BENCH_PG_URL) and pgbench; MariaDB only with SLUICE_BENCH_MARIADB_URL.
  triggers: () => runCaptureTriggersBench(),
};

const chosen = process.argv.slice(2).length ? process.argv.slice(2) : Object.keys(suites);
for (const name of chosen)
  if (!suites[name])
    throw new Error(`unknown benchmark "${name}" (known: ${Object.keys(suites).join(', ')})`);
const cpu = os.cpus()[0]?.model ?? 'unknown CPU';
console.log(`# Sluice benchmarks, ${new Date().toISOString().slice(0, 10)}\n`);
console.log(
  `Machine: ${os.cpus().length} CPUs (${cpu}), ${(os.totalmem() / 2 ** 30).toFixed(0)} GiB, ${os.platform()} ${os.release()}, Node ${process.version}.\n`,
);
for (const name of chosen) {
  const t0 = Date.now();
  const md = await suites[name]();
  console.log(`## ${name}\n\n${md.trim()}\n\n(${((Date.now() - t0) / 1000).toFixed(0)} s)\n`);
}
process.exit(0);
