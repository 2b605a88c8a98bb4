/**
 * Outages (issue item 8): the pumps' PostgreSQL sessions are killed with pg_terminate_backend
 * every 300 ms for about 10 s while a writer changes rows; `sluice run` keeps running, logs the
 * outage and its end, and when the killing stops every change is in the target exactly once, in
 * per-key order, and the consumer's table (events applied by key) equals the database's.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';
import pg from 'pg';
import { keyHash } from '../engine/cdc/index.js';
import {
  assertLedgerExactlyOnce,
  createAppDb,
  LEDGER_DDL,
  PG_URL,
  sleepMs,
  type LedgerEvent,
} from './cdc-helpers.js';
import { sluice, SLUICE_CLI, tailValues } from './lib/cli.js';

const cli = SLUICE_CLI;

test('postgres: pumps whose sessions are killed every 300 ms under load reconnect by themselves; nothing lost, nothing twice, per-key order kept', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-outage-'));
  const app = await createAppDb('postgres');
  const ref = app.ref as { schema: string; captureSchema: string };
  const killer = new pg.Client({ connectionString: PG_URL });
  await killer.connect();
  let run: ReturnType<typeof spawn> | null = null;
  try {
    await app.exec(LEDGER_DDL.postgres);
    const file = path.join(dir, 'topology.yaml');
    fs.writeFileSync(
      file,
      `name: outage
dataDir: ${JSON.stringify(path.join(dir, 'data'))}
queues:
  - { name: ledger-changes, partitions: 2 }
capture:
  - name: app
    database: { dialect: postgres, url: ${JSON.stringify(PG_URL)}, schema: ${ref.schema}, captureSchema: ${ref.captureSchema} }
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

    // The pumps' sessions are the ones holding this staging table's advisory lock.
    const lockClass = keyHash(`sluice.cdc:${ref.captureSchema}.sluice_staging`);
    let killed = 0;
    let writing = true;
    const killing = (async () => {
      while (writing) {
        const r = await killer.query(
          `SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_locks
          WHERE locktype = 'advisory' AND classid = $1::bigint::oid AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
          [lockClass],
        );
        killed += r.rows[0].n as number;
        await sleepMs(300);
      }
    })();
    const writeUntil = Date.now() + 10_000;
    let changes = 0;
    for (let i = 0; Date.now() < writeUntil; i++) {
      const id = i % 40;
      await app.exec(
        `INSERT INTO ledger(id, holder) VALUES (${id}, 'v${i}') ON CONFLICT (id) DO UPDATE SET holder = EXCLUDED.holder`,
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
      const [row] = await app.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM "${ref.captureSchema}".sluice_staging`,
      );
      if (row!.n === 0) break;
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

test('postgres: a login refused at start and for 5 s more: the topology starts, the pump says it is down, then ships everything once the login works', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-outage-'));
  const app = await createAppDb('postgres');
  const ref = app.ref as { schema: string; captureSchema: string };
  const role = `${ref.schema}_pump`;
  const admin = new pg.Client({ connectionString: PG_URL });
  await admin.connect();
  let run: ReturnType<typeof spawn> | null = null;
  try {
    await app.exec(LEDGER_DDL.postgres);
    const file = path.join(dir, 'topology.yaml');
    const topology = (url: string) => `name: login
dataDir: ${JSON.stringify(path.join(dir, 'data'))}
queues:
  - { name: ledger-changes }
capture:
  - name: app
    database: { dialect: postgres, url: ${JSON.stringify(url)}, schema: ${ref.schema}, captureSchema: ${ref.captureSchema} }
    tables:
      - { table: ledger, operations: [insert, update, delete], target: ledger-changes }
`;
    fs.writeFileSync(file, topology(PG_URL));
    assert.is((await sluice(['install', file])).code, 0);
    fs.writeFileSync(file, topology(PG_URL.replace('postgres@', `${role}@`)));
    await app.exec(`INSERT INTO ledger(id, holder) SELECT g, 'h' FROM generate_series(1, 100) g`);
    run = spawn(process.execPath, [cli, 'run', file, '--status-ms', '0', '--http', '0'], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let err = '';
    run.stderr!.on('data', (b) => (err += b));
    const exited = new Promise<number | null>((resolve) =>
      run!.on('exit', (code) => resolve(code)),
    );
    const upBy = Date.now() + 30_000;
    while (!err.includes('is up') && Date.now() < upBy) await sleepMs(100);
    assert.match(
      err,
      `capture[0].database.url: capture source "app": cannot connect to ${PG_URL.replace('postgres@', `${role}@`)}: role "${role}" does not exist; its pumps wait for it`,
    );
    assert.match(err, 'is up');
    await sleepMs(5000);
    assert.match(
      err,
      new RegExp(
        `capture source "app" is down since \\S+Z: role "${role}" does not exist; retrying`,
      ),
    );
    const [staged] = await app.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM "${ref.captureSchema}".sluice_staging`,
    );
    assert.is(staged!.n, 100, 'nothing shipped while the login is refused');
    // The outage shows in the health (degraded, naming the pump and since when) and in the log.
    const url = /operations API and dashboard at (http:\/\/\S+?)\/?\n/.exec(err)?.[1];
    assert.ok(url, err);
    const down = await fetch(`${url}/health/ready`);
    const body = (await down.json()) as {
      status: string;
      degraded: { actor: string; error: string }[];
    };
    assert.is(down.status, 503);
    assert.is(body.status, 'degraded');
    assert.equal(
      body.degraded.map((d) => d.actor),
      ['pump:app/0'],
    );
    // The call that failed was to the source's database: the reason names the source.
    assert.is(
      body.degraded[0]!.error,
      `capture source "app" is down: role "${role}" does not exist; retrying`,
    );
    assert.match(err, /is up \(\d+ actor groups?\), not ready yet: |not ready \(degraded\): /);
    await admin.query(`CREATE ROLE "${role}" LOGIN SUPERUSER`);
    const drainBy = Date.now() + 30_000;
    for (;;) {
      const [row] = await app.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM "${ref.captureSchema}".sluice_staging`,
      );
      if (row!.n === 0) break;
      assert.ok(Date.now() < drainBy, `staging still holds ${row!.n} rows`);
      await sleepMs(200);
    }
    const readyBy = Date.now() + 10_000;
    while (!err.includes('sluice: ready (') && Date.now() < readyBy) await sleepMs(100);
    assert.match(err, 'sluice: ready (degraded before)');
    assert.is((await fetch(`${url}/health/ready`)).status, 200);
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
      .query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1`, [role])
      .catch(() => undefined);
    await admin.query(`DROP ROLE IF EXISTS "${role}"`).catch(() => undefined);
    await admin.end();
    await app.destroy();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
