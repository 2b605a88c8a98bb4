/**
 * JSON schemas of the operations API's requests and responses, one per shape; fastify validates
 * requests with them and @fastify/swagger publishes them in /openapi.json. Response objects keep
 * `additionalProperties: true` so a field added to a figure is served before the schema names it.
 */
import { CDC_DEFAULTS } from '../engine/cdc/index.js';

const num = { type: 'number' } as const;
const int = { type: 'integer' } as const;
const str = { type: 'string' } as const;
const obj = (properties: Record<string, unknown>, required: string[] = Object.keys(properties)) =>
  ({ type: 'object', properties, required, additionalProperties: true }) as const;

export const anyObject = { type: 'object', additionalProperties: true } as const;
export const error = obj({ error: str });
export const live = obj({ status: { type: 'string', enum: ['live'] } });
export const version = obj({ version: str, topology: str });

export const health = obj({
  status: { type: 'string', enum: ['ok', 'starting', 'degraded', 'draining', 'stopped', 'failed'] },
  ready: { type: 'boolean' },
  reasons: { type: 'array', items: str },
  degraded: {
    type: 'array',
    items: obj({
      group: str,
      actor: str,
      error: str,
      since: { type: 'string', format: 'date-time' },
      restarts: int,
    }),
  },
  waiting: {
    type: 'array',
    items: obj({
      what: str,
      action: str,
      error: str,
      since: { type: 'string', format: 'date-time' },
    }),
  },
});

const rates = obj({ perSecond1s: num, perSecond1m: num });
const inputLag = obj({
  queue: str,
  partition: int,
  endIndex: int,
  handledIndex: int,
  lagRecords: int,
  lagMs: num,
});
const ring = obj({ capacityBytes: int, usedBytes: int, ratio: num, closed: { type: 'boolean' } });

export const actor = obj({
  name: str,
  kind: { type: 'string', enum: ['pump', 'reader', 'service', 'timer', 'other'] },
  group: str,
  state: { type: 'string', enum: ['new', 'init', 'replay', 'live', 'drain', 'stopped', 'failed'] },
  restarts: int,
  startedAt: { type: 'string', format: 'date-time' },
  heartbeatAgeMs: num,
  lastError: { type: 'string', nullable: true },
  outage: {
    ...obj({ side: { type: 'string', enum: ['source', 'target'] }, what: str, error: str }),
    nullable: true,
  },
  counters: obj({
    eventsIn: num,
    eventsOut: num,
    batches: num,
    waits: num,
    replayed: num,
    replayTotal: num,
    errors: num,
  }),
  rates: obj({ eventsIn: rates, eventsOut: rates }),
  inputs: { type: 'array', items: inputLag },
  ring: { ...ring, nullable: true },
});

export const actors = obj({
  topology: str,
  time: { type: 'string', format: 'date-time' },
  actors: { type: 'array', items: actor },
});

export const actorParams = obj({ name: str });
export const historyQuery = {
  type: 'object',
  properties: {
    step: { type: 'string', enum: ['second', 'minute'] },
    samples: { type: 'integer', minimum: 1, maximum: 3600 },
  },
  additionalProperties: false,
} as const;
const series = { type: 'array', items: num } as const;
export const history = obj({
  actor: str,
  step: str,
  timeMs: series,
  intervalMs: series,
  eventsInPerSecond: series,
  eventsOutPerSecond: series,
  lagRecords: series,
  lagMs: series,
});

export const capture = obj({
  topology: str,
  sources: {
    type: 'array',
    items: obj({
      source: str,
      dialect: str,
      stagingTable: str,
      pumps: int,
      error: { type: 'string', nullable: true },
      readAt: { type: 'string', format: 'date-time' },
      drainRate: rates,
      tables: {
        type: 'array',
        nullable: true,
        items: obj({
          table: str,
          target: str,
          stagingDepth: int,
          oldestStagedAgeMs: num,
          parkedErrors: { type: 'integer', nullable: true },
        }),
      },
    }),
  },
});

const level = {
  type: 'string',
  enum: ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'],
} as const;
export const logLevels = obj({
  global: str,
  actors: { type: 'object', additionalProperties: str },
});
export const logLevelBody = {
  type: 'object',
  properties: { level, actor: { type: 'string', minLength: 1 } },
  required: ['level'],
  additionalProperties: false,
} as const;

const anyValue = {} as const;
export const auditEntry = obj({
  time: { type: 'string', format: 'date-time' },
  user: str,
  remote: str,
  action: str,
  target: str,
  before: anyValue,
  after: anyValue,
});
export const auditQuery = {
  type: 'object',
  properties: { limit: { type: 'integer', minimum: 1, maximum: 10000 } },
  additionalProperties: false,
} as const;
export const audit = obj({ entries: { type: 'array', items: auditEntry } });

// ---- the pump count of a capture source ------------------------------------------------------
export const pumpCount = obj({ source: str, pumps: int });
export const pumpCountBody = {
  type: 'object',
  properties: { pumps: { type: 'integer', minimum: 1, maximum: CDC_DEFAULTS.pumpsMax } },
  required: ['pumps'],
  additionalProperties: false,
} as const;
export const pumpCountChange = obj({
  ...auditEntry.properties,
  switchMs: int,
  terminated: { type: 'array', items: str },
});

// ---- the capture error table and the dead-letter queues --------------------------------------
export const sourceParams = obj({ source: str });
export const errorsQuery = {
  type: 'object',
  properties: {
    limit: { type: 'integer', minimum: 1, maximum: 10000 },
    images: { type: 'boolean' },
  },
  additionalProperties: false,
} as const;
const parkedChange = obj({
  stagingId: str,
  table: str,
  op: str,
  key: str,
  txid: str,
  timeMs: num,
  attempts: int,
  error: str,
  parkedTimeMs: num,
  beforeChars: { type: 'integer', nullable: true },
  afterChars: { type: 'integer', nullable: true },
  before: { type: 'string', nullable: true },
  after: { type: 'string', nullable: true },
});
export const errorsList = obj({
  source: str,
  total: int,
  parked: { type: 'array', items: parkedChange },
});
const stagingIds = { type: 'array', items: { type: 'string', pattern: '^[0-9]+$' }, minItems: 1 };
export const requeueBody = {
  type: 'object',
  properties: { ids: stagingIds, all: { type: 'boolean' } },
  additionalProperties: false,
} as const;
export const purgeBody = {
  type: 'object',
  properties: {
    ids: stagingIds,
    all: { type: 'boolean' },
    olderThanMs: { type: 'integer', minimum: 0 },
  },
  additionalProperties: false,
} as const;
export const errorsChange = obj({ source: str, changed: int, parked: int, audit: auditEntry });

export const queueParams = obj({ queue: str });
export const dlqQueues = obj({
  queues: { type: 'array', items: obj({ queue: str, service: str, deadLetters: int }) },
});
const deadLetter = obj({
  dlqIndex: int,
  service: str,
  queue: str,
  partition: int,
  index: int,
  key: str,
  attempts: int,
  error: str,
  failedAtMs: num,
  value: anyValue,
});
export const dlqList = obj({
  queue: str,
  total: int,
  deadLetters: { type: 'array', items: deadLetter },
});
export const dlqQuery = {
  type: 'object',
  properties: { limit: { type: 'integer', minimum: 1, maximum: 10000 } },
  additionalProperties: false,
} as const;
export const dlqReplayBody = {
  type: 'object',
  properties: {
    to: { type: 'string', minLength: 1 },
    indexes: { type: 'array', items: { type: 'integer', minimum: 0 }, minItems: 1 },
  },
  additionalProperties: false,
} as const;
export const dlqReplayed = obj({
  queue: str,
  replayed: {
    type: 'array',
    items: obj({ dlqIndex: int, queue: str, partition: int, index: int }),
  },
  audit: auditEntry,
});
export const dlqPurged = obj({ queue: str, purged: int, audit: auditEntry });

// ---- statistics ----------------------------------------------------------------------------
export const statsQuery = {
  type: 'object',
  properties: {
    from: { type: 'string', minLength: 1 },
    to: { type: 'string', minLength: 1 },
    step: { type: 'string', enum: ['minute', 'hour'] },
    name: { type: 'string', minLength: 1 },
  },
  additionalProperties: false,
} as const;
const nullableNum = { type: 'number', nullable: true } as const;
export const stats = obj({
  topology: str,
  step: str,
  fromMs: num,
  toMs: num,
  intervalMs: num,
  series: {
    type: 'array',
    items: obj({
      kind: { type: 'string', enum: ['actor', 'capture'] },
      name: str,
      points: {
        type: 'array',
        items: obj({
          startMs: num,
          intervalMs: num,
          eventsIn: num,
          eventsOut: num,
          errors: num,
          lagP50Ms: nullableNum,
          lagP99Ms: nullableNum,
        }),
      },
    }),
  },
});

// ---- capture configuration -----------------------------------------------------------------
export const configQuery = {
  type: 'object',
  properties: { schema: { type: 'string', minLength: 1 } },
  additionalProperties: false,
} as const;
const captureSection = { type: 'array', items: anyObject } as const;
export const captureExport = obj({ schema: str, capture: captureSection }, ['capture']);
/** Only the shape; the fields are validated as the topology file's (with their line:col). */
export const captureImport = {
  type: 'object',
  properties: { schema: str, capture: { type: 'array' } },
  required: ['capture'],
  additionalProperties: true,
} as const;
const diffEntry = obj({ path: str, before: anyValue, after: anyValue });
const versionFields = {
  version: int,
  time: { type: 'string', format: 'date-time' },
  user: str,
  action: { type: 'string', enum: ['initial', 'import', 'restore'] },
  restoredFrom: int,
  diff: { type: 'array', items: diffEntry },
};
export const configVersion = obj({ ...versionFields, capture: captureSection }, [
  'version',
  'time',
  'user',
  'action',
  'diff',
  'capture',
]);
export const configHistory = obj({
  versions: {
    type: 'array',
    items: obj(versionFields, ['version', 'time', 'user', 'action', 'diff']),
  },
});
export const configChange = obj({ version: configVersion, audit: auditEntry });
export const configProblems = obj(
  {
    error: str,
    problems: {
      type: 'array',
      items: obj({ file: str, line: int, col: int, path: str, message: str }),
    },
  },
  ['error'],
);
export const versionParams = obj({ version: { type: 'integer', minimum: 0 } });
export const restoreBody = {
  type: 'object',
  properties: { version: { type: 'integer', minimum: 0 } },
  required: ['version'],
  additionalProperties: false,
} as const;
