/**
 * `npm run bench:peers`: the benchmarks against peers on the JVM, in one process, printed as
 * markdown for bench/RESULTS.md. Needs Java 17+ and Maven (the harnesses under bench/peers/ are
 * built with `mvn -q -B` on first use, from Maven Central, and cached in target/), and for the
 * Debezium peer PostgreSQL 15's server binaries in /usr/lib/postgresql/15/bin.
 *   node dist/bench/peers/run.js [agrona] [debezium]   (default: both)
 * These are harnesses only: nothing under bench/peers/ is a dependency of Sluice.
 */
import { runAgronaBench } from './agrona.js';
import { runDebeziumBench } from './debezium.js';
import { machineLine } from '../lib/report.js';

const suites: Record<string, () => Promise<string>> = {
  agrona: () => runAgronaBench(),
  debezium: () => runDebeziumBench(),
};

const chosen = process.argv.slice(2).length ? process.argv.slice(2) : Object.keys(suites);
for (const name of chosen) {
  if (!suites[name]) {
    throw new Error(`unknown peer "${name}" (known: ${Object.keys(suites).join(', ')})`);
  }
}
console.log(`# Sluice against peers, ${new Date().toISOString().slice(0, 16)} UTC\n`);
console.log(`Machine: ${machineLine()}.\n`);
for (const name of chosen) {
  const t0 = Date.now();
  const md = await suites[name]!();
  console.log(`## ${name}\n\n${md.trim()}\n\n(${((Date.now() - t0) / 1000).toFixed(0)} s)\n`);
}
process.exit(0);
