/**
 * The kill -9 cases of test/replay-crash-cases.ts on the real Kafka broker (issue 8): a child
 * process running a service on Kafka is killed 10 times at random moments per restart strategy;
 * every restart rebuilds the reference state from the output topic, and a read_committed
 * reader of the output sees each input's effect exactly once. CI runs the first strategy;
 * SLUICE_KAFKA_CRASH=all (`npm run test:kafka-services`) runs every one.
 * test-timeout-s: 600 (a kill -9 loop: each restart waited out)
 */
import { test } from 'uvu';
import { crashTests } from './replay-crash-cases.js';
import { kafkaBackend } from './lib/backends.js';
import { testKafka } from '../testing/index.js';

crashTests('kafka', async () => kafkaBackend('replay-crash', await testKafka()));

test.run();
