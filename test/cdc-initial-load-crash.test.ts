/**
 * Initial load survives kill -9 at random moments (issue 10 item 6): a child process runs the
 * topology (two pump actors, the journal as target) while the parent writes to the loaded rows;
 * the parent SIGKILLs the child five times (three in npm test), each once the load reached a random fraction of the
 * table, then lets a last
 * run finish it. The consumer's table, rebuilt from the journal's events, equals the database's,
 * and every staged change is in the journal exactly once. SQLite, PostgreSQL and MariaDB.
 * Rows: SLUICE_LOAD_CRASH_ROWS (default 20,000; MariaDB 10,000).
 * test-timeout-s: 600 (three databases, five kills each)
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { installCapture, loadTopology } from 'sluice';
import { openStaging, readLoadProgress } from '../engine/cdc/index.js';
import { createAppDb, sleepMs, type AppDb, type Dialect } from './cdc-helpers.js';
import { ITEMS_DDL, fillItems, itemsInDb, applyEvents, readAll } from './initial-load-helpers.js';
import { longOr } from './lib/long.js';

const child = new URL('./initial-load.child.js', import.meta.url).pathname;
/** npm test: 3; npm run test:long: 5 (test/lib/long.ts). */
const KILLS = longOr(5, 3);
const PUMPS = 2;
const rowsFor = (d: Dialect) =>
  Number(process.env.SLUICE_LOAD_CRASH_ROWS ?? (d === 'mariadb' ? 10_000 : 20_000));

/**
 * Runs the child; once it printed "up", polls `killNow` every 10 ms and kills the child with
 * SIGKILL when it answers true (null: let it finish). The child may also finish by itself first.
 */
function runChild(
  file: string,
  killNow: (() => Promise<boolean>) | null,
): Promise<{ code: number | null; signal: string | null; out: string }> {
  return new Promise((resolve) => {
    const env = { ...process.env };
    delete env.SLUICE_FAULT;
    const p = spawn(process.execPath, [child, file], { stdio: ['ignore', 'pipe', 'pipe'], env });
    let out = '';
    let exited = false;
    let polling = false;
    p.stdout.on('data', (b: Buffer) => {
      out += b;
      if (killNow === null || polling || !out.includes('up\n')) return;
      polling = true;
      const poll = async (): Promise<void> => {
        if (exited) return;
        if (await killNow().catch(() => false)) p.kill('SIGKILL');
        else setTimeout(() => void poll(), 10);
      };
      void poll();
    });
    p.stderr.on('data', (b) => (out += b));
    p.on('exit', (code, signal) => {
      exited = true;
      resolve({ code, signal, out });
    });
  });
}

async function writer(app: AppDb, rows: number, stop: { now: boolean }): Promise<number> {
  let n = 0;
  while (!stop.now) {
    const id = 1 + Math.floor(Math.random() * rows);
    const k = Math.random();
    if (k < 0.9) await app.exec(`UPDATE items SET n = n + 1, note = 'c${n}' WHERE id = ${id}`);
    else if (k < 0.95) await app.exec(`DELETE FROM items WHERE id = ${id}`);
    else await app.exec(`INSERT INTO items (id, n, note) VALUES (${rows + 1 + n}, 0, 'new')`);
    n++;
    await sleepMs(app.dialect === 'sqlite' ? 2 : 0);
  }
  return n;
}

for (const dialect of (process.env.INITLOAD_DIALECTS?.split(',') ?? [
  'sqlite',
  'postgres',
  'mariadb',
]) as Dialect[]) {
  test(`${dialect}: initial load, kill -9 of the loading process ${KILLS} times at random moments, resumed: the consumer's table equals the database's`, async () => {
    const rows = rowsFor(dialect);
    const app = await createAppDb(dialect, 'initload_');
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'initload-crash-'));
    const w = await app.connect();
    const stop = { now: false };
    let writing: Promise<number> | null = null;
    try {
      await app.exec(ITEMS_DDL[dialect]);
      await fillItems(app, rows);
      const ref = app.ref;
      const db =
        ref.dialect === 'sqlite'
          ? `{ dialect: sqlite, file: "${ref.file}" }`
          : ref.dialect === 'postgres'
            ? `{ dialect: postgres, url: "${ref.url}", schema: ${ref.schema}, captureSchema: ${ref.captureSchema} }`
            : `{ dialect: mariadb, url: "${ref.url}", captureSchema: ${ref.captureSchema} }`;
      const file = path.join(dir, 'topology.yaml');
      fs.writeFileSync(
        file,
        [
          'name: initload',
          'dataDir: ./data',
          'supervisor: { backoffInitialMs: 10 }',
          'queues:',
          `  - { name: items, partitions: ${PUMPS} }`,
          'capture:',
          '  - name: app',
          `    database: ${db}`,
          `    pumps: ${PUMPS}`,
          '    tables:',
          '      - { table: items, operations: [insert, update, delete], target: items, initialLoad: true }',
          '',
        ].join('\n'),
      );
      const topology = loadTopology(file);
      await installCapture(topology);
      const staging = await openStaging(topology.capture[0]!);
      writing = writer(w, rows, stop);
      let killedDuringLoad = 0;
      for (let i = 0; i < KILLS; i++) {
        // Killed once the load has got to a random fraction of the table (or at once when a
        // pump's load is done): the kills land during the load however fast this machine is.
        const target = Math.random() * 0.9;
        const r = await runChild(file, async () => {
          const p = await readLoadProgress(staging);
          if (p.length === 0) return false;
          const share = (x: (typeof p)[number]) =>
            x.done ? 1 : x.total > 0 ? x.scanned / x.total : 0;
          return p.some((x) => x.done) || p.reduce((a, x) => a + share(x), 0) / p.length >= target;
        });
        assert.ok(r.signal === 'SIGKILL' || r.code === 0, `run ${i}: exit ${r.code}:\n${r.out}`);
        const progress = await readLoadProgress(staging);
        if (r.signal === 'SIGKILL' && !progress.every((p) => p.done)) killedDuringLoad++;
      }
      stop.now = true;
      const written = await writing;
      const final = await runChild(file, null);
      assert.is(final.code, 0, final.out);
      assert.ok(
        killedDuringLoad >= 3,
        `only ${killedDuringLoad} of ${KILLS} kills came during the load`,
      );
      await staging.close();

      const table = new Map<string, unknown>();
      const reads = new Map<string, number>();
      const ids = new Map<string, number>();
      for (let p = 0; p < PUMPS; p++) {
        const events = readAll(path.join(dir, 'data/queues/items', String(p)));
        for (const e of events)
          if (e.op !== 'read') ids.set(e.stagingId, (ids.get(e.stagingId) ?? 0) + 1);
        applyEvents(table, events, reads);
      }
      for (const [id, n] of ids) assert.is(n, 1, `staging id ${id} is in the journal ${n} times`);
      const dbRows = await itemsInDb(app);
      assert.is(table.size, dbRows.size, 'rows in the consumer vs the database');
      for (const [k, v] of dbRows) assert.equal(table.get(k), v, `row ${k}`);
      const again = [...reads.values()].filter((n) => n > 1).length;
      console.log(
        `  ${dialect}: ${rows} rows, ${KILLS} kills (${killedDuringLoad} during the load), ${written} writes, ${ids.size} changes, ${[...reads.values()].reduce((a, b) => a + b, 0)} read events (${again} keys read again after a kill)`,
      );
    } finally {
      // The writer stops before its connection closes (else a failed assertion above surfaces as
      // the writer's "connection is not open" instead of its own message).
      stop.now = true;
      await writing?.catch(() => undefined);
      await w.close().catch(() => undefined);
      if (process.env.INITLOAD_KEEP) console.log(`kept ${dir}`);
      else fs.rmSync(dir, { recursive: true, force: true });
      await app.destroy();
    }
  });
}

test.run();
