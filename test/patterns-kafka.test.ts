/**
 * The pattern conformance suite on the kafka backend against a real Kafka broker
 * (testing/kafka-broker.ts). Every test runs, with no known limits: the crash test kills a child
 * process (kill -9) in the middle of a transaction, and P1, P2 and P4 of
 * ../shared/cases/patterns.md run as on the other backends.
 */
import { createKafkaBus } from '../engine/bus/index.js';
import { testKafka } from '../testing/kafka-broker.js';
import { patternConformance } from './patterns-conformance.js';

const kafka = await testKafka();

patternConformance(
  'kafka',
  async () => ({
    bus: createKafkaBus({ brokers: kafka.brokers }),
    reopen: async () => createKafkaBus({ brokers: kafka.brokers }),
    crashChild: { kind: 'kafka', brokers: kafka.brokers },
  }),
  {
    sessionTimeoutMs: 3000,
    after: () => kafka.release(),
    testTimeoutMs: 45_000,
  },
);
