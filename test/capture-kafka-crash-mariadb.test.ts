/**
 * Capture from MariaDB into Kafka exactly once across kill -9 of `sluice run`, on the real
 * broker, verified against the database (test/lib/capture-kafka-crash.ts): 10 kills at random (5 in npm test)
 * moments and 1 between a Kafka commit and the staging delete.
 * test-timeout-s: 600 (a kill -9 loop: each restart waited out)
 */
import { test } from 'uvu';
import { runCaptureCrash } from './lib/capture-kafka-crash.js';
import { longOr } from './lib/long.js';

/** npm test: 5; npm run test:long: 10 (test/lib/long.ts). */
const KILLS_RANDOM = longOr(10, 5);
const KILLS_AFTER_COMMIT = 1;

test(`mariadb: kill -9 of sluice run ${KILLS_RANDOM} times at random moments and ${KILLS_AFTER_COMMIT} time between a Kafka commit and the staging delete: every change exactly once, in order per key`, async () => {
  await runCaptureCrash('mariadb', {
    killsRandom: KILLS_RANDOM,
    killsAfterCommit: KILLS_AFTER_COMMIT,
    changesMax: 800,
  });
});

test.run();
