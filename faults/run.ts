/**
 * `npm run faults [-- --seed N --faults 1000 --minutes 60 --shapes a,b --kafka|--all-shapes --keep]`: the fault
 * suite from the command line. Prints every fault and every violation (each with the seed), then
 * one summary line; exits 0 with no violation, 1 with any, 2 on a usage error.
 */
import { Command, InvalidArgumentError } from 'commander';
import { runSuite } from './suite.js';

function int(name: string) {
  return (v: string): number => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < 0)
      throw new InvalidArgumentError(`${name} must be an integer >= 0, got "${v}"`);
    return n;
  };
}

const o = new Command()
  .name('faults')
  .exitOverride((err) => process.exit(err.exitCode === 0 ? 0 : 2))
  .option('--seed <n>', 'seed of every choice (default: random, printed)', int('--seed'))
  .option('--faults <n>', 'faults to inject in all', int('--faults'), 1000)
  .option(
    '--minutes <n>',
    'time budget; the shapes stop injecting when it is spent',
    int('--minutes'),
    90,
  )
  .option('--shapes <names>', 'comma-separated shape names (default: all)')
  .option('--no-tmpfs', 'no disk-full or read-only faults')
  .option('--no-net', 'no network faults (net-partition, net-loss)')
  .option(
    '--kafka',
    'the Kafka shapes (a 1-node and a 3-node cluster started by the suite; broker faults)',
    false,
  )
  .option('--all-shapes', 'the journal shapes and the Kafka shapes in one run', false)
  .option(
    '--port-base <port>',
    "first port of the topologies' operations API (default 19161, Kafka 19181)",
    int('--port-base'),
  )
  .option(
    '--parallel <n>',
    'shapes run at the same time (default 1); each lane gets the whole time budget',
    int('--parallel'),
    1,
  )
  .option('--dir <dir>', 'working directory (default: a fresh one in the temp directory)')
  .option('--keep', 'keep the working directory (logs) after a clean run', false)
  .parse()
  .opts<{
    seed?: number;
    faults: number;
    minutes: number;
    shapes?: string;
    tmpfs: boolean;
    net: boolean;
    kafka: boolean;
    allShapes: boolean;
    portBase?: number;
    dir?: string;
    keep: boolean;
    parallel: number;
  }>();

const seed = o.seed ?? Math.floor(Math.random() * 2 ** 31);
const result = await runSuite({
  seed,
  faults: o.faults,
  budgetMs: o.minutes * 60_000,
  shapes: o.shapes?.split(','),
  tmpfs: o.tmpfs,
  net: o.net,
  kafka: o.kafka,
  all: o.allShapes,
  portBase: o.portBase,
  dir: o.dir,
  keep: o.keep,
  parallel: o.parallel,
});
console.log(
  JSON.stringify({ event: 'faults-done', ...result, violations: result.violations.length }),
);
console.log(
  `faults: seed ${seed}: ${result.faults} faults, ${result.violations.length} violations in ${(result.durationMs / 1000).toFixed(0)} s` +
    `${result.violations.length ? ` (logs in ${result.dir}; replay: npm run faults -- --seed ${seed} --faults ${o.faults}${o.parallel > 1 ? ` --parallel ${o.parallel}` : ''}${o.kafka ? ' --kafka' : ''})` : ''}`,
);
for (const v of result.violations) console.log(v);
process.exit(result.violations.length ? 1 : 0);
