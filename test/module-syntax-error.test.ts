/**
 * A service or processor module with a JavaScript syntax error: `sluice check` and `sluice run`
 * name the topology field (services[i].module, processors[i].module), the file and line:column
 * of the error, then the parser's message; for an ES module `.js` (package type module), an
 * `.mjs`, and an error in a module the service module imports.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { sluice } from './lib/cli.js';

let dir = '';
test.before.each(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-module-syntax-'));
  // `.js` files of this directory are ES modules.
  fs.writeFileSync(path.join(dir, 'package.json'), '{ "type": "module" }\n');
});
test.after.each(() => {
  fs.rmSync(dir, { recursive: true, force: true });
});

/** Writes `name` in the test's directory; returns its path. */
function write(name: string, text: string): string {
  const file = path.join(dir, name);
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, text);
  return file;
}

/** `line:col` (1-based) of the first occurrence of `token` in `text`, `shift` columns right. */
function at(text: string, token: string, shift = 0): string {
  const lines = text.split('\n');
  const line = lines.findIndex((l) => l.includes(token));
  if (line < 0) throw new Error(`test bug: "${token}" not in the text`);
  return `${line + 1}:${lines[line]!.indexOf(token) + 1 + shift}`;
}

/** A topology of one service (module `service`) and, given `processor`, one durable processor. */
function topology(service: string, processor?: string): { file: string; text: string } {
  const text = [
    'name: syntax',
    'dataDir: ./data',
    'queues:',
    '  - { name: in }',
    '  - { name: out }',
    '  - { name: orders }',
    '  - { name: invoices }',
    'services:',
    '  - name: pass',
    `    module: ${service}`,
    '    inputs: [in]',
    '    output: out',
    ...(processor === undefined
      ? []
      : [
          'processors:',
          '  - name: billing',
          '    pattern: durable',
          `    module: ${processor}`,
          '    inputs: [orders]',
          '    outputs: [invoices]',
        ]),
    '',
  ].join('\n');
  return { file: write('topology.yaml', text), text };
}

const BAD_SERVICE = [
  'export default {',
  '  init() { return 0; },',
  '  handlers: { json(s) { return s +; } },',
  '};',
  '',
].join('\n');

const BAD_PROCESSOR = [
  'let total = 0;',
  'export default {',
  '  onNext(order) {',
  '    let total = 1; let total = 2;',
  '    return [order];',
  '  },',
  '};',
  '',
].join('\n');

test('check: an ES module .js service and an .mjs processor with syntax errors, each at its field with file, line:col and message', async () => {
  const service = write('pass.js', BAD_SERVICE);
  const processor = write('billing.mjs', BAD_PROCESSOR);
  const { file, text } = topology('./pass.js', './billing.mjs');
  const r = await sluice(['check', file]);
  assert.is(r.code, 2, r.out);
  assert.equal(r.err.trim().split('\n'), [
    `${file}:${at(text, './pass.js')}: services[0].module: service "pass": syntax error at ${service}:${at(BAD_SERVICE, '+;', 1)}: Unexpected token ';'`,
    `${file}:${at(text, './billing.mjs')}: processors[0].module: processor "billing": syntax error at ${processor}:${at(BAD_PROCESSOR, 'total = 2')}: Identifier 'total' has already been declared`,
  ]);
});

test('run: an .mjs service with a syntax error fails at start, naming field, file, line:col and message', async () => {
  const service = write('pass.mjs', BAD_SERVICE);
  const { file, text } = topology('./pass.mjs');
  const r = await sluice(['run', file, '--status-ms', '0']);
  assert.is(r.code, 2, r.out);
  assert.is(
    r.err.trim(),
    `${file}:${at(text, './pass.mjs')}: services[0].module: service "pass": syntax error at ${service}:${at(BAD_SERVICE, '+;', 1)}: Unexpected token ';'`,
  );
});

test('check: a syntax error in a module the service imports is named at that file, with the importer', async () => {
  const helperText = ['export function plus(a, b) {', '  return a + b +;', '}', ''].join('\n');
  const helper = write('lib/plus.js', helperText);
  const service = write(
    'pass.mjs',
    [
      "import { plus } from './lib/plus.js';",
      'export default {',
      '  init() { return 0; },',
      '  handlers: { json(s) { return plus(s, 1); } },',
      '};',
      '',
    ].join('\n'),
  );
  const { file, text } = topology('./pass.mjs');
  const r = await sluice(['check', file]);
  assert.is(r.code, 2, r.out);
  assert.is(
    r.err.trim(),
    `${file}:${at(text, './pass.mjs')}: services[0].module: service "pass": syntax error at ${helper}:${at(helperText, '+;', 1)} (imported by ${service}): Unexpected token ';'`,
  );
});

test.run();
