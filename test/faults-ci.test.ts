/**
 * The CI subset of the fault suite (issue 13 §1; the whole suite is `npm run faults`): 50 faults
 * injected into `sluice run` of the bank job on SQLite and of the lww-product service with
 * LAST_WRITTEN + INPUTS and with OUTPUT (kill -9 of the process, worker threads ending or
 * throwing, the data directory full when tmpfs can be mounted), with every invariant checked
 * after each fault and at the end. SLUICE_TEST_SEED replays a seed; SLUICE_FAULTS_CI_FAULTS
 * changes the count.
 * test-timeout-s: 600 (50 faults, each waited out: 250 s on a quiet machine)
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { runSuite } from '../faults/suite.js';

const FAULTS = Number(process.env.SLUICE_FAULTS_CI_FAULTS ?? 50);

test(`${FAULTS} faults across the bank job and two restart strategies: no violation`, async () => {
  // A fixed seed in CI (30860: 50 faults, 0 violations in a clean-clone run), so CI is repeatable;
  // SLUICE_TEST_SEED=random draws one. Seed 538597 once made `sluice run` exit 1: a disk-full
  // fault over a wall-clock minute boundary, where the statistics recorder's ENOSPC was uncaught
  // (fixed; test/faults-disk-full.test.ts reproduces it without depending on the clock).
  const env = process.env.SLUICE_TEST_SEED;
  const seed = env === 'random' ? Date.now() % 1_000_000 : Number(env ?? 30860);
  const lines: string[] = [];
  const result = await runSuite({
    seed,
    faults: FAULTS,
    budgetMs: 20 * 60_000,
    portBase: 19171,
    shapes: ['bank-sqlite', 'service-last-written-inputs', 'service-output'],
    out: (l) => lines.push(l),
  });
  process.stdout.write(
    `\n  seed ${seed}: ${result.faults} faults (${JSON.stringify(result.byFault)}) in ${(result.durationMs / 1000).toFixed(0)} s, ${result.violations.length} violations\n`,
  );
  assert.is(
    result.violations.length,
    0,
    `seed ${seed} (replay: SLUICE_TEST_SEED=${seed}); logs in ${result.dir}:\n${result.violations.join('\n')}`,
  );
  assert.is(
    result.faults,
    FAULTS,
    `seed ${seed}: only ${result.faults} of ${FAULTS} faults injected:\n${lines.slice(-20).join('\n')}`,
  );
});

test.run();
