/**
 * `sluice/bus`: the bus API (topics, partitions, transactional producers, consumer groups) and
 * its backends: `createJournalBus({ dir })` (embedded, durable), `createMemoryBus()` (tests) and
 * `createKafkaBus({ brokers })`. The message patterns (`sluice/patterns`) run on any of them.
 */
export * from './engine/bus/types.js';
export { murmur2, partitionForKey } from './engine/bus/partitioner.js';
export {
  createJournalBus,
  createKafkaBus,
  createMemoryBus,
  mockClusterAssigners,
  type JournalBusOptions,
  type KafkaBusOptions,
} from './engine/bus/index.js';
