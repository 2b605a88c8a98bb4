/**
 * The bus conformance suite on the kafka backend, against a real Apache Kafka broker
 * (testing/kafka-broker.ts: the run's shared broker, or a private single node). Every test runs;
 * nothing is a known limit.
 */
import { createKafkaBus } from '../engine/bus/index.js';
import { testKafka } from '../testing/kafka-broker.js';
import { busConformance } from './bus-conformance.js';

const kafka = await testKafka();

busConformance('kafka', async () => createKafkaBus({ brokers: kafka.brokers }), {
  // group.min.session.timeout.ms of the test broker is 1000 (tools/kafka/kafka.sh); a short
  // session keeps the group tests short (Kafka's own default minimum is 6000).
  sessionTimeoutMs: 3000,
  after: () => kafka.release(),
  testTimeoutMs: 30_000,
});
