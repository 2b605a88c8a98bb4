/**
 * Checks the schema cannot express: names unique, queue references known, one writer per queue,
 * partitions matching pumps, service modules present, ring size a power of two, no service
 * cycles. They run on the raw document even when the schema found problems, skipping any part
 * whose shape is wrong (the schema reports that), so one run reports as much as possible.
 */
import { existsSync } from 'node:fs';
import path from 'node:path';
import {
  MARIADB_TRUNCATE_REFUSAL,
  ORACLE_INITIAL_LOAD_REFUSAL,
  ORACLE_TRUNCATE_REFUSAL,
  parseMariaDbUrl,
  parseOracleUrl,
} from '../cdc/index.js';
import { queueId } from '../codec/index.js';
import { conditionProblems, keyStrategyProblems } from '../cdc/index.js';
import { formatPath, type Segment } from './source-map.js';
import { TOPOLOGY_DEFAULTS } from './topology.js';

/** Reports a problem at a field path (`at: 'key'` points at the field name). */
export type Report = (path: Segment[], message: string, at?: 'value' | 'key') => void;
/** 1-based line of the node at a field path, for "first defined at line N". */
export type LineOf = (path: Segment[]) => number;

type Raw = Record<string, unknown>;

const isRecord = (v: unknown): v is Raw => typeof v === 'object' && v !== null && !Array.isArray(v);
const list = (v: unknown): unknown[] => (Array.isArray(v) ? v : []);
const str = (v: unknown): string | undefined => (typeof v === 'string' ? v : undefined);
const posInt = (v: unknown): number | undefined =>
  Number.isInteger(v) && (v as number) >= 1 ? (v as number) : undefined;

/**
 * Topology sections whose actors cannot read or write a kafka bus yet; a topology with
 * `bus.kind: kafka` and one of them is refused at load (an empty list once every actor can).
 */
export const KAFKA_BUS_UNSUPPORTED: readonly string[] = [];

/**
 * Every topic a processor reads or writes (inputs, outputs, state and dead-letter topics), by
 * name, from the raw file: on the journal bus these live on the bus, so a capture target among
 * them is shipped into the bus (actors/plan captureIntoBus).
 */
function processorTopicNames(root: Raw): Set<string> {
  const names = new Set<string>();
  for (const pr of list(root.processors)) {
    if (!isRecord(pr)) continue;
    for (const t of [...list(pr.inputs), ...list(pr.outputs), pr.stateTopic, pr.deadLetterTopic])
      if (typeof t === 'string') names.add(t);
  }
  return names;
}

/** The compiled JavaScript file of a service module, or why there is none. */
export type ModuleResolution = { ok: true; file: string } | { ok: false; message: string };

const COMPILED_EXTENSIONS: Readonly<Record<string, string>> = {
  '.ts': '.js',
  '.mts': '.mjs',
  '.cts': '.cjs',
};

/**
 * Resolves a service `module` path, relative to `baseDir` (the topology file's directory), to the
 * JavaScript file a worker imports. A TypeScript source (`.ts`, `.mts`, `.cts`) maps to its
 * compiled file `<package root>/dist/<path relative to the package root>` with `.js` (`.mjs`,
 * `.cjs`), the package root being the nearest ancestor directory holding a package.json; the
 * source may be absent if the compiled file exists (a deployment without sources).
 */
export function resolveModule(module: string, baseDir: string): ModuleResolution {
  const source = path.resolve(baseDir, module);
  const compiledExtension = COMPILED_EXTENSIONS[path.extname(source)];
  if (compiledExtension === undefined) {
    return existsSync(source)
      ? { ok: true, file: source }
      : { ok: false, message: `module file not found: ${source}` };
  }
  const root = packageRoot(path.dirname(source));
  if (root === undefined) {
    if (!existsSync(source)) return { ok: false, message: `module file not found: ${source}` };
    return {
      ok: false,
      message: `cannot locate the compiled JavaScript of ${source}: no package.json in any parent directory`,
    };
  }
  const relative = path.relative(root, source);
  const compiled = path.join(
    root,
    'dist',
    relative.slice(0, -path.extname(relative).length) + compiledExtension,
  );
  if (existsSync(compiled)) return { ok: true, file: compiled };
  if (!existsSync(source)) return { ok: false, message: `module file not found: ${source}` };
  return {
    ok: false,
    message: `compiled module not found: ${compiled} (compile it first: npm run build)`,
  };
}

function packageRoot(dir: string): string | undefined {
  for (let d = dir; ; d = path.dirname(d)) {
    if (existsSync(path.join(d, 'package.json'))) return d;
    if (path.dirname(d) === d) return undefined;
  }
}

/**
 * Runs every cross-reference check on the raw document `doc`; `baseDir` is the topology file's
 * directory (for module paths).
 */
export function checkReferences(
  doc: unknown,
  baseDir: string,
  report: Report,
  lineOf: LineOf,
): void {
  const root = isRecord(doc) ? doc : {};

  const capacityBytes =
    root.rings !== undefined && isRecord(root.rings) ? root.rings.capacityBytes : undefined;
  if (
    Number.isInteger(capacityBytes) &&
    (capacityBytes as number) > 0 &&
    ((capacityBytes as number) & ((capacityBytes as number) - 1)) !== 0
  ) {
    report(['rings', 'capacityBytes'], `must be a power of two, got ${String(capacityBytes)}`);
  }

  if (isRecord(root.supervisor)) {
    const s = root.supervisor;
    const initial = Number.isInteger(s.backoffInitialMs)
      ? (s.backoffInitialMs as number)
      : TOPOLOGY_DEFAULTS.supervisor.backoffInitialMs;
    const max = Number.isInteger(s.backoffMaxMs)
      ? (s.backoffMaxMs as number)
      : TOPOLOGY_DEFAULTS.supervisor.backoffMaxMs;
    if (max < initial) {
      const at = s.backoffMaxMs !== undefined ? 'backoffMaxMs' : 'backoffInitialMs';
      report(['supervisor', at], `backoffMaxMs (${max}) must be >= backoffInitialMs (${initial})`);
    }
  }

  // Bus: a kafka bus's SASL needs exactly one password source. What runs on a kafka bus is
  // checked per section (KAFKA_BUS_UNSUPPORTED lists the sections that cannot run there yet).
  if (isRecord(root.bus) && root.bus.kind === 'kafka') {
    const sasl = root.bus.sasl;
    if (isRecord(sasl) && (sasl.password === undefined) === (sasl.passwordFile === undefined)) {
      report(
        ['bus', 'sasl'],
        'give exactly one of password (e.g. "${KAFKA_PASSWORD}") and passwordFile',
      );
    }
    for (const section of KAFKA_BUS_UNSUPPORTED) {
      if (list(root[section]).length > 0) {
        report(
          ['bus', 'kind'],
          `${section} cannot run on a kafka bus yet (only on the embedded journal); remove bus or use kind: journal`,
        );
      }
    }
  }

  const onKafka = isRecord(root.bus) && root.bus.kind === 'kafka';

  // Queues: unique names, unique queueIds (the id stored in every envelope's cause).
  const queues = new Map<string, { index: number; partitions: number }>();
  const byId = new Map<number, string>();
  list(root.queues).forEach((q, i) => {
    const name = isRecord(q) ? str(q.name) : undefined;
    if (name === undefined) return;
    const first = queues.get(name);
    if (first !== undefined) {
      report(
        ['queues', i, 'name'],
        `duplicate queue name "${name}" (first defined at line ${lineOf(['queues', first.index, 'name'])})`,
      );
      return;
    }
    queues.set(name, {
      index: i,
      partitions: posInt((q as Raw).partitions) ?? TOPOLOGY_DEFAULTS.queue.partitions,
    });
    const id = queueId(name);
    const other = byId.get(id);
    if (other !== undefined) {
      report(
        ['queues', i, 'name'],
        `queue "${name}" has the same queueId (${id}, FNV-1a 32) as "${other}"; rename one`,
      );
    } else {
      byId.set(id, name);
    }
  });
  const known =
    queues.size > 0 ? `known: ${[...queues.keys()].join(', ')}` : 'no queues are defined';
  /** Queues in engine/journal's layout (services, capture), with the first field naming each. */
  const journalQueueUsers = new Map<string, Segment[]>();
  // On the journal bus a capture target that is also a processor topic lives on the bus (the
  // pumps ship into it in bus transactions, as on Kafka), not in engine/journal's layout.
  const processorTopics = processorTopicNames(root);
  const checkQueue = (p: Segment[], name: string): { partitions: number } | undefined => {
    const q = queues.get(name);
    if (q === undefined) report(p, `unknown queue "${name}" (${known})`);
    const onBus = p[0] === 'capture' && processorTopics.has(name);
    if ((p[0] === 'services' || p[0] === 'capture') && !onBus && !journalQueueUsers.has(name))
      journalQueueUsers.set(name, p);
    return q;
  };

  // Writers: each queue has one (a service, or the pumps of one capture source).
  // `writer` identifies a service or capture source by position, so duplicate names still count
  // as two writers; `what` describes it.
  const writerOf = new Map<string, { writer: string; what: string; line: number }>();
  const claimWriter = (p: Segment[], queue: string, writer: string, what: string): void => {
    const first = writerOf.get(queue);
    if (first === undefined) {
      writerOf.set(queue, { writer, what, line: lineOf(p) });
    } else if (first.writer !== writer) {
      report(
        p,
        `queue "${queue}" is already written by ${first.what} (line ${first.line}); a queue has one writer`,
      );
    }
  };

  // Services.
  const serviceNames = new Map<string, number>();
  const services: Array<{
    index: number;
    name: string;
    inputs: Array<{ queue: string; k: number }>;
    output?: string;
  }> = [];
  list(root.services).forEach((s, i) => {
    if (!isRecord(s)) return;
    const name = str(s.name);
    if (name !== undefined) {
      const first = serviceNames.get(name);
      if (first !== undefined) {
        report(
          ['services', i, 'name'],
          `duplicate service name "${name}" (first defined at line ${lineOf(['services', first, 'name'])})`,
        );
      } else {
        serviceNames.set(name, i);
      }
    }
    const inputs: Array<{ queue: string; k: number }> = [];
    list(s.inputs).forEach((input, k) => {
      if (typeof input !== 'string') return;
      if (inputs.some((x) => x.queue === input)) {
        report(['services', i, 'inputs', k], `queue "${input}" is listed twice`);
        return;
      }
      checkQueue(['services', i, 'inputs', k], input);
      inputs.push({ queue: input, k });
    });
    const output = str(s.output);
    if (output !== undefined) {
      const q = checkQueue(['services', i, 'output'], output);
      if (q !== undefined) {
        claimWriter(
          ['services', i, 'output'],
          output,
          `services[${i}]`,
          `service "${name ?? `#${i}`}"`,
        );
        if (q.partitions !== 1) {
          report(
            ['services', i, 'output'],
            `queue "${output}" has ${q.partitions} partitions; a service output queue must have 1`,
          );
        }
      }
    }
    // The dead-letter queue: written by this service alone, 1 partition (declared or implicit).
    const errors = isRecord(s.errors) ? s.errors : {};
    if (errors.onFailure !== 'stop' && name !== undefined && serviceNames.get(name) === i) {
      const dlq = str(errors.deadLetterQueue) ?? `${name}.dlq`;
      const at =
        isRecord(s.errors) && errors.deadLetterQueue !== undefined
          ? ['services', i, 'errors', 'deadLetterQueue']
          : ['services', i, 'name'];
      claimWriter(at, dlq, `services[${i}]`, `service "${name}" (its dead-letter queue)`);
      if (!journalQueueUsers.has(dlq)) journalQueueUsers.set(dlq, at);
      const q = queues.get(dlq);
      if (q !== undefined && q.partitions !== 1) {
        report(at, `dead-letter queue "${dlq}" has ${q.partitions} partitions; it must have 1`);
      }
      if (dlq === output) report(at, `dead-letter queue "${dlq}" is the service's output queue`);
    }
    // startFrom START with a replay (after Chronicle Services): the replay starts at index 0
    // and runs through LAST_WRITTEN with outputs suppressed, then the service goes live after
    // LAST_WRITTEN. OUTPUT_REVERSE reads the output, not the inputs, so it has no START.
    const replay = str(s.inputsReplay);
    if (str(s.startFrom) === 'START' && replay === 'OUTPUT_REVERSE') {
      report(
        ['services', i, 'inputsReplay'],
        'inputsReplay OUTPUT_REVERSE rebuilds the state from the output, not from the inputs, so ' +
          'it cannot start from START; use inputsReplay INPUTS or OUTPUT with START (replay from ' +
          'index 0 through LAST_WRITTEN, then live), or startFrom LAST_WRITTEN',
      );
    }
    if (s.emitDuringReplay === true && replay !== 'INPUTS' && replay !== 'OUTPUT') {
      report(
        ['services', i, 'emitDuringReplay'],
        'emitDuringReplay needs a replay of the inputs: inputsReplay INPUTS or OUTPUT, ' +
          `not ${replay ?? 'NONE'}`,
      );
    }
    // Periodic update events go to one of the service's own input queues, of one partition.
    if (isRecord(s.settings) && s.settings.timerQueue !== undefined) {
      const tq = s.settings.timerQueue;
      const at = ['services', i, 'settings', 'timerQueue'];
      if (typeof tq !== 'string' || !inputs.some((x) => x.queue === tq)) {
        report(
          at,
          `settings.timerQueue ${JSON.stringify(tq)} must name one of the service's input queues (${inputs.map((x) => x.queue).join(', ') || 'none'})`,
        );
      } else if (queues.has(tq) && queues.get(tq)!.partitions !== 1) {
        report(
          at,
          `timer queue "${tq}" has ${queues.get(tq)!.partitions} partitions; a timer queue must have 1`,
        );
      }
      const ti = s.settings.timerIntervalMs;
      if (!(typeof ti === 'number' && Number.isInteger(ti) && ti >= 1)) {
        report(
          ti === undefined ? at : ['services', i, 'settings', 'timerIntervalMs'],
          `settings.timerIntervalMs must be an integer >= 1 (ms) when settings.timerQueue is set, got ${JSON.stringify(ti)}`,
        );
      }
    }
    const module = str(s.module);
    if (module !== undefined && module.length > 0) {
      const resolved = resolveModule(module, baseDir);
      if (!resolved.ok) report(['services', i, 'module'], resolved.message);
    }
    if (name !== undefined) services.push({ index: i, name, inputs, output });
  });
  checkCycles(services, report);

  // Capture sources.
  const sourceNames = new Map<string, number>();
  list(root.capture).forEach((c, i) => {
    if (!isRecord(c)) return;
    const name = str(c.name);
    if (name !== undefined) {
      const first = sourceNames.get(name);
      if (first !== undefined) {
        report(
          ['capture', i, 'name'],
          `duplicate capture source name "${name}" (first defined at line ${lineOf(['capture', first, 'name'])})`,
        );
      } else {
        sourceNames.set(name, i);
      }
    }
    const pumps = posInt(c.pumps) ?? TOPOLOGY_DEFAULTS.capture.pumps;
    const dialect = isRecord(c.database) ? c.database.dialect : undefined;
    const isMariaDb = dialect === 'mariadb' || dialect === 'mysql';
    if (isMariaDb && isRecord(c.database) && typeof c.database.url === 'string') {
      const url = parseMariaDbUrl(c.database.url);
      if (typeof url === 'string') report(['capture', i, 'database', 'url'], url);
    }
    const isOracle = dialect === 'oracle';
    if (isOracle && isRecord(c.database) && typeof c.database.url === 'string') {
      const url = parseOracleUrl(c.database.url);
      if (typeof url === 'string') report(['capture', i, 'database', 'url'], url);
      else if (url.password !== '' && c.database.passwordFile !== undefined)
        report(
          ['capture', i, 'database', 'passwordFile'],
          'give the password in the url or in passwordFile, not both',
        );
    }
    const tables = new Map<string, number>();
    list(c.tables).forEach((t, k) => {
      if (!isRecord(t)) return;
      const table = str(t.table);
      if (table !== undefined) {
        const first = tables.get(table);
        if (first !== undefined) {
          report(
            ['capture', i, 'tables', k, 'table'],
            `table "${table}" is captured twice in this source (first at line ${lineOf(['capture', i, 'tables', first, 'table'])})`,
          );
        } else {
          tables.set(table, k);
        }
      }
      for (const problem of keyStrategyProblems(
        t.key,
        typeof dialect === 'string' ? dialect : undefined,
      )) {
        report(['capture', i, 'tables', k, 'key', ...problem.sub], problem.message);
      }
      if (t.initialLoad === true && t.key === 'transactionId') {
        report(
          ['capture', i, 'tables', k, 'initialLoad'],
          'needs a key that names the row (primaryKey, columns, fixed, expression or none); key transactionId orders by transaction and a read event has none',
        );
      }
      for (const problem of conditionProblems(
        t.condition,
        list(t.operations),
        dialect,
        t.triggers,
      )) {
        report(['capture', i, 'tables', k, 'condition', ...problem.sub], problem.message);
      }
      if (dialect === 'sqlite') {
        list(t.operations).forEach((op, n) => {
          if (op === 'truncate') {
            report(
              ['capture', i, 'tables', k, 'operations', n],
              'truncate is not supported on sqlite (SQLite has no TRUNCATE; DELETE fires per-row delete triggers)',
            );
          }
        });
      }
      if (isOracle) {
        list(t.operations).forEach((op, n) => {
          if (op === 'truncate')
            report(['capture', i, 'tables', k, 'operations', n], ORACLE_TRUNCATE_REFUSAL);
        });
        if (t.initialLoad === true)
          report(['capture', i, 'tables', k, 'initialLoad'], ORACLE_INITIAL_LOAD_REFUSAL);
      }
      if (isMariaDb) {
        list(t.operations).forEach((op, n) => {
          if (op === 'truncate')
            report(['capture', i, 'tables', k, 'operations', n], MARIADB_TRUNCATE_REFUSAL);
        });
      }
      const target = str(t.target);
      if (target === undefined) return;
      const p: Segment[] = ['capture', i, 'tables', k, 'target'];
      const q = checkQueue(p, target);
      if (q === undefined) return;
      claimWriter(p, target, `capture[${i}]`, `capture source "${name ?? `#${i}`}"`);
      // The journal has one appender per partition: a change goes to partition keyHash mod
      // partitions and pump i of N appends the partitions p with p mod N = i, which is exact when
      // N divides the partitions (then keyHash mod N = (keyHash mod partitions) mod N), and lets
      // the pump count change at runtime to any divisor without moving a key to another
      // partition. On Kafka a record's partition is murmur2(key) mod partitions and its pump
      // keyHash(key) mod pumps: many producers share a partition (transactions), so the two
      // counts are independent.
      if (!onKafka && !processorTopics.has(target) && q.partitions % pumps !== 0) {
        report(
          p,
          `queue "${target}" has ${q.partitions} partition${q.partitions === 1 ? '' : 's'} but capture source ` +
            `"${name ?? `#${i}`}" has ${pumps} pump${pumps === 1 ? '' : 's'}; on the journal bus the partitions of a capture target must be a multiple of the pumps ` +
            '(one appender per partition; on a kafka bus the counts are independent)',
        );
      }
    });
    // A source ships either into the bus (every target a processor topic) or into journal
    // queues: its pumps have one sink.
    const targets = list(c.tables).map((t) => (isRecord(t) ? str(t.target) : undefined));
    const onBus = targets.filter((t) => t !== undefined && processorTopics.has(t));
    if (!onKafka && onBus.length > 0) {
      targets.forEach((t, k) => {
        if (t !== undefined && !processorTopics.has(t))
          report(
            ['capture', i, 'tables', k, 'target'],
            `queue "${t}" is not a processor topic but "${onBus[0]}" of the same capture source is; on the journal bus a capture source ships either into processor topics (the bus) or into journal queues (services), not both: use two capture sources`,
          );
      });
    }
    list(c.tables).forEach((t, k) => {
      const intoBus = isRecord(t) && typeof t.target === 'string' && processorTopics.has(t.target);
      if (isRecord(t) && t.format === 'json' && !onKafka && !intoBus) {
        report(
          ['capture', i, 'tables', k, 'format'],
          "format json needs a kafka bus (bus: { kind: kafka, brokers: [...] }); the journal's readers take the envelope (a sink with format json ships a journal queue to Kafka as JSON)",
        );
      }
      // A service reads Sluice envelopes: JSON records would fail at its first one.
      if (isRecord(t) && t.format === 'json' && typeof t.target === 'string') {
        list(root.services).forEach((sv, si) => {
          if (!isRecord(sv)) return;
          list(sv.inputs).forEach((q, qi) => {
            if (q === t.target)
              report(
                ['services', si, 'inputs', qi],
                `queue "${q}" gets capture[${i}].tables[${k}] as format json (line ${lineOf(['capture', i, 'tables', k, 'format'])}), and a service reads Sluice envelopes: use format envelope for it, or read it with a processor (codec json)`,
              );
          });
        });
      }
    });
  });

  // Sinks: unique names, a journal queue to forward, on the journal bus only.
  const sinkNames = new Map<string, number>();
  list(root.sinks).forEach((k, i) => {
    if (!isRecord(k)) return;
    const name = str(k.name);
    if (name !== undefined) {
      const first = sinkNames.get(name);
      if (first !== undefined)
        report(
          ['sinks', i, 'name'],
          `duplicate sink name "${name}" (first defined at line ${lineOf(['sinks', first, 'name'])})`,
        );
      else sinkNames.set(name, i);
    }
    const from = str(k.from);
    if (from !== undefined) checkQueue(['sinks', i, 'from'], from);
    if (onKafka)
      report(
        ['sinks', i],
        'a sink forwards a queue of the embedded journal to Kafka; on a kafka bus the queues are Kafka topics already (remove the sink, or use bus kind journal)',
      );
  });

  const busKind = isRecord(root.bus) && root.bus.kind === 'kafka' ? 'kafka' : 'journal';
  checkProcessors(root, baseDir, busKind, queues, journalQueueUsers, report, lineOf);
  checkRetention(root, onKafka, processorTopics, report);
}

/**
 * `queues[].retention`: a bound to apply (bytesMax or ageMsMax); only on the embedded journal's
 * queues; not on a queue a sink forwards unless deleteUncommitted (the sink's position is a
 * Kafka group offset, which retention cannot see).
 */
function checkRetention(
  root: Raw,
  onKafka: boolean,
  processorTopics: Set<string>,
  report: Report,
): void {
  const sinkOf = new Map<string, string>();
  for (const k of list(root.sinks)) {
    if (isRecord(k) && str(k.from) !== undefined) sinkOf.set(str(k.from)!, str(k.name) ?? '?');
  }
  list(root.queues).forEach((q, i) => {
    if (!isRecord(q) || !isRecord(q.retention)) return;
    const r = q.retention;
    const at = ['queues', i, 'retention'];
    const name = str(q.name) ?? '';
    if (r.bytesMax === undefined && r.ageMsMax === undefined) {
      report(at, 'give bytesMax (bytes) or ageMsMax (ms), or both');
    } else if (onKafka) {
      report(
        at,
        `retention applies to the embedded journal's queues; on a kafka bus queue "${name}" is a Kafka topic: set its retention.bytes / retention.ms on the broker`,
      );
    } else if (processorTopics.has(name)) {
      report(
        at,
        `queue "${name}" is a processor topic (in <dataDir>/bus); topology retention covers <dataDir>/queues only`,
      );
    } else if (sinkOf.has(name) && r.deleteUncommitted !== true) {
      report(
        at,
        `queue "${name}" is forwarded by sink "${sinkOf.get(name)}", whose position is a Kafka group offset that retention cannot see; set deleteUncommitted: true to delete by size and age anyway`,
      );
    }
  });
}

/** Which processor fields each pattern takes (see TopologyProcessor); the rest are refused. */
const PATTERN_FIELDS: Readonly<Record<string, readonly string[]>> = {
  durable: [
    'group',
    'deadLetterTopic',
    'batchSizeMax',
    'commitRecordsMax',
    'retriesMax',
    'retryBackoffMs',
    'sessionTimeoutMs',
    'fencing',
    'pool',
  ],
  'state-and-event': [
    'group',
    'stateTopic',
    'batchSizeMax',
    'retriesMax',
    'retryBackoffMs',
    'sessionTimeoutMs',
  ],
  pubsub: ['pool'],
  compacted: [],
  rpc: [],
};
/** Why a pattern refuses `pool` (its handler keeps state, or one call answers in order). */
const POOL_REFUSED: Readonly<Record<string, string>> = {
  'state-and-event':
    "each event's handler call needs its key's state as the previous event of that key left it",
  compacted: 'its handler updates the one map of the topic, record after record',
  rpc: 'a responder answers each request as it comes, there is no batch to spread',
};
/** Fields every processor takes. */
const COMMON_PROCESSOR_FIELDS = [
  'name',
  'pattern',
  'module',
  'inputs',
  'outputs',
  'codec',
  'settings',
];
/** Input and output counts per pattern: [inputs min, inputs max, outputs min, outputs max]. */
const PATTERN_TOPICS: Readonly<Record<string, readonly [number, number, number, number]>> = {
  durable: [1, Infinity, 0, Infinity],
  'state-and-event': [1, 1, 0, Infinity],
  pubsub: [1, 1, 0, 0],
  compacted: [1, 1, 0, 0],
  rpc: [1, 1, 1, 1],
};
const WHAT_TOPICS: Readonly<Record<string, string>> = {
  durable: 'a durable processor reads one or more input topics',
  'state-and-event':
    'a state-and-event processor reads one event topic (its states are in stateTopic)',
  pubsub: 'a pubsub processor reads one topic and writes nothing (at most once, no outputs)',
  compacted:
    'a compacted processor reads one topic and writes nothing (its map is rebuilt at each start)',
  rpc: 'an rpc responder reads one request topic and writes one response topic (same partition numbers)',
};

/**
 * processors[]: names unique among processors, every topic a declared queue, the pattern's topic counts and
 * options (PATTERN_FIELDS), partition counts the pattern needs (state topic and rpc response
 * topic at least the input's), module present, and, on the journal bus, no topic that is also
 * a service queue (the journal bus keeps its topics in its own layout under `<dataDir>/bus/`,
 * services theirs under `<dataDir>/queues/`; a capture target that is a processor topic is
 * shipped into the bus, so it is not in `journalQueueUsers`).
 */
function checkProcessors(
  root: Raw,
  baseDir: string,
  busKind: 'journal' | 'kafka',
  queues: Map<string, { index: number; partitions: number }>,
  journalQueueUsers: Map<string, Segment[]>,
  report: Report,
  lineOf: LineOf,
): void {
  const names = new Map<string, number>();
  const known =
    queues.size > 0 ? `known: ${[...queues.keys()].join(', ')}` : 'no queues are defined';
  list(root.processors).forEach((pr, i) => {
    if (!isRecord(pr)) return;
    const name = str(pr.name);
    if (name !== undefined) {
      const first = names.get(name);
      if (first !== undefined)
        report(
          ['processors', i, 'name'],
          `duplicate processor name "${name}" (first defined at line ${lineOf(['processors', first, 'name'])})`,
        );
      else names.set(name, i);
    }
    const pattern = str(pr.pattern);
    const topic = (p: Segment[], queue: string): { partitions: number } | undefined => {
      const q = queues.get(queue);
      if (q === undefined) {
        report(p, `unknown queue "${queue}" (${known})`);
        return undefined;
      }
      const user = journalQueueUsers.get(queue);
      if (busKind === 'journal' && user !== undefined) {
        report(
          p,
          `queue "${queue}" is also ${formatPath(user)} (line ${lineOf(user)}); on the journal bus a processor's topics live in the bus directory (<dataDir>/bus), services' and capture's queues in <dataDir>/queues, so one queue cannot be both yet; use another queue`,
        );
      }
      return q;
    };
    const inputs = list(pr.inputs).map((x, k) =>
      typeof x === 'string' ? topic(['processors', i, 'inputs', k], x) : undefined,
    );
    const outputs = list(pr.outputs).map((x, k) =>
      typeof x === 'string' ? topic(['processors', i, 'outputs', k], x) : undefined,
    );
    if (pattern === undefined || PATTERN_FIELDS[pattern] === undefined) return;
    const allowed = new Set([...COMMON_PROCESSOR_FIELDS, ...PATTERN_FIELDS[pattern]!]);
    for (const field of Object.keys(pr)) {
      if (allowed.has(field) || !Object.values(PATTERN_FIELDS).some((f) => f.includes(field)))
        continue;
      const takers = Object.entries(PATTERN_FIELDS)
        .filter(([, f]) => f.includes(field))
        .map(([p]) => p);
      if (field === 'pool') {
        report(
          ['processors', i, field],
          `pool does not apply to pattern ${pattern}: ${POOL_REFUSED[pattern] ?? 'its handler is not stateless'}; a pool runs stateless handlers only (${takers.join(', ')})`,
          'key',
        );
        continue;
      }
      report(
        ['processors', i, field],
        `${field} does not apply to pattern ${pattern} (only to ${takers.join(', ')})`,
        'key',
      );
    }
    const [inMin, inMax, outMin, outMax] = PATTERN_TOPICS[pattern]!;
    const nIn = list(pr.inputs).length;
    const nOut = list(pr.outputs).length;
    if (Array.isArray(pr.inputs) && (nIn < inMin || nIn > inMax))
      report(['processors', i, 'inputs'], `lists ${nIn} topics; ${WHAT_TOPICS[pattern]}`);
    if (nOut < outMin || nOut > outMax)
      report(
        ['processors', i, pr.outputs === undefined ? 'pattern' : 'outputs'],
        `${pr.outputs === undefined ? 'outputs is missing' : `outputs lists ${nOut} topics`}; ${WHAT_TOPICS[pattern]}`,
      );
    if (pattern === 'state-and-event') {
      const st = str(pr.stateTopic);
      if (st === undefined) {
        if (pr.stateTopic === undefined)
          report(
            ['processors', i, 'pattern'],
            'a state-and-event processor needs stateTopic (its per-key states, as many partitions as the event topic)',
          );
      } else {
        const q = topic(['processors', i, 'stateTopic'], st);
        const ev = inputs[0];
        if (q !== undefined && ev !== undefined && q.partitions < ev.partitions) {
          report(
            ['processors', i, 'stateTopic'],
            `queue "${st}" has ${q.partitions} partitions; the state topic needs at least the event topic's ${ev.partitions} (a key's state and events share a partition number)`,
          );
        }
        if (list(pr.inputs).includes(st) || list(pr.outputs).includes(st))
          report(
            ['processors', i, 'stateTopic'],
            `"${st}" is also an input or output of the processor; the state topic is written only with the states`,
          );
      }
    }
    if (pattern === 'durable' && typeof pr.deadLetterTopic === 'string') {
      topic(['processors', i, 'deadLetterTopic'], pr.deadLetterTopic);
      if (list(pr.inputs).includes(pr.deadLetterTopic))
        report(
          ['processors', i, 'deadLetterTopic'],
          `"${pr.deadLetterTopic}" is also an input: dead letters would be read again`,
        );
    }
    if (
      pattern === 'rpc' &&
      inputs[0] !== undefined &&
      outputs[0] !== undefined &&
      outputs[0].partitions < inputs[0].partitions
    ) {
      report(
        ['processors', i, 'outputs', 0],
        `queue "${str(list(pr.outputs)[0])}" has ${outputs[0].partitions} partitions; an rpc response topic needs at least the request topic's ${inputs[0].partitions} (each response goes to its request's partition number)`,
      );
    }
    if (busKind === 'kafka' && pr.fencing === 'member') {
      report(
        ['processors', i, 'fencing'],
        'fencing member on a kafka bus lets a zombie member commit (kafkajs sends no KIP-447 generation): every process of the topology would need its own transactionalId; use partition (the default on kafka)',
      );
    }
    const module = str(pr.module);
    if (module !== undefined && module.length > 0) {
      const resolved = resolveModule(module, baseDir);
      if (!resolved.ok) report(['processors', i, 'module'], resolved.message);
    }
  });
}

/** Reports each cycle of the service graph (service -> services reading its output) once. */
function checkCycles(
  services: Array<{
    index: number;
    name: string;
    inputs: Array<{ queue: string; k: number }>;
    output?: string;
  }>,
  report: Report,
): void {
  const producer = new Map<string, (typeof services)[number]>();
  for (const s of services)
    if (s.output !== undefined && !producer.has(s.output)) producer.set(s.output, s);
  const state = new Map<string, 'visiting' | 'done'>();
  const stack: string[] = [];
  const visit = (s: (typeof services)[number]): void => {
    state.set(s.name, 'visiting');
    stack.push(s.name);
    for (const input of s.inputs) {
      const up = producer.get(input.queue);
      if (up === undefined) continue;
      const st = state.get(up.name);
      if (st === 'visiting') {
        const cycle = [...stack.slice(stack.indexOf(up.name)), up.name];
        report(
          ['services', s.index, 'inputs', input.k],
          `service cycle (each reads the output of the next): ${cycle.join(' -> ')}`,
        );
      } else if (st === undefined) {
        visit(up);
      }
    }
    stack.pop();
    state.set(s.name, 'done');
  };
  for (const s of services) if (!state.has(s.name)) visit(s);
}
