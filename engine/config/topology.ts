/**
 * The topology model: what `loadTopology` returns, its defaults and its bounds.
 *
 * A Topology is plain data (strings, numbers, booleans, arrays, plain objects), so it can be
 * posted to worker threads (structured clone) as is. Every optional field of the file is filled
 * in from TOPOLOGY_DEFAULTS, in one place (`applyDefaults` in load.ts); every path is absolute.
 */
import type { CaptureSource, DatabaseRef } from '../cdc/index.js';
import { CDC_DEFAULTS, KAFKA_SINK_DEFAULTS, STAGING_NAME_PATTERN } from '../cdc/index.js';
import { CAPACITY_BYTES_MAX, CAPACITY_BYTES_MIN } from '../ring/index.js';
import { SUPERVISOR_DEFAULTS } from '../supervisor/index.js';
import type { SupervisorOptions } from '../supervisor/index.js';

/** Where a service's readers start when it (re)starts. */
export type StartFrom = 'START' | 'LAST_WRITTEN' | 'END';
/** What a (re)starting service replays, outputs suppressed, before going live. */
export type InputsReplay = 'NONE' | 'INPUTS' | 'OUTPUT' | 'OUTPUT_REVERSE';
/** When a queue's appender fsyncs: never, on each flush (batch), or after every record. */
export type QueueFsync = 'none' | 'batch' | 'record';

/** Allowed values of `services[].startFrom`. */
export const START_FROM_VALUES: readonly StartFrom[] = ['START', 'LAST_WRITTEN', 'END'];
/** Allowed values of `services[].inputsReplay`. */
export const INPUTS_REPLAY_VALUES: readonly InputsReplay[] = [
  'NONE',
  'INPUTS',
  'OUTPUT',
  'OUTPUT_REVERSE',
];
/** What a service does with an event whose handler still throws after its retries. */
export type OnFailure = 'dead-letter' | 'stop';
/** Allowed values of `services[].errors.onFailure`. */
export const ON_FAILURE_VALUES: readonly OnFailure[] = ['dead-letter', 'stop'];
/** Allowed values of `queues[].fsync`. */
export const QUEUE_FSYNC_VALUES: readonly QueueFsync[] = ['none', 'batch', 'record'];
/** Allowed values of `capture[].database.dialect`. */
export const DIALECT_VALUES: readonly DatabaseRef['dialect'][] = [
  'sqlite',
  'postgres',
  'mariadb',
  'mysql',
  'oracle',
];

/** A durable queue: `partitions` journals under `<dataDir>/queues/<name>/<partition>`. */
export interface TopologyQueue {
  /** Unique; matches QUEUE_NAME_PATTERN. */
  name: string;
  /** Partition count, >= 1. A capture target has one per pump; a service output has 1. */
  partitions: number;
  /** Segment file roll size, bytes. */
  segmentBytes: number;
  fsync: QueueFsync;
  /** Absent: every record is kept. See {@link TopologyQueueRetention}. */
  retention?: TopologyQueueRetention;
}

/**
 * `queues[].retention`: the journal bus's topic retention (engine/bus RetentionOptions, same
 * fields and units) for a topology queue under `<dataDir>/queues`, applied per partition by
 * engine/service/retention.ts every `retentionIntervalMs` while the topology runs. Sealed
 * segments are deleted whole, oldest first, while the partition takes more than `bytesMax` or
 * the oldest one sealed more than `ageMsMax` ago, but never one holding a record some reader of
 * the queue still needs (each service's restart, see engine/service/retention.ts), unless
 * `deleteUncommitted`. Then `startFrom: START` (and any replay from the first record) starts at
 * the earliest retained record.
 */
export interface TopologyQueueRetention {
  /** Bytes of segment and index files per partition above which the oldest segments go. */
  bytesMax?: number;
  /** Age of a sealed segment (since its successor was created) above which it goes, ms. */
  ageMsMax?: number;
  /** Default false: readers' needs hold segments. True: delete by size and age alone. */
  deleteUncommitted: boolean;
}

/** A service: a module that turns events of its input queues into events of its output queue. */
export interface TopologyService {
  /** Unique; matches SERVICE_NAME_PATTERN. */
  name: string;
  /** Absolute path of the compiled JavaScript module (a `.ts` source maps to dist/, see load.ts). */
  module: string;
  /** Input queue names, at least one, no repeats. */
  inputs: string[];
  /** Output queue name; no other service or capture source writes it. */
  output: string;
  startFrom: StartFrom;
  inputsReplay: InputsReplay;
  /** Events handed to the service per batch. */
  batchSizeMax: number;
  /**
   * Outputs emitted while the state is rebuilt by replaying inputs (INPUTS, OUTPUT) are appended
   * too, stamped with the replayed input; default false (suppressed, as Chronicle Services).
   */
  emitDuringReplay: boolean;
  /** Free-form settings passed to the service's init (plain data from the YAML file). */
  settings: Record<string, unknown>;
  /** What happens when a handler throws (see {@link TopologyServiceErrors}). */
  errors: TopologyServiceErrors;
}

/**
 * A handler that throws for an event is called again up to `retriesMax` times, `retryBackoffMs`
 * apart (doubling per retry); then `dead-letter` appends the event with the error to the
 * service's dead-letter queue and goes on with the next event (later events of the same key are
 * processed, not held back), and `stop` fails the service group (the supervisor restarts it, and
 * the same event fails again: the behaviour before dead letters).
 */
export interface TopologyServiceErrors {
  /** Extra attempts after the first failure, per event. */
  retriesMax: number;
  /** Delay before the first retry, ms; doubles per retry. */
  retryBackoffMs: number;
  onFailure: OnFailure;
  /** Queue of 1 partition written only by this service; declared implicitly when absent. */
  deadLetterQueue: string;
}

/** Ring sizes of the SharedArrayBuffer rings between queue readers and services. */
export interface TopologyRings {
  /** Data area of each ring, bytes; a power of two. */
  capacityBytes: number;
  /**
   * Largest input record a service handles, bytes. Records over capacityBytes / 8 are handed
   * over by reference (the service reads them from the journal); records over this maximum are
   * dead-lettered (or fail the service with onFailure stop).
   */
  recordBytesMax: number;
}

/** Allowed values of `bus.kind`. */
export const BUS_KIND_VALUES = ['journal', 'kafka'] as const;
/** Allowed values of `bus.sasl.mechanism` (kafkajs's built-in mechanisms). */
export const SASL_MECHANISM_VALUES = ['plain', 'scram-sha-256', 'scram-sha-512'] as const;

/** TLS to the Kafka brokers; files are absolute paths (PEM), read when the bus connects. */
export interface TopologyBusTls {
  /** CA certificates to trust instead of the system's. */
  caFile?: string;
  /** Client certificate and key, for mutual TLS. */
  certFile?: string;
  keyFile?: string;
  /** Default true: the broker's certificate must verify. */
  rejectUnauthorized: boolean;
}

/**
 * SASL to the Kafka brokers. The password comes from the environment (`${VAR}` in the file) or
 * from `passwordFile` (read when the bus connects, trailing newline dropped); it never appears in
 * logs, errors or `/topology`.
 */
export interface TopologyBusSasl {
  mechanism: (typeof SASL_MECHANISM_VALUES)[number];
  username: string;
  password?: string;
  /** Absolute path of a file holding the password. */
  passwordFile?: string;
}

/**
 * The topology's bus: where its topics (the `queues` section) live. `journal` (the default) is
 * the embedded journal under `dataDir`, no server; `kafka` is an Apache Kafka cluster.
 */
export type TopologyBus =
  | { kind: 'journal' }
  | {
      kind: 'kafka';
      /** Bootstrap servers, `host:port`, at least one. */
      brokers: string[];
      /** Kafka client id; default `sluice-<topology name>`. */
      clientId: string;
      /** Absent: plaintext. */
      tls?: TopologyBusTls;
      /** Absent: no authentication. */
      sasl?: TopologyBusSasl;
      /**
       * Largest record value Sluice writes to a topic, bytes: service outputs, dead letters,
       * snapshot chunks (half of it), appends and captured changes. Set it below the broker's
       * message.max.bytes (and any topic's max.message.bytes), less room for key, headers and
       * the record batch's overhead (the default 1000000 sits under the broker's default
       * 1048588); a larger record is refused by Sluice, not by the broker.
       */
      recordBytesMax: number;
    };

/** Allowed values of `processors[].pattern` (engine/patterns). */
export const PROCESSOR_PATTERN_VALUES = [
  'durable',
  'state-and-event',
  'pubsub',
  'compacted',
  'rpc',
] as const;
/** One message pattern of engine/patterns. */
export type ProcessorPattern = (typeof PROCESSOR_PATTERN_VALUES)[number];
/** Allowed values of `processors[].codec`: engine/patterns' jsonCodec, stringCodec, bytesCodec. */
export const PROCESSOR_CODEC_VALUES = ['json', 'string', 'bytes'] as const;
/** How a processor's record values are decoded and encoded. */
export type ProcessorCodec = (typeof PROCESSOR_CODEC_VALUES)[number];
/** Allowed values of `processors[].fencing` (durable; see engine/patterns startDurable). */
export const PROCESSOR_FENCING_VALUES = ['member', 'partition'] as const;

/**
 * A processor: one message pattern (engine/patterns) with the application's handler module, run
 * in its own worker thread on the topology's bus. Its topics are queues of the `queues` section
 * (their partition counts); on the journal bus they live in the bus directory
 * `<dataDir>/bus/` (engine/bus/journal's layout), not in `<dataDir>/queues/`, so a queue a
 * processor reads or writes cannot also be a service's or a capture source's queue there.
 *
 * Which fields apply to which pattern (anything else is refused at load):
 *
 * | field            | durable | state-and-event | pubsub | compacted | rpc (responder) |
 * |------------------|---------|-----------------|--------|-----------|-----------------|
 * | inputs           | >= 1    | 1 (events)      | 1      | 1         | 1 (requests)    |
 * | outputs          | any     | any             | none   | none      | 1 (responses)   |
 * | group            | yes     | yes             |        |           |                 |
 * | stateTopic       |         | required        |        |           |                 |
 * | deadLetterTopic  | yes     |                 |        |           |                 |
 * | batchSizeMax, retriesMax, retryBackoffMs, sessionTimeoutMs | yes | yes | | |          |
 * | commitRecordsMax, fencing | yes |             |        |           |                 |
 * | pool             | yes     |                 | yes    |           |                 |
 */
export interface TopologyProcessor {
  /** Unique among processors; matches SERVICE_NAME_PATTERN. Its actor is `processor:<name>`. */
  name: string;
  pattern: ProcessorPattern;
  /**
   * Absolute path of the compiled handler module. Its default export is the processor the
   * pattern takes (e.g. `{ onNext(records) }` for durable), or a function
   * `(context: ProcessorContext) => processor` (sync or async) given the settings and topics.
   */
  module: string;
  /** Input topics (queue names). */
  inputs: string[];
  /** Output topics (queue names) the handler may write; [] for pubsub and compacted. */
  outputs: string[];
  /** Consumer group (durable, state-and-event); default the processor's name. */
  group: string;
  /** Value codec of inputs, outputs and states. */
  codec: ProcessorCodec;
  /** state-and-event: the state topic (as many partitions as the event topic, or more). */
  stateTopic?: string;
  /** durable: undecodable inputs go here, once, in the batch's transaction. */
  deadLetterTopic?: string;
  /** durable, state-and-event: most records per poll. Default: the bus's (500). */
  batchSizeMax?: number;
  /** durable: most input records per transaction (group commit). Default 5000. */
  commitRecordsMax?: number;
  /** durable, state-and-event: retries of a failed batch in a row. Default 10. */
  retriesMax?: number;
  /** durable, state-and-event: wait before a retry, ms. Default 50. */
  retryBackoffMs?: number;
  /** durable, state-and-event: consumer group session timeout, ms. Default the bus's (10000). */
  sessionTimeoutMs?: number;
  /** durable: who fences a zombie; default 'partition' on kafka, 'member' on the journal. */
  fencing?: (typeof PROCESSOR_FENCING_VALUES)[number];
  /**
   * durable, pubsub: run the handler on a piscina pool of worker threads (engine/processors/pool-stage.ts)
   * instead of in the processor's own thread. Absent: inline.
   */
  pool?: TopologyProcessorPool;
  /** Free-form, given to a handler factory. */
  settings: Record<string, unknown>;
}

/**
 * `processors[].pool`: the pool stage of a stateless processor (durable, pubsub). Each poll's
 * records are cut into batches of `batchSize` records and run by the same handler module in
 * `threads` piscina threads; at most `batchesInFlightMax` batches are in the pool at once (the
 * poll waits: backpressure). Outputs keep the poll's input order (total order, so per-key order).
 */
export interface TopologyProcessorPool {
  /** Pool threads, in [1, 256]. */
  threads: number;
  /** Records per pool task, in [1, 65536]. Default {@link POOL_DEFAULTS}.batchSize (64). */
  batchSize: number;
  /** Tasks in the pool at once, in [1, 4096]. Default 2 x threads (one queued per thread). */
  batchesInFlightMax: number;
}

/** Defaults of `processors[].pool` (batchesInFlightMax: `batchesInFlightPerThread` x threads). */
export const POOL_DEFAULTS = Object.freeze({ batchSize: 64, batchesInFlightPerThread: 2 });

/** A validated topology with every default applied and every path absolute. */
export interface Topology {
  /** Matches TOPOLOGY_NAME_PATTERN. */
  name: string;
  /** Absolute path of the file it was loaded from (`parseTopology`: as given, resolved). */
  file: string;
  /** Absolute directory of the queues and other state. */
  dataDir: string;
  /** Where the topics live (default `{ kind: 'journal' }`). */
  bus: TopologyBus;
  rings: TopologyRings;
  supervisor: SupervisorOptions;
  queues: TopologyQueue[];
  services: TopologyService[];
  /** Capture sources, in engine/cdc's shape; sqlite files are absolute. */
  capture: CaptureSource[];
  /** Message-pattern processors on the topology's bus (default []). */
  processors: TopologyProcessor[];
  /** Sink actors forwarding journal queues to Kafka topics (journal bus only). */
  sinks: TopologySink[];
}

/** Allowed values of `sinks[].format` (and of `capture[].tables[].format`). */
export const SINK_FORMAT_VALUES = ['envelope', 'json'] as const;

/**
 * A sink: one actor per partition of the journal queue `from` forwards its records, in index
 * order, to the Kafka topic `to.topic`, exactly once: each batch is one Kafka transaction that
 * also commits the partition's next index as the offset of partition 0 of `to.topic` for the
 * consumer group `sluice.sink.<topology>.<sink>.<partition>` (also the transactional.id), and a
 * restarted sink resumes from that offset.
 */
export interface TopologySink {
  /** Unique among sinks; matches SERVICE_NAME_PATTERN. */
  name: string;
  /** Journal queue to forward (every partition). */
  from: string;
  to: {
    /** Bootstrap servers, `host:port`. */
    brokers: string[];
    /** Kafka topic; default the queue's name. */
    topic: string;
    /** Partitions of the topic when the sink creates it; default the queue's partition count. */
    partitions: number;
    /** Kafka client id; default `sluice-<topology name>`. */
    clientId: string;
    /**
     * The Kafka record limit of the target, bytes: the largest record value the sink sends to
     * `topic` (default KAFKA_SINK_DEFAULTS.recordBytesMax, as a kafka bus's bus.recordBytesMax);
     * set it under the brokers' message.max.bytes and the topic's max.message.bytes, less room
     * for key, headers and batch overhead. At a record over it the sink stops shipping the
     * partition (actors/sink.ts) instead of sending a batch the broker refuses.
     */
    recordBytesMax: number;
  };
  /**
   * `envelope` (default): each record's envelope bytes as they are in the journal. `json`:
   * change events as the capture JSON value (engine/cdc/json-format.ts), JSON events as their
   * JSON text; other event types are not forwarded.
   */
  format: (typeof SINK_FORMAT_VALUES)[number];
  /** Records per Kafka transaction. */
  batchSizeMax: number;
  /** Pause after a cycle that found nothing to forward, ms. */
  pollIntervalMs: number;
}

/**
 * Defaults of every optional topology field, applied in one place (load.ts `applyDefaults`):
 *
 * | field                                  | default                        | unit  |
 * |----------------------------------------|--------------------------------|-------|
 * | dataDir                                | `./data/<name>` (file-relative)| path  |
 * | bus                                    | `{ kind: journal }`            |       |
 * | bus.clientId (kafka)                   | `sluice-<name>`                |       |
 * | bus.tls.rejectUnauthorized (kafka)     | true                           |       |
 * | bus.recordBytesMax (kafka)             | 1000000 (KAFKA_SINK_DEFAULTS)  | bytes |
 * | rings.capacityBytes                    | 1048576 (1 MiB)                | bytes |
 * | rings.recordBytesMax                   | 16777216 (16 MiB)              | bytes |
 * | supervisor.restartWindowMs             | 60000 (SUPERVISOR_DEFAULTS)    | ms    |
 * | supervisor.backoffInitialMs            | 100 (SUPERVISOR_DEFAULTS)      | ms    |
 * | supervisor.backoffMaxMs                | 5000 (SUPERVISOR_DEFAULTS)     | ms    |
 * | supervisor.drainTimeoutMs              | 10000 (SUPERVISOR_DEFAULTS)    | ms    |
 * | queues[].partitions                    | 1                              |       |
 * | queues[].segmentBytes                  | 67108864 (64 MiB)              | bytes |
 * | queues[].fsync                         | batch                          |       |
 * | queues[].retention                     | absent = keep every record     |       |
 * | queues[].retention.bytesMax, .ageMsMax | absent = no bound of that kind | bytes, ms |
 * | queues[].retention.deleteUncommitted   | false                          |       |
 * | services[].startFrom                   | LAST_WRITTEN                   |       |
 * | services[].inputsReplay                | NONE                           |       |
 * | services[].batchSizeMax                | 256                            | events|
 * | services[].emitDuringReplay            | false                          |       |
 * | services[].settings                    | {}                             |       |
 * | services[].errors.retriesMax           | 2                              |       |
 * | services[].errors.retryBackoffMs       | 10                             | ms    |
 * | services[].errors.onFailure            | dead-letter                    |       |
 * | services[].errors.deadLetterQueue      | `<service>.dlq` (1 partition)  |       |
 * | supervisor.restartsMax                 | absent = restart forever       |       |
 * | capture[].pumps                        | 1                              |       |
 * | capture[].batchSizeMax                 | 500                            | rows  |
 * | capture[].pollIntervalMs               | 10                             | ms    |
 * | capture[].stagingTable                 | sluice_staging                 |       |
 * | capture[].recordBytesMax               | 268435456 (CDC_DEFAULTS)       | bytes |
 * | capture[].errors.*                     | CDC_DEFAULTS.errors            |       |
 * | capture[].tables[].suppressNoopUpdates | true (CDC_DEFAULTS)            |       |
 * | capture[].tables[].triggers            | statement (CDC_DEFAULTS)       |       |
 * | capture[].tables[].columns             | absent = every column          |       |
 * | capture[].tables[].key                 | absent = the primary key       |       |
 * | processors[].outputs                   | []                             |       |
 * | processors[].group                     | the processor's name           |       |
 * | processors[].codec                     | json                           |       |
 * | processors[].settings                  | {}                             |       |
 * | processors[] pattern options           | absent = engine/patterns' PATTERN_DEFAULTS |  |
 * | processors[].pool.batchSize            | 64 (POOL_DEFAULTS)             | records|
 * | processors[].pool.batchesInFlightMax   | 2 x pool.threads               | tasks |
 * | capture[].tables[].initialLoad         | absent = false (no load)       |       |
 * | capture[].tables[].format              | envelope                       |       |
 * | sinks[].to.topic                       | the `from` queue's name        |       |
 * | sinks[].to.partitions                  | the `from` queue's partitions  |       |
 * | sinks[].to.clientId                    | `sluice-<name>`                |       |
 * | sinks[].to.recordBytesMax              | 1000000 (KAFKA_SINK_DEFAULTS)  | bytes |
 * | sinks[].format                         | envelope                       |       |
 * | sinks[].batchSizeMax                   | 500                            | records|
 * | sinks[].pollIntervalMs                 | 10                             | ms    |
 */
export const TOPOLOGY_DEFAULTS = deepFreeze({
  dataDirPrefix: './data',
  kafkaBus: { recordBytesMax: KAFKA_SINK_DEFAULTS.recordBytesMax },
  rings: { capacityBytes: 1 << 20, recordBytesMax: 16 << 20 },
  supervisor: { ...SUPERVISOR_DEFAULTS },
  queue: { partitions: 1, segmentBytes: 64 * 1024 * 1024, fsync: 'batch' as QueueFsync },
  service: {
    startFrom: 'LAST_WRITTEN' as StartFrom,
    inputsReplay: 'NONE' as InputsReplay,
    batchSizeMax: 256,
    emitDuringReplay: false,
  },
  serviceErrors: { retriesMax: 2, retryBackoffMs: 10, onFailure: 'dead-letter' as OnFailure },
  capture: { pumps: 1, batchSizeMax: 500, pollIntervalMs: 10, stagingTable: 'sluice_staging' },
  processor: { codec: 'json' as ProcessorCodec },
  captureTable: {
    suppressNoopUpdates: CDC_DEFAULTS.suppressNoopUpdates as boolean,
    format: 'envelope' as const,
  },
  sink: {
    format: 'envelope' as const,
    batchSizeMax: 500,
    pollIntervalMs: 10,
    recordBytesMax: KAFKA_SINK_DEFAULTS.recordBytesMax,
  },
});

/** Inclusive [min, max] bounds of every numeric topology field. */
export const TOPOLOGY_LIMITS = deepFreeze({
  /**
   * Power of two, as engine/ring requires; at least 4096 so that a ring carries records of up
   * to 504 bytes (capacity / 8 less the reader's 8-byte frame header; engine/ring's own minimum,
   * 64, would carry none).
   */
  ringCapacityBytes: [Math.max(4096, CAPACITY_BYTES_MIN), CAPACITY_BYTES_MAX],
  restartsMax: [0, 1000],
  retriesMax: [0, 100],
  retryBackoffMs: [0, 60_000],
  restartWindowMs: [1, 24 * 3_600_000],
  backoffInitialMs: [0, 3_600_000],
  backoffMaxMs: [0, 3_600_000],
  drainTimeoutMs: [1, 3_600_000],
  partitions: [1, CDC_DEFAULTS.pumpsMax],
  segmentBytes: [4096, 2 ** 30],
  /** Up to 1 PiB per partition; whole segments go, so the bound is at least one segment. */
  retentionBytesMax: [0, 2 ** 50],
  /** Up to 10 years. */
  retentionAgeMsMax: [0, 3650 * 24 * 3_600_000],
  /** One ring read delivers at most 2^16 records (RING_DEFAULTS.readLimit). */
  serviceBatchSizeMax: [1, 1 << 16],
  pumps: [1, CDC_DEFAULTS.pumpsMax],
  captureBatchSizeMax: [1, CDC_DEFAULTS.claimLimitMax],
  pollIntervalMs: [0, 3_600_000],
  busyTimeoutMs: [0, 3_600_000],
  recordBytesMax: [1, CDC_DEFAULTS.recordBytesMax],
  /**
   * bus.recordBytesMax (kafka): at least 64 KiB, so that a dead letter without its event's bytes
   * (error text, position) and a snapshot chunk of half the limit fit; at most the journal's
   * largest record, as for capture sources (Kafka's own message.max.bytes is an int).
   */
  busRecordBytesMax: [1 << 16, CDC_DEFAULTS.recordBytesMax],
  /** sinks[].to.recordBytesMax: the same bounds as bus.recordBytesMax (one Kafka limit). */
  sinkRecordBytesMax: [1 << 16, CDC_DEFAULTS.recordBytesMax],
  /** Processor poll size; the bus caps a poll at its pollRecordsMax anyway. */
  processorBatchSizeMax: [1, 1 << 16],
  processorCommitRecordsMax: [1, 1 << 20],
  processorRetriesMax: [0, 1000],
  processorRetryBackoffMs: [0, 3_600_000],
  /** piscina threads of one processor's pool stage (the machine's cores bound what helps). */
  poolThreads: [1, 256],
  poolBatchSize: [1, 1 << 16],
  poolBatchesInFlightMax: [1, 4096],
  /** Kafka brokers accept group.min/max.session.timeout.ms of 6 s / 30 min by default. */
  sessionTimeoutMs: [1, 3_600_000],
} as const);

/**
 * Bounds of every name, path, list and of the file itself, stated in the schema (maxLength,
 * maxItems) or checked by limits.ts. Names are ASCII, so their lengths are characters; path
 * limits are in UTF-8 bytes of the resolved absolute path, as the kernel counts them.
 *
 * | bound                    | value   | why                                                      |
 * |--------------------------|---------|----------------------------------------------------------|
 * | fileBytesMax             | 1 MiB   | a topology is a few KiB; bounds parse time and memory    |
 * | nestingDepthMax          | 32      | lists and maps inside each other (settings included)     |
 * | topologyNameLengthMax    | 64      | part of the default dataDir                              |
 * | queueNameLengthMax       | 128     | a directory name under `<dataDir>/queues/`               |
 * | serviceNameLengthMax     | 128     | services and capture sources; part of actor names        |
 * | pathLengthMax            | 1024    | dataDir, module, database.file as written                |
 * | pathBytesMax             | 3839    | resolved; PATH_MAX 4096 less room for files under it     |
 * | pathComponentBytesMax    | 255     | NAME_MAX of Linux file systems                           |
 * | urlLengthMax             | 4096    | capture[].database.url                                   |
 * | brokersMax               | 64      | bus.brokers (kafka)                                      |
 * | brokerLengthMax          | 1024    | one `host:port` of bus.brokers                           |
 * | sqlNameLengthMax         | 63      | PostgreSQL identifiers (NAMEDATALEN - 1): columns, key   |
 * | tableNameLengthMax       | 127     | `schema.table`, 63 each                                  |
 * | stagingTableLengthMax    | 56      | 63 less the `_errors` suffix of its error table          |
 * | conditionLengthMax       | 4096    | SQL text embedded in trigger definitions                 |
 * | settingsBytesMax         | 65536   | services[].settings as JSON, posted to its worker        |
 * | queuesMax                | 1024    |                                                          |
 * | servicesMax              | 256     | each runs in its own worker thread                       |
 * | inputsMax                | 64      | queues one service reads                                 |
 * | captureSourcesMax        | 64      |                                                          |
 * | processorsMax            | 256     | each runs in its own worker thread                       |
 * | tablesMax                | 1024    | captured tables of one source                            |
 * | columnsMax               | 1600    | PostgreSQL's column limit per table                      |
 */
export const TOPOLOGY_SIZE_LIMITS = deepFreeze({
  fileBytesMax: 1 << 20,
  nestingDepthMax: 32,
  topologyNameLengthMax: 64,
  queueNameLengthMax: 128,
  serviceNameLengthMax: 128,
  pathLengthMax: 1024,
  pathBytesMax: 4095 - 256,
  pathComponentBytesMax: 255,
  urlLengthMax: 4096,
  brokersMax: 64,
  brokerLengthMax: 1024,
  sqlNameLengthMax: 63,
  tableNameLengthMax: 127,
  stagingTableLengthMax: 56,
  conditionLengthMax: 4096,
  settingsBytesMax: 65536,
  queuesMax: 1024,
  servicesMax: 256,
  inputsMax: 64,
  captureSourcesMax: 64,
  processorsMax: 256,
  sinksMax: 256,
  tablesMax: 1024,
  columnsMax: 1600,
} as const);

/** Paths in a topology file: anything but NUL (which no file system allows in a name). */
export const PATH_PATTERN = '^[^\\u0000]+$';

/** Topology names: also used in directory names. */
export const TOPOLOGY_NAME_PATTERN = '^[a-z0-9-]+$';
/** A Kafka bootstrap server: `host:port` (IPv6 hosts in brackets). */
export const BROKER_PATTERN =
  '^(\\[[0-9a-fA-F:.]+\\]|[A-Za-z0-9._-]+):([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])$';

/** Queue names: also used in directory names. */
export const QUEUE_NAME_PATTERN = '^[a-z0-9][a-z0-9._-]*$';
/** Service and capture source names. */
export const SERVICE_NAME_PATTERN = '^[a-z0-9][a-z0-9._-]*$';
/** Staging table names (embedded unquoted in trigger names); engine/cdc's STAGING_NAME_PATTERN. */
export const STAGING_TABLE_PATTERN = STAGING_NAME_PATTERN.source;

function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === 'object') {
    for (const v of Object.values(value)) deepFreeze(v);
    Object.freeze(value);
  }
  return value;
}
