/**
 * `sluice snapshot` as a user runs it on a running topology: its final line counts the rows
 * delivered as read events and the rows skipped, with why (a row the target refuses; a row of a
 * key held by a refused change), on SQLite and PostgreSQL.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';
import {
  openStaging,
  readLoadProgress,
  upgradeLoadTable,
  type StagingClient,
} from '../engine/cdc/index.js';
import { createAppDb, DIALECTS, LEDGER_DDL, sleepMs, sourceFor } from './cdc-helpers.js';
import { sluice } from './lib/cli.js';

const cli = new URL('../cli/sluice.js', import.meta.url).pathname;

/** Starts `sluice run` and resolves once it says it is up; stop() sends SIGTERM and waits. */
async function runUp(file: string): Promise<{ stop: () => Promise<string> }> {
  const child = spawn(process.execPath, [cli, 'run', file, '--status-ms', '0'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let err = '';
  const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()));
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`run not up in 30 s: ${err}`)), 30_000);
    child.stderr.on('data', (b) => {
      err += b;
      if (err.includes('is up')) {
        clearTimeout(timer);
        resolve();
      }
    });
  });
  return {
    stop: async () => {
      child.kill('SIGTERM');
      await exited;
      return err;
    },
  };
}

for (const dialect of DIALECTS) {
  test(`${dialect}: snapshot's final line counts the rows delivered and skipped, and why each was skipped`, async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-snapshot-'));
    const app = await createAppDb(dialect, 'sluice_snapshot_');
    let run: { stop: () => Promise<string> } | null = null;
    try {
      await app.exec(LEDGER_DDL[dialect]);
      const big = dialect === 'postgres' ? `repeat('x', 10000)` : `printf('%.*c', 10000, 'x')`;
      // Row 2 is larger than recordBytesMax: its read event is refused by the target.
      await app.exec(
        `INSERT INTO ledger(id, holder) VALUES (1, 'a'); INSERT INTO ledger(id, memo) VALUES (2, ${big}); INSERT INTO ledger(id, holder) VALUES (3, 'c')`,
      );
      const file = path.join(dir, 'topology.yaml');
      fs.writeFileSync(
        file,
        [
          'name: snap',
          'dataDir: ./data',
          'queues:',
          '  - { name: changes }',
          'capture:',
          '  - name: app',
          `    database: ${JSON.stringify(app.ref)}`,
          '    recordBytesMax: 4000',
          '    errors: { retriesImmediate: 0, attemptsMax: 1 }',
          '    tables:',
          '      - { table: ledger, operations: [insert, update, delete], target: changes }',
          '',
        ].join('\n'),
      );
      assert.is((await sluice(['install', file])).code, 0);
      // Row 4's insert is refused and parked: its key is held, so the load skips its row.
      await app.exec(`INSERT INTO ledger(id, memo) VALUES (4, ${big})`);
      run = await runUp(file);
      const deadline = Date.now() + 30_000;
      while (!(await sluice(['errors', 'list', file])).out.startsWith('app: 1 parked change')) {
        if (Date.now() > deadline) throw new Error('row 4 was not parked in 30 s');
        await sleepMs(200);
      }
      const r = await sluice(['snapshot', file, 'app', 'ledger']);
      assert.is(r.code, 0, r.err);
      const lines = r.out.trim().split('\n');
      assert.is(lines[0], 'snapshot of "ledger" requested: 4 rows, 1 pump');
      assert.match(
        lines[1]!,
        new RegExp(
          '^snapshot of "ledger" done: 2 rows delivered as read events, 2 skipped ' +
            '\\(1 refused by the target \\(larger than recordBytesMax\\): not delivered and not parked; raise recordBytesMax and run sluice snapshot again; ' +
            '1 of a key held by a refused change \\(waiting for a retry or parked\\): that change carries the row when it is delivered\\), ' +
            'in \\d+\\.\\d s \\(\\d+ rows/s\\)$',
        ),
      );
      await run.stop();
      run = null;
      const tail = await sluice(['tail', file, 'changes', '--from-start', '-n', '100']);
      assert.is(tail.code, 0, tail.err);
      const reads = tail.out
        .trim()
        .split('\n')
        .map((l) => (JSON.parse(l) as { value: { op: string; key: string } }).value)
        .filter((v) => v.op === 'read')
        .map((v) => v.key);
      assert.equal(reads, ['["1"]', '["3"]']);
    } finally {
      await run?.stop();
      await app.destroy();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
}

for (const dialect of DIALECTS) {
  test(`${dialect}: a load table of the version before the skipped counts gets them, 0 in its rows`, async () => {
    const app = await createAppDb(dialect, 'sluice_snapshot_');
    let staging: StagingClient | null = null;
    try {
      await app.exec(LEDGER_DDL[dialect]);
      staging = await openStaging(sourceFor(app, [{}]));
      await staging.install();
      const loads = staging.load!.loadTable;
      const big = dialect === 'sqlite' ? 'INTEGER' : 'BIGINT';
      await app.exec(`DROP TABLE IF EXISTS ${loads}`);
      await app.exec(`CREATE TABLE ${loads} (
        table_name TEXT NOT NULL, pump ${big} NOT NULL, pumps ${big} NOT NULL, generation ${big} NOT NULL,
        cursor_key TEXT, done ${big} NOT NULL DEFAULT 0, scanned ${big} NOT NULL DEFAULT 0,
        emitted ${big} NOT NULL DEFAULT 0, total ${big} NOT NULL DEFAULT 0, updated_ms ${big} NOT NULL,
        PRIMARY KEY (table_name, pump))`);
      await app.exec(
        `INSERT INTO ${loads} (table_name, pump, pumps, generation, done, scanned, emitted, total, updated_ms) VALUES ('ledger', 0, 1, 1, 1, 5, 5, 5, 1)`,
      );
      await upgradeLoadTable(staging);
      await upgradeLoadTable(staging); // idempotent
      const [p] = await readLoadProgress(staging);
      assert.equal([p!.emitted, p!.skippedHeld, p!.skippedRefused], [5, 0, 0]);
    } finally {
      await staging?.close();
      await app.destroy();
    }
  });
}

test.run();
