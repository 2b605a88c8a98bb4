/**
 * The pattern conformance suite with its processors run as actors from a topology file on the
 * real broker (testing/kafka-broker.ts): the topology's bus is `kind: kafka`, and each processor
 * actor connects to the broker from its own worker thread.
 */
import { createKafkaBus } from '../engine/bus/index.js';
import { testKafka } from '../testing/kafka-broker.js';
import { patternConformance } from './patterns-conformance.js';
import { actorRunner } from './patterns-runners.js';

const kafka = await testKafka();

patternConformance(
  'kafka',
  async () => ({
    bus: createKafkaBus({ brokers: kafka.brokers }),
    reopen: async () => createKafkaBus({ brokers: kafka.brokers }),
    crashChild: { kind: 'kafka', brokers: kafka.brokers },
  }),
  {
    runner: actorRunner(kafka.brokers),
    sessionTimeoutMs: 3000,
    after: () => kafka.release(),
    testTimeoutMs: 45_000,
  },
);
