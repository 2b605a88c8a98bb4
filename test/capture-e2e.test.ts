/**
 * Capture end to end through the engine (pump actors, durable queues, a service), with real
 * crashes: SLUICE_FAULT=after-append makes a pump SIGKILL the whole engine process right after it
 * appended a batch to the queue and before it deleted those rows from staging (case C2), with
 * several row events from one statement in flight (case C3). After restarts, every change is in
 * the queue exactly once, in staging-id order per key, and the service saw each exactly once.
 * SQLite, PostgreSQL and MariaDB.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { openStaging } from '../engine/cdc/index.js';
import { Tailer } from '../engine/journal/index.js';
import { EnvelopeView, decodeChange, decodeJson } from '../engine/codec/index.js';
import { createAppDb, LEDGER_DDL, DIALECTS } from './cdc-helpers.js';

const child = new URL('./capture-e2e.child.js', import.meta.url).pathname;
const serviceModule = new URL('./fixtures/services/change-log.js', import.meta.url).pathname;
const PUMPS = 2;

function runChild(
  file: string,
  fault: boolean,
): Promise<{ code: number | null; signal: string | null; out: string }> {
  return new Promise((resolve) => {
    const env = { ...process.env };
    if (fault) env.SLUICE_FAULT = 'after-append';
    else delete env.SLUICE_FAULT;
    const p = spawn(process.execPath, [child, file], { stdio: ['ignore', 'pipe', 'pipe'], env });
    let out = '';
    p.stdout.on('data', (b) => (out += b));
    p.stderr.on('data', (b) => (out += b));
    p.on('exit', (code, signal) => resolve({ code, signal, out }));
  });
}

function readAll(dir: string): Uint8Array[] {
  const t = Tailer.open({ dir });
  const out: Uint8Array[] = [];
  for (let r = t.next(); r; r = t.next()) out.push(new Uint8Array(r.bytes));
  t.close();
  return out;
}

for (const dialect of [...DIALECTS, 'mariadb'] as const) {
  test(`${dialect}: kill -9 between append and staging delete, repeatedly: each change once, per-key order kept`, async () => {
    const app = await createAppDb(dialect);
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-e2e-'));
    try {
      await app.exec(LEDGER_DDL[dialect]);
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
          'name: e2e',
          'dataDir: ./data',
          'supervisor: { backoffInitialMs: 10 }',
          'queues:',
          `  - { name: ledger-changes, partitions: ${PUMPS} }`,
          '  - { name: out }',
          'services:',
          '  - name: change-log',
          `    module: ${serviceModule}`,
          '    inputs: [ledger-changes]',
          '    output: out',
          'capture:',
          '  - name: ledger-db',
          `    database: ${db}`,
          `    pumps: ${PUMPS}`,
          '    batchSizeMax: 4',
          '    pollIntervalMs: 2',
          '    tables:',
          '      - { table: ledger, operations: [insert, update, delete], target: ledger-changes }',
          '',
        ].join('\n'),
      );
      const { loadTopology } = await import('sluice');
      const staging = await openStaging(loadTopology(file).capture[0]);
      await staging.install();
      // C3: one statement, many row events; then several changes of the same keys.
      if (dialect === 'postgres')
        await app.exec(
          `INSERT INTO ledger(id, holder) SELECT g, 'bulk' FROM generate_series(20, 39) g`,
        );
      else if (dialect === 'mariadb')
        await app.exec(`INSERT INTO ledger(id, holder) SELECT seq, 'bulk' FROM seq_20_to_39`);
      else
        await app.exec(
          `WITH RECURSIVE g(x) AS (SELECT 20 UNION ALL SELECT x + 1 FROM g WHERE x < 39) INSERT INTO ledger(id, holder) SELECT x, 'bulk' FROM g`,
        );
      for (let round = 0; round < 3; round++) {
        for (const id of [20, 25, 31])
          await app.exec(`UPDATE ledger SET memo = 'r${round}' WHERE id = ${id}`);
      }
      await app.exec(`DELETE FROM ledger WHERE id = 38`);
      const expected = 20 + 9 + 1;
      assert.is(await staging.stagedCount(), expected);
      await staging.close();

      // Each faulty run ships one batch and dies by SIGKILL before deleting it from staging.
      for (let i = 0; i < 4; i++) {
        const r = await runChild(file, true);
        assert.is(
          r.signal,
          'SIGKILL',
          `run ${i} was expected to die after its first append:\n${r.out}`,
        );
      }
      const final = await runChild(file, false);
      assert.is(final.code, 0, final.out);

      // The queue: every staged change exactly once, in staging-id order per key.
      const view = new EnvelopeView();
      const seen = new Map<string, number>();
      const lastIdOfKey = new Map<string, bigint>();
      for (let p = 0; p < PUMPS; p++) {
        for (const bytes of readAll(path.join(dir, 'data/queues/ledger-changes', String(p)))) {
          view.wrap(bytes, 0, bytes.length);
          const c = decodeChange(view.payload);
          seen.set(c.stagingId, (seen.get(c.stagingId) ?? 0) + 1);
          const id = BigInt(c.stagingId);
          const last = lastIdOfKey.get(c.key);
          assert.ok(
            last === undefined || id > last,
            `key ${c.key}: staging id ${id} after ${last}`,
          );
          lastIdOfKey.set(c.key, id);
        }
      }
      assert.is(seen.size, expected, `distinct changes in the queue`);
      for (const [id, n] of seen)
        assert.is(n, 1, `staging id ${id} appears ${n} times in the queue`);
      // The service saw each change once.
      const outIds = readAll(path.join(dir, 'data/queues/out/0')).map((b) => {
        view.wrap(b, 0, b.length);
        return (decodeJson(view.payload) as { stagingId: string }).stagingId;
      });
      assert.is(outIds.length, expected);
      assert.is(new Set(outIds).size, expected);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
      await app.destroy();
    }
  });
}

test.run();
