/**
 * autocannon in a process of its own, for bench/ops-overhead.ts `--cannon-nice N`: the parent
 * starts it under `nice -n N`, so the load generator can give way to the pipeline on the same
 * cores instead of competing with it at the pipeline's priority. Options: one JSON argument
 * (autocannon's options). Runs until its duration ends or SIGTERM, then prints one JSON line:
 * `{ total, perS, p99Ms, non2xx, errors, cpuS }` (cpuS: this process's user + system CPU, s).
 */
import autocannon from 'autocannon';
import { cannonSummary } from './lib/cannon-summary.js';

const options = JSON.parse(process.argv[2] ?? '{}') as Parameters<typeof autocannon>[0];
const instance = autocannon(options);
process.on('SIGTERM', () => instance.stop());
instance.then(
  (r) => console.log(JSON.stringify(cannonSummary(r, process.cpuUsage()))),
  (err: Error) => {
    console.error(`cannon-child: ${err.message}`);
    process.exit(2);
  },
);
