/**
 * JSON Schema (draft-07, checked by ajv) of a topology file after YAML parsing and environment
 * substitution. It covers shapes, types, required fields, unknown fields, enums, patterns and
 * numeric ranges, and the length of every name, path and list (TOPOLOGY_SIZE_LIMITS); limits.ts
 * checks resolved path lengths, nesting depth and the size of settings; cross-references (queue names, partitions vs pumps, files) are checked in
 * checks.ts, which can point at the exact YAML node.
 */
import {
  CAPTURE_OPERATIONS,
  ERROR_POLICY_LIMITS,
  KEY_UPDATE_MODES,
  TRIGGER_LEVELS,
} from '../cdc/index.js';
import {
  BROKER_PATTERN,
  BUS_KIND_VALUES,
  SASL_MECHANISM_VALUES,
  SINK_FORMAT_VALUES,
  DIALECT_VALUES,
  INPUTS_REPLAY_VALUES,
  PROCESSOR_CODEC_VALUES,
  PROCESSOR_FENCING_VALUES,
  PROCESSOR_PATTERN_VALUES,
  ON_FAILURE_VALUES,
  PATH_PATTERN,
  QUEUE_FSYNC_VALUES,
  QUEUE_NAME_PATTERN,
  SERVICE_NAME_PATTERN,
  STAGING_TABLE_PATTERN,
  START_FROM_VALUES,
  TOPOLOGY_LIMITS,
  TOPOLOGY_NAME_PATTERN,
  TOPOLOGY_SIZE_LIMITS,
} from './topology.js';

const int = (range: readonly [number, number]) => ({
  type: 'integer',
  minimum: range[0],
  maximum: range[1],
});
const L = TOPOLOGY_LIMITS;
const S = TOPOLOGY_SIZE_LIMITS;
const text = (maxLength: number) => ({ type: 'string', minLength: 1, maxLength });
const named = (pattern: string, maxLength: number) => ({ type: 'string', pattern, maxLength });
const filePath = {
  type: 'string',
  minLength: 1,
  maxLength: S.pathLengthMax,
  pattern: PATH_PATTERN,
};
const queueName = { type: 'string', maxLength: S.queueNameLengthMax };
const columnList = {
  type: 'array',
  minItems: 1,
  maxItems: S.columnsMax,
  uniqueItems: true,
  items: text(S.sqlNameLengthMax),
};

const queue = {
  type: 'object',
  required: ['name'],
  additionalProperties: false,
  properties: {
    name: named(QUEUE_NAME_PATTERN, S.queueNameLengthMax),
    partitions: int(L.partitions),
    segmentBytes: int(L.segmentBytes),
    fsync: { enum: QUEUE_FSYNC_VALUES },
    // At least one of bytesMax and ageMsMax: checked in checks.ts (checkRetention), which says so.
    retention: {
      type: 'object',
      additionalProperties: false,
      properties: {
        bytesMax: int(L.retentionBytesMax),
        ageMsMax: int(L.retentionAgeMsMax),
        deleteUncommitted: { type: 'boolean' },
      },
    },
  },
};

const service = {
  type: 'object',
  required: ['name', 'module', 'inputs', 'output'],
  additionalProperties: false,
  properties: {
    name: named(SERVICE_NAME_PATTERN, S.serviceNameLengthMax),
    module: filePath,
    inputs: { type: 'array', minItems: 1, maxItems: S.inputsMax, items: queueName },
    output: queueName,
    startFrom: { enum: START_FROM_VALUES },
    inputsReplay: { enum: INPUTS_REPLAY_VALUES },
    batchSizeMax: int(L.serviceBatchSizeMax),
    emitDuringReplay: { type: 'boolean' },
    settings: { type: 'object' },
    errors: {
      type: 'object',
      additionalProperties: false,
      properties: {
        retriesMax: int(L.retriesMax),
        retryBackoffMs: int(L.retryBackoffMs),
        onFailure: { enum: ON_FAILURE_VALUES },
        deadLetterQueue: { type: 'string', pattern: QUEUE_NAME_PATTERN },
      },
    },
  },
};

// Which options apply to which pattern is checked in checks.ts (processorProblems), which can
// name the pattern in its message; the schema states shapes and ranges only.
const processor = {
  type: 'object',
  required: ['name', 'pattern', 'module', 'inputs'],
  additionalProperties: false,
  properties: {
    name: named(SERVICE_NAME_PATTERN, S.serviceNameLengthMax),
    pattern: { enum: PROCESSOR_PATTERN_VALUES },
    module: filePath,
    inputs: {
      type: 'array',
      minItems: 1,
      maxItems: S.inputsMax,
      uniqueItems: true,
      items: queueName,
    },
    outputs: { type: 'array', maxItems: S.inputsMax, uniqueItems: true, items: queueName },
    group: named('^[A-Za-z0-9._-]+$', S.serviceNameLengthMax),
    codec: { enum: PROCESSOR_CODEC_VALUES },
    stateTopic: queueName,
    deadLetterTopic: queueName,
    batchSizeMax: int(L.processorBatchSizeMax),
    commitRecordsMax: int(L.processorCommitRecordsMax),
    retriesMax: int(L.processorRetriesMax),
    retryBackoffMs: int(L.processorRetryBackoffMs),
    sessionTimeoutMs: int(L.sessionTimeoutMs),
    fencing: { enum: PROCESSOR_FENCING_VALUES },
    pool: {
      type: 'object',
      required: ['threads'],
      additionalProperties: false,
      properties: {
        threads: int(L.poolThreads),
        batchSize: int(L.poolBatchSize),
        batchesInFlightMax: int(L.poolBatchesInFlightMax),
      },
    },
    settings: { type: 'object' },
  },
};

const bus = {
  type: 'object',
  required: ['kind'],
  discriminator: { propertyName: 'kind' },
  oneOf: [
    { properties: { kind: { const: BUS_KIND_VALUES[0] } }, additionalProperties: false },
    {
      properties: {
        kind: { const: BUS_KIND_VALUES[1] },
        brokers: {
          type: 'array',
          minItems: 1,
          maxItems: S.brokersMax,
          uniqueItems: true,
          items: { type: 'string', maxLength: S.brokerLengthMax, pattern: BROKER_PATTERN },
        },
        clientId: named('^[A-Za-z0-9._-]+$', S.serviceNameLengthMax),
        tls: {
          type: 'object',
          additionalProperties: false,
          properties: {
            caFile: filePath,
            certFile: filePath,
            keyFile: filePath,
            rejectUnauthorized: { type: 'boolean' },
          },
        },
        sasl: {
          type: 'object',
          required: ['mechanism', 'username'],
          additionalProperties: false,
          properties: {
            mechanism: { enum: SASL_MECHANISM_VALUES },
            username: text(S.sqlNameLengthMax * 4),
            password: text(S.urlLengthMax),
            passwordFile: filePath,
          },
        },
        recordBytesMax: int(L.busRecordBytesMax),
      },
      required: ['brokers'],
      additionalProperties: false,
    },
  ],
};

const database = {
  type: 'object',
  required: ['dialect'],
  discriminator: { propertyName: 'dialect' },
  oneOf: [
    {
      properties: {
        dialect: { const: DIALECT_VALUES[0] },
        file: filePath,
        busyTimeoutMs: int(L.busyTimeoutMs),
      },
      required: ['file'],
      additionalProperties: false,
    },
    {
      properties: {
        dialect: { const: DIALECT_VALUES[1] },
        url: text(S.urlLengthMax),
        schema: text(S.sqlNameLengthMax),
        captureSchema: named(STAGING_TABLE_PATTERN, S.sqlNameLengthMax),
      },
      required: ['url'],
      additionalProperties: false,
    },
    {
      properties: {
        dialect: { enum: [DIALECT_VALUES[2], DIALECT_VALUES[3]] },
        url: text(S.urlLengthMax),
        captureSchema: named(STAGING_TABLE_PATTERN, S.sqlNameLengthMax),
      },
      required: ['url'],
      additionalProperties: false,
    },
    {
      properties: {
        dialect: { const: DIALECT_VALUES[4] },
        url: text(S.urlLengthMax),
        passwordFile: filePath,
        schema: named(STAGING_TABLE_PATTERN, S.sqlNameLengthMax),
        captureSchema: named(STAGING_TABLE_PATTERN, S.sqlNameLengthMax),
      },
      required: ['url'],
      additionalProperties: false,
    },
  ],
};

const captureTable = {
  type: 'object',
  required: ['table', 'operations', 'target'],
  additionalProperties: false,
  properties: {
    table: text(S.tableNameLengthMax),
    operations: {
      type: 'array',
      minItems: 1,
      uniqueItems: true,
      items: { enum: CAPTURE_OPERATIONS },
    },
    columns: columnList,
    // Any shape here: checks.ts reports a bad key strategy precisely (keyStrategyProblems).
    key: {},
    // Any shape here: checks.ts reports a bad condition precisely (conditionProblems).
    condition: {},
    target: queueName,
    suppressNoopUpdates: { type: 'boolean' },
    keyUpdate: { enum: KEY_UPDATE_MODES },
    initialLoad: { type: 'boolean' },
    triggers: { enum: TRIGGER_LEVELS },
    format: { enum: SINK_FORMAT_VALUES },
  },
};

const brokerList = {
  type: 'array',
  minItems: 1,
  maxItems: S.brokersMax,
  uniqueItems: true,
  items: { type: 'string', maxLength: S.brokerLengthMax, pattern: BROKER_PATTERN },
};

const sink = {
  type: 'object',
  required: ['name', 'from', 'to'],
  additionalProperties: false,
  properties: {
    name: named(SERVICE_NAME_PATTERN, S.serviceNameLengthMax),
    from: queueName,
    to: {
      type: 'object',
      required: ['brokers'],
      additionalProperties: false,
      properties: {
        brokers: brokerList,
        // Kafka's legal topic characters and length.
        topic: named('^[A-Za-z0-9._-]+$', 249),
        partitions: int(L.partitions),
        clientId: named('^[A-Za-z0-9._-]+$', S.serviceNameLengthMax),
        recordBytesMax: int(L.sinkRecordBytesMax),
      },
    },
    format: { enum: SINK_FORMAT_VALUES },
    batchSizeMax: int(L.captureBatchSizeMax),
    pollIntervalMs: int(L.pollIntervalMs),
  },
};

const captureSource = {
  type: 'object',
  required: ['name', 'database', 'tables'],
  additionalProperties: false,
  properties: {
    name: named(SERVICE_NAME_PATTERN, S.serviceNameLengthMax),
    database,
    pumps: int(L.pumps),
    batchSizeMax: int(L.captureBatchSizeMax),
    pollIntervalMs: int(L.pollIntervalMs),
    stagingTable: named(STAGING_TABLE_PATTERN, S.stagingTableLengthMax),
    recordBytesMax: int(L.recordBytesMax),
    errors: {
      type: 'object',
      additionalProperties: false,
      properties: {
        ...Object.fromEntries(
          Object.entries(ERROR_POLICY_LIMITS).map(([k, range]) => [k, int(range)]),
        ),
        holdKeyWhenParked: { type: 'boolean' },
      },
    },
    tables: { type: 'array', minItems: 1, maxItems: S.tablesMax, items: captureTable },
  },
};

/**
 * The topology file schema (JSON Schema draft-07 plus ajv's `discriminator` on
 * `capture[].database`); also usable by editors (e.g. yaml-language-server) for completion.
 */
export const TOPOLOGY_SCHEMA = {
  type: 'object',
  required: ['name'],
  additionalProperties: false,
  properties: {
    name: named(TOPOLOGY_NAME_PATTERN, S.topologyNameLengthMax),
    dataDir: filePath,
    bus,
    rings: {
      type: 'object',
      additionalProperties: false,
      properties: {
        capacityBytes: int(L.ringCapacityBytes),
        recordBytesMax: int(L.recordBytesMax),
      },
    },
    supervisor: {
      type: 'object',
      additionalProperties: false,
      properties: {
        restartsMax: int(L.restartsMax),
        restartWindowMs: int(L.restartWindowMs),
        backoffInitialMs: int(L.backoffInitialMs),
        backoffMaxMs: int(L.backoffMaxMs),
        drainTimeoutMs: int(L.drainTimeoutMs),
      },
    },
    queues: { type: 'array', maxItems: S.queuesMax, items: queue },
    services: { type: 'array', maxItems: S.servicesMax, items: service },
    capture: { type: 'array', maxItems: S.captureSourcesMax, items: captureSource },
    processors: { type: 'array', maxItems: S.processorsMax, items: processor },
    sinks: { type: 'array', maxItems: S.sinksMax, items: sink },
  },
} as const;
