/**
 * Several capture schemas capturing one table (PostgreSQL, MariaDB): two sources with different
 * `captureSchema` (the same staging table name) install their own triggers side by side, both
 * stage every insert, update and delete, an uninstall of one leaves the other capturing, and
 * `check --live` reports the table and schema whose triggers are gone. An installation made by
 * the previous version (trigger names without the capture schema: PostgreSQL
 * `sluice_cdc_<staging>_<op>`, MariaDB `sluice_cdc_<staging>_<table>_<op>`) is left alone by
 * another schema's install, replaced by its own schema's install and removed by its uninstall.
 *
 * The tests find each schema's triggers in the catalog the way a person would (PostgreSQL: the
 * trigger's function is in the schema; MariaDB: the trigger's body inserts into the schema's
 * staging table), not through the engine's name functions.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { openStaging } from '../engine/cdc/index.js';
import type { CaptureSource, StagingClient } from '../engine/cdc/index.js';
import { checkCaptureLive, type Topology } from '../index.js';
import { createAppDb, drain, LEDGER_DDL, sourceFor, view } from './cdc-helpers.js';
import type { AppDb } from './cdc-helpers.js';

type Db = 'postgres' | 'mariadb';

/** One capture trigger on `ledger`: its name and the operation it fires on. */
interface Trig {
  name: string;
  op: string;
}

/** The capture triggers on `ledger` that belong to capture schema `cs`, by name. */
async function triggersOf(app: AppDb, cs: string): Promise<Trig[]> {
  if (app.dialect === 'postgres') {
    return app.query<Trig>(
      `SELECT t.tgname::text AS name,
         CASE WHEN t.tgtype & 4 <> 0 THEN 'insert' WHEN t.tgtype & 8 <> 0 THEN 'delete'
              WHEN t.tgtype & 16 <> 0 THEN 'update' ELSE 'truncate' END AS op
       FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid JOIN pg_namespace n ON n.oid = p.pronamespace
       WHERE t.tgrelid = 'ledger'::regclass AND NOT t.tgisinternal AND n.nspname = '${cs}'
       ORDER BY 1`,
    );
  }
  const rows = await app.query<{ name: string; op: string; body: string }>(
    `SELECT TRIGGER_NAME AS name, LOWER(EVENT_MANIPULATION) AS op, ACTION_STATEMENT AS body
     FROM information_schema.TRIGGERS WHERE EVENT_OBJECT_SCHEMA = DATABASE() AND EVENT_OBJECT_TABLE = 'ledger'
     ORDER BY TRIGGER_NAME`,
  );
  return rows
    .filter((r) => r.body.includes(`INSERT INTO \`${cs}\`.\`sluice_staging\``))
    .map((r) => ({ name: r.name, op: r.op }));
}

/** Every trigger name on `ledger`. */
async function allTriggerNames(app: AppDb): Promise<string[]> {
  const rows = await app.query<{ name: string }>(
    app.dialect === 'postgres'
      ? `SELECT tgname::text AS name FROM pg_trigger WHERE tgrelid = 'ledger'::regclass AND NOT tgisinternal ORDER BY 1`
      : `SELECT TRIGGER_NAME AS name FROM information_schema.TRIGGERS WHERE EVENT_OBJECT_SCHEMA = DATABASE() AND EVENT_OBJECT_TABLE = 'ledger' ORDER BY 1`,
  );
  return rows.map((r) => r.name);
}

/** The name the previous version gave the trigger of `op` (no capture schema in it). */
function oldTriggerName(dialect: Db, op: string): string {
  return dialect === 'postgres'
    ? `sluice_cdc_sluice_staging_${op}`
    : `sluice_cdc_sluice_staging_ledger_${op}`;
}

/** Renames capture schema `cs`'s triggers on `ledger` to the previous version's names. */
async function makeOldNamed(app: AppDb, cs: string): Promise<void> {
  const dialect = app.dialect as Db;
  for (const t of await triggersOf(app, cs)) {
    const old = oldTriggerName(dialect, t.op);
    if (t.name === old) continue;
    if (dialect === 'postgres') {
      await app.exec(`ALTER TRIGGER "${t.name}" ON ledger RENAME TO "${old}"`);
      continue;
    }
    // MariaDB has no RENAME TRIGGER: the same statement under the old name, in its sql_mode.
    const [shown] = await app.query<Record<string, string>>(`SHOW CREATE TRIGGER \`${t.name}\``);
    const stmt = shown!['SQL Original Statement']!.replace(`\`${t.name}\``, `\`${old}\``);
    await app.exec(`SET SESSION sql_mode = '${shown!.sql_mode}'`);
    await app.exec(`DROP TRIGGER \`${t.name}\``);
    await app.exec(stmt);
  }
  assert.equal(
    (await triggersOf(app, cs)).map((t) => t.name).sort(),
    ['delete', 'insert', 'update'].map((op) => oldTriggerName(dialect, op)).sort(),
    'the previous version’s installation',
  );
}

/** Inserts two rows, updates one and deletes the other; `base` offsets the ids. */
async function writeChanges(app: AppDb, base: number): Promise<void> {
  await app.exec(
    `INSERT INTO ledger(id, holder) VALUES (${base + 1}, 'ann'), (${base + 2}, 'bob')`,
  );
  await app.exec(`UPDATE ledger SET holder = 'ann2' WHERE id = ${base + 1}`);
  await app.exec(`DELETE FROM ledger WHERE id = ${base + 2}`);
}

/** What writeChanges(base) stages, as op:key. */
function expected(base: number): string[] {
  return [`insert:${base + 1}`, `insert:${base + 2}`, `update:${base + 1}`, `delete:${base + 2}`];
}

/** Drains `staging` (pump 0 of 1) and returns op:key of each change in staging order. */
async function staged(staging: StagingClient): Promise<string[]> {
  return (await drain(staging)).map(view).map((c) => `${c.op}:${(c.key as string[])[0]}`);
}

/** A table `ledger` captured by two sources, "a" into the usual capture schema, "b" into `<it>2`. */
async function withTwoSchemas(
  dialect: Db,
  body: (app: AppDb, a: StagingClient, b: StagingClient, csA: string, csB: string) => Promise<void>,
): Promise<void> {
  const app = await createAppDb(dialect, 'h_trig_');
  const csA = (app.ref as { captureSchema: string }).captureSchema;
  const csB = `${csA}2`;
  const srcA: CaptureSource = sourceFor(app, [{}], { name: 'a' });
  const srcB: CaptureSource = sourceFor(app, [{}], {
    name: 'b',
    database: { ...app.ref, captureSchema: csB } as CaptureSource['database'],
  });
  let a: StagingClient | null = null;
  let b: StagingClient | null = null;
  try {
    await app.exec(LEDGER_DDL[dialect]);
    a = await openStaging(srcA);
    b = await openStaging(srcB);
    await body(app, a, b, csA, csB);
  } finally {
    if (a) await a.close();
    if (b) await b.close();
    await app.exec(
      dialect === 'postgres'
        ? `DROP SCHEMA IF EXISTS "${csB}" CASCADE`
        : `SET foreign_key_checks = 0; DROP DATABASE IF EXISTS \`${csB}\`; SET foreign_key_checks = 1`,
    );
    await app.destroy();
  }
}

/** The check --live line for source `name` whose schema `cs` lost every row trigger. */
function missingLine(name: string, cs: string): string {
  return (
    `capture source "${name}": table "ledger": capture schema "${cs}" has no insert, update, delete trigger on the table: ` +
    `those changes are not staged for this source (triggers dropped, or replaced by another capture source's install; run sluice install)`
  );
}

for (const dialect of ['postgres', 'mariadb'] as const) {
  test(`${dialect}: two capture schemas on one table both stage every change; check --live names the schema whose triggers were dropped; uninstall of one leaves the other capturing`, async () => {
    await withTwoSchemas(dialect, async (app, a, b, csA, csB) => {
      await a.install();
      await b.install();
      assert.is((await triggersOf(app, csA)).length, 3, `${csA}'s triggers after ${csB}'s install`);
      assert.is((await triggersOf(app, csB)).length, 3);
      await writeChanges(app, 0);
      assert.equal(await staged(a), expected(0), `schema ${csA} stages every change`);
      assert.equal(await staged(b), expected(0), `schema ${csB} stages every change`);
      const topology = { capture: [a.source, b.source] } as unknown as Topology;
      assert.equal(await checkCaptureLive(topology), []);

      // A's triggers dropped by hand: check --live of A says so, B is fine and still captures.
      for (const t of await triggersOf(app, csA)) {
        await app.exec(
          dialect === 'postgres'
            ? `DROP TRIGGER "${t.name}" ON ledger`
            : `DROP TRIGGER \`${t.name}\``,
        );
      }
      assert.equal(await checkCaptureLive(topology), [missingLine('a', csA)]);
      await writeChanges(app, 10);
      assert.equal(await staged(a), []);
      assert.equal(await staged(b), expected(10));

      // A reinstalled; then A uninstalled: B keeps its triggers and every change.
      await a.install();
      assert.equal(await checkCaptureLive(topology), []);
      await a.uninstall({ dropStaging: true });
      assert.is((await triggersOf(app, csA)).length, 0);
      assert.is(
        (await triggersOf(app, csB)).length,
        3,
        `${csB}'s triggers after ${csA}'s uninstall`,
      );
      await writeChanges(app, 20);
      assert.equal(await staged(b), expected(20), `schema ${csB} still stages every change`);
      await b.uninstall({ dropStaging: true });
      assert.equal(await allTriggerNames(app), [], 'no capture trigger left');
    });
  });

  test(`${dialect}: a previous version's installation (names without the capture schema) is kept by another schema's install, replaced by its own install and removed by its own uninstall`, async () => {
    await withTwoSchemas(dialect, async (app, a, b, csA, csB) => {
      await a.install();
      await makeOldNamed(app, csA);
      assert.equal(await checkCaptureLive({ capture: [a.source] } as unknown as Topology), []);

      // Another schema's install leaves A's old-named triggers alone.
      await b.install();
      assert.equal(
        (await triggersOf(app, csA)).map((t) => t.name).sort(),
        ['delete', 'insert', 'update'].map((op) => oldTriggerName(dialect, op)).sort(),
        `${csB}'s install keeps ${csA}'s old-named triggers`,
      );
      await writeChanges(app, 0);
      assert.equal(await staged(a), expected(0));
      assert.equal(await staged(b), expected(0));

      // A's own install replaces them: three triggers, none old-named, each change staged once.
      await a.install();
      const now = (await triggersOf(app, csA)).map((t) => t.name);
      assert.is(now.length, 3, now.join(', '));
      for (const op of ['insert', 'update', 'delete'])
        assert.not.ok(now.includes(oldTriggerName(dialect, op)), now.join(', '));
      assert.is((await triggersOf(app, csB)).length, 3);
      await writeChanges(app, 10);
      assert.equal(await staged(a), expected(10));
      assert.equal(await staged(b), expected(10));

      // A old-named again, then A's uninstall removes them and leaves B capturing.
      await makeOldNamed(app, csA);
      await a.uninstall();
      assert.equal(await triggersOf(app, csA), []);
      assert.is((await triggersOf(app, csB)).length, 3);
      await writeChanges(app, 20);
      assert.equal(await staged(a), []);
      assert.equal(await staged(b), expected(20));
      await a.uninstall({ dropStaging: true });
      await b.uninstall({ dropStaging: true });
      assert.equal(await allTriggerNames(app), [], 'no capture trigger left');
    });
  });
}

test.run();
