/**
 * engine/bus public face: the bus API (types), Kafka-compatible partitioning, and the backends.
 *
 * ```ts
 * const bus = createMemoryBus()        // or createJournalBus({ dir }), createKafkaBus({ brokers })
 * await bus.createTopics([{ name: 'orders', partitions: 4 }])
 * const producer = await bus.producer({ transactionalId: 'svc-1' })
 * const txn = await producer.begin()
 * await txn.send([{ topic: 'orders', key: 'o-1', value: bytes }])
 * await txn.sendOffsets(consumer.groupMetadata()!, positions)
 * await txn.commit()
 * const consumer = await bus.consumer({ groupId: 'svc' })
 * await consumer.subscribe(['orders'], { assigned, revoked })
 * for (;;) for (const r of await consumer.poll({ timeoutMs: 100 })) ...
 * ```
 */
export * from './types.js';
export { murmur2, partitionForKey, PartitionResolver, tpKey } from './partitioner.js';
export { checkRecordBytes, recordPlace, RecordTooLargeError } from './record-limit.js';
export { createMemoryBus } from './memory/index.js';
export {
  createJournalBus,
  JOURNAL_BUS_DEFAULTS,
  COMPACTION_DEFAULTS,
  type JournalBus,
  type JournalBusOptions,
  type MaintenanceReport,
} from './journal/index.js';
export {
  createKafkaBus,
  deleteRecordsBefore,
  KAFKA_PRODUCER_RETRY,
  type KafkaBusOptions,
  type KafkaRetryOptions,
} from './kafka/index.js';
export {
  kafkaBusOptionsOf,
  kafkaSecurityOptions,
  type KafkaSecurityOptions,
  type KafkaTlsSettings,
  type KafkaSaslSettings,
  type KafkaTopologyBus,
} from './kafka/security.js';
export {
  startKafkaMockCluster,
  type KafkaMockCluster,
  type KafkaMockOptions,
} from './kafka/mock-cluster.js';
export { serveBus, connectBus, type BusServing } from './remote/index.js';
