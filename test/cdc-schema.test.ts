/**
 * Capture's own objects (issue item 3): on PostgreSQL every object install creates, except the
 * triggers on the captured tables, lives in the capture schema; on SQLite every object is named
 * with the staging table's name (default prefix sluice_). Uninstall removes exactly what install
 * created, on databases holding other objects (the user's tables, functions, triggers, views, and
 * a capture schema the user made and filled).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { openStaging, pgTriggerName } from '../engine/cdc/index.js';
import { createAppDb, LEDGER_DDL, sourceFor } from './cdc-helpers.js';
import type { AppDb } from './cdc-helpers.js';

/** Every user-visible object of the app and capture schemas, as sorted "kind:schema.name" lines. */
async function pgCatalog(app: AppDb): Promise<string[]> {
  const ref = app.ref as { schema: string; captureSchema: string };
  const rows = await app.query<{ o: string }>(`
    WITH s AS (SELECT oid, nspname FROM pg_namespace WHERE nspname IN ('${ref.schema}', '${ref.captureSchema}'))
    SELECT 'schema:' || nspname AS o FROM s
    UNION ALL SELECT 'class:' || s.nspname || '.' || c.relname || ':' || c.relkind::text FROM pg_class c JOIN s ON s.oid = c.relnamespace
    UNION ALL SELECT 'proc:' || s.nspname || '.' || p.proname FROM pg_proc p JOIN s ON s.oid = p.pronamespace
    UNION ALL SELECT 'trigger:' || s.nspname || '.' || c.relname || '.' || t.tgname
      FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN s ON s.oid = c.relnamespace WHERE NOT t.tgisinternal
    UNION ALL SELECT 'comment:' || s.nspname || ':' || coalesce(obj_description(s.oid, 'pg_namespace'), '') FROM s
    ORDER BY 1`);
  return rows.map((r) => r.o);
}

const PG_USER_OBJECTS = `
  CREATE TABLE audit (id bigint, what text);
  CREATE FUNCTION audit_fn() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN INSERT INTO audit VALUES (NEW.id, 'x'); RETURN NULL; END $$;
  CREATE TRIGGER audit_trg AFTER INSERT ON ledger FOR EACH ROW EXECUTE FUNCTION audit_fn();
  CREATE VIEW holders AS SELECT holder FROM ledger;
  CREATE SEQUENCE invoice_seq;`;

test('postgres: install puts staging, error table, index, hash and trigger functions in the capture schema it creates; uninstall removes exactly those and the schema', async () => {
  const app = await createAppDb('postgres');
  try {
    await app.exec(LEDGER_DDL.postgres);
    await app.exec(PG_USER_OBJECTS);
    const before = await pgCatalog(app);
    const staging = await openStaging(
      sourceFor(app, [{ operations: ['insert', 'update', 'delete', 'truncate'] }], { pumps: 2 }),
    );
    try {
      await staging.install();
      const cs = (app.ref as { captureSchema: string }).captureSchema;
      const added = (await pgCatalog(app)).filter((o) => !before.includes(o));
      const outside = added.filter(
        (o) =>
          !o.includes(`:${cs}`) && !o.startsWith(`class:${cs}.`) && !o.startsWith(`proc:${cs}.`),
      );
      const schema = (app.ref as { schema: string }).schema;
      assert.equal(
        outside,
        (['insert', 'update', 'delete', 'truncate'] as const)
          // The capture schema is in the trigger names: several capture schemas may capture one table.
          .map((op) => `trigger:${schema}.ledger.${pgTriggerName(cs, 'sluice_staging', op)}`)
          .sort(),
      );
      assert.ok(added.includes(`schema:${cs}`), added.join('\n'));
      assert.ok(added.includes(`class:${cs}.sluice_staging:r`));
      assert.ok(added.includes(`class:${cs}.sluice_staging_errors:r`));
      assert.ok(added.includes(`proc:${cs}.sluice_staging_fnv1a32`));
      assert.ok(added.includes(`proc:${cs}.sluice_cdc_sluice_staging_ledger`));
      await app.exec(`INSERT INTO ledger(id) VALUES (1)`);
      assert.is(
        await staging.stagedCount(),
        1,
        'capture works with its objects in their own schema',
      );
      await staging.uninstall({ dropStaging: true });
    } finally {
      await staging.close();
    }
    assert.equal(await pgCatalog(app), before);
    await app.exec(`INSERT INTO ledger(id) VALUES (2)`); // the application's statements still run
    assert.equal(await app.query(`SELECT count(*)::int AS n FROM audit`), [{ n: 2 }]);
  } finally {
    await app.destroy();
  }
});

test('postgres: a capture schema the user made (with their own table in it) is kept by uninstall, with their table', async () => {
  const app = await createAppDb('postgres');
  try {
    const cs = (app.ref as { captureSchema: string }).captureSchema;
    await app.exec(LEDGER_DDL.postgres);
    await app.exec(
      `CREATE SCHEMA "${cs}"; CREATE TABLE "${cs}".mine (x int); INSERT INTO "${cs}".mine VALUES (7)`,
    );
    const before = await pgCatalog(app);
    const staging = await openStaging(sourceFor(app, [{}]));
    try {
      await staging.install();
      await staging.uninstall({ dropStaging: true });
    } finally {
      await staging.close();
    }
    assert.equal(await pgCatalog(app), before);
    assert.equal(await app.query(`SELECT x FROM "${cs}".mine`), [{ x: 7 }]);
  } finally {
    await app.destroy();
  }
});

test('sqlite: every object install creates is named after the staging table (sluice_ prefix); uninstall removes exactly those', async () => {
  const app = await createAppDb('sqlite');
  try {
    await app.exec(LEDGER_DDL.sqlite);
    await app.exec(`CREATE TABLE audit (id INTEGER, what TEXT);
      CREATE TRIGGER audit_trg AFTER INSERT ON ledger BEGIN INSERT INTO audit VALUES (NEW.id, 'x'); END;
      CREATE VIEW holders AS SELECT holder FROM ledger;
      CREATE TABLE counters (id INTEGER PRIMARY KEY AUTOINCREMENT, n INTEGER); INSERT INTO counters(n) VALUES (1);`);
    const catalog = async () =>
      (
        await app.query<{ o: string }>(
          `SELECT type || ':' || name AS o FROM sqlite_master UNION ALL SELECT 'seq:' || name || '=' || seq FROM sqlite_sequence ORDER BY 1`,
        )
      ).map((r) => r.o);
    const before = await catalog();
    const staging = await openStaging(sourceFor(app, [{}]));
    try {
      await staging.install();
      await app.exec(`INSERT INTO ledger(id) VALUES (1)`);
      const added = (await catalog()).filter((o) => !before.includes(o));
      assert.equal(added, [
        'seq:sluice_staging=1',
        'table:sluice_staging',
        'table:sluice_staging_errors',
        'table:sluice_staging_installation',
        'trigger:sluice_cdc_sluice_staging_ledger_delete',
        'trigger:sluice_cdc_sluice_staging_ledger_insert',
        'trigger:sluice_cdc_sluice_staging_ledger_update',
      ]);
      await staging.ack((await staging.claim(0, 1, 10)).map((r) => r.stagingId));
      await staging.uninstall({ dropStaging: true });
    } finally {
      await staging.close();
    }
    assert.equal(await catalog(), before);
  } finally {
    await app.destroy();
  }
});

test.run();
