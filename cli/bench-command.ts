/**
 * `sluice bench <topology>`: the benchmark harness (engine/harness) from the command line.
 */
import { readFileSync } from 'node:fs';
import type { Command } from 'commander';
import { InvalidArgumentError } from 'commander';
import { loadTopology } from '../engine/config/index.js';
import { BENCH_DEFAULTS, formatBenchReport, runBench } from '../engine/harness/index.js';

/** Registers `bench` on `program`; `intOption(name, min)` parses an integer option. */
export function addBenchCommand(
  program: Command,
  intOption: (name: string, min: number) => (v: string) => number,
): void {
  program
    .command('bench')
    .argument('<topology>', 'topology YAML file (run on a scratch data directory, never its own)')
    .option(
      '--rate <n>',
      'records per second in all, split over the source queues; 0: as fast as possible',
      intOption('--rate', 0),
      BENCH_DEFAULTS.ratePerSecond,
    )
    .option(
      '--duration-s <s>',
      'seconds of input',
      intOption('--duration-s', 1),
      BENCH_DEFAULTS.durationMs / 1000,
    )
    .option(
      '--record-bytes <n>',
      'approximate JSON size of a synthetic record',
      intOption('--record-bytes', 1),
      BENCH_DEFAULTS.recordBytes,
    )
    .option(
      '--keys <n>',
      'distinct keys (k0, k1, ...)',
      intOption('--keys', 1),
      BENCH_DEFAULTS.keys,
    )
    .option(
      '--skew <s>',
      'Zipf exponent of the key distribution; 0: uniform',
      (v: string) => {
        const n = Number(v);
        if (!Number.isFinite(n) || n < 0)
          throw new InvalidArgumentError(`--skew must be a number >= 0, got "${v}"`);
        return n;
      },
      BENCH_DEFAULTS.skew,
    )
    .option('--seed <n>', 'seed of the key sequence', intOption('--seed', 0), BENCH_DEFAULTS.seed)
    .option(
      '--template <file>',
      'a JSON file used as every record\'s value; strings "$key", "$seq", "$ts" are replaced',
    )
    .option(
      '--queue <name...>',
      'source queues to feed (default: every queue some service reads and nothing in the topology writes)',
    )
    .option(
      '--data-dir <dir>',
      'scratch data directory, kept afterwards (default: a temporary one, removed)',
    )
    .option(
      '--catch-up-s <s>',
      'longest wait for the services to catch up after the input ends',
      intOption('--catch-up-s', 1),
      BENCH_DEFAULTS.catchUpTimeoutMs / 1000,
    )
    .option('--json', 'print the report as JSON', false)
    .description(
      'benchmark a topology: generate input into its source queues, run it, print events/s, lag, parks, restarts and CPU per actor',
    )
    .action(
      async (
        file: string,
        opts: {
          rate: number;
          durationS: number;
          recordBytes: number;
          keys: number;
          skew: number;
          seed: number;
          template?: string;
          queue?: string[];
          dataDir?: string;
          catchUpS: number;
          json: boolean;
        },
      ) => {
        const topology = loadTopology(file);
        let template: unknown = null;
        if (opts.template !== undefined) {
          try {
            template = JSON.parse(readFileSync(opts.template, 'utf8'));
          } catch (e) {
            throw new Error(`--template ${opts.template}: ${(e as Error).message}`);
          }
        }
        const report = await runBench(topology, {
          ratePerSecond: opts.rate,
          durationMs: opts.durationS * 1000,
          recordBytes: opts.recordBytes,
          keys: opts.keys,
          skew: opts.skew,
          seed: opts.seed,
          template,
          queues: opts.queue ?? null,
          dataDir: opts.dataDir ?? null,
          catchUpTimeoutMs: opts.catchUpS * 1000,
          log: opts.json ? () => {} : (line) => console.error(`sluice: ${line}`),
        });
        console.log(opts.json ? JSON.stringify(report, null, 2) : formatBenchReport(report));
        if (!report.caughtUp) process.exitCode = 1;
      },
    );
}
