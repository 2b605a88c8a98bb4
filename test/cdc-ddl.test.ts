/**
 * Schema changes of a captured table (issue item 9) with capture installed: adding, dropping and
 * renaming a column never makes the application's own statements fail. PostgreSQL: new columns
 * are captured for tables that capture all columns, a dropped column leaves the images, a renamed
 * one appears under its new name. SQLite: what SQLite itself allows (see README).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { openStaging } from '../engine/cdc/index.js';
import type { CaptureTable, StagingClient } from '../engine/cdc/index.js';
import { checkCaptureLive, type Topology } from '../index.js';
import { createAppDb, drain, LEDGER_DDL, sourceFor, view } from './cdc-helpers.js';
import type { AppDb, Dialect } from './cdc-helpers.js';

async function withLedger(
  dialect: Dialect,
  table: Partial<CaptureTable>,
  body: (app: AppDb, staging: StagingClient) => Promise<void>,
): Promise<void> {
  const app = await createAppDb(dialect);
  let staging: StagingClient | null = null;
  try {
    await app.exec(LEDGER_DDL[dialect]);
    staging = await openStaging(sourceFor(app, [table]));
    await staging.install();
    await body(app, staging);
  } finally {
    if (staging) await staging.close();
    await app.destroy();
  }
}

test('postgres: ADD, DROP and RENAME COLUMN with capture installed: every application statement runs, images follow the table', async () => {
  await withLedger('postgres', {}, async (app, staging) => {
    await app.exec(`INSERT INTO ledger(id, holder, memo) VALUES (1, 'ann', 'm')`);
    await app.exec(`ALTER TABLE ledger ADD COLUMN note text`);
    await app.exec(`INSERT INTO ledger(id, holder, note) VALUES (2, 'bob', 'new column')`);
    await app.exec(`ALTER TABLE ledger DROP COLUMN memo`);
    await app.exec(`INSERT INTO ledger(id, holder) VALUES (3, 'cy')`);
    await app.exec(`UPDATE ledger SET holder = 'ann2' WHERE id = 1`);
    await app.exec(`ALTER TABLE ledger RENAME COLUMN holder TO owner`);
    await app.exec(`UPDATE ledger SET owner = 'bob2' WHERE id = 2`);
    await app.exec(`UPDATE ledger SET owner = 'bob2' WHERE id = 2`); // no-op: still suppressed
    await app.exec(`DELETE FROM ledger WHERE id = 3`);
    const rows = (await drain(staging)).map(view);
    const base = { amount: null, booked: null, booked_tz: null };
    assert.equal(rows, [
      {
        table: 'ledger',
        op: 'insert',
        key: ['1'],
        before: null,
        after: { id: '1', holder: 'ann', memo: 'm', ...base },
      },
      {
        table: 'ledger',
        op: 'insert',
        key: ['2'],
        before: null,
        after: { id: '2', holder: 'bob', memo: null, ...base, note: 'new column' },
      },
      {
        table: 'ledger',
        op: 'insert',
        key: ['3'],
        before: null,
        after: { id: '3', holder: 'cy', ...base, note: null },
      },
      {
        table: 'ledger',
        op: 'update',
        key: ['1'],
        before: { id: '1', holder: 'ann', ...base, note: null },
        after: { id: '1', holder: 'ann2', ...base, note: null },
      },
      {
        table: 'ledger',
        op: 'update',
        key: ['2'],
        before: { id: '2', owner: 'bob', ...base, note: 'new column' },
        after: { id: '2', owner: 'bob2', ...base, note: 'new column' },
      },
      {
        table: 'ledger',
        op: 'delete',
        key: ['3'],
        before: { id: '3', owner: 'cy', ...base, note: null },
        after: null,
      },
    ]);
    const topology = { capture: [staging.source] } as unknown as Topology;
    const where = 'capture source "test": table "ledger"';
    // "owner" and "note" are in the images above already: no warning says they are not captured.
    assert.equal(await checkCaptureLive(topology), [
      `${where}: column "holder" is captured by the installed triggers but the table no longer has it (dropped or renamed; run sluice install)`,
      `${where}: column "memo" is captured by the installed triggers but the table no longer has it (dropped or renamed; run sluice install)`,
    ]);
    // install regenerates the fast path from the table as it is now.
    await staging.install();
    assert.equal(await checkCaptureLive(topology), []);
    await app.exec(`INSERT INTO ledger(id, owner) VALUES (4, 'dee')`);
    assert.equal((await drain(staging)).map(view)[0]!.after, {
      id: '4',
      owner: 'dee',
      ...base,
      note: null,
    });
  });
});

test('postgres: a table with listed columns keeps capturing after one of them is dropped; the others stay exact', async () => {
  await withLedger('postgres', { columns: ['holder', 'amount'] }, async (app, staging) => {
    await app.exec(`ALTER TABLE ledger DROP COLUMN holder`);
    await app.exec(`INSERT INTO ledger(id, amount) VALUES (9007199254740993, 999999999999.999998)`);
    assert.equal((await drain(staging)).map(view), [
      {
        table: 'ledger',
        op: 'insert',
        key: ['9007199254740993'],
        before: null,
        after: { amount: '999999999999.999998' },
      },
    ]);
  });
});

test("sqlite: ADD and RENAME COLUMN run and capture continues; DROP COLUMN of a captured column is refused by SQLite itself, naming the trigger; the application's writes never fail", async () => {
  await withLedger('sqlite', {}, async (app, staging) => {
    await app.exec(`ALTER TABLE ledger ADD COLUMN note TEXT`);
    await app.exec(`INSERT INTO ledger(id, holder, note) VALUES (1, 'ann', 'n')`);
    await app.exec(`ALTER TABLE ledger RENAME COLUMN holder TO owner`);
    await app.exec(`INSERT INTO ledger(id, owner) VALUES (2, 'bob')`);
    try {
      await app.exec(`ALTER TABLE ledger DROP COLUMN memo`);
      assert.unreachable('SQLite refuses to drop a column a trigger names');
    } catch (err) {
      assert.match(
        (err as Error).message,
        /error in trigger sluice_cdc_sluice_staging_ledger_\w+ after drop column: no such column: (NEW|OLD)\.memo/,
      );
    }
    await app.exec(`UPDATE ledger SET owner = 'ann2' WHERE id = 1`);
    const rows = (await drain(staging)).map(view);
    assert.equal(
      rows.map((r) => [r.op, (r.after as Record<string, unknown>).holder]),
      [
        ['insert', 'ann'],
        ['insert', 'bob'],
        ['update', 'ann2'],
      ],
    );
    const topology = { capture: [staging.source] } as unknown as Topology;
    assert.equal(await checkCaptureLive(topology), [
      'capture source "test": table "ledger": column "holder" is captured by the installed triggers but the table no longer has it (dropped or renamed; run sluice install)',
      'capture source "test": table "ledger": column "owner" is not captured yet (added or renamed since install; the installed triggers name their columns): run sluice install to capture it',
      'capture source "test": table "ledger": column "note" is not captured yet (added or renamed since install; the installed triggers name their columns): run sluice install to capture it',
    ]);
    await staging.install(); // regenerates: the new column and the new name are captured
    assert.equal(await checkCaptureLive(topology), []);
    await app.exec(`INSERT INTO ledger(id, owner, note) VALUES (3, 'cy', 'n3')`);
    const after = (await drain(staging)).map(view)[0]!.after as Record<string, unknown>;
    assert.equal([after.owner, after.note], ['cy', 'n3']);
    await staging.uninstall();
    await app.exec(`ALTER TABLE ledger DROP COLUMN memo`); // fine once the triggers are gone
  });
});

/**
 * ADD COLUMN on a table that captures all columns, then one insert: whether the new column is in
 * the image, and what check --live says about it, per dialect.
 */
async function addColumnCase(
  dialect: Dialect,
  table: Partial<CaptureTable>,
): Promise<{ image: Record<string, unknown>; live: string[]; reinstalled: string[] }> {
  let out: { image: Record<string, unknown>; live: string[]; reinstalled: string[] } | null = null;
  await withLedger(dialect, table, async (app, staging) => {
    await app.exec(`ALTER TABLE ledger ADD COLUMN note ${dialect === 'sqlite' ? 'TEXT' : 'text'}`);
    await app.exec(`INSERT INTO ledger(id, holder, note) VALUES (1, 'ann', 'n1')`);
    const image = (await drain(staging)).map(view)[0]!.after as Record<string, unknown>;
    const topology = { capture: [staging.source] } as unknown as Topology;
    const live = await checkCaptureLive(topology);
    await staging.install();
    out = { image, live, reinstalled: await checkCaptureLive(topology) };
  });
  return out!;
}

const NOT_YET =
  'capture source "test": table "ledger": column "note" is not captured yet (added or renamed since install; the installed triggers name their columns): run sluice install to capture it';

test('postgres: check --live after ADD COLUMN on a table capturing all columns warns of nothing: the column is captured at once', async () => {
  const r = await addColumnCase('postgres', {});
  assert.is(r.image.note, 'n1');
  assert.equal(r.live, []);
  assert.equal(r.reinstalled, []);
});

test('postgres: ADD COLUMN on a table with listed columns: not captured, and check --live does not ask for it', async () => {
  const r = await addColumnCase('postgres', { columns: ['holder'] });
  assert.is(r.image.note, undefined);
  assert.equal(r.live, []);
});

for (const dialect of ['sqlite', 'mariadb'] as const) {
  test(`${dialect}: check --live after ADD COLUMN says the column is captured once sluice install regenerates the triggers`, async () => {
    const r = await addColumnCase(dialect, {});
    assert.is(r.image.note, undefined);
    assert.equal(r.live, [NOT_YET]);
    assert.equal(r.reinstalled, []);
  });
}

test.run();
