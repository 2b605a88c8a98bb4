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
  DeadLetterReplayError,
  deadLetteredPositions,
  readDeadLetters,
  decodeDeadLetter,
  deadLetterOwner,
  replayTargets,
  replayDeadLetters,
  listDeadLetters,
  replayDeadLetterQueue,
  purgeDeadLetters,
  type ReplayedDeadLetter,
  type ReplayTarget,
  type DeadLetter,
  type DeadLetterEntry,
  type QueueTarget,
} from './dead-letter.js';
export {
  openQueueLogs,
  actorBusOf,
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
  isBrokerAwaySend,
  kafkaBusOptionsOf,
  type KafkaConnection,
  type KafkaLogRecord,
} from './kafka-sync.js';
export {
  HOST_SHARED,
  createPositions,
  type HostInput,
  type ServiceHostData,
  type ServiceReadyInfo,
  type ServiceSummary,
} from './host-contract.js';
export { runServiceHost } from './host.js';
export { ServiceRuntime, type ServiceRuntimeOptions } from './host-runtime.js';
export { HostEvent } from './host-event.js';
export {
  findRestartPositions,
  replayStrategyOf,
  REPLAY_STRATEGIES,
  type ReplayStrategy,
  type ReplayRun,
  type ReplayResult,
  type RestartPositions,
} from './host-replay.js';
export {
  startFromStrategy,
  START_FROM_STRATEGIES,
  type StartFromStrategy,
  type StartFromInput,
} from './start-from.js';
export {
  applyQueueRetention,
  queueHolds,
  queueRetentionPlan,
  restartNeeds,
  QUEUE_RETENTION_DEFAULTS,
  type QueueRetentionPlan,
  type QueueRetentionReport,
  type ReaderDefinition,
  type RestartNeeds,
  type RetainedPartition,
  type RetentionReader,
} from './retention.js';
