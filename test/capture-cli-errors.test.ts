/**
 * The capture commands' failures as a user meets them: `sluice uninstall` and `sluice snapshot`
 * name where a database failure happened (topology file:line:col, the capture[i] field, the source,
 * the table, what the command was doing) before the driver's own message, and exit 2, as
 * `sluice install` does; nothing a command did before the failure is hidden.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import net from 'node:net';
import Database from 'better-sqlite3';
import { createAppDb, LEDGER_DDL, DIALECTS, positionIn as at } from './cdc-helpers.js';
import type { AppDb } from './cdc-helpers.js';
import { sluice } from './lib/cli.js';

let dir = '';
test.before.each(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-capture-cli-'));
});
test.after.each(() => {
  fs.rmSync(dir, { recursive: true, force: true });
});

/** One capture source of a test topology: its name, database (a YAML flow map) and table lines. */
interface SourceText {
  name: string;
  database: string;
  lines?: string[];
  tables?: string[];
}

const LEDGER = '      - { table: ledger, operations: [insert, update, delete], target: changes }';

/** Writes topology.yaml in the test's directory with `sources`; returns its path. */
function writeTopology(sources: SourceText[]): string {
  const file = path.join(dir, 'topology.yaml');
  const lines = [
    'name: errs',
    'dataDir: ./data',
    'queues:',
    '  - { name: changes }',
    '  - { name: changes2 }',
    'capture:',
  ];
  for (const s of sources) {
    lines.push(`  - name: ${s.name}`, `    database: ${s.database}`, ...(s.lines ?? []));
    lines.push('    tables:', ...(s.tables ?? [LEDGER]));
  }
  fs.writeFileSync(file, `${lines.join('\n')}\n`);
  return file;
}

/** The database entry of `app`, as a YAML flow map (JSON is YAML). */
function databaseOf(app: AppDb): string {
  return JSON.stringify(app.ref);
}

/** A local TCP port nothing listens on. */
async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as net.AddressInfo).port;
  await new Promise((r) => server.close(r));
  return port;
}

test('uninstall and snapshot name the source and its database field when PostgreSQL cannot be reached', async () => {
  const port = await closedPort();
  const url = `postgres://postgres@127.0.0.1:${port}/test`;
  const file = writeTopology([{ name: 'shop', database: `{ dialect: postgres, url: "${url}" }` }]);
  const expected = `${file}:${at(file, 'database:', '"postgres:')}: capture[0].database.url: capture source "shop": cannot connect to ${url}: connect ECONNREFUSED 127.0.0.1:${port}\n`;
  for (const args of [
    ['uninstall', file],
    ['uninstall', file, '--force'],
    ['snapshot', file, 'shop', 'ledger'],
  ]) {
    const r = await sluice(args);
    assert.is(r.code, 2, `${args.join(' ')}: ${r.err}`);
    assert.is(r.err, expected, args.join(' '));
  }
});

test('uninstall and snapshot name the source and its database field when the SQLite file does not exist (and do not create it)', async () => {
  const missing = path.join(dir, 'typo.db');
  const file = writeTopology([{ name: 'app', database: `{ dialect: sqlite, file: ./typo.db }` }]);
  for (const args of [
    ['uninstall', file],
    ['snapshot', file, 'app', 'ledger'],
  ]) {
    const r = await sluice(args);
    assert.is(r.code, 2, r.err);
    assert.ok(
      r.err.startsWith(
        `${file}:${at(file, './typo.db')}: capture[0].database.file: capture source "app": cannot open ${missing}: `,
      ),
      r.err,
    );
    assert.not.ok(fs.existsSync(missing), `${args[0]} created ${missing}`);
  }
});

for (const dialect of DIALECTS) {
  test(`${dialect}: snapshot names the table's field for a table not installed, not captured or no longer there`, async () => {
    const app = await createAppDb(dialect);
    try {
      await app.exec(LEDGER_DDL[dialect]);
      const file = writeTopology([{ name: 'app', database: databaseOf(app) }]);
      const tableAt = `${file}:${at(file, '- { table: ledger', 'ledger')}`;
      // Capture never installed: the load table is missing.
      let r = await sluice(['snapshot', file, 'app', 'ledger']);
      assert.is(r.code, 2, r.err);
      const missing =
        dialect === 'sqlite'
          ? 'no such table: sluice_staging_loads'
          : `relation "${(app.ref as { captureSchema: string }).captureSchema}.sluice_staging_loads" does not exist`;
      assert.is(
        r.err,
        `${tableAt}: capture[0].tables[0].table: capture source "app": table "ledger": snapshot (requesting the initial load) failed: ${missing}; capture is not installed (or installed by a version without initial loads): run sluice install ${file}\n`,
      );
      assert.is((await sluice(['install', file])).code, 0);
      // A table the source does not capture.
      r = await sluice(['snapshot', file, 'app', 'ledgr']);
      assert.is(r.code, 2, r.err);
      assert.is(
        r.err,
        `${file}:${at(file, '- { table: ledger', '-')}: capture[0].tables: capture source "app": table "ledgr" is not captured by this source (captured: ledger)\n`,
      );
      // The table dropped after install.
      await app.exec('DROP TABLE ledger');
      r = await sluice(['snapshot', file, 'app', 'ledger']);
      assert.is(r.code, 2, r.err);
      assert.is(
        r.err,
        `${tableAt}: capture[0].tables[0].table: capture source "app": capture table "ledger": table not found (no columns introspected)\n`,
      );
    } finally {
      await app.destroy();
    }
  });
}

test('sqlite: uninstall that cannot take the write lock names the source, what it was dropping and the driver message', async () => {
  const app = await createAppDb('sqlite');
  try {
    await app.exec(LEDGER_DDL.sqlite);
    const dbFile = (app.ref as { file: string }).file;
    const file = writeTopology([
      {
        name: 'app',
        database: `{ dialect: sqlite, file: ${JSON.stringify(dbFile)}, busyTimeoutMs: 200 }`,
      },
    ]);
    assert.is((await sluice(['install', file])).code, 0);
    const writer = new Database(dbFile);
    writer.exec('BEGIN IMMEDIATE');
    const r = await sluice(['uninstall', file, '--keep-staging']).finally(() => {
      writer.exec('ROLLBACK');
      writer.close();
    });
    assert.is(r.code, 2, r.err);
    assert.is(
      r.err,
      `${file}:${at(file, '- name: app', 'app')}: capture[0].name: capture source "app": uninstall (dropping its triggers of "ledger") failed: database is locked\n`,
    );
    assert.not.match(r.out, 'uninstalled');
  } finally {
    await app.destroy();
  }
});

test('uninstall --force over two sources: the second unreachable is named with the first already uninstalled', async () => {
  const app = await createAppDb('sqlite');
  try {
    await app.exec(LEDGER_DDL.sqlite);
    const port = await closedPort();
    const url = `postgres://postgres@127.0.0.1:${port}/test`;
    const sqliteOnly = writeTopology([{ name: 'app', database: databaseOf(app) }]);
    assert.is((await sluice(['install', sqliteOnly])).code, 0);
    const file = writeTopology([
      { name: 'app', database: databaseOf(app) },
      {
        name: 'shop',
        database: `{ dialect: postgres, url: "${url}" }`,
        tables: ['      - { table: orders, operations: [insert], target: changes2 }'],
      },
    ]);
    const r = await sluice(['uninstall', file, '--force']);
    assert.is(r.code, 2, r.err);
    assert.is(
      r.err,
      `${file}:${at(file, `"${url}"`, '"postgres:')}: capture[1].database.url: capture source "shop": cannot connect to ${url}: connect ECONNREFUSED 127.0.0.1:${port} (capture "app" was uninstalled before this failure)\n`,
    );
    const triggers = await app.query<{ n: number }>(
      `SELECT count(*) AS n FROM sqlite_master WHERE type = 'trigger'`,
    );
    assert.is(triggers[0]!.n, 0);
  } finally {
    await app.destroy();
  }
});

test.run();
