/**
 * The `sluice` command line as a user drives it: check, install, append, tail, run; and its
 * errors: one line naming what and where, exit 2, no stack trace.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import net from 'node:net';
import { spawn } from 'node:child_process';
import Database from 'better-sqlite3';
import pg from 'pg';
import { createAppDb } from './cdc-helpers.js';

const cli = new URL('../cli/sluice.js', import.meta.url).pathname;
const passThrough = new URL('./fixtures/services/thrower.js', import.meta.url).pathname;

function sluice(
  args: string[],
  stdin = '',
  timeoutMs = 60_000,
  env: Record<string, string> = {},
  /** SIGTERM once stderr matches this (a `sluice run` that is up), instead of waiting for exit. */
  stopWhen?: RegExp,
): Promise<{ code: number | null; out: string; err: string }> {
  return new Promise((resolve) => {
    const p = spawn(process.execPath, [cli, ...args], {
      stdio: ['pipe', 'pipe', 'pipe'],
      env: { ...process.env, ...env },
    });
    let out = '';
    let err = '';
    p.stdout.on('data', (b) => (out += b));
    p.stderr.on('data', (b) => {
      err += b;
      if (stopWhen?.test(err)) p.kill('SIGTERM');
    });
    const timer = setTimeout(() => p.kill('SIGKILL'), timeoutMs);
    p.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, out, err });
    });
    p.stdin.end(stdin);
  });
}

let dir = '';
test.before.each(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-cli-'));
});
test.after.each(() => {
  fs.rmSync(dir, { recursive: true, force: true });
});

function writeTopology(extra = ''): string {
  const file = path.join(dir, 'topology.yaml');
  fs.writeFileSync(
    file,
    `name: cli\ndataDir: ./data\nsupervisor: { restartsMax: 1, backoffInitialMs: 10 }\nqueues:\n  - { name: in, partitions: 2 }\n  - { name: out }\nservices:\n  - name: pass\n    module: ${passThrough}\n    inputs: [in]\n    output: out\n${extra}`,
  );
  return file;
}

test('check lists every actor, readers included', async () => {
  const r = await sluice(['check', writeTopology()]);
  assert.is(r.code, 0, r.err);
  // The service's dead-letter queue pass.dlq is declared implicitly.
  assert.match(r.out, 'ok (3 queues, 1 service, 0 capture sources)');
  assert.match(r.out, 'service:pass');
  assert.match(r.out, 'reader:in/0>pass');
  assert.match(r.out, 'reader:in/1>pass');
});

test('append takes JSON lines from stdin; tail prints the last n, or the first n with --from-start', async () => {
  const file = writeTopology();
  const lines = Array.from({ length: 30 }, (_, i) => JSON.stringify({ key: 'k', n: i })).join('\n');
  const a = await sluice(['append', file, 'in', '--partition', '1'], lines);
  assert.is(a.code, 0, a.err);
  assert.match(a.err, 'appended 30 events to in');
  const last = await sluice(['tail', file, 'in', '-p', '1', '-n', '3']);
  assert.is(last.code, 0, last.err);
  assert.equal(
    last.out
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l).value.n),
    [27, 28, 29],
  );
  const first = await sluice(['tail', file, 'in', '-p', '1', '-n', '2', '--from-start']);
  assert.equal(
    first.out
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l).index),
    [0, 1],
  );
  assert.is(first.err, '', 'no note when -p is given');
  // Without -p only partition 0 is shown, and stderr says so.
  const p0 = await sluice(['tail', file, 'in']);
  assert.is(p0.code, 0, p0.err);
  assert.is(p0.out, '');
  assert.match(p0.err, 'queue "in" has 2 partitions; showing partition 0 (-p <n> for another)');
  const single = await sluice(['tail', file, 'out']);
  assert.is(single.err, '');
});

test('append reports the stdin line of bad input and keeps what came before it', async () => {
  const file = writeTopology();
  const r = await sluice(
    ['append', file, 'in'],
    '{"key":"a","n":1}\n{"key":"b","n":2}\nnot json\n',
  );
  assert.is(r.code, 2);
  assert.match(r.err, 'stdin line 3: not JSON');
  assert.match(r.err, '2 events before it were appended');
  const nul = await sluice(['append', file, 'in'], '{"key":null}\n');
  assert.is(nul.code, 2);
  assert.match(nul.err, 'stdin line 1: the key field "key" is null');
  const missing = await sluice(['append', file, 'in'], '{"id":1}\n');
  assert.match(missing.err, 'stdin line 1: no "key" field for the key');
  const t0 = await sluice(['tail', file, 'in', '-p', '0']);
  const t1 = await sluice(['tail', file, 'in', '-p', '1']);
  assert.is((t0.out + t1.out).trim().split('\n').length, 2);
});

test('user errors are one line with exit 2: unknown queue, partition out of range, bad number', async () => {
  const file = writeTopology();
  const q = await sluice(['tail', file, 'nope']);
  assert.is(q.code, 2);
  assert.match(q.err, 'unknown queue "nope"');
  assert.not.match(q.err, '    at ');
  const p = await sluice(['tail', file, 'in', '-p', '5']);
  assert.is(p.code, 2);
  assert.match(p.err, 'queue "in" has partitions 0..1, --partition 5');
  const n = await sluice(['tail', file, 'in', '-n', 'abc']);
  assert.is(n.code, 2, n.err);
  assert.match(n.err, '--lines must be an integer >= 0, got "abc"');
  assert.not.match(n.err, 'Usage:', 'no full help dump');
  assert.ok(n.err.trim().split('\n').length <= 2, n.err);
  const u = await sluice(['tail', file, 'in', '--no-such-option']);
  assert.is(u.code, 2, u.err);
  assert.match(u.err, "unknown option '--no-such-option'");
  const h = await sluice(['tail', '--help']);
  assert.is(h.code, 0, h.err);
  assert.match(h.out, 'Usage: sluice tail');
});

test('run without installed capture fails at once, saying how to install; install then works', async () => {
  const db = path.join(dir, 'app.db');
  const sqlite = new Database(db);
  sqlite.exec('CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT)');
  sqlite.close();
  const file = writeTopology(
    `capture:\n  - name: app\n    database: { dialect: sqlite, file: ./app.db }\n    tables:\n      - { table: items, operations: [insert], target: items-changes }\n`,
  ).replace(/$/, '');
  fs.writeFileSync(
    file,
    fs
      .readFileSync(file, 'utf8')
      .replace('  - { name: out }', '  - { name: out }\n  - { name: items-changes }'),
  );
  const r = await sluice(['run', file, '--status-ms', '0']);
  assert.is(r.code, 2);
  assert.match(r.err, 'capture source "app" is not installed');
  assert.match(r.err, `sluice install ${file}`);
  const i = await sluice(['install', file]);
  assert.is(i.code, 0, i.err);
  assert.match(i.out, 'installed capture "app": items (insert) -> items-changes');
});

test('a capture database path that does not exist is an error, not a new empty database', async () => {
  const file = writeTopology(
    `capture:\n  - name: app\n    database: { dialect: sqlite, file: ./typo.db }\n    tables:\n      - { table: items, operations: [insert], target: items-changes }\n`,
  );
  fs.writeFileSync(
    file,
    fs
      .readFileSync(file, 'utf8')
      .replace('  - { name: out }', '  - { name: out }\n  - { name: items-changes }'),
  );
  const r = await sluice(['install', file]);
  assert.is(r.code, 2);
  assert.match(r.err, `typo.db does not exist`);
  assert.not.ok(fs.existsSync(path.join(dir, 'typo.db')));
  const c = await sluice(['check', file]);
  assert.is(c.code, 2, c.out);
  assert.is(
    c.err.trim(),
    `${file}:${at(file, './typo.db')}: capture[0].database.file: SQLite database file not found: ${path.join(dir, 'typo.db')} (create the database first; capture does not create it)`,
  );
  assert.not.ok(fs.existsSync(path.join(dir, 'typo.db')));
});

test("check reports a missing capture database file together with the file's other problems (a missing service module)", async () => {
  const file = writeTopology(
    `capture:\n  - name: app\n    database: { dialect: sqlite, file: ./typo.db }\n    tables:\n      - { table: items, operations: [insert], target: items-changes }\n`,
  );
  fs.writeFileSync(
    file,
    fs
      .readFileSync(file, 'utf8')
      .replace('  - { name: out }', '  - { name: out }\n  - { name: items-changes }')
      .replace(/module: .*/, 'module: ./nope.mjs'),
  );
  const c = await sluice(['check', file]);
  assert.is(c.code, 2, c.out);
  assert.equal(c.err.trim().split('\n'), [
    `${file}:${at(file, './nope.mjs')}: services[0].module: module file not found: ${path.join(dir, 'nope.mjs')}`,
    `${file}:${at(file, './typo.db')}: capture[0].database.file: SQLite database file not found: ${path.join(dir, 'typo.db')} (create the database first; capture does not create it)`,
  ]);
});

/** `line:col` (1-based) of the first occurrence of `token` in `file`, computed from its text. */
function at(file: string, token: string): string {
  const lines = fs.readFileSync(file, 'utf8').split('\n');
  const line = lines.findIndex((l) => l.includes(token));
  if (line < 0) throw new Error(`test bug: "${token}" not in ${file}`);
  return `${line + 1}:${lines[line]!.indexOf(token) + 1}`;
}

test('install names the topology file, line and field of a captured table or column that does not exist', async () => {
  const sqlite = new Database(path.join(dir, 'app.db'));
  sqlite.exec('CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT)');
  sqlite.close();
  const file = writeTopology(
    `capture:\n  - name: app\n    database: { dialect: sqlite, file: ./app.db }\n    tables:\n` +
      `      - { table: items, operations: [insert], columns: [id, nmae], target: items-changes }\n` +
      `      - { table: nosuchtable, operations: [insert], target: items-changes }\n`,
  );
  fs.writeFileSync(
    file,
    fs
      .readFileSync(file, 'utf8')
      .replace('  - { name: out }', '  - { name: out }\n  - { name: items-changes }'),
  );
  assert.is((await sluice(['check', file])).code, 0);
  let r = await sluice(['install', file]);
  assert.is(r.code, 2);
  assert.is(
    r.err.trim(),
    `${file}:${at(file, 'nmae')}: capture[0].tables[0].columns[1]: capture source "app": capture table "items": columns: column "nmae" not found (columns: id, name)`,
  );
  fs.writeFileSync(file, fs.readFileSync(file, 'utf8').replace('nmae', 'name'));
  r = await sluice(['install', file]);
  assert.is(r.code, 2);
  assert.is(
    r.err.trim(),
    `${file}:${at(file, 'nosuchtable')}: capture[0].tables[1].table: capture source "app": capture table "nosuchtable": table not found (no columns introspected)`,
  );
});

test('a handler that throws with onFailure stop: the failure names the service, the input partition and index, once', async () => {
  const file = writeTopology('    errors: { onFailure: stop }\n');
  await sluice(
    ['append', file, 'in', '-p', '0'],
    '{"key":"a"}\n{"key":"b"}\n{"key":"c","bad":true}\n',
  );
  const r = await sluice(['run', file, '--status-ms', '0']);
  assert.is(r.code, 2);
  assert.match(
    r.err,
    'service pass: handler for type 2 failed on in/0 index 2 (key "c"): bad event on purpose',
  );
  assert.is(r.err.split('\n').filter((l) => l.startsWith('sluice: stopped:')).length, 1, r.err);
  // One line per failure, no stack trace (README: SLUICE_DEBUG=1 adds them).
  assert.not.match(r.err, /^\s+at /m, r.err);
  assert.match(r.err, 'sluice: actor service:pass failed: service pass: handler for type 2 failed');
});

test('SLUICE_DEBUG=1 adds the stack trace of an actor failure', async () => {
  const file = writeTopology('    errors: { onFailure: stop }\n');
  await sluice(['append', file, 'in', '-p', '0'], '{"key":"c","bad":true}\n');
  const r = await sluice(['run', file, '--status-ms', '0'], '', 60_000, { SLUICE_DEBUG: '1' });
  assert.is(r.code, 2);
  assert.match(r.err, /^\s+at /m, r.err);
});

test('a replay strategy the module cannot serve fails at check and at run, naming service and field', async () => {
  const file = writeTopology().replace(/$/, '');
  fs.writeFileSync(
    file,
    fs
      .readFileSync(file, 'utf8')
      .replace('    output: out\n', '    output: out\n    inputsReplay: OUTPUT_REVERSE\n'),
  );
  const c = await sluice(['check', file]);
  assert.is(c.code, 2, c.out + c.err);
  assert.match(c.err, 'services[0].inputsReplay');
  assert.match(c.err, 'service "pass"');
  const r = await sluice(['run', file, '--status-ms', '0']);
  assert.is(r.code, 2);
  assert.match(r.err, 'services[0].inputsReplay');
  assert.not.match(r.err, 'restarting');
});

test('a second run of a running topology fails at once, naming the running pid, exit 2; the lock goes with the first', async () => {
  const file = writeTopology();
  const first = spawn(process.execPath, [cli, 'run', file, '--status-ms', '0'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let firstErr = '';
  const exited = new Promise<number | null>((resolve) => first.on('exit', (code) => resolve(code)));
  try {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`first run not up in 30 s: ${firstErr}`)),
        30_000,
      );
      first.stderr.on('data', (b) => {
        firstErr += b;
        if (firstErr.includes('is up')) {
          clearTimeout(timer);
          resolve();
        }
      });
    });
    const started = Date.now();
    const second = await sluice(['run', file, '--status-ms', '0']);
    const tookMs = Date.now() - started;
    assert.is(second.code, 2, second.err);
    const lock = path.join(dir, 'data', 'topology.lock');
    assert.is(
      second.err.trim(),
      `sluice: topology "cli" (${file}) is already running (pid ${first.pid}): its data directory ${path.join(dir, 'data')} is locked by ${lock}`,
    );
    assert.ok(tookMs < 10_000, `second run took ${tookMs} ms`);
    assert.ok(fs.existsSync(lock));
  } finally {
    first.kill('SIGTERM');
  }
  assert.is(await exited, 0, firstErr);
  assert.not.ok(
    fs.existsSync(path.join(dir, 'data', 'topology.lock')),
    'the first run released its lock',
  );
});

test('check and run warn, at the service input, when a capture target feeds a service without a change handler', async () => {
  const sqlite = new Database(path.join(dir, 'app.db'));
  sqlite.exec('CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT)');
  sqlite.close();
  const file = writeTopology(
    `capture:\n  - name: app\n    database: { dialect: sqlite, file: ./app.db }\n    tables:\n      - { table: items, operations: [insert], target: items-changes }\n`,
  );
  fs.writeFileSync(
    file,
    fs
      .readFileSync(file, 'utf8')
      .replace('  - { name: out }', '  - { name: out }\n  - { name: items-changes }')
      .replace('    inputs: [in]', '    inputs: [in, items-changes]'),
  );
  const warning =
    `${file}:${at(file, 'items-changes]')}: services[0].inputs[1]: warning: service "pass" has no change handler: ` +
    `the change events capture source "app" writes to queue "items-changes" would be dropped (add handlers.change to ${passThrough})`;
  const c = await sluice(['check', file]);
  assert.is(c.code, 0, c.err);
  assert.is(c.err.trim(), warning);
  assert.is((await sluice(['install', file])).code, 0);
  // Stopped once up (a fixed 3 s was too short for a loaded machine to print the warning).
  const r = await sluice(['run', file, '--status-ms', '0'], '', 60_000, {}, / is up /);
  assert.match(r.err, `sluice: ${warning}\n`);
  // A service with a change handler gets no warning.
  fs.writeFileSync(
    file,
    fs
      .readFileSync(file, 'utf8')
      .replace(passThrough, new URL('./fixtures/services/change-log.js', import.meta.url).pathname),
  );
  const ok = await sluice(['check', file]);
  assert.is(ok.code, 0, ok.err);
  assert.is(ok.err, '');
});

/** A TCP port nothing listens on (the OS picked it free, then it was closed). */
async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const port = (server.address() as net.AddressInfo).port;
  await new Promise((r) => server.close(r));
  return port;
}

test('install names the capture source and the database field when the database cannot be reached; run says so and waits for it', async () => {
  const port = await closedPort();
  const file = path.join(dir, 'topology.yaml');
  fs.writeFileSync(
    file,
    [
      'name: conn',
      'dataDir: ./data',
      'queues:',
      '  - { name: changes }',
      'capture:',
      '  - name: shop-db',
      `    database: { dialect: postgres, url: "postgres://app:secret@127.0.0.1:${port}/shop" }`,
      '    tables:',
      '      - { table: orders, operations: [insert], target: changes }',
      '',
    ].join('\n'),
  );
  const expected = `${file}:7:41: capture[0].database.url: capture source "shop-db": cannot connect to postgres://app:***@127.0.0.1:${port}/shop: connect ECONNREFUSED 127.0.0.1:${port}`;
  const r = await sluice(['install', file]);
  assert.is(r.code, 2, r.err);
  assert.is(r.err, `${expected}\n`);
  // run waits a database out (its pumps retry): it says so, starts, and drains on SIGTERM.
  const child = spawn(process.execPath, [cli, 'run', file, '--status-ms', '0'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let err = '';
  child.stderr.on('data', (b) => (err += b));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const deadline = Date.now() + 30_000;
  while (!err.includes('is up') && Date.now() < deadline)
    await new Promise((res) => setTimeout(res, 100));
  child.kill('SIGTERM');
  assert.is(await exited, 0, err);
  assert.ok(err.startsWith(`sluice: ${expected}; its pumps wait for it\n`), err);
});

test('check reports service module problems with the YAML ones, in file order, each at its line:col', async () => {
  const file = path.join(dir, 'topology.yaml');
  fs.writeFileSync(
    file,
    [
      'name: modules',
      'queues:',
      '  - { name: in }',
      '  - { name: out }',
      '  - { name: out2 }',
      'services:',
      '  - name: reverse',
      `    module: ${new URL('./fixtures/services/no-replay-handler.js', import.meta.url).pathname}`,
      '    inputs: [in]',
      '    output: out',
      '    inputsReplay: OUTPUT_REVERSE',
      '  - name: typo',
      `    module: ${passThrough}`,
      '    inputs: [inn]',
      '    output: out2',
      '',
    ].join('\n'),
  );
  const r = await sluice(['check', file]);
  assert.is(r.code, 2, r.err);
  const lines = r.err.trim().split('\n');
  assert.is(lines.length, 2, r.err);
  assert.match(
    lines[0]!,
    `${file}:11:19: services[0].inputsReplay: service "reverse": inputsReplay OUTPUT_REVERSE needs an output-replay handler`,
  );
  assert.match(lines[1]!, `${file}:14:14: services[1].inputs[0]: unknown queue "inn"`);
});

test('check --live finds missing tables, columns and keys in the live SQLite and PostgreSQL databases', async () => {
  const sqliteFile = path.join(dir, 'app.db');
  const sqlite = new Database(sqliteFile);
  sqlite.exec(
    'CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT); CREATE TABLE notes (body TEXT)',
  );
  sqlite.close();
  const schema = `sluice_live_${process.pid}_${Math.floor(Math.random() * 1e9)}`;
  const admin = new pg.Client({ connectionString: 'postgres://postgres@127.0.0.1:5432/test' });
  await admin.connect();
  try {
    await admin.query(`CREATE SCHEMA "${schema}"`);
    await admin.query(`CREATE TABLE "${schema}".orders (id int PRIMARY KEY, amount numeric)`);
    const file = path.join(dir, 'topology.yaml');
    const write = (itemsColumns: string, ordersColumns: string, extra: string) =>
      fs.writeFileSync(
        file,
        [
          'name: live',
          'dataDir: ./data',
          'queues:',
          '  - { name: a }',
          '  - { name: b }',
          'capture:',
          '  - name: app',
          '    database: { dialect: sqlite, file: ./app.db }',
          '    tables:',
          `      - { table: items, columns: [${itemsColumns}], operations: [insert], target: a }`,
          ...extra.split('|').filter((l) => l !== ''),
          '  - name: shop',
          `    database: { dialect: postgres, url: "postgres://postgres@127.0.0.1:5432/test", schema: ${schema} }`,
          '    tables:',
          `      - { table: orders, columns: [${ordersColumns}], operations: [insert], target: b }`,
          '',
        ].join('\n'),
      );
    write(
      'id, nme',
      'id, amont',
      '      - { table: itemz, operations: [insert], target: a }|      - { table: notes, operations: [insert], target: a }',
    );
    const plain = await sluice(['check', file]);
    assert.is(plain.code, 0, plain.err); // the file alone is fine
    const r = await sluice(['check', '--live', file]);
    assert.is(r.code, 2, r.out + r.err);
    assert.equal(r.err.trim().split('\n'), [
      `${file}:10:39: capture[0].tables[0].columns[1]: capture source "app": capture table "items": columns: column "nme" not found (columns: id, name)`,
      `${file}:11:18: capture[0].tables[1].table: capture source "app": capture table "itemz": table not found (no columns introspected)`,
      `${file}:12:9: capture[0].tables[2].key: capture source "app": capture table "notes": key: table has no primary key; give a key strategy in "key" (columns, none, fixed, transactionId, expression)`,
      `${file}:16:40: capture[1].tables[0].columns[1]: capture source "shop": capture table "orders": columns: column "amont" not found (columns: id, amount)`,
    ]);
    write('id, name', 'id, amount', '');
    const ok = await sluice(['check', '--live', file]);
    assert.is(ok.code, 0, ok.err);
    assert.match(ok.out, 'live: 2 captured tables found with their columns and keys');
  } finally {
    await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await admin.end();
  }
});

test('check --live: an unreachable MariaDB is reported at its url field before any "ok"', async () => {
  const file = path.join(dir, 'maria-down.yaml');
  fs.writeFileSync(
    file,
    [
      'name: mdown',
      'dataDir: ./data',
      'queues:',
      '  - { name: a }',
      'capture:',
      '  - name: shop',
      '    database: { dialect: mariadb, url: "mysql://root@127.0.0.1:1/nowhere" }',
      '    tables:',
      '      - { table: orders, operations: [insert], target: a }',
      '',
    ].join('\n'),
  );
  const r = await sluice(['check', '--live', file]);
  assert.is(r.code, 2, r.out + r.err);
  assert.not.match(r.out, /ok \(/);
  assert.match(
    r.err,
    new RegExp(
      `^${file.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')}:7:\\d+: capture\\[0\\]\\.database\\.url: capture source "shop": cannot open the database: .*ECONNREFUSED`,
      'm',
    ),
  );
});

test('check --live on MariaDB: a table or column that does not exist is refused at its field', async () => {
  const app = await createAppDb('mariadb', 'sluice_cli_live_');
  try {
    await app.exec('CREATE TABLE orders (id INT PRIMARY KEY, name VARCHAR(20))');
    const url = (app.ref as { url: string }).url;
    const file = path.join(dir, 'maria-live.yaml');
    const write = (tables: string[]) =>
      fs.writeFileSync(
        file,
        [
          'name: mlive',
          'dataDir: ./data',
          'queues:',
          '  - { name: a }',
          'capture:',
          '  - name: shop',
          `    database: { dialect: mariadb, url: "${url}" }`,
          '    tables:',
          ...tables,
          '',
        ].join('\n'),
      );
    write([
      '      - { table: ordrs, operations: [insert], target: a }',
      '      - { table: orders, columns: [id, nme], operations: [insert], target: a }',
    ]);
    const r = await sluice(['check', '--live', file]);
    assert.is(r.code, 2, r.out + r.err);
    assert.not.match(r.out, /ok \(/);
    assert.equal(r.err.trim().split('\n'), [
      `${file}:9:18: capture[0].tables[0].table: capture source "shop": capture table "ordrs": table not found (no columns introspected)`,
      `${file}:10:40: capture[0].tables[1].columns[1]: capture source "shop": capture table "orders": columns: column "nme" not found (columns: id, name)`,
    ]);
    write(['      - { table: orders, columns: [id, name], operations: [insert], target: a }']);
    const ok = await sluice(['check', '--live', file]);
    assert.match(ok.out, 'live: 1 captured table found with their columns and keys');
  } finally {
    await app.destroy();
  }
});

for (const dialect of ['sqlite', 'postgres', 'mariadb'] as const) {
  test(`check --live on ${dialect}: a condition or an expression key the database refuses is reported at its field, and nothing is installed`, async () => {
    const app = await createAppDb(dialect, 'sluice_cli_sql_');
    try {
      await app.exec('CREATE TABLE orders (id INT PRIMARY KEY, amount INT)');
      await app.exec('CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(20))');
      const file = path.join(dir, `sql-live-${dialect}.yaml`);
      const write = (condition: string, expression: string) =>
        fs.writeFileSync(
          file,
          [
            'name: sqllive',
            'dataDir: ./data',
            'queues:',
            '  - { name: a }',
            'capture:',
            '  - name: shop',
            `    database: ${JSON.stringify(app.ref)}`,
            '    tables:',
            `      - { table: orders, operations: [insert, update], target: a, condition: { update: "${condition}" } }`,
            `      - { table: items, operations: [insert], target: a, key: { expression: "${expression}" } }`,
            '',
          ].join('\n'),
        );
      write('NEW.amont > OLD.amount', 'upper(ROW.nme)');
      const plain = await sluice(['check', file]);
      assert.is(plain.code, 0, plain.err); // the file alone is fine: the SQL is the database's
      const r = await sluice(['check', '--live', file]);
      assert.is(r.code, 2, r.out + r.err);
      const lines = r.err.trim().split('\n');
      assert.is(lines.length, 2, r.err);
      assert.match(
        lines[0],
        `${file}:9:88: capture[0].tables[0].condition.update: capture source "shop": capture table "orders": condition (update): the database refuses it: `,
      );
      assert.match(lines[0], /amont/);
      assert.match(
        lines[1],
        `${file}:10:77: capture[0].tables[1].key.expression: capture source "shop": capture table "items": key expression: the database refuses it: `,
      );
      // As the user wrote it (ROW.nme; PostgreSQL prints row.nme), not as NEW.nme.
      assert.match(lines[1], /\bROW\.nme\b/i);
      assert.not.match(lines[1], /\bNEW\./i);
      write('NEW.amount > OLD.amount', 'upper(ROW.name)');
      const ok = await sluice(['check', '--live', file]);
      assert.is(ok.code, 0, ok.err);
      assert.match(ok.out, 'live: 2 captured tables found with their columns and keys');
      // Read only: an insert still stages nothing (no trigger was created by either check).
      await app.exec('INSERT INTO orders (id, amount) VALUES (1, 5)');
      const triggers =
        dialect === 'sqlite'
          ? await app.query<{ n: number }>(
              "SELECT count(*) AS n FROM sqlite_master WHERE type = 'trigger'",
            )
          : dialect === 'postgres'
            ? await app.query<{ n: number }>(
                'SELECT count(*)::int AS n FROM pg_trigger WHERE NOT tgisinternal',
              )
            : await app.query<{ n: number }>(
                'SELECT count(*) AS n FROM information_schema.triggers WHERE event_object_schema = database()',
              );
      assert.is(Number(triggers[0].n), 0, 'no trigger exists');
    } finally {
      await app.destroy();
    }
  });
}

test.run();
