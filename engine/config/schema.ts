/**
 * JSON Schema (draft-07, checked by ajv) of a topology file after YAML parsing and environment
 * substitution. It covers shapes, types, required fields, unknown fields, enums, patterns and
 * numeric ranges; cross-references (queue names, partitions vs pumps, files) are checked in
 * checks.ts, which can point at the exact YAML node.
 */
import { CAPTURE_OPERATIONS, ERROR_POLICY_LIMITS, KEY_UPDATE_MODES } from '../cdc/index.js';
import {
  DIALECT_VALUES, INPUTS_REPLAY_VALUES, ON_FAILURE_VALUES, QUEUE_FSYNC_VALUES, QUEUE_NAME_PATTERN,
  SERVICE_NAME_PATTERN,
  STAGING_TABLE_PATTERN, START_FROM_VALUES, TOPOLOGY_LIMITS, TOPOLOGY_NAME_PATTERN,
} from './topology.js';

const int = (range: readonly [number, number]) => ({ type: 'integer', minimum: range[0], maximum: range[1] });
const nonEmptyString = { type: 'string', minLength: 1 };
const columnList = { type: 'array', minItems: 1, uniqueItems: true, items: nonEmptyString };
const L = TOPOLOGY_LIMITS;

const queue = {
  type: 'object',
  required: ['name'],
  additionalProperties: false,
  properties: {
    name: { type: 'string', pattern: QUEUE_NAME_PATTERN },
    partitions: int(L.partitions),
    segmentBytes: int(L.segmentBytes),
    fsync: { enum: QUEUE_FSYNC_VALUES },
  },
};

const service = {
  type: 'object',
  required: ['name', 'module', 'inputs', 'output'],
  additionalProperties: false,
  properties: {
    name: { type: 'string', pattern: SERVICE_NAME_PATTERN },
    module: nonEmptyString,
    inputs: { type: 'array', minItems: 1, items: { type: 'string' } },
    output: { type: 'string' },
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

const database = {
  type: 'object',
  required: ['dialect'],
  discriminator: { propertyName: 'dialect' },
  oneOf: [
    {
      properties: {
        dialect: { const: DIALECT_VALUES[0] },
        file: nonEmptyString,
        busyTimeoutMs: int(L.busyTimeoutMs),
      },
      required: ['file'],
      additionalProperties: false,
    },
    {
      properties: {
        dialect: { const: DIALECT_VALUES[1] },
        url: nonEmptyString,
        schema: nonEmptyString,
        captureSchema: { type: 'string', pattern: STAGING_TABLE_PATTERN },
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
    table: nonEmptyString,
    operations: { type: 'array', minItems: 1, uniqueItems: true, items: { enum: CAPTURE_OPERATIONS } },
    columns: columnList,
    // Any shape here: checks.ts reports a bad key strategy precisely (keyStrategyProblems).
    key: {},
    // Any shape here: checks.ts reports a bad condition precisely (conditionProblems).
    condition: {},
    target: { type: 'string' },
    suppressNoopUpdates: { type: 'boolean' },
    keyUpdate: { enum: KEY_UPDATE_MODES },
  },
};

const captureSource = {
  type: 'object',
  required: ['name', 'database', 'tables'],
  additionalProperties: false,
  properties: {
    name: { type: 'string', pattern: SERVICE_NAME_PATTERN },
    database,
    pumps: int(L.pumps),
    batchSizeMax: int(L.captureBatchSizeMax),
    pollIntervalMs: int(L.pollIntervalMs),
    stagingTable: { type: 'string', pattern: STAGING_TABLE_PATTERN },
    recordBytesMax: int(L.recordBytesMax),
    errors: {
      type: 'object',
      additionalProperties: false,
      properties: {
        ...Object.fromEntries(Object.entries(ERROR_POLICY_LIMITS).map(([k, range]) => [k, int(range)])),
        holdKeyWhenParked: { type: 'boolean' },
      },
    },
    tables: { type: 'array', minItems: 1, items: captureTable },
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
    name: { type: 'string', pattern: TOPOLOGY_NAME_PATTERN },
    dataDir: nonEmptyString,
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
    queues: { type: 'array', items: queue },
    services: { type: 'array', items: service },
    capture: { type: 'array', items: captureSource },
  },
} as const;
