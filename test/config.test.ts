import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  checkEnvironment,
  ConfigError,
  TOPOLOGY_DEFAULTS,
  TOPOLOGY_LIMITS,
  loadTopology,
  parseTopology,
} from '../engine/config/index.js';
import { KAFKA_SINK_DEFAULTS } from '../engine/cdc/index.js';
import type { Topology } from '../engine/config/index.js';

// Compiled to dist/test/: the repository root is two levels up.
const root = fileURLToPath(new URL('../../', import.meta.url));
const fixtures = path.join(root, 'test', 'fixtures', 'config');
/** Inline topologies are "located" in the fixtures dir so ./services/running-total.ts resolves. */
const inline = path.join(fixtures, 'inline.yaml');
const compiledService = path.join(
  root,
  'dist',
  'test',
  'fixtures',
  'config',
  'services',
  'running-total.js',
);

const yaml = (...lines: string[]) => lines.join('\n') + '\n';

/** A small valid topology; tests append or replace lines. Line numbers are in the comments. */
const BASE = [
  'name: t', //                                 1
  'queues:', //                                 2
  '  - name: in', //                            3
  '  - name: out', //                           4
  'services:', //                               5
  '  - name: s', //                             6
  '    module: ./services/running-total.ts', // 7
  '    inputs: [in]', //                        8
  '    output: out', //                         9
];

/**
 * `line:col` (1-based) of the `nth` occurrence of `token` on line `line` of `text`: the expected
 * positions are computed from the text itself, independently of the YAML parser.
 */
function at(text: string, line: number, token: string, nth = 1): string {
  const lineText = text.split('\n')[line - 1]!;
  let col = -1;
  for (let i = 0; i < nth; i++) col = lineText.indexOf(token, col + 1);
  if (col < 0) throw new Error(`test bug: "${token}" #${nth} not on line ${line}: ${lineText}`);
  return `${line}:${col + 1}`;
}

/** Parses `text` expecting a ConfigError; returns its message lines. */
function problemLines(text: string, file = inline, env: Record<string, string> = {}): string[] {
  try {
    parseTopology(text, file, { env });
  } catch (e) {
    if (e instanceof ConfigError) return e.message.split('\n');
    throw e;
  }
  throw new Error('expected a ConfigError, the topology loaded');
}

/** Asserts the problems are exactly `expected` (as `line:col: path: message`, file prefix added). */
function assertProblems(text: string, expected: string[], file = inline): void {
  assert.equal(
    problemLines(text, file),
    expected.map((p) => `${file}:${p}`),
  );
}

test('a valid file loads with defaults applied and paths resolved against its directory', () => {
  const t = loadTopology(path.join(fixtures, 'valid.yaml'), { env: {} });
  const expected: Topology = {
    name: 'shop',
    file: path.join(fixtures, 'valid.yaml'),
    dataDir: path.join(fixtures, 'data', 'shop'),
    bus: { kind: 'journal' },
    rings: { capacityBytes: 65536, recordBytesMax: 16777216 },
    supervisor: {
      restartsMax: 3,
      restartWindowMs: 60000,
      backoffInitialMs: 100,
      backoffMaxMs: 2000,
      drainTimeoutMs: 10000,
    },
    queues: [
      { name: 'order-changes', partitions: 2, segmentBytes: 1048576, fsync: 'record' },
      { name: 'totals-out', partitions: 1, segmentBytes: 67108864, fsync: 'batch' },
      { name: 'running-total.dlq', partitions: 1, segmentBytes: 67108864, fsync: 'batch' },
    ],
    services: [
      {
        name: 'running-total',
        module: compiledService,
        inputs: ['order-changes'],
        output: 'totals-out',
        startFrom: 'LAST_WRITTEN',
        inputsReplay: 'INPUTS',
        batchSizeMax: 256,
        emitDuringReplay: false,
        settings: { field: 'amount', nested: { list: [1, 'two', null] } },
        errors: {
          retriesMax: 2,
          retryBackoffMs: 10,
          onFailure: 'dead-letter',
          deadLetterQueue: 'running-total.dlq',
        },
      },
    ],
    capture: [
      {
        name: 'shop-db',
        database: { dialect: 'sqlite', file: path.join(fixtures, 'shop.db') },
        tables: [
          {
            table: 'orders',
            operations: ['insert', 'update', 'delete'],
            columns: ['id', 'amount'],
            key: ['id'],
            condition: { insert: 'NEW.amount <> 0', update: 'NEW.amount <> 0 OR OLD.amount <> 0' },
            target: 'order-changes',
            suppressNoopUpdates: false,
            keyUpdate: 'delete-create',
          },
          {
            table: 'refunds',
            operations: ['insert'],
            target: 'order-changes',
            suppressNoopUpdates: true,
            keyUpdate: 'delete-create',
          },
        ],
        pumps: 2,
        batchSizeMax: 500,
        pollIntervalMs: 50,
        stagingTable: 'sluice_staging',
        recordBytesMax: 1 << 28,
        errors: {
          retriesImmediate: 2,
          attemptsMax: 5,
          retryDelayMs: 1000,
          retryDelayMaxMs: 60_000,
          holdKeyWhenParked: true,
          retentionMs: 7 * 24 * 3_600_000,
        },
      },
    ],
    processors: [],
    sinks: [],
  };
  assert.equal(t, expected);
});

test('a topology is plain data: structuredClone (as postMessage to a worker does) keeps it equal', () => {
  const t = loadTopology(path.join(fixtures, 'valid.yaml'), { env: {} });
  assert.equal(structuredClone(t), t);
});

test('every default comes from TOPOLOGY_DEFAULTS', () => {
  const t = parseTopology(
    yaml(
      'name: tiny',
      'queues: [{ name: q }, { name: o }]',
      'services: [{ name: s, module: ./services/running-total.ts, inputs: [q], output: o }]',
      'capture: [{ name: c, database: { dialect: postgres, url: "postgres://h/db" }, tables: [{ table: x, operations: [insert], target: q }] }]',
    ),
    inline,
    { env: {} },
  );
  const D = TOPOLOGY_DEFAULTS;
  assert.is(t.dataDir, path.join(fixtures, 'data', 'tiny'));
  assert.equal(t.rings, { capacityBytes: 1048576, recordBytesMax: 16777216 });
  assert.equal(t.supervisor, {
    restartsMax: Infinity,
    restartWindowMs: 60000,
    backoffInitialMs: 100,
    backoffMaxMs: 5000,
    drainTimeoutMs: 10000,
  });
  assert.equal(t.queues[0], { name: 'q', ...D.queue });
  assert.equal(t.queues[0], {
    name: 'q',
    partitions: 1,
    segmentBytes: 64 * 1024 * 1024,
    fsync: 'batch',
  });
  const s = t.services[0]!;
  assert.equal(
    [s.startFrom, s.inputsReplay, s.batchSizeMax, s.settings],
    ['LAST_WRITTEN', 'NONE', 256, {}],
  );
  const c = t.capture[0]!;
  assert.equal(
    [c.pumps, c.batchSizeMax, c.pollIntervalMs, c.stagingTable],
    [1, 500, 10, 'sluice_staging'],
  );
  assert.equal(c.tables[0], {
    table: 'x',
    operations: ['insert'],
    target: 'q',
    suppressNoopUpdates: true,
    keyUpdate: 'delete-create',
  });
  assert.equal(c.database, { dialect: 'postgres', url: 'postgres://h/db' });
});

test('${VAR} and ${VAR:-default} are substituted in string values; plain scalars are re-read as YAML', () => {
  const file = path.join(fixtures, 'env.yaml');
  const t = loadTopology(file, {
    env: { SHOP_PG_URL: 'postgres://sluice@db:5432/shop', SHOP_PUMPS: '3' },
  });
  assert.is(t.capture[0]!.database.dialect, 'postgres');
  assert.equal(t.capture[0]!.database, {
    dialect: 'postgres',
    url: 'postgres://sluice@db:5432/shop',
    schema: 'public',
  });
  assert.is(t.queues[0]!.partitions, 3);
  assert.is(t.capture[0]!.pumps, 3);
  assert.is(t.dataDir, path.join(fixtures, 'state', 'pg'));
  assert.is(t.capture[0]!.tables[0]!.condition, "NEW.note <> '${literal}'");
  // An empty value falls back to the default with ":-", as in sh.
  const t2 = loadTopology(file, {
    env: { SHOP_PG_URL: 'postgres://h/db', SHOP_PUMPS: '', SHOP_DATA_DIR: '/var/sluice' },
  });
  assert.is(t2.capture[0]!.pumps, 2);
  assert.is(t2.dataDir, '/var/sluice/pg');
});

test('an unset variable without default is one problem at its value, not repeated by later checks', () => {
  const file = path.join(fixtures, 'env.yaml');
  const text = readFileSync(file, 'utf8');
  const where = at(text, 9, '"${SHOP_PG_URL}"');
  assert.throws(
    () => loadTopology(file, { env: {} }),
    (e: unknown) =>
      e instanceof ConfigError &&
      e.message ===
        `${file}:${where}: capture[0].database.url: environment variable SHOP_PG_URL is not set (give a default with \${SHOP_PG_URL:-default})` &&
      e.problems.length === 1 &&
      `${e.problems[0]!.line}:${e.problems[0]!.col}` === where &&
      e.problems[0]!.path === 'capture[0].database.url',
  );
  assertProblems(yaml('name: "${NAME"'), [
    '1:7: name: unterminated "${" in "${NAME" (write "$${" for a literal "${")',
  ]);
  assertProblems(yaml('name: "${1X}"'), [
    '1:7: name: bad environment variable reference "${1X}": the name must match ^[A-Za-z_][A-Za-z0-9_]*$',
  ]);
});

test('unknown fields are reported at the key, with "did you mean" when a field is close', () => {
  const lines = [...BASE];
  lines[7] = '    inptus: [in]';
  assertProblems(yaml(...lines, 'colour: blue'), [
    '6:5: services[0].inputs: missing required field',
    '8:5: services[0].inptus: unknown field "inptus" (did you mean "inputs"?)',
    '10:1: colour: unknown field "colour" (known: name, dataDir, bus, rings, supervisor, queues, services, capture, processors, sinks)',
  ]);
  const text = yaml('name: t', 'Queues: []', 'supervisor: { restartMax: 1 }');
  assertProblems(text, [
    '2:1: Queues: unknown field "Queues" (did you mean "queues"?)',
    `${at(text, 3, 'restartMax')}: supervisor.restartMax: unknown field "restartMax" (did you mean "restartsMax"?)`,
  ]);
});

test('wrong types name the expected type and the value found', () => {
  const text = yaml(
    'name: t',
    'queues:',
    '  - name: q',
    '    partitions: two',
    '  - name: 7',
    'services: {}',
    'capture:',
    '  - name: c',
    '    database: { dialect: sqlite, file: x.db }',
    '    tables: [{ table: t, operations: insert, target: q, suppressNoopUpdates: "no" }]',
  );
  assertProblems(text, [
    '4:17: queues[0].partitions: must be an integer, got "two"',
    '5:11: queues[1].name: must be a string, got 7',
    '6:11: services: must be a list, got a map',
    `${at(text, 10, 'insert')}: capture[0].tables[0].operations: must be a list, got "insert"`,
    `${at(text, 10, '"no"')}: capture[0].tables[0].suppressNoopUpdates: must be true or false, got "no"`,
  ]);
});

test('missing required fields are reported at the map that lacks them', () => {
  const text = yaml(
    'queues:',
    '  - partitions: 2',
    'capture:',
    '  - name: c',
    '    database: { dialect: postgres }',
    '    tables: [{ table: t }]',
  );
  assertProblems(text, [
    '1:1: name: missing required field',
    '2:5: queues[0].name: missing required field',
    `${at(text, 5, '{')}: capture[0].database.url: missing required field`,
    `${at(text, 6, '{')}: capture[0].tables[0].operations: missing required field`,
    `${at(text, 6, '{')}: capture[0].tables[0].target: missing required field`,
  ]);
});

test('duplicate queue, service and capture source names point at the second one', () => {
  const text = yaml(
    'name: t',
    'queues: [{ name: in }, { name: a }, { name: in }, { name: b }]',
    'services:',
    '  - { name: s, module: ./services/running-total.ts, inputs: [in], output: a }',
    '  - { name: s, module: ./services/running-total.ts, inputs: [in], output: b }',
    'capture:',
    '  - { name: db, database: { dialect: sqlite, file: a.db }, tables: [{ table: t, operations: [insert], target: in }] }',
    '  - { name: db, database: { dialect: sqlite, file: b.db }, tables: [{ table: u, operations: [insert], target: in }] }',
  );
  assertProblems(text, [
    `${at(text, 2, 'in', 2)}: queues[2].name: duplicate queue name "in" (first defined at line 2)`,
    `${at(text, 5, 's,')}: services[1].name: duplicate service name "s" (first defined at line 4)`,
    `${at(text, 8, 'db')}: capture[1].name: duplicate capture source name "db" (first defined at line 7)`,
    `${at(text, 8, 'in }')}: capture[1].tables[0].target: queue "in" is already written by capture source "db" (line 7); a queue has one writer`,
  ]);
  // A key repeated within one map is a YAML error, reported before anything else.
  assertProblems(yaml(...BASE, 'queues: []'), ['10:1: queues: Map keys must be unique']);
});

test('unknown queues in service inputs, outputs and capture targets list the known queues', () => {
  const lines = [...BASE];
  lines[7] = '    inputs: [in, histry]';
  lines[8] = '    output: outt';
  const text = yaml(
    ...lines,
    'capture:',
    '  - name: db',
    '    database: { dialect: sqlite, file: a.db }',
    '    tables:',
    '      - { table: t, operations: [insert], target: history }',
  );
  assertProblems(text, [
    '8:18: services[0].inputs[1]: unknown queue "histry" (known: in, out)',
    '9:13: services[0].output: unknown queue "outt" (known: in, out)',
    `${at(text, 14, 'history')}: capture[0].tables[0].target: unknown queue "history" (known: in, out)`,
  ]);
});

test('a queue written by two services or by a service and a capture source is reported at the second writer', () => {
  const text = yaml(
    ...BASE,
    '  - { name: s2, module: ./services/running-total.ts, inputs: [in], output: out }',
    'capture:',
    '  - { name: db, database: { dialect: sqlite, file: a.db }, tables: [{ table: t, operations: [insert], target: out }] }',
  );
  assertProblems(text, [
    `${at(text, 10, 'out }')}: services[1].output: queue "out" is already written by service "s" (line 9); a queue has one writer`,
    `${at(text, 12, 'out }')}: capture[0].tables[0].target: queue "out" is already written by service "s" (line 9); a queue has one writer`,
  ]);
});

test('partition counts: capture target partitions must equal pumps; a service output has 1', () => {
  const text = yaml(
    'name: t',
    'queues: [{ name: in, partitions: 2 }, { name: out, partitions: 2 }]',
    'services: [{ name: s, module: ./services/running-total.ts, inputs: [in], output: out }]',
    'capture:',
    '  - name: db',
    '    database: { dialect: sqlite, file: a.db }',
    '    pumps: 3',
    '    tables: [{ table: t, operations: [insert], target: in }]',
  );
  assertProblems(text, [
    `${at(text, 3, 'out }')}: services[0].output: queue "out" has 2 partitions; a service output queue must have 1`,
    `${at(text, 8, 'in ')}: capture[0].tables[0].target: queue "in" has 2 partitions but capture source "db" has 3 pumps; on the journal bus the partitions of a capture target must be a multiple of the pumps (one appender per partition; on a kafka bus the counts are independent)`,
  ]);
});

test('a bad key strategy is reported at its field: unknown word, unknown form, transactionId on sqlite, empty columns', () => {
  const text = yaml(
    ...BASE,
    'capture:',
    '  - name: db',
    '    database: { dialect: sqlite, file: a.db }',
    '    tables:',
    '      - { table: a, operations: [insert], target: in, key: primarykey }',
    '      - { table: b, operations: [insert], target: in, key: { fixd: x } }',
    '      - { table: c, operations: [insert], target: in, key: transactionId }',
    '      - { table: d, operations: [insert], target: in, key: { columns: [] } }',
  );
  const shapes =
    'primaryKey, none, transactionId, a list of columns, {columns: [...]}, {fixed: "value"} or {expression: "SQL"}';
  assertProblems(text, [
    `${at(text, 14, 'primarykey')}: capture[0].tables[0].key: must be one of ${shapes}, got "primarykey"`,
    `${at(text, 15, 'x }')}: capture[0].tables[1].key.fixd: unknown key strategy (one of ${shapes})`,
    `${at(text, 16, 'transactionId')}: capture[0].tables[2].key: transactionId is not supported on sqlite (SQLite gives triggers no transaction identity)`,
    `${at(text, 17, '[]')}: capture[0].tables[3].key.columns: must be a non-empty list of column names`,
  ]);
});

test('a condition naming a row image its operation lacks is refused at its field, per operation or for all', () => {
  const text = yaml(
    ...BASE,
    'capture:',
    '  - name: db',
    '    database: { dialect: sqlite, file: a.db }',
    '    tables:',
    '      - { table: a, operations: [insert, delete], target: in, condition: "NEW.x <> \'OLD.y\'" }',
    '      - table: b',
    '        operations: [insert, update, delete]',
    '        target: in',
    '        condition:',
    '          insert: OLD.x > 0',
    '          update: NEW.x <> OLD.x',
    '          delete: new . x = 1',
    '          upsert: "true"',
    '      - { table: c, operations: [insert], target: in, condition: { delete: OLD.x > 0 } }',
  );
  assertProblems(text, [
    `${at(text, 14, '"NEW')}: capture[0].tables[0].condition: names NEW, which a delete has not (insert has NEW, delete has OLD, update both); give one condition per operation: condition: { insert: ..., update: ..., delete: ... }`,
    `${at(text, 19, 'OLD')}: capture[0].tables[1].condition.insert: names OLD, which an insert has not (insert has NEW, delete has OLD, update both)`,
    `${at(text, 21, 'new')}: capture[0].tables[1].condition.delete: names NEW, which a delete has not (insert has NEW, delete has OLD, update both)`,
    `${at(text, 22, '"true"')}: capture[0].tables[1].condition.upsert: unknown operation (insert, update or delete)`,
    `${at(text, 23, 'OLD')}: capture[0].tables[2].condition.delete: delete is not in operations; its condition would never apply`,
  ]);
});

/** Each dialect's `database:` line, and a condition whose parentheses balance only by its rules. */
const SQL_TEXT_DIALECTS = {
  sqlite: {
    database: '{ dialect: sqlite, file: a.db }',
    // A [bracketed] and a `backquoted` identifier, a literal and a trailing line comment.
    balanced: "NEW.[na)me] <> ')' AND NEW.`b(` > 0 -- (",
    unbalancedHere: 'NEW.a > 0 # (', // `#` starts no comment on SQLite
  },
  postgres: {
    database: '{ dialect: postgres, url: "postgres://u@h/d" }',
    // A dollar quote, an E'' literal with an escaped quote, a nested block comment.
    balanced: "NEW.name <> $x$)$x$ AND NEW.memo <> E'\\')' /* ( /* ) */ ( */",
    unbalancedHere: 'NEW.name <> "(" OR (true', // "..." is an identifier, the second ( is open
  },
  mariadb: {
    database: '{ dialect: mariadb, url: "mysql://u@h/d" }',
    // A "..." string with a backslash escape, a # comment and a -- comment.
    balanced: 'NEW.name <> "\\")" -- (\n  AND NEW.memo <> \'(\' # (',
    unbalancedHere: 'NEW.a --(\n > 0', // `--(` is two minus signs: the ( is code
  },
} as const;

for (const [dialect, d] of Object.entries(SQL_TEXT_DIALECTS)) {
  test(`${dialect}: a condition or key expression whose parentheses do not balance (outside literals, quoted identifiers and comments) is refused at load, at its field`, () => {
    const text = yaml(
      ...BASE,
      'capture:',
      '  - name: db',
      `    database: ${d.database}`,
      '    tables:',
      '      - table: a',
      '        operations: [insert, update, delete]',
      '        target: in',
      '        condition:',
      "          update: 'NEW.id > 0) OR (true'",
      `          insert: ${JSON.stringify(d.balanced)}`,
      `          delete: ${JSON.stringify(d.unbalancedHere.replace('NEW.', 'OLD.'))}`,
      "      - { table: b, operations: [insert], target: in, key: { expression: 'upper(ROW.name' } }",
      "      - { table: c, operations: [insert], target: in, key: { expression: 'ROW.a || '')'' -- (' } }",
    );
    const delete_ = d.unbalancedHere.replace('NEW.', 'OLD.');
    const open = delete_.lastIndexOf('(') + 1;
    assertProblems(text, [
      `${at(text, 18, "'NEW")}: capture[0].tables[0].condition.update: parentheses do not balance: the ")" at character 11 closes no "(" (outside of string literals, quoted identifiers and comments)`,
      `${at(text, 20, '"OLD')}: capture[0].tables[0].condition.delete: parentheses do not balance: the "(" at character ${open} is not closed (outside of string literals, quoted identifiers and comments)`,
      `${at(text, 21, "'upper")}: capture[0].tables[1].key.expression: parentheses do not balance: the "(" at character 6 is not closed (outside of string literals, quoted identifiers and comments)`,
    ]);
  });
}

test('a condition or key expression that leaves a literal, quoted identifier or block comment open is refused at load', () => {
  const text = yaml(
    ...BASE,
    'capture:',
    '  - name: db',
    '    database: { dialect: postgres, url: "postgres://u@h/d" }',
    '    tables:',
    `      - { table: a, operations: [insert], target: in, condition: "NEW.name <> 'x" }`,
    '      - { table: b, operations: [insert], target: in, key: { expression: "ROW.a /* note" } }',
  );
  assertProblems(text, [
    `${at(text, 14, '"NEW')}: capture[0].tables[0].condition: the string literal at character 13 is not closed`,
    `${at(text, 15, '"ROW')}: capture[0].tables[1].key.expression: the comment at character 7 is not closed`,
  ]);
});

test('a key expression naming NEW. or OLD. (its row is ROW.) is refused at load, at its field; in a literal it is text', () => {
  const text = yaml(
    ...BASE,
    'capture:',
    '  - name: db',
    '    database: { dialect: sqlite, file: app.db }',
    '    tables:',
    "      - { table: a, operations: [insert], target: in, key: { expression: 'upper(NEW.holder)' } }",
    '      - { table: b, operations: [insert], target: in, key: { expression: "ROW.a || \'new.x\'" } }',
    '      - { table: c, operations: [delete], target: in, key: { expression: "old.id || NEW.id" } }',
  );
  assertProblems(text, [
    `${at(text, 14, "'upper")}: capture[0].tables[0].key.expression: names NEW: a key expression reads its row as ROW.<column> (NEW's columns for an insert or update, OLD's for a delete), e.g. ROW.id`,
    `${at(text, 16, '"old')}: capture[0].tables[2].key.expression: names OLD and NEW: a key expression reads its row as ROW.<column> (NEW's columns for an insert or update, OLD's for a delete), e.g. ROW.id`,
  ]);
});

test('unknown enum values list the allowed ones and suggest the closest', () => {
  const text = yaml(
    'name: t',
    'queues: [{ name: in, fsync: always }, { name: out }]',
    'services:',
    '  - name: s',
    '    module: ./services/running-total.ts',
    '    inputs: [in]',
    '    output: out',
    '    startFrom: last_written',
    '    inputsReplay: OUTPUTS',
    'capture: [{ name: db, database: { dialect: postgress, url: x }, tables: [{ table: t, operations: [delete, truncate, upsurt], target: in }] }]',
  );
  assertProblems(text, [
    `${at(text, 2, 'always')}: queues[0].fsync: must be one of none, batch, record, got "always"`,
    '8:16: services[0].startFrom: must be one of START, LAST_WRITTEN, END, got "last_written" (did you mean "LAST_WRITTEN"?)',
    '9:19: services[0].inputsReplay: must be one of NONE, INPUTS, OUTPUT, OUTPUT_REVERSE, got "OUTPUTS" (did you mean "OUTPUT"?)',
    `${at(text, 10, 'postgress')}: capture[0].database.dialect: must be one of sqlite, postgres, mariadb, mysql, oracle, got "postgress" (did you mean "postgres"?)`,
    `${at(text, 10, 'upsurt')}: capture[0].tables[0].operations[2]: must be one of insert, update, delete, truncate, got "upsurt"`,
  ]);
});

test('numbers out of range give the allowed range; ring capacity must be a power of two', () => {
  const text = yaml(
    'name: t',
    'rings: { capacityBytes: 100000 }',
    'supervisor: { restartsMax: -1, backoffInitialMs: 900, backoffMaxMs: 500 }',
    'queues: [{ name: in, partitions: 0, segmentBytes: 1024 }, { name: out }]',
    'services: [{ name: s, module: ./services/running-total.ts, inputs: [in], output: out, batchSizeMax: 1.5 }]',
    'capture: [{ name: db, database: { dialect: sqlite, file: a.db }, pumps: 0, pollIntervalMs: 3600001, tables: [{ table: t, operations: [insert], target: in }] }]',
  );
  assertProblems(text, [
    `${at(text, 2, '100000')}: rings.capacityBytes: must be a power of two, got 100000`,
    `${at(text, 3, '-1')}: supervisor.restartsMax: must be in [0, 1000], got -1`,
    `${at(text, 3, '500')}: supervisor.backoffMaxMs: backoffMaxMs (500) must be >= backoffInitialMs (900)`,
    `${at(text, 4, '0')}: queues[0].partitions: must be in [1, 1024], got 0`,
    `${at(text, 4, '1024')}: queues[0].segmentBytes: must be in [4096, 1073741824], got 1024`,
    `${at(text, 5, '1.5')}: services[0].batchSizeMax: must be an integer, got 1.5`,
    `${at(text, 6, '0,')}: capture[0].pumps: must be in [1, 1024], got 0`,
    `${at(text, 6, '3600001')}: capture[0].pollIntervalMs: must be in [0, 3600000], got 3600001`,
  ]);
});

test('service modules: missing source, .ts not compiled yet, plain .js, and the compiled path', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'sluice-config-'));
  try {
    writeFileSync(path.join(dir, 'package.json'), '{}');
    mkdirSync(path.join(dir, 'app', 'services'), { recursive: true });
    writeFileSync(path.join(dir, 'app', 'services', 'fresh.ts'), 'export default {};\n');
    writeFileSync(path.join(dir, 'app', 'services', 'plain.js'), 'export default {};\n');
    const file = path.join(dir, 'app', 'topology.yaml');
    const text = yaml(
      'name: t',
      'queues: [{ name: in }, { name: a }, { name: b }, { name: c }]',
      'services:',
      '  - { name: s1, module: ./services/gone.ts, inputs: [in], output: a }',
      '  - { name: s2, module: ./services/fresh.ts, inputs: [in], output: b }',
      '  - { name: s3, module: services/plain.js, inputs: [in], output: c }',
    );
    assertProblems(
      text,
      [
        `${at(text, 4, './')}: services[0].module: module file not found: ${path.join(dir, 'app', 'services', 'gone.ts')}`,
        `${at(text, 5, './')}: services[1].module: compiled module not found: ${path.join(dir, 'dist', 'app', 'services', 'fresh.js')} (compile it first: npm run build)`,
      ],
      file,
    );
    mkdirSync(path.join(dir, 'dist', 'app', 'services'), { recursive: true });
    writeFileSync(path.join(dir, 'dist', 'app', 'services', 'fresh.js'), 'export default {};\n');
    writeFileSync(path.join(dir, 'dist', 'app', 'services', 'gone.js'), 'export default {};\n');
    const t = parseTopology(text, file, { env: {} });
    assert.equal(
      t.services.map((s) => s.module),
      [
        path.join(dir, 'dist', 'app', 'services', 'gone.js'), // the compiled file alone is enough
        path.join(dir, 'dist', 'app', 'services', 'fresh.js'),
        path.join(dir, 'app', 'services', 'plain.js'),
      ],
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('service cycles, repeated inputs and truncate on sqlite are reported where they occur', () => {
  const text = yaml(
    'name: t',
    'queues: [{ name: a }, { name: b }]',
    'services:',
    '  - { name: s1, module: ./services/running-total.ts, inputs: [b, b], output: a }',
    '  - { name: s2, module: ./services/running-total.ts, inputs: [a], output: b }',
    'capture: [{ name: db, database: { dialect: sqlite, file: x.db }, tables: [{ table: t, operations: [insert, truncate], target: a }] }]',
  );
  assertProblems(text, [
    `${at(text, 4, 'b]')}: services[0].inputs[1]: queue "b" is listed twice`,
    `${at(text, 5, 'a]')}: services[1].inputs[0]: service cycle (each reads the output of the next): s1 -> s2 -> s1`,
    `${at(text, 6, 'truncate')}: capture[0].tables[0].operations[1]: truncate is not supported on sqlite (SQLite has no TRUNCATE; DELETE fires per-row delete triggers)`,
    `${at(text, 6, 'a }')}: capture[0].tables[0].target: queue "a" is already written by service "s1" (line 4); a queue has one writer`,
  ]);
});

test('YAML syntax errors are reported at the position the parser gives and stop further checks', () => {
  assertProblems(yaml('name: t', 'queues:', '  - name: [unclosed', 'services: 3'), [
    '4:1: services: Flow sequence in block collection must be sufficiently indented and end with a ]',
  ]);
});

test('an unreadable file is a ConfigError naming the file', () => {
  const file = path.join(fixtures, 'no-such-file.yaml');
  assert.throws(
    () => loadTopology(file),
    (e: unknown) =>
      e instanceof ConfigError &&
      e.message.startsWith(`${file}: cannot read topology file: ENOENT`),
  );
});

test('several problems in one file are all reported at once, in file order', () => {
  const file = path.join(fixtures, 'many-problems.yaml');
  const missing = path.join(fixtures, 'services', 'missing.ts');
  let error: unknown;
  try {
    loadTopology(file, { env: {} });
  } catch (e) {
    error = e;
  }
  assert.instance(error, ConfigError);
  const e = error as ConfigError;
  assert.equal(e.message.split('\n'), [
    `${file}:1:7: name: must be lowercase letters, digits and "-" (/^[a-z0-9-]+$/), got "Bank"`,
    `${file}:2:25: rings.capacityBytes: must be a power of two, got 100000`,
    `${file}:6:12: queues[0].fsync: must be one of none, batch, record, got "sometimes"`,
    `${file}:9:11: queues[2].name: duplicate queue name "history-changes" (first defined at line 4)`,
    `${file}:12:5: services[0].inputs: missing required field`,
    `${file}:14:5: services[0].inptus: unknown field "inptus" (did you mean "inputs"?)`,
    `${file}:16:16: services[0].startFrom: must be one of START, LAST_WRITTEN, END, got "LAST" (did you mean "LAST_WRITTEN"?)`,
    `${file}:18:13: services[1].module: module file not found: ${missing}`,
    `${file}:19:14: services[1].inputs[0]: unknown queue "histry" (known: history-changes, account-changes, out)`,
    `${file}:20:13: services[1].output: queue "out" is already written by service "balances" (line 15); a queue has one writer`,
    `${file}:21:19: services[1].batchSizeMax: must be in [1, 65536], got 0`,
    `${file}:24:26: capture[0].database.dialect: must be one of sqlite, postgres, mariadb, mysql, oracle, got "mssql" (did you mean "mysql"?)`,
    `${file}:29:17: capture[0].tables[0].target: queue "history-changes" has 2 partitions but capture source "bank-db" has 3 pumps; on the journal bus the partitions of a capture target must be a multiple of the pumps (one appender per partition; on a kafka bus the counts are independent)`,
  ]);
  assert.equal(e.problems[8], {
    file,
    line: 19,
    col: 14,
    path: 'services[1].inputs[0]',
    message: 'unknown queue "histry" (known: history-changes, account-changes, out)',
  });
});

test('the example bank topologies load', () => {
  const sqlite = loadTopology(path.join(root, 'examples', 'bank', 'topology.yaml'), { env: {} });
  assert.is(sqlite.capture[0]!.database.dialect, 'sqlite');
  const pg = loadTopology(path.join(root, 'examples', 'bank', 'topology.pg.yaml'), {
    env: { SLUICE_PG_URL: 'postgres://u@pg/bank' },
  });
  assert.equal(pg.capture[0]!.database, { dialect: 'postgres', url: 'postgres://u@pg/bank' });
});

test('startFrom START with inputsReplay INPUTS or OUTPUT loads; OUTPUT_REVERSE with START and emitDuringReplay without an input replay are refused', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'sluice-cfg-start-'));
  try {
    const mod = path.join(dir, 'svc.mjs');
    writeFileSync(mod, 'export default { init: () => 0, handlers: {} };\n');
    const file = path.join(dir, 't.yaml');
    const text = (extra: string) =>
      `name: x\nqueues:\n  - { name: a }\n  - { name: b }\nservices:\n  - name: s\n    module: ${mod}\n    inputs: [a]\n    output: b\n${extra}`;
    for (const replay of ['INPUTS', 'OUTPUT']) {
      const t = parseTopology(
        text(`    startFrom: START\n    inputsReplay: ${replay}\n    emitDuringReplay: true\n`),
        file,
      );
      assert.equal(
        [t.services[0]!.startFrom, t.services[0]!.inputsReplay, t.services[0]!.emitDuringReplay],
        ['START', replay, true],
      );
    }
    const problems = (extra: string): string[] => {
      try {
        parseTopology(text(extra), file);
      } catch (e) {
        assert.instance(e, ConfigError);
        return (e as Error).message.split('\n');
      }
      return [];
    };
    assert.equal(problems('    startFrom: START\n    inputsReplay: OUTPUT_REVERSE\n'), [
      `${file}:11:19: services[0].inputsReplay: inputsReplay OUTPUT_REVERSE rebuilds the state from the output, not from the inputs, so it cannot start from START; use inputsReplay INPUTS or OUTPUT with START (replay from index 0 through LAST_WRITTEN, then live), or startFrom LAST_WRITTEN`,
    ]);
    assert.equal(problems('    emitDuringReplay: true\n'), [
      `${file}:10:23: services[0].emitDuringReplay: emitDuringReplay needs a replay of the inputs: inputsReplay INPUTS or OUTPUT, not NONE`,
    ]);
    assert.equal(problems('    emitDuringReplay: yes\n'), [
      `${file}:10:23: services[0].emitDuringReplay: must be true or false, got "yes"`,
    ]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('bus: journal by default; a kafka bus resolves clientId, TLS files and SASL; bad entries are refused where they are', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'sluice-cfg-bus-'));
  try {
    const file = path.join(dir, 't.yaml');
    assert.equal(parseTopology('name: x\n', file).bus, { kind: 'journal' });
    const t = parseTopology(
      [
        'name: x',
        'bus:',
        '  kind: kafka',
        '  brokers: [127.0.0.1:9092, "[::1]:9093"]',
        '  tls: { caFile: certs/ca.pem }',
        '  sasl: { mechanism: scram-sha-512, username: u, passwordFile: secret/kafka }',
        'queues:',
        '  - { name: a, partitions: 3 }',
        '',
      ].join('\n'),
      file,
    );
    assert.equal(t.bus, {
      kind: 'kafka',
      brokers: ['127.0.0.1:9092', '[::1]:9093'],
      clientId: 'sluice-x',
      tls: { caFile: path.join(dir, 'certs', 'ca.pem'), rejectUnauthorized: true },
      sasl: {
        mechanism: 'scram-sha-512',
        username: 'u',
        passwordFile: path.join(dir, 'secret', 'kafka'),
      },
      recordBytesMax: 1_000_000,
    });
    const problems = (text: string): string[] => {
      try {
        parseTopology(text, file);
      } catch (e) {
        assert.instance(e, ConfigError);
        return (e as Error).message.split('\n').map((l) => l.slice(file.length + 1));
      }
      return [];
    };
    assert.equal(problems('name: x\nbus: { kind: kafka, brokers: [localhost] }\n'), [
      '2:31: bus.brokers[0]: must be host:port with a port 1-65535 (an IPv6 host in brackets), got "localhost"',
    ]);
    // The port range at check time, not at the first connection (a fresh user's 99999).
    assert.equal(
      problems(
        'name: x\nbus: { kind: kafka, brokers: ["h:99999", "h:0", "h:65535", "[::1]:1"] }\n',
      ),
      [
        '2:31: bus.brokers[0]: must be host:port with a port 1-65535 (an IPv6 host in brackets), got "h:99999"',
        '2:42: bus.brokers[1]: must be host:port with a port 1-65535 (an IPv6 host in brackets), got "h:0"',
      ],
    );
    assert.equal(
      problems(
        'name: x\nbus: { kind: kafka, brokers: [h:1], sasl: { mechanism: plain, username: u } }\n',
      ),
      ['2:43: bus.sasl: give exactly one of password (e.g. "${KAFKA_PASSWORD}") and passwordFile'],
    );
    assert.ok(
      problems('name: x\nbus: { kind: rabbit }\n')[0]!.startsWith(
        '2:14: bus.kind: must be one of journal, kafka',
      ),
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('bus.recordBytesMax (kafka): 1000000 by default, any integer in its bounds; a value out of them, not an integer, or on the journal bus is refused naming file, line and field', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'sluice-cfg-bus-limit-'));
  try {
    const file = path.join(dir, 't.yaml');
    const kafka = (extra: string) => `name: x\nbus: { kind: kafka, brokers: [h:1]${extra} }\n`;
    const limitOf = (text: string) => {
      const b = parseTopology(text, file).bus;
      return b.kind === 'kafka' ? b.recordBytesMax : null;
    };
    assert.is(limitOf(kafka('')), KAFKA_SINK_DEFAULTS.recordBytesMax);
    assert.is(KAFKA_SINK_DEFAULTS.recordBytesMax, 1_000_000);
    const [min, max] = TOPOLOGY_LIMITS.busRecordBytesMax;
    assert.equal([min, max], [65_536, 268_435_456]);
    for (const v of [min, 1_040_000, max]) assert.is(limitOf(kafka(`, recordBytesMax: ${v}`)), v);
    const problems = (text: string): string[] => {
      try {
        parseTopology(text, file);
      } catch (e) {
        assert.instance(e, ConfigError);
        return (e as Error).message.split('\n');
      }
      return [];
    };
    const at = `${file}:2:53: bus.recordBytesMax: `;
    assert.equal(problems(kafka(', recordBytesMax: 65535')), [
      `${at}must be in [65536, 268435456], got 65535`,
    ]);
    assert.equal(problems(kafka(', recordBytesMax: 268435457')), [
      `${at}must be in [65536, 268435456], got 268435457`,
    ]);
    assert.equal(problems(kafka(', recordBytesMax: 1000000.5')), [
      `${at}must be an integer, got 1000000.5`,
    ]);
    assert.equal(problems(kafka(', recordBytesMax: "2000000"')), [
      `${at}must be an integer, got "2000000"`,
    ]);
    const journal = problems('name: x\nbus: { kind: journal, recordBytesMax: 2000000 }\n');
    assert.is(journal.length, 1);
    assert.match(journal[0]!, /bus\.recordBytesMax: unknown field "recordBytesMax"/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('sluice check (checkEnvironment): a kafka bus file that cannot be read is named at its field, without its contents', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'sluice-busfiles-'));
  try {
    const file = path.join(dir, 't.yaml');
    writeFileSync(path.join(dir, 'ca.pem'), 'not checked here');
    writeFileSync(
      file,
      [
        'name: x',
        'bus:',
        '  kind: kafka',
        '  brokers: ["h:9092"]',
        '  tls: { caFile: ./ca.pem, certFile: ./cert.pem, keyFile: ./key.pem }',
        '  sasl: { mechanism: plain, username: u, passwordFile: ./pw }',
        '',
      ].join('\n'),
    );
    const t = loadTopology(file);
    const e = (() => {
      try {
        checkEnvironment(t);
      } catch (x) {
        return x as Error;
      }
      return null;
    })();
    assert.instance(e, ConfigError);
    assert.equal(
      e!.message.split('\n').map((l) => l.slice(file.length + 1)),
      [
        `5:38: bus.tls.certFile: cannot read ${dir}/cert.pem: ENOENT`,
        `5:59: bus.tls.keyFile: cannot read ${dir}/key.pem: ENOENT`,
        `6:56: bus.sasl.passwordFile: cannot read ${dir}/pw: ENOENT`,
      ],
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
