import { readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { LineCounter, parseDocument } from 'yaml';
import type {
  CaptureErrorPolicy,
  ConditionsByOp,
  KeyStrategy,
  KeyUpdateMode,
  TriggerLevel,
  CaptureOperation,
  CaptureSource,
  CaptureTable,
  DatabaseRef,
} from '../cdc/index.js';
import { CDC_DEFAULTS } from '../cdc/index.js';
import { firstInvalidUtf8 } from '../codec/index.js';
import { checkReferences, resolveModule } from './checks.js';
import { checkResolvedLimits, findStructureProblem } from './limits.js';
import { substituteEnv } from './env.js';
import type { Environment } from './env.js';
import { ConfigError } from './errors.js';
import type { ConfigProblem } from './errors.js';
import { formatPath, SourceMap } from './source-map.js';
import type { Segment } from './source-map.js';
import { POOL_DEFAULTS, TOPOLOGY_DEFAULTS, TOPOLOGY_SIZE_LIMITS } from './topology.js';
import type {
  InputsReplay,
  QueueFsync,
  StartFrom,
  Topology,
  TopologyBus,
  TopologyBusSasl,
  TopologyProcessor,
} from './topology.js';
import { validateSchema } from './validate.js';

/** Options of `loadTopology` / `parseTopology`. */
export interface TopologyLoadOptions {
  /** Variables for `${VAR}` substitution; default `process.env`. */
  env?: Environment;
}

/**
 * Reads, validates and resolves a topology YAML file (format: docs/ARCHITECTURE.md, engine/config).
 * Relative paths in it (dataDir, service modules, sqlite files) are relative to the file's
 * directory; the result has every default of TOPOLOGY_DEFAULTS applied and every path absolute.
 *
 * @throws ConfigError listing every problem found (unreadable file, YAML syntax, unset environment
 *   variables, schema violations, bad references, missing module files), each as
 *   `file:line:col: path: message`.
 */
export function loadTopology(file: string, options: TopologyLoadOptions = {}): Topology {
  const unreadable = (message: string) =>
    new ConfigError([{ file, line: 0, col: 0, path: '(root)', message }]);
  let bytes: Buffer;
  try {
    // Checked before reading, so a huge file (or a device) is not read into memory.
    const size = statSync(file).size;
    if (size > TOPOLOGY_SIZE_LIMITS.fileBytesMax) throw unreadable(tooBig(size));
    bytes = readFileSync(file);
  } catch (e) {
    if (e instanceof ConfigError) throw e;
    throw unreadable(`cannot read topology file: ${(e as Error).message}`);
  }
  if (bytes.length > TOPOLOGY_SIZE_LIMITS.fileBytesMax) throw unreadable(tooBig(bytes.length));
  const bad = firstInvalidUtf8(bytes);
  if (bad >= 0) {
    const before = bytes.subarray(0, bad);
    const line = before.filter((b) => b === 0x0a).length + 1;
    const col = bad - (before.lastIndexOf(0x0a) + 1) + 1;
    throw new ConfigError([
      {
        file,
        line,
        col,
        path: '(root)',
        message: `not UTF-8: byte 0x${bytes[bad].toString(16).padStart(2, '0')} at offset ${bad} (a topology file is UTF-8 text)`,
      },
    ]);
  }
  return parseTopology(bytes.toString('utf8'), file, options);
}

function tooBig(bytes: number): string {
  return `the file is ${bytes} bytes; a topology file is at most ${TOPOLOGY_SIZE_LIMITS.fileBytesMax} bytes`;
}

/**
 * `loadTopology` on text already read: `file` names the source in problems and anchors relative
 * paths (its directory, resolved against the working directory).
 *
 * Steps, all problems of a step collected before failing: YAML parse (syntax errors, duplicate
 * keys: stop here); `${VAR}` / `${VAR:-default}` substitution in string values; JSON Schema
 * (ajv, allErrors) mapped back to YAML node positions; cross-reference checks (checks.ts).
 *
 * @throws ConfigError as `loadTopology`.
 */
export function parseTopology(
  text: string,
  file: string,
  options: TopologyLoadOptions = {},
): Topology {
  if (
    text.length > TOPOLOGY_SIZE_LIMITS.fileBytesMax ||
    Buffer.byteLength(text) > TOPOLOGY_SIZE_LIMITS.fileBytesMax
  ) {
    throw new ConfigError([
      { file, line: 0, col: 0, path: '(root)', message: tooBig(Buffer.byteLength(text)) },
    ]);
  }
  const lineCounter = new LineCounter();
  const doc = parseDocument(text, { lineCounter, prettyErrors: false, uniqueKeys: true });
  const map = new SourceMap(doc, lineCounter);
  const problems: ConfigProblem[] = [];
  const atOffset = (offset: number, message: string): void => {
    const { line, col } = map.linePos(offset);
    problems.push({ file, line, col, path: formatPath(map.pathAt(offset)), message });
  };

  // Before the syntax errors: too deep a nesting makes the parser itself overflow its stack
  // ("Maximum call stack size exceeded" as a syntax error), and later steps recurse too.
  const structure = findStructureProblem(doc);
  if (structure !== null) {
    const { line, col } = lineCounter.linePos(structure.offset);
    throw new ConfigError([
      { file, line, col, path: formatPath(structure.path), message: structure.message },
    ]);
  }

  if (doc.errors.length > 0) {
    // Only the first syntax error: the parser's later ones mostly follow from it, with paths
    // that reflect its recovery guesses rather than the file.
    const [first, ...rest] = doc.errors;
    atOffset(
      first.pos[0],
      rest.length > 0
        ? `${first.message} (${rest.length} more YAML error${rest.length === 1 ? '' : 's'} after this one not shown)`
        : first.message,
    );
    throw new ConfigError(ordered(problems));
  }

  // A value whose substitution failed keeps its "${...}" text; problems the later steps find in
  // that text would only repeat the substitution problem, so they are dropped.
  const unsubstituted = new Set<string>();
  for (const p of substituteEnv(doc, options.env ?? process.env)) {
    atOffset(p.offset, p.message);
    unsubstituted.add(problems[problems.length - 1]!.path);
  }

  let data: unknown;
  try {
    data = doc.toJS({ maxAliasCount: 1000 });
  } catch (e) {
    atOffset(0, `cannot read the YAML document: ${(e as Error).message}`);
    throw new ConfigError(ordered(problems));
  }

  const report = (fieldPath: Segment[], message: string, at: 'value' | 'key' = 'value'): void => {
    const formatted = formatPath(fieldPath);
    if (unsubstituted.has(formatted)) return;
    const { line, col } = map.position(fieldPath, at);
    problems.push({ file, line, col, path: formatted, message: bounded(message) });
  };
  for (const p of validateSchema(data)) report(p.path, p.message, p.at);
  const baseDir = path.dirname(path.resolve(file));
  checkResolvedLimits(data, baseDir, report);
  checkReferences(data, baseDir, report, (p) => map.position(p).line);

  if (problems.length > 0) throw new ConfigError(ordered(problems));
  return applyDefaults(data as TopologyFile, path.resolve(file), baseDir);
}

/** A service entry of a topology file whose module file resolves (see readServiceModules). */
export interface ServiceModuleRef {
  index: number;
  name: string;
  /** The JavaScript file to import. */
  module: string;
  /** As written, or the default (NONE) when absent or not a string. */
  inputsReplay: string;
  settings: Record<string, unknown>;
}

/**
 * The services of a topology file whose `module` resolves to a file, read leniently: the rest
 * of the file may have problems (this is for reporting module problems together with them).
 * `${VAR}` is substituted as in loadTopology. Returns [] when the file cannot be read or parsed.
 */
export function readServiceModules(
  file: string,
  options: TopologyLoadOptions = {},
): ServiceModuleRef[] {
  let data: unknown;
  try {
    const text = readFileSync(file, 'utf8');
    const doc = parseDocument(text, { prettyErrors: false, uniqueKeys: true });
    if (doc.errors.length > 0) return [];
    substituteEnv(doc, options.env ?? process.env);
    data = doc.toJS({ maxAliasCount: 1000 });
  } catch {
    return [];
  }
  const services = (data as { services?: unknown } | null)?.services;
  if (!Array.isArray(services)) return [];
  const baseDir = path.dirname(path.resolve(file));
  const out: ServiceModuleRef[] = [];
  services.forEach((s: unknown, index) => {
    if (typeof s !== 'object' || s === null) return;
    const e = s as Record<string, unknown>;
    if (typeof e.module !== 'string' || e.module.length === 0) return;
    const module = resolveModule(e.module, baseDir);
    if (!module.ok) return;
    const raw = e.settings;
    const isObject = typeof raw === 'object' && raw !== null && !Array.isArray(raw);
    const settings = isObject ? (raw as Record<string, unknown>) : {};
    out.push({
      index,
      name: typeof e.name === 'string' ? e.name : `#${index}`,
      module: module.file,
      inputsReplay:
        typeof e.inputsReplay === 'string'
          ? e.inputsReplay
          : TOPOLOGY_DEFAULTS.service.inputsReplay,
      settings,
    });
  });
  return out;
}

/**
 * Longest message of one problem. The longest legitimate part of a message is a resolved path
 * (at most pathBytesMax); anything longer quotes a value the schema already refused for its
 * length (a cross-reference check naming a 300,000-character queue name), so it is cut.
 */
const MESSAGE_CHARS_MAX = 4608;

function bounded(message: string): string {
  if (message.length <= MESSAGE_CHARS_MAX) return message;
  return `${message.slice(0, 200)}... (message cut; ${message.length} characters)`;
}

/** Problems in file order, exact repeats dropped. */
function ordered(problems: ConfigProblem[]): ConfigProblem[] {
  const seen = new Set<string>();
  return problems
    .filter((p) => {
      const id = `${p.line}:${p.col}:${p.path}:${p.message}`;
      if (seen.has(id)) return false;
      seen.add(id);
      return true;
    })
    .sort((a, b) => a.line - b.line || a.col - b.col);
}

// The file's shape once the schema has accepted it: optional fields may be absent.
interface TopologyFile {
  name: string;
  dataDir?: string;
  bus?:
    | { kind: 'journal' }
    | {
        kind: 'kafka';
        brokers: string[];
        clientId?: string;
        tls?: {
          caFile?: string;
          certFile?: string;
          keyFile?: string;
          rejectUnauthorized?: boolean;
        };
        sasl?: TopologyBusSasl;
        recordBytesMax?: number;
      };
  rings?: { capacityBytes?: number; recordBytesMax?: number };
  supervisor?: Partial<Topology['supervisor']>;
  queues?: Array<{
    name: string;
    partitions?: number;
    segmentBytes?: number;
    fsync?: QueueFsync;
    retention?: { bytesMax?: number; ageMsMax?: number; deleteUncommitted?: boolean };
  }>;
  services?: Array<{
    name: string;
    module: string;
    inputs: string[];
    output: string;
    startFrom?: StartFrom;
    inputsReplay?: InputsReplay;
    batchSizeMax?: number;
    emitDuringReplay?: boolean;
    settings?: Record<string, unknown>;
    errors?: Partial<Topology['services'][number]['errors']>;
  }>;
  processors?: Array<
    Omit<TopologyProcessor, 'outputs' | 'group' | 'codec' | 'settings' | 'pool'> &
      Partial<Pick<TopologyProcessor, 'outputs' | 'group' | 'codec' | 'settings'>> & {
        pool?: { threads: number; batchSize?: number; batchesInFlightMax?: number };
      }
  >;
  capture?: Array<{
    name: string;
    database: DatabaseRef;
    pumps?: number;
    batchSizeMax?: number;
    pollIntervalMs?: number;
    stagingTable?: string;
    recordBytesMax?: number;
    errors?: Partial<CaptureErrorPolicy>;
    tables: Array<{
      table: string;
      operations: CaptureOperation[];
      columns?: string[];
      key?: KeyStrategy;
      condition?: string | ConditionsByOp;
      target: string;
      suppressNoopUpdates?: boolean;
      keyUpdate?: KeyUpdateMode;
      initialLoad?: boolean;
      triggers?: TriggerLevel;
      format?: 'envelope' | 'json';
    }>;
  }>;
  sinks?: Array<{
    name: string;
    from: string;
    to: {
      brokers: string[];
      topic?: string;
      partitions?: number;
      clientId?: string;
      recordBytesMax?: number;
    };
    format?: 'envelope' | 'json';
    batchSizeMax?: number;
    pollIntervalMs?: number;
  }>;
}

function busOf(f: TopologyFile, resolvePath: (p: string) => string): TopologyBus {
  const b = f.bus;
  if (b === undefined || b.kind === 'journal') return { kind: 'journal' };
  const file = resolvePath;
  return {
    kind: 'kafka',
    brokers: [...b.brokers],
    clientId: b.clientId ?? `sluice-${f.name}`,
    recordBytesMax: b.recordBytesMax ?? TOPOLOGY_DEFAULTS.kafkaBus.recordBytesMax,
    ...(b.tls !== undefined
      ? {
          tls: {
            ...(b.tls.caFile !== undefined ? { caFile: file(b.tls.caFile) } : {}),
            ...(b.tls.certFile !== undefined ? { certFile: file(b.tls.certFile) } : {}),
            ...(b.tls.keyFile !== undefined ? { keyFile: file(b.tls.keyFile) } : {}),
            rejectUnauthorized: b.tls.rejectUnauthorized ?? true,
          },
        }
      : {}),
    ...(b.sasl !== undefined
      ? {
          sasl: {
            mechanism: b.sasl.mechanism,
            username: b.sasl.username,
            ...(b.sasl.password !== undefined ? { password: b.sasl.password } : {}),
            ...(b.sasl.passwordFile !== undefined
              ? { passwordFile: resolvePath(b.sasl.passwordFile) }
              : {}),
          },
        }
      : {}),
  };
}

/**
 * The one place where TOPOLOGY_DEFAULTS are applied and relative paths resolved against
 * `baseDir`. Called only on a document that passed every check.
 */
function applyDefaults(f: TopologyFile, file: string, baseDir: string): Topology {
  const D = TOPOLOGY_DEFAULTS;
  const resolvePath = (p: string) => path.resolve(baseDir, p);
  const database = (db: NonNullable<TopologyFile['capture']>[number]['database']): DatabaseRef => {
    if (db.dialect === 'sqlite') {
      // ":memory:" and "file:" URIs are SQLite names, not paths.
      const dbFile =
        db.file === ':memory:' || db.file.startsWith('file:') ? db.file : resolvePath(db.file);
      return {
        dialect: 'sqlite',
        file: dbFile,
        ...(db.busyTimeoutMs !== undefined ? { busyTimeoutMs: db.busyTimeoutMs } : {}),
      };
    }
    if (db.dialect === 'postgres') {
      return {
        dialect: 'postgres',
        url: db.url,
        ...(db.schema !== undefined ? { schema: db.schema } : {}),
        ...(db.captureSchema !== undefined ? { captureSchema: db.captureSchema } : {}),
      };
    }
    if (db.dialect === 'oracle') {
      return {
        dialect: 'oracle',
        url: db.url,
        ...(db.passwordFile !== undefined ? { passwordFile: resolvePath(db.passwordFile) } : {}),
        ...(db.schema !== undefined ? { schema: db.schema } : {}),
        ...(db.captureSchema !== undefined ? { captureSchema: db.captureSchema } : {}),
      };
    }
    // "mysql" is another spelling of the same dialect.
    return {
      dialect: 'mariadb',
      url: db.url,
      ...(db.captureSchema !== undefined ? { captureSchema: db.captureSchema } : {}),
    };
  };
  const t: Topology = {
    name: f.name,
    file,
    dataDir: resolvePath(f.dataDir ?? path.join(D.dataDirPrefix, f.name)),
    bus: busOf(f, resolvePath),
    rings: {
      capacityBytes: f.rings?.capacityBytes ?? D.rings.capacityBytes,
      recordBytesMax: f.rings?.recordBytesMax ?? D.rings.recordBytesMax,
    },
    supervisor: { ...D.supervisor, ...f.supervisor },
    queues: (f.queues ?? []).map((q) => ({
      name: q.name,
      partitions: q.partitions ?? D.queue.partitions,
      segmentBytes: q.segmentBytes ?? D.queue.segmentBytes,
      fsync: q.fsync ?? D.queue.fsync,
      ...(q.retention !== undefined
        ? {
            retention: {
              ...q.retention,
              deleteUncommitted: q.retention.deleteUncommitted ?? false,
            },
          }
        : {}),
    })),
    services: (f.services ?? []).map((s) => {
      const module = resolveModule(s.module, baseDir);
      if (!module.ok)
        throw new Error(`unreachable: module checked before defaults, ${module.message}`);
      return {
        name: s.name,
        module: module.file,
        inputs: [...s.inputs],
        output: s.output,
        startFrom: s.startFrom ?? D.service.startFrom,
        inputsReplay: s.inputsReplay ?? D.service.inputsReplay,
        batchSizeMax: s.batchSizeMax ?? D.service.batchSizeMax,
        emitDuringReplay: s.emitDuringReplay ?? D.service.emitDuringReplay,
        settings: s.settings ?? {},
        errors: { ...D.serviceErrors, deadLetterQueue: `${s.name}.dlq`, ...s.errors },
      };
    }),
    capture: (f.capture ?? []).map((c): CaptureSource => ({
      name: c.name,
      database: database(c.database),
      tables: c.tables.map((t): CaptureTable => ({
        table: t.table,
        operations: [...t.operations],
        ...(t.columns !== undefined ? { columns: [...t.columns] } : {}),
        ...(t.key !== undefined ? { key: structuredClone(t.key) } : {}),
        ...(t.condition !== undefined ? { condition: structuredClone(t.condition) } : {}),
        target: t.target,
        suppressNoopUpdates: t.suppressNoopUpdates ?? D.captureTable.suppressNoopUpdates,
        keyUpdate: t.keyUpdate ?? CDC_DEFAULTS.keyUpdate,
        ...(t.initialLoad !== undefined ? { initialLoad: t.initialLoad } : {}),
        ...(t.triggers !== undefined ? { triggers: t.triggers } : {}),
        ...(t.format === 'json' ? { format: 'json' as const } : {}),
      })),
      pumps: c.pumps ?? D.capture.pumps,
      batchSizeMax: c.batchSizeMax ?? D.capture.batchSizeMax,
      pollIntervalMs: c.pollIntervalMs ?? D.capture.pollIntervalMs,
      stagingTable: c.stagingTable ?? D.capture.stagingTable,
      recordBytesMax: c.recordBytesMax ?? CDC_DEFAULTS.recordBytesMax,
      errors: { ...CDC_DEFAULTS.errors, ...c.errors },
    })),
    processors: (f.processors ?? []).map(({ pool, ...pr }): TopologyProcessor => {
      const module = resolveModule(pr.module, baseDir);
      if (!module.ok)
        throw new Error(`unreachable: module checked before defaults, ${module.message}`);
      return {
        ...pr,
        module: module.file,
        inputs: [...pr.inputs],
        outputs: [...(pr.outputs ?? [])],
        group: pr.group ?? pr.name,
        codec: pr.codec ?? D.processor.codec,
        settings: pr.settings ?? {},
        ...(pool !== undefined
          ? {
              pool: {
                threads: pool.threads,
                batchSize: pool.batchSize ?? POOL_DEFAULTS.batchSize,
                batchesInFlightMax:
                  pool.batchesInFlightMax ?? POOL_DEFAULTS.batchesInFlightPerThread * pool.threads,
              },
            }
          : {}),
      };
    }),
    sinks: [],
  };
  t.sinks = (f.sinks ?? []).map((k) => ({
    name: k.name,
    from: k.from,
    to: {
      brokers: [...k.to.brokers],
      topic: k.to.topic ?? k.from,
      partitions:
        k.to.partitions ??
        t.queues.find((q) => q.name === k.from)?.partitions ??
        D.queue.partitions,
      clientId: k.to.clientId ?? `sluice-${f.name}`,
      recordBytesMax: k.to.recordBytesMax ?? D.sink.recordBytesMax,
    },
    format: k.format ?? D.sink.format,
    batchSizeMax: k.batchSizeMax ?? D.sink.batchSizeMax,
    pollIntervalMs: k.pollIntervalMs ?? D.sink.pollIntervalMs,
  }));
  // A dead-letter queue not declared in `queues` is declared here: 1 partition, queue defaults.
  for (const s of t.services) {
    if (s.errors.onFailure !== 'dead-letter') continue;
    if (t.queues.some((q) => q.name === s.errors.deadLetterQueue)) continue;
    t.queues.push({
      name: s.errors.deadLetterQueue,
      partitions: 1,
      segmentBytes: D.queue.segmentBytes,
      fsync: D.queue.fsync,
    });
  }
  return t;
}
