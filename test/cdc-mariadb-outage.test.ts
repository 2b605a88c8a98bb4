/**
 * Outages (issue item 8) on MariaDB: the pumps' sessions (found as the holders of their pump
 * locks, IS_USED_LOCK) are killed with KILL CONNECTION every 300 ms for about 10 s while a writer
 * changes rows; and a login refused at start (the pumps' user does not exist yet). `sluice run`
 * keeps running, logs the outage and its end, and when the killing stops every change is in the target exactly once, in
 * per-key order, and the consumer's table (events applied by key) equals the database's.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';
import mysql from 'mysql2/promise';
import { keyHash } from '../engine/cdc/index.js';
import {
  assertLedgerExactlyOnce,
  createAppDb,
  LEDGER_DDL,
  sleepMs,
  stagingName,
  type LedgerEvent,
} from './cdc-helpers.js';
import { sluice, SLUICE_CLI, tailValues } from './lib/cli.js';
import { mariaDbOptions } from './cdc-mariadb-helpers.js';

const cli = SLUICE_CLI;

test('mariadb: pumps whose sessions are killed every 300 ms under load reconnect by themselves; nothing lost, nothing twice, per-key order kept', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-outage-'));
  const app = await createAppDb('mariadb');
  const ref = app.ref as { url: string; captureSchema: string };
  const killer = await mysql.createConnection(mariaDbOptions());
  let run: ReturnType<typeof spawn> | null = null;
  try {
    await app.exec(LEDGER_DDL.mariadb);
    const file = path.join(dir, 'topology.yaml');
    fs.writeFileSync(
      file,
      `name: outage
dataDir: ${JSON.stringify(path.join(dir, 'data'))}
queues:
  - { name: ledger-changes, partitions: 2 }
capture:
  - name: app
    database: { dialect: mariadb, url: ${JSON.stringify(ref.url)}, captureSchema: ${ref.captureSchema} }
    pumps: 2
    batchSizeMax: 50
    tables:
      - { table: ledger, operations: [insert, update, delete], target: ledger-changes }
`,
    );
    assert.is((await sluice(['install', file])).code, 0);
    run = spawn(process.execPath, [cli, 'run', file, '--status-ms', '1000'], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let err = '';
    run.stderr!.on('data', (b) => (err += b));
    const exited = new Promise<number | null>((resolve) =>
      run!.on('exit', (code) => resolve(code)),
    );
    const deadline = Date.now() + 30_000;
    while (!err.includes('is up') && Date.now() < deadline) await sleepMs(100);
    assert.ok(err.includes('is up'), err);

    // The pumps' sessions are the ones holding their pump locks (GET_LOCK, see mariadb.ts).
    const lockOf = (pump: number) =>
      `sluice.cdc.${keyHash(`${ref.captureSchema}.sluice_staging`).toString(16)}.${pump}`;
    let killed = 0;
    let writing = true;
    const killing = (async () => {
      while (writing) {
        for (const pump of [0, 1]) {
          const [rows] = await killer.query<mysql.RowDataPacket[]>('SELECT IS_USED_LOCK(?) AS id', [
            lockOf(pump),
          ]);
          const id = rows[0]?.id;
          if (id === null || id === undefined) continue;
          await killer.query(`KILL CONNECTION ${Number(id)}`).then(
            () => killed++,
            () => undefined,
          );
        }
        await sleepMs(300);
      }
    })();
    const writeUntil = Date.now() + 10_000;
    let changes = 0;
    for (let i = 0; Date.now() < writeUntil; i++) {
      const id = i % 40;
      await app.exec(
        `INSERT INTO ledger(id, holder) VALUES (${id}, 'v${i}') ON DUPLICATE KEY UPDATE holder = VALUES(holder)`,
      );
      changes++;
      if (i % 7 === 6) {
        await app.exec(`DELETE FROM ledger WHERE id = ${(i * 3) % 40}`);
        changes++;
      }
      await sleepMs(2);
    }
    writing = false;
    await killing;
    assert.ok(killed >= 10, `pump sessions killed: ${killed}`);
    // Every change drained: staging empty.
    const drainDeadline = Date.now() + 60_000;
    for (;;) {
      const [row] = await app.query<{ n: string }>(`SELECT COUNT(*) AS n FROM ${stagingName(app)}`);
      if (Number(row!.n) === 0) break;
      assert.ok(Date.now() < drainDeadline, `staging still holds ${row!.n} rows`);
      await sleepMs(200);
    }
    await sleepMs(500);
    run.kill('SIGTERM');
    assert.is(await exited, 0, err);
    run = null;
    assert.match(err, /capture source "app" is down since \S+Z: /);
    assert.match(err, /capture source "app" is up again after \d+\.\d s down/);

    // Verified against the database: every event once, per-key order, final table equal.
    const events = await tailValues<LedgerEvent>(file, 'ledger-changes', 2);
    await assertLedgerExactlyOnce(app, events);
    assert.ok(changes > 100, `changes written: ${changes}`);
  } finally {
    if (run) run.kill('SIGKILL');
    await killer.end();
    await app.destroy();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('mariadb: a capture database that refuses the login at start is waited out by its pumps; once the user exists every change is shipped once, in order', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-outage-'));
  const app = await createAppDb('mariadb');
  const ref = app.ref as { url: string; captureSchema: string };
  const user = `${ref.url.split('/').pop()}_pump`;
  const admin = await mysql.createConnection(mariaDbOptions());
  let run: ReturnType<typeof spawn> | null = null;
  try {
    await app.exec(LEDGER_DDL.mariadb);
    const file = path.join(dir, 'topology.yaml');
    const topology = (url: string) => `name: login
dataDir: ${JSON.stringify(path.join(dir, 'data'))}
queues:
  - { name: ledger-changes }
capture:
  - name: app
    database: { dialect: mariadb, url: ${JSON.stringify(url)}, captureSchema: ${ref.captureSchema} }
    tables:
      - { table: ledger, operations: [insert, update, delete], target: ledger-changes }
`;
    fs.writeFileSync(file, topology(ref.url));
    assert.is((await sluice(['install', file])).code, 0);
    fs.writeFileSync(file, topology(ref.url.replace(/\/\/[^@/]+@/, `//${user}@`)));
    await app.exec(`INSERT INTO ledger(id, holder) SELECT seq, 'h' FROM seq_1_to_100`);
    run = spawn(process.execPath, [cli, 'run', file, '--status-ms', '0'], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let err = '';
    run.stderr!.on('data', (b) => (err += b));
    const exited = new Promise<number | null>((resolve) =>
      run!.on('exit', (code) => resolve(code)),
    );
    const upBy = Date.now() + 30_000;
    // The pump's first outage line (not the topology's "<name> is up" line, which comes first).
    while (!err.includes('is down since') && Date.now() < upBy) await sleepMs(100);
    assert.ok(err.includes('is down'), err);
    assert.match(
      err,
      new RegExp(
        `capture source "app": cannot connect to .*Access denied for user '${user}'@.*; its pumps wait for it`,
      ),
    );
    assert.match(err, 'is up');
    await sleepMs(5000);
    assert.match(
      err,
      new RegExp(
        `capture source "app" is down since \\S+Z: Access denied for user '${user}'@.*; retrying`,
      ),
    );
    const [staged] = await app.query<{ n: string }>(
      `SELECT COUNT(*) AS n FROM ${stagingName(app)}`,
    );
    assert.is(Number(staged!.n), 100, 'nothing shipped while the login is refused');
    await admin.query(`CREATE USER '${user}'@'%'; GRANT ALL PRIVILEGES ON *.* TO '${user}'@'%'`);
    await admin.query(
      `CREATE USER '${user}'@'localhost'; GRANT ALL PRIVILEGES ON *.* TO '${user}'@'localhost'`,
    );
    const drainBy = Date.now() + 30_000;
    for (;;) {
      const [row] = await app.query<{ n: string }>(`SELECT COUNT(*) AS n FROM ${stagingName(app)}`);
      if (Number(row!.n) === 0) break;
      assert.ok(Date.now() < drainBy, `staging still holds ${row!.n} rows`);
      await sleepMs(200);
    }
    run.kill('SIGTERM');
    assert.is(await exited, 0, err);
    run = null;
    assert.match(err, /capture source "app" is up again after \d+\.\d s down/);
    const r = await sluice(['tail', file, 'ledger-changes', '--from-start', '-n', '1000']);
    const keys = r.out
      .trim()
      .split('\n')
      .map((l) => (JSON.parse(l) as { key: string }).key);
    assert.equal(
      keys,
      Array.from({ length: 100 }, (_, i) => `["${i + 1}"]`),
    );
  } finally {
    if (run) run.kill('SIGKILL');
    await admin
      .query(`DROP USER IF EXISTS '${user}'@'%', '${user}'@'localhost'`)
      .catch(() => undefined);
    await admin.end();
    await app.destroy();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
