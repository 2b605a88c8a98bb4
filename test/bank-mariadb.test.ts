/**
 * The bank example on MariaDB, as users run it (`npm run bank:mariadb`), in a database of its own
 * and a capture database of its own (random suffix, both dropped at the end): pgbench's TPC-B from 4 connections, capture, two pumps,
 * two services, and the verification against the database.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import mysql from 'mysql2/promise';
import { MARIADB_URL, mariaDbOptions } from './cdc-mariadb-helpers.js';

const main = new URL('../examples/bank/main.js', import.meta.url).pathname;
const root = new URL('../../', import.meta.url).pathname;

function runBank(
  args: string[],
  env: Record<string, string>,
): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    const p = spawn(process.execPath, [main, ...args], {
      cwd: root,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, ...env },
    });
    let out = '';
    p.stdout.on('data', (b) => (out += b));
    p.stderr.on('data', (b) => (out += b));
    p.on('exit', (code) => resolve({ code, out }));
  });
}

test('bank job on MariaDB: every branch total and changed account matches the database', async () => {
  const database = `sluice_bank_${randomBytes(6).toString('hex')}`;
  try {
    const r = await runBank(
      ['--topology', 'examples/bank/topology.mariadb.yaml', '--duration-s', '4', '--clients', '4'],
      {
        SLUICE_MARIADB_BANK_URL: `${MARIADB_URL}/${database}`,
        SLUICE_MARIADB_BANK_CAPTURE: `${database}_sluice`,
      },
    );
    assert.is(r.code, 0, r.out);
    assert.match(r.out, /bank summary \(mariadb, scale 1, 4 clients,/);
    assert.match(
      r.out,
      /verification\s+OK: 1 branch totals and \d+ changed accounts match the database/,
    );
    const m = /transactions run\s+(\d+)/.exec(r.out);
    assert.ok(m && Number(m[1]) > 50, r.out);
    // Every transaction inserts one history row; its account update is an event unless delta was 0
    // (an update that changes nothing is suppressed).
    const count = (service: string) =>
      Number(new RegExp(`events processed\\s+\\d+ \\(.*\\b${service} (\\d+)`).exec(r.out)?.[1]);
    assert.is(count('branch-balances'), Number(m![1]), 'one history event per transaction');
    const accounts = count('accounts');
    assert.ok(accounts <= Number(m![1]) && accounts >= Number(m![1]) * 0.99, r.out);
  } finally {
    const c = await mysql.createConnection(mariaDbOptions());
    await c.query(
      `SET foreign_key_checks = 0; DROP DATABASE IF EXISTS \`${database}\`; DROP DATABASE IF EXISTS \`${database}_sluice\``,
    );
    await c.end();
  }
});

test.run();
