/** Service API (what applications write) and the LAST_WRITTEN restart computation. */
export {
  defineService,
  assertServiceDefinition,
  assertNotThenable,
  replayProblems,
  type ServiceSnapshot,
  type ServiceReplayConfig,
  type ServiceDefinition,
  type ServiceHandler,
  type ServiceEvent,
  type ServiceContext,
  type ServiceInit,
} from './api.js';
export {
  computeLastWritten,
  inputKey,
  type InputPartition,
  type BackwardReader,
} from './last-written.js';
export {
  EVENT_TYPE_DEAD_LETTERED,
  encodeDeadLetter,
  deadLetteredPositions,
  readDeadLetters,
  replayDeadLetters,
  listDeadLetters,
  replayDeadLetterQueue,
  purgeDeadLetters,
  assertJournalBus,
  KafkaBusUnsupportedError,
  type ReplayedDeadLetter,
  type DeadLetter,
  type DeadLetterEntry,
  type QueueTarget,
} from './dead-letter.js';
export {
  openQueueLogs,
  KafkaTailer,
  KafkaAppender,
  KAFKA_APPENDER_DEFAULTS,
  type ActorBus,
  type QueueLogs,
  type QueuePartition,
  type PartitionRecord,
  type PartitionTailer,
  type PartitionAppender,
  type AppenderSpec,
} from './queue-logs.js';
export {
  SyncKafka,
  SyncKafkaError,
  SYNC_KAFKA_DEFAULTS,
  kafkaBusOptionsOf,
  type KafkaConnection,
  type KafkaLogRecord,
} from './kafka-sync.js';
export {
  startFromStrategy,
  START_FROM_STRATEGIES,
  type StartFromStrategy,
  type StartFromInput,
} from './start-from.js';
