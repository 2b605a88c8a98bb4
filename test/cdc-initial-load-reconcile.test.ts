/**
 * Crash between append and ack in a cycle of an initial load, deterministically (the sequence
 * cdc-initial-load-crash hit by chance in CI: staging id 572 twice in the journal, PostgreSQL).
 * A load cycle claims the staged changes and reads a chunk in one snapshot, appends the changes,
 * then the chunk's read events, and only then acks: a kill -9 there leaves the changes staged
 * behind 2000 read events. The restarted pump must find them in the journal (its window counts
 * staged changes, not records: engine/cdc/journal-sink.ts) and delete them instead of appending
 * them again. Pump actors in a child process, the journal as target, PostgreSQL.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { installCapture, loadTopology } from 'sluice';
import { openStaging, readLoadProgress } from '../engine/cdc/index.js';
import { createAppDb } from './cdc-helpers.js';
import { ITEMS_DDL, fillItems, itemsInDb, applyEvents, readAll } from './initial-load-helpers.js';

const child = new URL('./initial-load.child.js', import.meta.url).pathname;
/** Two chunks (CDC_DEFAULTS.loadChunkRows 2000): the killed cycle is the first one's. */
const ROWS = 3000;
/** Staged before the pump starts: fewer than batchSizeMax (500), so the cycle reads a chunk. */
const CHANGES = 20;

/** Runs the child to its end; `fault` is its SLUICE_FAULT (null: none). */
function runChild(
  file: string,
  fault: string | null,
): Promise<{ code: number | null; signal: string | null; out: string }> {
  return new Promise((resolve) => {
    const env = { ...process.env };
    if (fault === null) delete env.SLUICE_FAULT;
    else env.SLUICE_FAULT = fault;
    const p = spawn(process.execPath, [child, file], { stdio: ['ignore', 'pipe', 'pipe'], env });
    let out = '';
    p.stdout.on('data', (b: Buffer) => (out += b));
    p.stderr.on('data', (b: Buffer) => (out += b));
    p.on('exit', (code, signal) => resolve({ code, signal, out }));
  });
}

test(`postgres: kill -9 after a load cycle appended ${CHANGES} changes and 2000 read events, before its ack; after restart each change is in the journal once`, async () => {
  const app = await createAppDb('postgres', 'hcdc_');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-load-reconcile-'));
  try {
    await app.exec(ITEMS_DDL.postgres);
    await fillItems(app, ROWS);
    const ref = app.ref;
    assert.ok(ref.dialect === 'postgres');
    const file = path.join(dir, 'topology.yaml');
    fs.writeFileSync(
      file,
      [
        'name: loadreconcile',
        'dataDir: ./data',
        'supervisor: { backoffInitialMs: 10 }',
        'queues:',
        '  - { name: items, partitions: 1 }',
        'capture:',
        '  - name: app',
        `    database: { dialect: postgres, url: "${ref.url}", schema: ${ref.schema}, captureSchema: ${ref.captureSchema} }`,
        '    pumps: 1',
        '    tables:',
        '      - { table: items, operations: [insert, update, delete], target: items, initialLoad: true }',
        '',
      ].join('\n'),
    );
    const topology = loadTopology(file);
    await installCapture(topology);
    // Staged after the load was requested: the pump's first cycle claims them with chunk 1.
    await app.exec(`UPDATE items SET n = n + 1, note = 'changed' WHERE id <= ${CHANGES}`);
    const partition = path.join(dir, 'data/queues/items/0');
    const staging = await openStaging(topology.capture[0]!);
    let restarted: Awaited<ReturnType<typeof runChild>>;
    try {
      const crashed = await runChild(file, 'after-append');
      assert.is(crashed.signal, 'SIGKILL', `killed itself after the append:\n${crashed.out}`);
      const before = readAll(partition);
      assert.is(before.filter((e) => e.op !== 'read').length, CHANGES, 'changes appended');
      assert.is(before.filter((e) => e.op === 'read').length, 2000, 'read events after them');
      assert.is(before.at(-1)!.op, 'read', 'the read events are the last records');
      assert.is(await staging.stagedCount(), CHANGES, 'never acked: still staged');

      restarted = await runChild(file, null);
      assert.is(restarted.code, 0, restarted.out);
      assert.ok(
        (await readLoadProgress(staging)).every((p) => p.done),
        'load done',
      );
    } finally {
      await staging.close();
    }
    const events = readAll(partition);
    const ids = new Map<string, number>();
    for (const e of events)
      if (e.op !== 'read') ids.set(e.stagingId, (ids.get(e.stagingId) ?? 0) + 1);
    for (const [id, n] of ids) assert.is(n, 1, `staging id ${id} is in the journal ${n} times`);
    assert.is(ids.size, CHANGES, 'every change');
    assert.match(
      restarted.out,
      `deleted ${CHANGES} staged changes the target already held`,
      'reconciled at start',
    );
    const table = new Map<string, unknown>();
    applyEvents(table, events, new Map());
    const dbRows = await itemsInDb(app);
    assert.is(table.size, dbRows.size, 'rows in the consumer vs the database');
    for (const [k, v] of dbRows) assert.equal(table.get(k), v, `row ${k}`);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
    await app.destroy();
  }
});

test.run();
