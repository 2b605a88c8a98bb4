/**
 * Capture from MariaDB into Kafka exactly once across kill -9 of `sluice run`, on the real
 * broker, verified against the database (test/lib/capture-kafka-crash.ts): 10 kills at random
 * moments and 1 between a Kafka commit and the staging delete.
 */
import { test } from 'uvu';
import { runCaptureCrash } from './lib/capture-kafka-crash.js';

const KILLS_RANDOM = 10;
const KILLS_AFTER_COMMIT = 1;

test(`mariadb: kill -9 of sluice run ${KILLS_RANDOM} times at random moments and ${KILLS_AFTER_COMMIT} time between a Kafka commit and the staging delete: every change exactly once, in order per key`, async () => {
  await runCaptureCrash('mariadb', {
    killsRandom: KILLS_RANDOM,
    killsAfterCommit: KILLS_AFTER_COMMIT,
    changesMax: 800,
  });
});

test.run();
