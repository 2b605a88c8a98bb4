/**
 * fast-check generators of topology files for test/fuzz-topology.test.ts: valid topologies (every
 * reference resolvable, one writer per queue, no cycles, names up to their maximum lengths) and
 * mutations of them, on the data (a field deleted, replaced by a value of another type, made
 * too long, an unknown field added) and on the text (bytes inserted, deleted, cut off).
 */
import fc from 'fast-check';
import { stringify } from 'yaml';
import { TOPOLOGY_LIMITS, TOPOLOGY_SIZE_LIMITS } from '../../engine/config/index.js';

const S = TOPOLOGY_SIZE_LIMITS;

/** Tables of the SQLite database the generated capture sources read (created by the test). */
export const CAPTURE_TABLES = ['t1', 't2', 't3'] as const;
/** Columns of every table in CAPTURE_TABLES; `id` is the primary key. */
export const CAPTURE_COLUMNS = ['id', 'v', 'w'] as const;

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type Obj = { [key: string]: Json };

/** Built once: fast-check compiles a regular expression per stringMatching call. */
const dottedBody = fc.stringMatching(/^[a-z0-9][a-z0-9._-]{0,11}$/);
const settingsKey = fc.stringMatching(/^[a-z]{1,8}$/);

/** A name matching `^[a-z0-9][a-z0-9._-]*$`, sometimes exactly `max` characters long. */
function dottedName(max: number): fc.Arbitrary<string> {
  const body = dottedBody;
  return fc.oneof(
    { weight: 8, arbitrary: body },
    { weight: 1, arbitrary: body.map((s) => (s + 'x'.repeat(max)).slice(0, max)) },
  );
}

const topologyName = fc.oneof(
  { weight: 8, arbitrary: fc.stringMatching(/^[a-z0-9-]{1,16}$/) },
  { weight: 1, arbitrary: fc.constant('n'.repeat(S.topologyNameLengthMax)) },
);

/** A relative dataDir: short, or with components up to NAME_MAX and a length near the limit. */
const dataDir = fc.oneof(
  { weight: 6, arbitrary: fc.constantFrom('./data', 'data/q', './state/x.y') },
  {
    weight: 1,
    arbitrary: fc
      .array(fc.integer({ min: 1, max: S.pathComponentBytesMax }), { minLength: 1, maxLength: 4 })
      .map(
        (lengths) => './' + lengths.map((n, i) => String.fromCharCode(97 + i).repeat(n)).join('/'),
      ),
  },
);

const pow2 = (min: number, max: number) =>
  fc.integer({ min: Math.log2(min), max: Math.min(Math.log2(max), 24) }).map((e) => 2 ** e);
const inRange = (r: readonly [number, number], cap = r[1]) =>
  fc.integer({ min: r[0], max: Math.min(r[1], cap) });

interface Shape {
  sources: Array<{ name: string; partitions: number; segmentBytes?: number; fsync?: string }>;
  outputs: Array<{ name: string; segmentBytes?: number; fsync?: string }>;
}

/** Queue names, unique; the first `sources` are fed from outside or by capture, the rest are service outputs. */
const queueName = dottedName(S.queueNameLengthMax);
const serviceName = dottedName(S.serviceNameLengthMax);
const shape: fc.Arbitrary<Shape> = fc
  .uniqueArray(queueName, { minLength: 1, maxLength: 7 })
  .chain((names) =>
    fc.integer({ min: 1, max: names.length }).chain((nSources) => {
      const queueOpts = fc.record({
        segmentBytes: fc.option(inRange(TOPOLOGY_LIMITS.segmentBytes, 1 << 22), { nil: undefined }),
        fsync: fc.option(fc.constantFrom('none', 'batch', 'record'), { nil: undefined }),
      });
      return fc.record({
        sources: fc.tuple(
          ...names
            .slice(0, nSources)
            .map((name) =>
              fc
                .tuple(queueOpts, fc.integer({ min: 1, max: 3 }))
                .map(([o, partitions]) => ({ name, partitions, ...o })),
            ),
        ),
        outputs:
          names.length > nSources
            ? fc.tuple(
                ...names.slice(nSources).map((name) => queueOpts.map((o) => ({ name, ...o }))),
              )
            : fc.constant([]),
      });
    }),
  );

/** `value` with "$" in strings replaced: "${" would be an environment variable reference. */
function noDollar(value: unknown): Json {
  if (typeof value === 'string') return value.replace(/\$/g, '_');
  if (Array.isArray(value)) return value.map(noDollar);
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(
      Object.entries(value).map(([k, v]) => [k.replace(/\$/g, '_'), noDollar(v)]),
    );
  }
  return value as Json;
}

function stripUndefined(o: Record<string, unknown>): Obj {
  const out: Obj = {};
  for (const [k, v] of Object.entries(o)) if (v !== undefined) out[k] = v as Json;
  return out;
}

/** What the generated files refer to. */
export interface GenOptions {
  /** Absolute path of the service module every generated service uses. */
  module: string;
  /** Add PostgreSQL capture sources (valid to check; the test does not start them). */
  postgres?: boolean;
}

/**
 * A valid topology as plain data. Capture sources read `./capture.db` next to the topology file
 * (tables CAPTURE_TABLES, provided by the test).
 */
export function validTopology(options: GenOptions): fc.Arbitrary<Obj> {
  return fc
    .tuple(shape, topologyName, fc.option(dataDir, { nil: undefined }), fc.nat(), fc.nat())
    .chain(([sh, name, dir, seedA, seedB]) => {
      const serviceNames = fc.uniqueArray(serviceName, {
        minLength: sh.outputs.length,
        maxLength: sh.outputs.length,
      });
      // Source queues with the same partition count can be the targets of one capture source.
      const byPartitions = new Map<number, string[]>();
      sh.sources.forEach((q, i) => {
        // About half the source queues are capture targets (chosen by the seeds).
        if (((seedA >>> i) & 1) === 1)
          byPartitions.set(q.partitions, [...(byPartitions.get(q.partitions) ?? []), q.name]);
      });
      const groups = [...byPartitions.entries()];
      const captureNames = fc.uniqueArray(serviceName, {
        minLength: groups.length,
        maxLength: groups.length,
      });
      const services = serviceNames.chain((names) =>
        fc.tuple(
          ...names.map((svcName, i) => {
            const upstream = [
              ...sh.sources.map((q) => q.name),
              ...sh.outputs.slice(0, i).map((q) => q.name),
            ];
            return fc
              .record({
                inputs: fc.shuffledSubarray(upstream, {
                  minLength: 1,
                  maxLength: Math.min(upstream.length, S.inputsMax),
                }),
                startFrom: fc.option(fc.constantFrom('LAST_WRITTEN', 'END'), { nil: undefined }),
                inputsReplay: fc.option(fc.constantFrom('NONE', 'INPUTS', 'OUTPUT'), {
                  nil: undefined,
                }),
                batchSizeMax: fc.option(inRange(TOPOLOGY_LIMITS.serviceBatchSizeMax), {
                  nil: undefined,
                }),
                settings: fc.option(
                  fc.dictionary(settingsKey, fc.jsonValue({ maxDepth: 3 }).map(noDollar), {
                    maxKeys: 3,
                  }),
                  { nil: undefined },
                ),
              })
              .map((s) =>
                stripUndefined({
                  name: svcName,
                  module: options.module,
                  ...s,
                  output: sh.outputs[i]!.name,
                }),
              );
          }),
        ),
      );
      const capture = captureNames.chain((names) =>
        fc.tuple(
          ...groups.map(([partitions, targets], i) => {
            const postgres = options.postgres === true && ((seedB >>> i) & 1) === 1;
            const table = fc.record({
              operations: fc.subarray(['insert', 'update', 'delete'], { minLength: 1 }),
              columns: fc.option(fc.subarray([...CAPTURE_COLUMNS], { minLength: 1 }), {
                nil: undefined,
              }),
              suppressNoopUpdates: fc.option(fc.boolean(), { nil: undefined }),
              target: fc.constantFrom(...targets),
            });
            return fc
              .record({
                tables: fc
                  .uniqueArray(fc.constantFrom(...CAPTURE_TABLES), { minLength: 1, maxLength: 3 })
                  .chain((ts) =>
                    fc.tuple(
                      ...ts.map((t) => table.map((x) => stripUndefined({ table: t, ...x }))),
                    ),
                  ),
                batchSizeMax: fc.option(inRange(TOPOLOGY_LIMITS.captureBatchSizeMax), {
                  nil: undefined,
                }),
                pollIntervalMs: fc.option(fc.integer({ min: 1, max: 50 }), { nil: undefined }),
                stagingTable: fc.option(
                  fc.constantFrom(
                    'sluice_staging',
                    'st_' + 'q'.repeat(S.stagingTableLengthMax - 3),
                  ),
                  { nil: undefined },
                ),
              })
              .map((c) => {
                // Every target of the source must be one of its tables' targets to be written by it;
                // the others stay plain source queues, which is also valid.
                return stripUndefined({
                  name: names[i]!,
                  database: postgres
                    ? { dialect: 'postgres', url: 'postgres://postgres@127.0.0.1:5432/test' }
                    : { dialect: 'sqlite', file: './capture.db' },
                  pumps: partitions,
                  ...c,
                });
              });
          }),
        ),
      );
      return fc
        .record({
          services,
          capture,
          rings: fc.option(
            pow2(TOPOLOGY_LIMITS.ringCapacityBytes[0], TOPOLOGY_LIMITS.ringCapacityBytes[1]).map(
              (capacityBytes) => ({ capacityBytes }),
            ),
            { nil: undefined },
          ),
          supervisor: fc.option(
            fc
              .tuple(fc.integer({ min: 0, max: 500 }), fc.integer({ min: 0, max: 500 }))
              .map(([a, b]) => ({
                backoffInitialMs: Math.min(a, b),
                backoffMaxMs: Math.max(a, b),
                restartsMax: 3,
              })),
            { nil: undefined },
          ),
        })
        .map((r) =>
          stripUndefined({
            name,
            dataDir: dir,
            rings: r.rings,
            supervisor: r.supervisor,
            queues: [
              ...sh.sources.map((q) => stripUndefined({ ...q })),
              ...sh.outputs.map((q) => stripUndefined({ ...q })),
            ],
            services: r.services.length > 0 ? r.services : undefined,
            capture: r.capture.length > 0 ? r.capture : undefined,
          }),
        );
    });
}

/** Paths (keys and indexes) of every node of `value`, the root excluded. */
function pathsOf(value: Json, prefix: Array<string | number> = []): Array<Array<string | number>> {
  const out: Array<Array<string | number>> = [];
  if (Array.isArray(value)) {
    value.forEach((v, i) => out.push([...prefix, i], ...pathsOf(v, [...prefix, i])));
  } else if (value !== null && typeof value === 'object') {
    for (const [k, v] of Object.entries(value))
      out.push([...prefix, k], ...pathsOf(v, [...prefix, k]));
  }
  return out;
}

/** Replacement values: other types, edge numbers, long and odd strings. */
const oddValue: fc.Arbitrary<Json> = fc.oneof(
  fc.constantFrom<Json>(
    null,
    true,
    false,
    0,
    -1,
    1.5,
    2 ** 31,
    2 ** 53,
    -(2 ** 53),
    '',
    ' ',
    '\u0000',
    '${UNSET}',
    '../../..',
    ':memory:',
    [],
    {},
  ),
  // Just past the limits (65, 129, 257: NAME_MAX, 1025, 4097) and one far past (200,000).
  fc.constantFrom(65, 129, 257, 1025, 4097, 200_000).map((n) => 'a'.repeat(n)),
  fc.string({ maxLength: 12, unit: 'binary' }),
  fc.jsonValue({ maxDepth: 2 }) as fc.Arbitrary<Json>,
  fc.integer({ min: 33, max: 60 }).map((n) => JSON.parse('['.repeat(n) + ']'.repeat(n)) as Json),
);

type DataMutation =
  | { kind: 'delete'; pick: number }
  | { kind: 'replace'; pick: number; value: Json }
  | { kind: 'unknown'; pick: number; key: string; value: Json }
  | { kind: 'duplicate'; pick: number };

const dataMutation: fc.Arbitrary<DataMutation> = fc.oneof(
  fc.record({ kind: fc.constant('delete' as const), pick: fc.nat() }),
  fc.record({ kind: fc.constant('replace' as const), pick: fc.nat(), value: oddValue }),
  fc.record({
    kind: fc.constant('unknown' as const),
    pick: fc.nat(),
    key: fc.string({ minLength: 1, maxLength: 10 }),
    value: oddValue,
  }),
  fc.record({ kind: fc.constant('duplicate' as const), pick: fc.nat() }),
);

function applyDataMutation(doc: Obj, m: DataMutation): Obj {
  const copy = structuredClone(doc) as Obj;
  const paths = pathsOf(copy);
  if (paths.length === 0) return copy;
  const p = paths[m.pick % paths.length]!;
  let parent: Json = copy;
  for (const seg of p.slice(0, -1))
    parent = (parent as Record<string | number, Json>)[seg as never]!;
  const last = p[p.length - 1]!;
  const container = parent as Record<string | number, Json> & Json[];
  switch (m.kind) {
    case 'delete':
      if (Array.isArray(container)) container.splice(last as number, 1);
      else delete container[last];
      break;
    case 'replace':
      container[last] = m.value;
      break;
    case 'unknown': {
      const target = container[last];
      if (target !== null && typeof target === 'object' && !Array.isArray(target))
        (target as Obj)[m.key] = m.value;
      else (container as Record<string, Json>)[m.key] = m.value;
      break;
    }
    case 'duplicate':
      if (Array.isArray(container)) container.push(structuredClone(container[last as number]!));
      else container[last] = structuredClone(container[last]!);
      break;
  }
  return copy;
}

type TextMutation =
  | { kind: 'insert'; at: number; text: string }
  | { kind: 'remove'; at: number; length: number }
  | { kind: 'truncate'; at: number }
  | { kind: 'repeat-line'; at: number };

const textMutation: fc.Arbitrary<TextMutation> = fc.oneof(
  fc.record({
    kind: fc.constant('insert' as const),
    at: fc.nat(),
    text: fc.oneof(
      fc.string({ minLength: 1, maxLength: 8, unit: 'binary' }),
      fc.constantFrom(
        ':',
        '- ',
        '\t',
        '\n',
        '  ',
        '{',
        '[',
        '"',
        "'",
        '&a',
        '*a',
        '!!binary',
        '%YAML 1.2\n',
        '---\n',
        '? ',
        '#',
        '${X}',
        '\u0000',
        '\ufeff',
      ),
    ),
  }),
  fc.record({
    kind: fc.constant('remove' as const),
    at: fc.nat(),
    length: fc.integer({ min: 1, max: 20 }),
  }),
  fc.record({ kind: fc.constant('truncate' as const), at: fc.nat() }),
  fc.record({ kind: fc.constant('repeat-line' as const), at: fc.nat() }),
);

function applyTextMutation(text: string, m: TextMutation): string {
  const at = text.length === 0 ? 0 : m.at % text.length;
  switch (m.kind) {
    case 'insert':
      return text.slice(0, at) + m.text + text.slice(at);
    case 'remove':
      return text.slice(0, at) + text.slice(at + m.length);
    case 'truncate':
      return text.slice(0, at);
    case 'repeat-line': {
      const lines = text.split('\n');
      const i = m.at % lines.length;
      lines.splice(i, 0, lines[i]!);
      return lines.join('\n');
    }
  }
}

/** YAML text of a document, block or flow style. */
export function toYaml(doc: unknown, flow: boolean): string {
  return stringify(doc, flow ? { collectionStyle: 'flow', lineWidth: 0 } : { lineWidth: 0 });
}

/** A generated file: its text, and whether the generator built it valid (unmutated). */
export interface GeneratedFile {
  text: string;
  valid: boolean;
  /** What was done to it, for the failure report. */
  mutations: string[];
}

/** Valid files (a quarter) and files with one to three data and text mutations. */
export function topologyFile(options: GenOptions): fc.Arbitrary<GeneratedFile> {
  return fc
    .tuple(
      validTopology({ ...options, postgres: true }),
      fc.boolean(),
      fc.integer({ min: 0, max: 3 }),
      fc.array(dataMutation, { maxLength: 3 }),
      fc.array(textMutation, { maxLength: 2 }),
    )
    .map(([doc, flow, mode, dataMs, textMs]) => {
      if (mode === 0) return { text: toYaml(doc, flow), valid: true, mutations: [] };
      const useData = mode !== 2 && dataMs.length > 0;
      const useText = mode !== 1 && textMs.length > 0;
      let mutated = doc;
      if (useData) for (const m of dataMs) mutated = applyDataMutation(mutated, m);
      let text = toYaml(mutated, flow);
      if (useText) for (const m of textMs) text = applyTextMutation(text, m);
      const mutations = [...(useData ? dataMs : []), ...(useText ? textMs : [])].map((m) =>
        JSON.stringify(m).slice(0, 200),
      );
      return { text, valid: !useData && !useText, mutations };
    });
}
