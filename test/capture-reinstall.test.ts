/**
 * Capture installed again while the target keeps the earlier installation's records: the
 * recreated staging table counts its ids from 1 again, so the earlier records carry the same
 * staging ids as the new, never-shipped changes. A pump's start reconciles against the records
 * of the current installation only (engine/cdc/staging.ts "Installation id"), so nothing new is
 * deleted as "already shipped".
 *
 * Per dialect: capture and ship a first set of changes into a journal queue; uninstall with the
 * staging tables, drop and recreate the application table, install again; write new changes; a
 * run with SLUICE_FAULT=after-append SIGKILLs the engine right after a pump's first append,
 * before the staging delete (case C2); the restart must ship every new change exactly once and
 * leave staging empty. SQLite, PostgreSQL and MariaDB.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { openStaging } from '../engine/cdc/index.js';
import { Tailer } from '../engine/journal/index.js';
import { EnvelopeView, decodeChange } from '../engine/codec/index.js';
import { createAppDb, LEDGER_DDL, DIALECTS } from './cdc-helpers.js';

const child = new URL('./capture-e2e.child.js', import.meta.url).pathname;
const PUMPS = 2;
/** Changes of each installation: inserts of ids [base, base + ROWS), then one update of each. */
const ROWS = 12;

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

/** Every change in the queue's partitions, as `op:memo-or-holder` tags with their counts. */
function queueTags(dir: string): { tags: Map<string, number>; records: number } {
  const view = new EnvelopeView();
  const tags = new Map<string, number>();
  let records = 0;
  for (let p = 0; p < PUMPS; p++) {
    const t = Tailer.open({ dir: path.join(dir, 'data/queues/ledger-changes', String(p)) });
    try {
      for (let r = t.next(); r; r = t.next()) {
        view.wrap(r.bytes, 0, r.bytes.length);
        const c = decodeChange(view.payload);
        const after = JSON.parse(c.after ?? '{}') as Record<string, string | null>;
        const tag = `${c.op}:${after.memo ?? after.holder}`;
        tags.set(tag, (tags.get(tag) ?? 0) + 1);
        records++;
      }
    } finally {
      t.close();
    }
  }
  return { tags, records };
}

/** Inserts ROWS rows from id `base` (holder `<gen>-h<id>`), then updates each (memo `<gen>-m<id>`). */
async function writeChanges(
  app: Awaited<ReturnType<typeof createAppDb>>,
  gen: string,
  base: number,
): Promise<string[]> {
  const tags: string[] = [];
  for (let id = base; id < base + ROWS; id++) {
    await app.exec(`INSERT INTO ledger(id, holder) VALUES (${id}, '${gen}-h${id}')`);
    tags.push(`insert:${gen}-h${id}`);
  }
  for (let id = base; id < base + ROWS; id++) {
    await app.exec(`UPDATE ledger SET memo = '${gen}-m${id}' WHERE id = ${id}`);
    tags.push(`update:${gen}-m${id}`);
  }
  return tags;
}

for (const dialect of [...DIALECTS, 'mariadb'] as const) {
  test(`${dialect}: capture installed again over a queue holding the earlier installation's records: a crash after append loses nothing new`, async () => {
    const app = await createAppDb(dialect, 'h_epoch_');
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-epoch-'));
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
          'name: epoch',
          'dataDir: ./data',
          'supervisor: { backoffInitialMs: 10 }',
          'queues:',
          `  - { name: ledger-changes, partitions: ${PUMPS} }`,
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
      const source = loadTopology(file).capture[0]!;

      // The first installation: its changes shipped, nothing left staged.
      let staging = await openStaging(source);
      await staging.install();
      const first = await writeChanges(app, 'old', 1);
      await staging.close();
      const r1 = await runChild(file, false);
      assert.is(r1.code, 0, r1.out);
      assert.is(queueTags(dir).records, first.length);

      // Capture removed with its staging tables, the application table recreated, capture
      // installed again: staging ids start at 1 again, the queue keeps the old records.
      staging = await openStaging(source);
      await staging.uninstall({ dropStaging: true });
      await app.exec('DROP TABLE ledger');
      await app.exec(LEDGER_DDL[dialect]);
      await staging.install();
      const second = await writeChanges(app, 'new', 1);
      assert.is(await staging.stagedCount(), second.length);
      await staging.close();

      // Dies by SIGKILL right after a pump's first append, before the staging delete.
      const r2 = await runChild(file, true);
      assert.is(
        r2.signal,
        'SIGKILL',
        `the faulty run was expected to die after an append:\n${r2.out}`,
      );
      const r3 = await runChild(file, false);
      assert.is(r3.code, 0, r3.out);

      const { tags, records } = queueTags(dir);
      const missing = [...first, ...second].filter((t) => !tags.has(t));
      assert.equal(missing, [], `changes never shipped (deleted from staging unshipped)`);
      for (const t of [...first, ...second])
        assert.is(tags.get(t), 1, `change ${t} is in the queue ${tags.get(t)} times`);
      assert.is(records, first.length + second.length);
      staging = await openStaging(source);
      assert.is(await staging.stagedCount(), 0);
      await staging.uninstall({ dropStaging: true });
      await staging.close();
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
      await app.destroy();
    }
  });
}

test.run();
