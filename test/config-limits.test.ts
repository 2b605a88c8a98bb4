import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  ConfigError,
  loadTopology,
  parseTopology,
  TOPOLOGY_SIZE_LIMITS,
} from '../engine/config/index.js';

const root = fileURLToPath(new URL('../../', import.meta.url));
const inline = path.join(root, 'test', 'fixtures', 'config', 'inline.yaml');
const S = TOPOLOGY_SIZE_LIMITS;
const yaml = (...lines: string[]) => lines.join('\n') + '\n';

function problems(text: string, file = inline): string[] {
  try {
    parseTopology(text, file, { env: {} });
  } catch (e) {
    if (e instanceof ConfigError) return e.message.split('\n');
    throw e;
  }
  throw new Error('expected a ConfigError, the topology loaded');
}

function loadProblems(file: string): string[] {
  try {
    loadTopology(file, { env: {} });
  } catch (e) {
    if (e instanceof ConfigError) return e.message.split('\n');
    throw e;
  }
  throw new Error('expected a ConfigError, the topology loaded');
}

test('a 200,000-character queue name is refused at its field in one short line (was: accepted, ENAMETOOLONG at run time)', () => {
  const name = 'a'.repeat(200_000);
  assert.equal(problems(yaml('name: t', 'queues:', `  - name: ${name}`)), [
    `${inline}:3:11: queues[0].name: must be at most ${S.queueNameLengthMax} characters long, got 200000`,
  ]);
});

test('a 200,000-character map key is shown cut in its problem line (fuzz seed 935163229: a 131,072-character line)', () => {
  const key = 'k'.repeat(200_000);
  const lines = problems(yaml('name: t', `${key}: 1`));
  assert.is(lines.length, 1);
  assert.ok(lines[0]!.length < 400, `${lines[0]!.length} characters`);
  assert.match(lines[0]!, `["${'k'.repeat(100)}"... (200000 characters)]: `);
});

test('names, SQL identifiers and references have stated maximum lengths', () => {
  const long = (n: number) => 'b'.repeat(n + 1);
  const text = yaml(
    `name: ${long(S.topologyNameLengthMax)}`,
    'dataDir: ./d',
    'queues: [{ name: in }]',
    `services: [{ name: ${long(S.serviceNameLengthMax)}, module: ./services/running-total.ts, inputs: [in], output: ${long(S.queueNameLengthMax)} }]`,
    `capture: [{ name: c, stagingTable: ${long(S.stagingTableLengthMax)}, database: { dialect: sqlite, file: a.db },`,
    `  tables: [{ table: ${long(S.tableNameLengthMax)}, operations: [insert], columns: [${long(S.sqlNameLengthMax)}], target: in }] }]`,
  );
  const lines = problems(text).map((l) => l.slice(inline.length + 1).replace(/^\d+:\d+: /, ''));
  assert.equal(
    lines.filter((l) => /at most/.test(l)),
    [
      `name: must be at most ${S.topologyNameLengthMax} characters long, got ${S.topologyNameLengthMax + 1}`,
      `services[0].name: must be at most ${S.serviceNameLengthMax} characters long, got ${S.serviceNameLengthMax + 1}`,
      `services[0].output: must be at most ${S.queueNameLengthMax} characters long, got ${S.queueNameLengthMax + 1}`,
      `capture[0].stagingTable: must be at most ${S.stagingTableLengthMax} characters long, got ${S.stagingTableLengthMax + 1}`,
      `capture[0].tables[0].table: must be at most ${S.tableNameLengthMax} characters long, got ${S.tableNameLengthMax + 1}`,
      `capture[0].tables[0].columns[0]: must be at most ${S.sqlNameLengthMax} characters long, got ${S.sqlNameLengthMax + 1}`,
    ],
  );
});

test('lists have stated maximum lengths: 65 inputs of one service are refused', () => {
  const queues = Array.from({ length: S.inputsMax + 1 }, (_, i) => `q${i}`);
  const text = yaml(
    'name: t',
    `queues: [${queues.map((q) => `{ name: ${q} }`).join(', ')}, { name: out }]`,
    `services: [{ name: s, module: ./services/running-total.ts, inputs: [${queues.join(', ')}], output: out }]`,
  );
  const col =
    text.split('\n')[2]!.indexOf('[in') === -1 ? text.split('\n')[2]!.indexOf('[q0') + 1 : 0;
  assert.equal(problems(text), [
    `${inline}:3:${col}: services[0].inputs: must list at most ${S.inputsMax} items, got ${S.inputsMax + 1}`,
  ]);
});

test('a dataDir that resolves too long, or with a component over 255 bytes, is refused at dataDir', () => {
  // The file's own directory is long; the dataDir as written is short.
  const far = path.join('/', ...Array.from({ length: 37 }, () => 'x'.repeat(100)), 'topology.yaml');
  assert.equal(problems(yaml('name: t', 'dataDir: ./d'), far), [
    `${far}:2:10: dataDir: resolves to a path of 3739 bytes (${path.dirname(far).slice(0, 60)}...); the limit is 3657`,
  ]);
  assert.equal(problems(yaml('name: t', `dataDir: ./${'y'.repeat(256)}/d`)), [
    `${inline}:2:10: dataDir: has a path component of 256 bytes ("${'y'.repeat(40)}..."); the limit is 255 (NAME_MAX)`,
  ]);
});

test('a NUL character in a path is refused at its field', () => {
  assert.equal(problems(yaml('name: t', 'dataDir: "./d\\0x"')), [
    `${inline}:2:10: dataDir: must not contain NUL characters`,
  ]);
});

test('nesting deeper than 32 levels is one problem at the first node too deep, even 100,000 levels (was: a stack overflow)', () => {
  const n = 100_000;
  const text = yaml('name: t', `x: ${'['.repeat(n)}${']'.repeat(n)}`);
  const lines = problems(text);
  assert.equal(lines.length, 1);
  assert.equal(
    lines[0],
    `${inline}:2:${4 + S.nestingDepthMax - 1}: x${'[0]'.repeat(S.nestingDepthMax - 1)}: ` +
      `lists and maps are nested more than ${S.nestingDepthMax} levels deep (the limit)`,
  );
  // 32 levels are fine as far as nesting goes (settings are free-form).
  const ok = yaml(
    'name: t',
    'queues: [{ name: in }, { name: out }]',
    `services: [{ name: s, module: ./services/running-total.ts, inputs: [in], output: out, settings: { a: ${'['.repeat(28)}1${']'.repeat(28)} } }]`,
  );
  assert.equal(parseTopology(ok, inline, { env: {} }).services[0]!.name, 's');
});

test('settings over 64 KiB as JSON are refused at services[i].settings', () => {
  const text = yaml(
    'name: t',
    'queues: [{ name: in }, { name: out }]',
    'services: [{ name: s, module: ./services/running-total.ts, inputs: [in], output: out,',
    `  settings: { blob: "${'z'.repeat(S.settingsBytesMax)}" } }]`,
  );
  assert.equal(problems(text), [
    `${inline}:4:13: services[0].settings: is ${S.settingsBytesMax + 11} bytes as JSON; the limit is ${S.settingsBytesMax}`,
  ]);
});

test('a file over 1 MiB is refused without being parsed; invalid UTF-8 is refused at its line and column', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'sluice-limits-'));
  try {
    const big = path.join(dir, 'big.yaml');
    writeFileSync(big, `name: t\n#${'-'.repeat(S.fileBytesMax)}\n`);
    assert.equal(loadProblems(big), [
      `${big}: the file is ${S.fileBytesMax + 10} bytes; a topology file is at most ${S.fileBytesMax} bytes`,
    ]);
    const bad = path.join(dir, 'bad.yaml');
    writeFileSync(
      bad,
      Buffer.concat([
        Buffer.from('name: t\nqueues:\n  - name: q'),
        Buffer.from([0xc3, 0x28]),
        Buffer.from('\n'),
      ]),
    );
    assert.equal(loadProblems(bad), [
      `${bad}:3:12: (root): not UTF-8: byte 0xc3 at offset 27 (a topology file is UTF-8 text)`,
    ]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a list or map as a map key is refused at the key (was: stringified with a warning)', () => {
  assert.equal(problems(yaml('name: t', 'queues:', '  - ? [a, b]', '    : 1')), [
    `${inline}:3:7: queues[0]: a map key must be a plain value, not a list or map`,
  ]);
});

test('a CR or NUL quoted from a value is escaped, so each problem stays one line (found by the fuzzer)', () => {
  const lines = problems(
    yaml(
      'name: a',
      'queues:',
      '  - { name: in }',
      '  - { name: out }',
      'services:',
      '  - { name: s, module: "x\\r\\u0000y.js", inputs: [in], output: out }',
    ),
  );
  assert.equal(lines, [
    `${inline}:6:24: services[0].module: must not contain NUL characters`,
    `${inline}:6:24: services[0].module: module file not found: ` +
      `${path.join(root, 'test', 'fixtures', 'config')}/x\\u000d\\u0000y.js`,
  ]);
});

test.run();
