/**
 * The main job, end to end, as users run it: the bank example on SQLite (TPC-B from worker
 * threads) and on PostgreSQL (the real pgbench), each ending with its verification against the
 * database. Short durations; the README's runs use the defaults. The runs use a temporary data
 * directory (BANK_DATA) and a PostgreSQL database of their own (SLUICE_PG_URL), never the quick
 * start's data/bank or sluice_bank.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';
import pg from 'pg';

const main = new URL('../examples/bank/main.js', import.meta.url).pathname;
const root = new URL('../../', import.meta.url).pathname;
const PG_ADMIN_URL = 'postgres://postgres@127.0.0.1:5432/postgres';
const pgDatabase = `sluice_bank_test_${process.pid}_${Math.floor(Math.random() * 1e6)}`;
const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-bank-'));
const env = {
  ...process.env,
  BANK_DATA: dataDir,
  SLUICE_PG_URL: `postgres://postgres@127.0.0.1:5432/${pgDatabase}`,
};

test.after(async () => {
  fs.rmSync(dataDir, { recursive: true, force: true });
  const admin = new pg.Client({ connectionString: PG_ADMIN_URL });
  await admin.connect();
  try {
    await admin.query(`DROP DATABASE IF EXISTS "${pgDatabase}" WITH (FORCE)`);
  } finally {
    await admin.end();
  }
});

function runBank(args: string[]): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    const p = spawn(process.execPath, [main, ...args], {
      cwd: root,
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    p.stdout.on('data', (b) => (out += b));
    p.stderr.on('data', (b) => (out += b));
    p.on('exit', (code) => resolve({ code, out }));
  });
}

function number(out: string, label: string): number {
  const m = new RegExp(`${label}\\s+(\\d+)`).exec(out);
  assert.ok(m, `no "${label}" line in:\n${out}`);
  return Number(m![1]);
}

test('bank job on SQLite: every branch total and changed account matches the database', async () => {
  const r = await runBank(['--duration-s', '3', '--clients', '2']);
  assert.is(r.code, 0, r.out);
  assert.match(
    r.out,
    /verification\s+OK: 1 branch totals and \d+ changed accounts match the database/,
  );
  const tx = number(r.out, 'transactions run');
  assert.ok(tx > 100, `only ${tx} transactions`);
  // Each TPC-B transaction inserts one history row and updates one account (unless its delta is 0).
  const captured = number(r.out, 'changes captured');
  assert.ok(
    captured >= 2 * tx - tx / 500 - 5 && captured <= 2 * tx,
    `captured ${captured} for ${tx} transactions`,
  );
});

test('bank job with --keep continues the last run: services replay, resume after LAST_WRITTEN, verification passes', async () => {
  const r = await runBank(['--duration-s', '2', '--clients', '2', '--keep']);
  assert.is(r.code, 0, r.out);
  assert.match(r.out, 'database kept from the last run');
  assert.match(r.out, /after replaying \d+ from earlier runs/);
  assert.match(r.out, /verification\s+OK/);
});

test('--keep takes the scale from the kept database and refuses a different --scale', async () => {
  const first = await runBank(['--scale', '2', '--duration-s', '1', '--clients', '2']);
  assert.is(first.code, 0, first.out);
  const kept = await runBank(['--keep', '--duration-s', '1', '--clients', '2']);
  assert.is(kept.code, 0, kept.out);
  assert.match(kept.out, 'database kept from the last run (scale 2)');
  assert.match(kept.out, /bank summary \(sqlite, scale 2,/);
  assert.match(kept.out, /verification\s+OK: 2 branch totals/);
  const wrong = await runBank(['--keep', '--scale', '1', '--duration-s', '1']);
  assert.is(wrong.code, 2, wrong.out);
  assert.match(wrong.out, 'bank: --scale 1 with --keep, but the kept database has scale 2');
  assert.is(wrong.out.trim().split('\n').length, 1, wrong.out);
});

test('SIGINT during the workload stops it early, drains, prints the summary of what ran, verifies, exit 0', async () => {
  const p = spawn(process.execPath, [main, '--duration-s', '60', '--clients', '2'], {
    cwd: root,
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  p.stdout.on('data', (b) => (out += b));
  p.stderr.on('data', (b) => (out += b));
  while (!out.includes('workload running') && p.exitCode === null)
    await new Promise((r) => setTimeout(r, 50));
  const t0 = Date.now();
  // late enough for the client threads to have committed transactions on a loaded machine
  setTimeout(() => p.kill('SIGINT'), 3000);
  const code = await new Promise<number | null>((r) => p.on('exit', (c) => r(c)));
  assert.is(code, 0, out);
  assert.ok(Date.now() - t0 < 30_000, `took ${Date.now() - t0} ms after the database was ready`);
  assert.match(
    out,
    /bank summary \(sqlite, scale 1, 2 clients, [\d.]+ s workload, stopped early by SIGINT\)/,
  );
  assert.ok(number(out, 'transactions run') > 0, out);
  assert.match(out, /verification\s+OK/);
});

test('bad options are one line each, exit 2, checked before the database is touched', async () => {
  const dbFile = path.join(dataDir, 'bank.db');
  const before = fs.statSync(dbFile);
  for (const [args, message] of [
    [['--scale', '0'], '--scale must be an integer in [1, 100], got "0"'],
    [['--duration-s', 'abc'], '--duration-s must be an integer in [1, 86400], got "abc"'],
    [['--clients', '0'], '--clients must be an integer in [1, 64], got "0"'],
  ] as const) {
    const r = await runBank([...args]);
    assert.is(r.code, 2, r.out);
    assert.match(r.out, message);
    assert.not.match(r.out, /^\s+at /m, r.out);
    assert.not.match(r.out, 'Usage:');
  }
  const after = fs.statSync(dbFile);
  assert.is(after.ino, before.ino, 'the database was not recreated');
  assert.is(after.mtimeMs, before.mtimeMs, 'the database was not written');
});

test("the runs used the temporary data directory and database, not the quick start's", () => {
  assert.ok(fs.existsSync(path.join(dataDir, 'bank.db')));
  assert.ok(fs.existsSync(path.join(dataDir, 'queues', 'accounts-out', '0')));
});

test('bank job on PostgreSQL driven by the real pgbench: verification passes', async () => {
  const r = await runBank([
    '--topology',
    'examples/bank/topology.pg.yaml',
    '--duration-s',
    '4',
    '--clients',
    '4',
  ]);
  assert.is(r.code, 0, r.out);
  assert.match(
    r.out,
    /verification\s+OK: 1 branch totals and \d+ changed accounts match the database/,
  );
  assert.ok(number(r.out, 'transactions run') > 50, r.out);
});

test.run();
