/**
 * Initial load (issue 10 item 6; engine/cdc/initial-load.ts): a table's existing rows are
 * delivered as read events in key chunks while writers update, insert and delete the same rows;
 * a consumer that keeps a table from the events (read/insert/update: the after image; delete:
 * gone) ends equal to the database. Two pumps, each with its own in-memory sink, per dialect.
 * PostgreSQL's writers are the real pgbench running a custom script on the loaded rows.
 *
 * Rows: SLUICE_LOAD_ROWS (default 100,000 on PostgreSQL, 20,000 on SQLite and MariaDB; the
 * 1,000,000-row run is `npm run test:initial-load-1e6`).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn, type ChildProcess } from 'node:child_process';
import { Worker } from 'node:worker_threads';
import {
  openStaging,
  PumpCore,
  installLoads,
  readLoadProgress,
  requestLoad,
  CaptureTableError,
  type StagedChange,
  type StagingClient,
} from '../engine/cdc/index.js';
import {
  createAppDb,
  memorySink,
  sourceFor,
  sleepMs,
  PG_URL,
  type AppDb,
  type Dialect,
  type MemorySink,
} from './cdc-helpers.js';
import { parseTopology, ConfigError } from '../engine/config/index.js';
import { ITEMS_DDL, fillItems, itemsInDb, applyEvents } from './initial-load-helpers.js';

const ROWS_ENV = Number(process.env.SLUICE_LOAD_ROWS ?? 0);
const rowsFor = (d: Dialect) => (ROWS_ENV > 0 ? ROWS_ENV : d === 'postgres' ? 100_000 : 20_000);
const PREFIX = 'initload_';

/** A writer loop over one connection: updates (most), inserts of new ids and deletes. */
function writerLoop(
  app: AppDb,
  rows: number,
  seed: number,
  stop: { now: boolean },
): Promise<number> {
  let x = seed * 7919 + 1;
  const rnd = (n: number) => {
    x = (x * 1103515245 + 12345) % 2147483648;
    return 1 + (x % n);
  };
  return (async () => {
    let n = 0;
    while (!stop.now) {
      const k = rnd(100);
      const id = rnd(rows);
      if (k <= 90)
        await app.exec(
          `UPDATE items SET n = n + ${rnd(9)}, note = 'w${seed}-${n}' WHERE id = ${id}`,
        );
      else if (k <= 95) await app.exec(`DELETE FROM items WHERE id = ${id}`);
      else
        await app.exec(
          `INSERT INTO items (id, n, note) VALUES (${rows + seed * 1_000_000 + n}, 1, 'new')`,
        );
      n++;
    }
    return n;
  })();
}

/** pgbench -c 4 with a TPC-B-like update of the loaded rows (runs until killed). */
function pgbench(app: AppDb, rows: number, dir: string): ChildProcess {
  const script = path.join(dir, 'update.sql');
  fs.writeFileSync(
    script,
    `\\set aid random(1, ${rows})\n\\set delta random(-5000, 5000)\nUPDATE items SET n = n + :delta WHERE id = :aid;\n`,
  );
  const ref = app.ref as { schema: string };
  const u = new URL(PG_URL);
  return spawn(
    'pgbench',
    [
      '-n',
      '-c',
      '4',
      '-j',
      '2',
      '-T',
      '600',
      '-f',
      script,
      '-h',
      u.hostname,
      '-p',
      u.port || '5432',
      '-U',
      u.username || 'postgres',
      u.pathname.slice(1),
    ],
    {
      env: { ...process.env, PGOPTIONS: `-c search_path=${ref.schema}` },
      stdio: 'ignore',
    },
  );
}

async function loadsDone(staging: StagingClient): Promise<boolean> {
  const p = await readLoadProgress(staging);
  return p.length > 0 && p.every((r) => r.done);
}

// INITLOAD_DIALECTS=sqlite,postgres picks dialects (default all three).
for (const dialect of (process.env.INITLOAD_DIALECTS?.split(',') ?? [
  'sqlite',
  'postgres',
  'mariadb',
]) as Dialect[]) {
  test(`${dialect}: initial load of ${rowsFor(dialect)} rows under concurrent writes: the consumer's table equals the database's`, async () => {
    const rows = rowsFor(dialect);
    const app = await createAppDb(dialect, PREFIX);
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), `${PREFIX}`));
    const clients: StagingClient[] = [];
    const writers: AppDb[] = [];
    let bench: ChildProcess | null = null;
    try {
      await app.exec(ITEMS_DDL[dialect]);
      await fillItems(app, rows);
      const source = sourceFor(app, [{ table: 'items', initialLoad: true, target: 'items' }], {
        pumps: 2,
        batchSizeMax: 500,
      });
      const admin = await openStaging(source);
      clients.push(admin);
      await admin.install();
      assert.equal(await installLoads(admin), ['items']);
      // A second install does not request it again.
      assert.equal(await installLoads(admin), []);

      const stop = { now: false };
      const writing: Promise<number>[] = [];
      const stopFlag = new SharedArrayBuffer(4);
      if (dialect === 'postgres') bench = pgbench(app, rows, dir);
      else if (dialect === 'sqlite') {
        const file = (app.ref as { file: string }).file;
        const worker = new Worker(new URL('./initial-load-writer.worker.js', import.meta.url), {
          workerData: { file, rows, seed: 1, stop: stopFlag },
        });
        writing.push(
          new Promise((resolve, reject) => {
            worker.on('message', (m: { writes: number }) => resolve(m.writes));
            worker.on('error', reject);
          }),
        );
      } else {
        for (let w = 0; w < 3; w++) {
          const c = await app.connect();
          writers.push(c);
          writing.push(writerLoop(c, rows, w + 1, stop));
        }
      }
      const sinks: MemorySink[] = [];
      const cores: PumpCore[] = [];
      for (let pump = 0; pump < 2; pump++) {
        const s = await openStaging(source);
        clients.push(s);
        const sink = memorySink();
        sinks.push(sink);
        const core = new PumpCore({ staging: s, sink, pump, pumps: 2, batchSizeMax: 500 });
        await core.start();
        cores.push(core);
      }
      const pumping = { now: true };
      const loops = cores.map(async (core) => {
        while (pumping.now) if ((await core.runCycle()) === 0) await sleepMs(5);
      });
      const t0 = Date.now();
      while (!(await loadsDone(admin))) await sleepMs(100);
      const loadMs = Date.now() - t0;
      // Writes go on a little after the load, then stop; the pumps drain.
      await sleepMs(300);
      stop.now = true;
      Atomics.store(new Int32Array(stopFlag), 0, 1);
      if (bench) bench.kill('SIGTERM');
      const written = (await Promise.all(writing)).reduce((a, b) => a + b, 0);
      if (bench) await new Promise((r) => bench!.once('exit', r));
      while ((await admin.stagedCount()) > 0) await sleepMs(20);
      pumping.now = false;
      await Promise.all(loops);

      const table = new Map<string, unknown>();
      const reads = new Map<string, number>();
      for (const sink of sinks) applyEvents(table, sink.changes, reads);
      const db = await itemsInDb(app);
      assert.is(table.size, db.size, 'rows in the consumer vs the database');
      for (const [k, v] of db) assert.equal(table.get(k), v, `row ${k}`);
      const loaded = cores.reduce((a, c) => a + c.stats.loaded, 0);
      const changes = sinks.reduce(
        (a, s) => a + s.changes.filter((c: StagedChange) => c.op !== 'read').length,
        0,
      );
      for (const [k, n] of reads) assert.is(n, 1, `key ${k} read ${n} times`);
      // Rows inserted during the load past the cursor are read too; rows changed before their chunk is read still are.
      assert.ok(
        loaded > rows * 0.5 && loaded <= rows + written,
        `read events ${loaded} of ${rows} rows`,
      );
      assert.ok(changes > 0, 'live changes were shipped during the load');
      const progress = await readLoadProgress(admin);
      assert.is(
        progress.reduce((a, p) => a + p.emitted, 0),
        loaded,
      );
      for (const p of progress)
        assert.ok(p.done && p.scanned >= rows * 0.9, `pump ${p.pump} scanned ${p.scanned} rows`);
      console.log(
        `  ${dialect}: ${rows} rows loaded in ${loadMs} ms (${Math.round(rows / (loadMs / 1000))} rows/s), ${loaded} read events, ${changes} live changes${written ? ` (${written} writes)` : ''}`,
      );
    } finally {
      if (bench && bench.exitCode === null) bench.kill('SIGKILL');
      for (const w of writers) await w.close().catch(() => undefined);
      for (const c of clients) await c.close().catch(() => undefined);
      fs.rmSync(dir, { recursive: true, force: true });
      await app.destroy();
    }
  });
}

test('sqlite: initialLoad of a table without a primary key is refused at field initialLoad; a unique NOT NULL key is used', async () => {
  const app = await createAppDb('sqlite', PREFIX);
  try {
    await app.exec('CREATE TABLE bare (code TEXT, n INTEGER)');
    await app.exec('CREATE TABLE coded (code TEXT NOT NULL UNIQUE, n INTEGER)');
    await app.exec(`INSERT INTO coded VALUES ('b', 2), ('a', 1), ('c', 3)`);
    const bare = await openStaging(
      sourceFor(app, [{ table: 'bare', key: ['code'], initialLoad: true, target: 'x' }]),
    );
    try {
      await bare.install();
      const err = await installLoads(bare).catch((e: unknown) => e);
      assert.instance(err, CaptureTableError);
      assert.is((err as CaptureTableError).field, 'initialLoad');
      assert.match((err as Error).message, 'initialLoad: the table has no primary key');
    } finally {
      await bare.close();
    }
    const source = sourceFor(app, [
      { table: 'coded', key: ['code'], initialLoad: true, target: 'x' },
    ]);
    const coded = await openStaging(source);
    try {
      await coded.install();
      assert.equal(await installLoads(coded), ['coded']);
      const sink = memorySink();
      const core = new PumpCore({
        staging: coded,
        sink,
        pump: 0,
        pumps: 1,
        batchSizeMax: 10,
        loadChunkRows: 2,
      });
      await core.start();
      while (!(await loadsDone(coded))) await core.runCycle();
      assert.equal(
        sink.changes.map((c) => [c.op, c.key]),
        [
          ['read', '["a"]'],
          ['read', '["b"]'],
          ['read', '["c"]'],
        ],
      );
      // sluice snapshot: a new request starts over.
      assert.is(await requestLoad(coded, 'coded'), 3);
      while (!(await loadsDone(coded))) await core.runCycle();
      assert.is(sink.changes.length, 6);
    } finally {
      await coded.close();
    }
  } finally {
    await app.destroy();
  }
});

test('initialLoad with key transactionId is refused at load, at the initialLoad field; a non-boolean too', () => {
  const yaml = (extra: string) =>
    [
      'name: t',
      'queues:',
      '  - { name: q }',
      'capture:',
      '  - name: app',
      '    database: { dialect: postgres, url: "postgres://x@127.0.0.1/db" }',
      '    tables:',
      `      - { table: items, operations: [insert], target: q, ${extra} }`,
      '',
    ].join('\n');
  const err = (() => {
    try {
      parseTopology(yaml('key: transactionId, initialLoad: true'), 't.yaml');
    } catch (e) {
      return e;
    }
    return null;
  })();
  assert.instance(err, ConfigError);
  assert.match(
    (err as Error).message,
    /^t\.yaml:8:\d+: capture\[0\]\.tables\[0\]\.initialLoad: needs a key that names the row/m,
  );
  assert.throws(() => parseTopology(yaml('initialLoad: "yes"'), 't.yaml'), /initialLoad/);
  assert.is(
    parseTopology(yaml('initialLoad: true'), 't.yaml').capture[0]!.tables[0]!.initialLoad,
    true,
  );
});

test.run();
