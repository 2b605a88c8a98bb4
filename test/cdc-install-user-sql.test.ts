/**
 * The SQL a user writes in a topology (a `condition`, global or per operation, and a
 * `key: { expression }`) is checked by `sluice install` against the live table before any
 * trigger exists: a wrong one is refused at its field (`file:line:col:
 * capture[0].tables[1].condition.update`), naming the table, then the database's message, and
 * nothing is left installed. On PostgreSQL the whole install is one transaction: a failure in the
 * trigger DDL of a later table rolls back the triggers of the earlier ones and the capture schema.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createAppDb, LEDGER_DDL, positionIn as at, stagingName } from './cdc-helpers.js';
import type { AppDb, Dialect } from './cdc-helpers.js';
import { sluice } from './lib/cli.js';
import { pgTriggerStatements } from '../engine/cdc/postgres.js';
import { resolveTable } from '../engine/cdc/index.js';

const ITEMS_DDL: Record<Dialect, string> = {
  sqlite: 'CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT)',
  postgres: 'CREATE TABLE items (id int PRIMARY KEY, name text)',
  mariadb: 'CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(20))',
};

/** Writes a topology capturing items, then ledger with `ledger` (YAML lines of its entry). */
function writeTopology(dir: string, app: AppDb, ledger: string[]): string {
  const file = path.join(dir, 'topology.yaml');
  const lines = [
    'name: usersql',
    'dataDir: ./data',
    'queues:',
    '  - { name: changes }',
    'capture:',
    '  - name: app',
    `    database: ${JSON.stringify(app.ref)}`,
    '    tables:',
    '      - { table: items, operations: [insert], target: changes }',
    '      - table: ledger',
    '        operations: [insert, update, delete]',
    '        target: changes',
    ...ledger.map((l) => `        ${l}`),
  ];
  fs.writeFileSync(file, `${lines.join('\n')}\n`);
  return file;
}

/** Triggers on the application's tables, and whether the capture schema / staging table exists. */
async function installed(app: AppDb): Promise<{ triggers: number; staging: boolean }> {
  const ref = app.ref as { schema?: string; captureSchema?: string };
  if (app.dialect === 'sqlite') {
    const [t] = await app.query<{ n: number }>(
      `SELECT count(*) AS n FROM sqlite_master WHERE type = 'trigger'`,
    );
    const [s] = await app.query<{ n: number }>(
      `SELECT count(*) AS n FROM sqlite_master WHERE name LIKE 'sluice_staging%'`,
    );
    return { triggers: Number(t!.n), staging: Number(s!.n) > 0 };
  }
  if (app.dialect === 'postgres') {
    const [t] = await app.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
       JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = '${ref.schema}' AND NOT t.tgisinternal`,
    );
    const [s] = await app.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_namespace WHERE nspname = '${ref.captureSchema}'`,
    );
    return { triggers: Number(t!.n), staging: Number(s!.n) > 0 };
  }
  const [t] = await app.query<{ n: number }>(
    `SELECT count(*) AS n FROM information_schema.TRIGGERS WHERE EVENT_OBJECT_SCHEMA = DATABASE()`,
  );
  const [s] = await app.query<{ n: number }>(
    `SELECT count(*) AS n FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = '${ref.captureSchema}'`,
  );
  return { triggers: Number(t!.n), staging: Number(s!.n) > 0 };
}

/** The database's refusal of a name `amout` that the table has not, per dialect. */
const UNKNOWN_COLUMN: Record<Dialect, (image: string) => RegExp> = {
  sqlite: (image) => new RegExp(`^no such column: ${image}\\.amout$`),
  postgres: (image) => new RegExp(`^column ${image.toLowerCase()}\\.amout does not exist$`),
  mariadb: (image) => new RegExp(`^Unknown column '${image}\\.amout' in '`),
};

const CASES = [
  {
    what: 'an update condition naming a column the table has not',
    ledger: [
      'condition:',
      '  insert: "NEW.amount <> \'0\'"',
      '  update: "NEW.amout <> OLD.amount"',
    ],
    token: '"NEW.amout <> OLD.amount"',
    field: 'condition.update',
    message: 'condition (update)',
    image: 'NEW',
  },
  {
    // PostgreSQL: an insert is a statement trigger, whose condition is resolved only when it runs.
    what: 'an insert condition naming a column the table has not',
    ledger: ['condition: { insert: "NEW.amout > 0", delete: "OLD.amount > 0" }'],
    token: '"NEW.amout > 0"',
    field: 'condition.insert',
    message: 'condition (insert)',
    image: 'NEW',
  },
  {
    what: 'one condition for every operation, with a syntax error',
    ledger: ['condition: "NEW.amount > AND OLD.amount > 0"', 'operations: [update]'],
    token: '"NEW.amount > AND',
    field: 'condition',
    message: 'condition (update)',
    image: null,
  },
  {
    // Named as written: the probe's row is ROW, not the NEW the trigger puts in its place.
    what: 'a key expression naming a column the table has not (named ROW.<column>, as written)',
    ledger: ['key: { expression: "ROW.amout" }'],
    token: '"ROW.amout"',
    field: 'key.expression',
    message: 'key expression',
    image: 'ROW',
  },
];

for (const dialect of ['sqlite', 'postgres', 'mariadb'] as const) {
  for (const c of CASES) {
    test(`${dialect}: install refuses ${c.what} at its field, with the table and the database's message, and installs nothing`, async () => {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-usersql-'));
      const app = await createAppDb(dialect, 'sluice_usersql_');
      try {
        await app.exec(LEDGER_DDL[dialect]);
        await app.exec(ITEMS_DDL[dialect]);
        // The last `operations:` wins in the flow of lines: replace the default one instead.
        const ops = c.ledger.find((l) => l.startsWith('operations:'));
        const file = writeTopology(
          dir,
          app,
          c.ledger.filter((l) => !l.startsWith('operations:')),
        );
        if (ops !== undefined)
          fs.writeFileSync(
            file,
            fs.readFileSync(file, 'utf8').replace('operations: [insert, update, delete]', ops),
          );
        const check = await sluice(['check', file]);
        assert.is(check.code, 0, check.err); // the file alone is fine
        const r = await sluice(['install', file]);
        assert.is(r.code, 2, r.out + r.err);
        const prefix = `${file}:${at(file, c.token)}: capture[0].tables[1].${c.field}: capture source "app": capture table "ledger": ${c.message}: the database refuses it: `;
        assert.ok(r.err.startsWith(prefix), `${r.err}\nexpected to start with\n${prefix}`);
        const driver = r.err.slice(prefix.length).trimEnd();
        assert.ok(!driver.includes('\n'), r.err);
        if (c.image !== null) assert.match(driver, UNKNOWN_COLUMN[dialect](c.image));
        else assert.ok(driver.length > 0, r.err);
        assert.is(r.out, '');
        assert.equal(await installed(app), { triggers: 0, staging: false });
      } finally {
        await app.destroy();
        fs.rmSync(dir, { recursive: true, force: true });
      }
    });
  }
}

for (const dialect of ['sqlite', 'postgres', 'mariadb'] as const) {
  test(`${dialect}: every refused condition and key expression of every table is reported together, one line at each field, by check --live and install alike`, async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-usersql-'));
    const app = await createAppDb(dialect, 'sluice_usersql_');
    try {
      await app.exec(LEDGER_DDL[dialect]);
      await app.exec(ITEMS_DDL[dialect]);
      const file = path.join(dir, 'topology.yaml');
      const lines = [
        'name: usersql',
        'dataDir: ./data',
        'queues:',
        '  - { name: changes }',
        'capture:',
        '  - name: app',
        `    database: ${JSON.stringify(app.ref)}`,
        '    tables:',
        '      - { table: items, operations: [insert], target: changes, condition: "NEW.nme <> \'x\'" }',
        '      - table: ledger',
        '        operations: [insert, update, delete]',
        '        target: changes',
        '        condition:',
        '          insert: "NEW.amout > 0"',
        '          update: "NEW.amount > AND OLD.amount > 0"',
        '          delete: "OLD.amount > 0"',
        '        key: { expression: "ROW.holdr" }',
      ];
      fs.writeFileSync(file, `${lines.join('\n')}\n`);
      const expected = [
        ['"NEW.nme', 'tables[0].condition', 'items', 'condition (insert)', /nme/],
        ['"NEW.amout', 'tables[1].condition.insert', 'ledger', 'condition (insert)', /amout/],
        ['"NEW.amount >', 'tables[1].condition.update', 'ledger', 'condition (update)', /./],
        ['"ROW.holdr', 'tables[1].key.expression', 'ledger', 'key expression', /\bROW\.holdr\b/i],
      ] as const;
      for (const args of [['check', '--live'], ['install']]) {
        const r = await sluice([...args, file]);
        assert.is(r.code, 2, r.out + r.err);
        const got = r.err.trimEnd().split('\n');
        assert.is(got.length, expected.length, `${args.join(' ')}: ${r.err}`);
        expected.forEach(([token, field, table, what, message], n) => {
          const prefix = `${file}:${at(file, token)}: capture[0].${field}: capture source "app": capture table "${table}": ${what}: the database refuses it: `;
          assert.ok(got[n]!.startsWith(prefix), `${args.join(' ')}: ${got[n]}\nexpected ${prefix}`);
          assert.match(got[n]!.slice(prefix.length), message);
        });
      }
      assert.equal(await installed(app), { triggers: 0, staging: false });
    } finally {
      await app.destroy();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
}

/** A topology capturing ledger (insert, update, delete) with `ledger` (YAML lines of its entry). */
function ledgerTopology(dir: string, app: AppDb, ledger: string[]): string {
  const file = path.join(dir, 'topology.yaml');
  const lines = [
    'name: usersql',
    'dataDir: ./data',
    'queues:',
    '  - { name: changes }',
    'capture:',
    '  - name: app',
    `    database: ${JSON.stringify(app.ref)}`,
    '    tables:',
    '      - table: ledger',
    '        operations: [insert, update, delete]',
    '        target: changes',
    ...ledger.map((l) => `        ${l}`),
  ];
  fs.writeFileSync(file, `${lines.join('\n')}\n`);
  return file;
}

for (const dialect of ['sqlite', 'postgres', 'mariadb'] as const) {
  const rowTrigger = dialect === 'postgres' ? " (PostgreSQL: a row trigger's WHEN)" : '';
  test(`${dialect}: a bare column name in a condition${rowTrigger} or a key expression is refused by check --live and install at its field, as the trigger would refuse it`, async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-usersql-'));
    const app = await createAppDb(dialect, 'sluice_usersql_');
    try {
      await app.exec(LEDGER_DDL[dialect]);
      const file = ledgerTopology(dir, app, [
        ...(dialect === 'postgres' ? ['triggers: row'] : []),
        'condition: { insert: "amount > 0" }',
        'key: { expression: "upper(holder)" }',
      ]);
      const expected = [
        ['"amount', 'condition.insert', 'condition (insert)', 'amount', 'NEW.<column>'],
        ['"upper', 'key.expression', 'key expression', 'holder', 'ROW.<column>'],
      ] as const;
      for (const args of [['check', '--live'], ['install']]) {
        const r = await sluice([...args, file]);
        assert.is(r.code, 2, r.out + r.err);
        const got = r.err.trimEnd().split('\n');
        assert.is(got.length, 2, `${args.join(' ')}: ${r.err}`);
        expected.forEach(([token, field, what, column, write], n) => {
          const prefix = `${file}:${at(file, token)}: capture[0].tables[0].${field}: capture source "app": capture table "ledger": ${what}: the database refuses it: `;
          assert.ok(got[n]!.startsWith(prefix), `${args.join(' ')}: ${got[n]}\nexpected ${prefix}`);
          assert.match(got[n]!, new RegExp(`'${column}'|"${column}"|: ${column} `));
          assert.match(got[n]!, /ambiguous/i);
          assert.ok(
            got[n]!.endsWith(` (the trigger resolves no bare column name: write ${write})`),
            got[n],
          );
        });
      }
      assert.equal(await installed(app), { triggers: 0, staging: false });
    } finally {
      await app.destroy();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
}

test("postgres: a statement trigger's condition and a key expression are probed with the capture function's search_path (pg_catalog): an unqualified table or function is refused, a bare column of a statement trigger's WHERE and schema-qualified names are captured", async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-usersql-'));
  const app = await createAppDb('postgres', 'sluice_usersql_');
  const schema = (app.ref as { schema: string }).schema;
  try {
    await app.exec(LEDGER_DDL.postgres);
    await app.exec(ITEMS_DDL.postgres);
    await app.exec("INSERT INTO items (id, name) VALUES (2, 'x')");
    await app.exec(
      "CREATE FUNCTION key_of(h text) RETURNS text LANGUAGE sql IMMUTABLE AS $$ SELECT 'k-' || h $$",
    );
    let file = ledgerTopology(dir, app, [
      'condition: { insert: "NEW.id IN (SELECT id FROM items)" }',
      'key: { expression: "key_of(ROW.holder)" }',
    ]);
    const hint =
      ' (it runs in the capture function, whose search_path is pg_catalog, pg_temp: name other tables, functions and types with their schema)';
    for (const args of [['check', '--live'], ['install']]) {
      const r = await sluice([...args, file]);
      assert.is(r.code, 2, r.out + r.err);
      const prefix = (token: string, field: string, what: string) =>
        `${file}:${at(file, token)}: capture[0].tables[0].${field}: capture source "app": capture table "ledger": ${what}: the database refuses it: `;
      assert.equal(r.err.trimEnd().split('\n'), [
        `${prefix('"NEW.id IN', 'condition.insert', 'condition (insert)')}relation "items" does not exist${hint}`,
        `${prefix('"key_of', 'key.expression', 'key expression')}function key_of(text) does not exist${hint}`,
      ]);
    }
    assert.equal(await installed(app), { triggers: 0, staging: false });
    file = ledgerTopology(dir, app, [
      `condition: { insert: "NEW.id IN (SELECT id FROM ${schema}.items) AND amount IS NULL" }`,
      `key: { expression: "${schema}.key_of(ROW.holder)" }`,
    ]);
    for (const args of [['check', '--live'], ['install']]) {
      const r = await sluice([...args, file]);
      assert.is(r.code, 0, `${args.join(' ')}: ${r.out}${r.err}`);
    }
    await app.exec("INSERT INTO ledger (id, holder) VALUES (1, 'a'), (2, 'b')");
    assert.equal(await staged(app), [['ledger', 'insert', '["k-b"]']]);
  } finally {
    await app.destroy();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

/** `SELECT table_name, op, key` of the staging table, in staging order. */
async function staged(app: AppDb): Promise<[string, string, string][]> {
  const key = app.dialect === 'mariadb' ? '`key`' : '"key"';
  const rows = await app.query<{ t: string; op: string; k: string }>(
    `SELECT table_name AS t, op, ${key} AS k FROM ${stagingName(app)} ORDER BY id`,
  );
  return rows.map((r) => [r.t, r.op, r.k]);
}

for (const dialect of ['sqlite', 'postgres', 'mariadb'] as const) {
  test(`${dialect}: a condition and a key expression ending in a -- comment pass check --live, install, and capture exactly the rows the condition selects`, async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-usersql-'));
    const app = await createAppDb(dialect, 'sluice_usersql_');
    try {
      await app.exec(LEDGER_DDL[dialect]);
      await app.exec(ITEMS_DDL[dialect]);
      const file = path.join(dir, 'topology.yaml');
      const lines = [
        'name: usersql',
        'dataDir: ./data',
        'queues:',
        '  - { name: changes }',
        'capture:',
        '  - name: app',
        `    database: ${JSON.stringify(app.ref)}`,
        '    tables:',
        '      - table: ledger',
        '        operations: [insert, update, delete]',
        '        target: changes',
        '        key: { expression: "ROW.holder -- the holder is the key" }',
        '        condition:',
        '          insert: "NEW.id > 1 -- note"',
        '          update: "NEW.memo <> OLD.memo -- note"',
        '          delete: "OLD.id > 1 --"',
      ];
      // PostgreSQL: inserts and deletes have statement triggers (the condition is a WHERE);
      // with triggers: row it is the trigger's WHEN.
      if (dialect === 'postgres')
        lines.push(
          '      - table: items',
          '        operations: [insert]',
          '        target: changes',
          '        triggers: row',
          '        condition: "NEW.id > 1 -- note"',
        );
      fs.writeFileSync(file, `${lines.join('\n')}\n`);
      const check = await sluice(['check', '--live', file]);
      assert.is(check.code, 0, check.out + check.err);
      const r = await sluice(['install', file]);
      assert.is(r.code, 0, r.out + r.err);
      await app.exec("INSERT INTO ledger (id, holder, memo) VALUES (1, 'a', 'm')");
      await app.exec("INSERT INTO ledger (id, holder, memo) VALUES (2, 'b', 'm')");
      await app.exec("UPDATE ledger SET memo = 'x' WHERE id = 1");
      await app.exec("UPDATE ledger SET holder = 'z' WHERE id = 2");
      await app.exec('DELETE FROM ledger WHERE id = 1');
      await app.exec('DELETE FROM ledger WHERE id = 2');
      if (dialect === 'postgres') await app.exec("INSERT INTO items VALUES (1, 'p'), (2, 'q')");
      assert.equal(await staged(app), [
        ['ledger', 'insert', '["b"]'],
        ['ledger', 'update', '["a"]'],
        ['ledger', 'delete', '["z"]'],
        ...(dialect === 'postgres'
          ? [['items', 'insert', '["2"]'] as [string, string, string]]
          : []),
      ]);
    } finally {
      await app.destroy();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
}

test('postgres: install is one transaction: a trigger DDL refused for the second table leaves no trigger on the first and no capture schema', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-usersql-'));
  const app = await createAppDb('postgres', 'sluice_usersql_');
  try {
    await app.exec(ITEMS_DDL.postgres);
    // A view: its columns resolve and the SQL probes pass, but it can have no capture trigger.
    await app.exec(LEDGER_DDL.postgres.replace('TABLE ledger', 'TABLE ledger_rows'));
    await app.exec('CREATE VIEW ledger AS SELECT * FROM ledger_rows');
    const file = writeTopology(dir, app, [
      'key: { columns: [id] }',
      'condition: { update: "NEW.amount <> OLD.amount" }',
    ]);
    const r = await sluice(['install', file]);
    assert.is(r.code, 2, r.out + r.err);
    assert.is(
      r.err,
      `${file}:${at(file, '- table: ledger', 'ledger')}: capture[0].tables[1].table: capture source "app": capture table "ledger": creating its capture function and triggers failed: "ledger" is a view\n`,
    );
    assert.equal(await installed(app), { triggers: 0, staging: false });
  } finally {
    await app.destroy();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test("postgres: a row trigger's CREATE TRIGGER carries its condition's field and where the condition is in it, so a refusal inside its WHEN points at the condition", () => {
  const columns = [
    { name: 'id', type: 'int4', pkPosition: 1, attnum: 1 },
    { name: 'amount', type: 'numeric', pkPosition: 0, attnum: 2 },
  ];
  const condition = { insert: 'NEW.amount > 0 -- note', update: 'NEW.amount <> OLD.amount' };
  for (const [triggers, withWhen] of [
    ['row', ['condition.insert', 'condition.update']],
    ['statement', ['condition.update']],
  ] as const) {
    const t = resolveTable(
      { table: 'ledger', operations: ['insert', 'update'], target: 'q', condition, triggers },
      columns,
    );
    const when = pgTriggerStatements('cap', 'staging', t).filter((s) => s.span !== undefined);
    assert.equal(
      when.map((s) => s.field),
      withWhen,
    );
    for (const s of when) {
      const op = s.field.slice('condition.'.length) as 'insert' | 'update';
      assert.is(s.sql.slice(...s.span!), condition[op]);
      assert.match(s.sql, /\bWHEN \(/);
    }
  }
});

/** Topology lines of a ledger capture with `condition` (YAML lines), inserts and updates. */
function subqueryTopology(dir: string, app: AppDb, condition: string[], extra: string[] = []) {
  const file = path.join(dir, 'topology.yaml');
  const lines = [
    'name: usersql',
    'dataDir: ./data',
    'queues:',
    '  - { name: changes }',
    'capture:',
    '  - name: app',
    `    database: ${JSON.stringify(app.ref)}`,
    '    tables:',
    '      - table: ledger',
    '        operations: [insert, update]',
    '        target: changes',
    ...extra.map((l) => `        ${l}`),
    '        condition:',
    ...condition.map((l) => `          ${l}`),
  ];
  fs.writeFileSync(file, `${lines.join('\n')}\n`);
  return file;
}

const SUBQUERY_INSERT = 'insert: "NEW.id IN (SELECT id FROM items)"';
const SUBQUERY_UPDATE = 'update: "EXISTS (SELECT 1 FROM items WHERE items.id = NEW.id)"';

test("postgres: a condition with a subquery is refused at its field by check, check --live and install alike where it would be a row trigger's WHEN (an update; an insert with triggers: row)", async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-usersql-'));
  const app = await createAppDb('postgres', 'sluice_usersql_');
  try {
    await app.exec(LEDGER_DDL.postgres);
    await app.exec(ITEMS_DDL.postgres);
    const refusal = (file: string, op: 'insert' | 'update', token: string, why: string) =>
      `${file}:${at(file, `${op}: "`, token)}: capture[0].tables[0].condition.${op}: has a subquery (the "(" at character ${token === '"EXISTS' ? 8 : 11}), which PostgreSQL refuses in a row trigger's WHEN (cannot use subquery in trigger WHEN condition): ${why}`;
    let file = subqueryTopology(dir, app, [SUBQUERY_INSERT, SUBQUERY_UPDATE]);
    const update = refusal(
      file,
      'update',
      '"EXISTS',
      'an update is captured by a row trigger (always, at either trigger level)',
    );
    for (const args of [['check'], ['check', '--live'], ['install']]) {
      const r = await sluice([...args, file]);
      assert.is(r.code, 2, r.out + r.err);
      assert.is(r.err, `${update}\n`, args.join(' '));
    }
    file = subqueryTopology(dir, app, [SUBQUERY_INSERT, SUBQUERY_UPDATE], ['triggers: row']);
    const insert = refusal(
      file,
      'insert',
      '"NEW',
      'an insert is captured by a row trigger (triggers: row); with triggers: statement, the default, an insert or delete condition may have one',
    );
    for (const args of [['check'], ['check', '--live'], ['install']]) {
      const r = await sluice([...args, file]);
      assert.is(r.code, 2, r.out + r.err);
      assert.is(
        r.err,
        `${insert}\n${refusal(file, 'update', '"EXISTS', 'an update is captured by a row trigger (always, at either trigger level)')}\n`,
        args.join(' '),
      );
    }
    assert.equal(await installed(app), { triggers: 0, staging: false });
  } finally {
    await app.destroy();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

for (const dialect of ['sqlite', 'postgres', 'mariadb'] as const) {
  const where =
    dialect === 'postgres'
      ? "in an insert's condition (a statement trigger's WHERE)"
      : 'in an insert and an update condition (both in the trigger, which allows subqueries)';
  test(`${dialect}: a subquery ${where} passes check --live and install, and captures only the rows it selects`, async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-usersql-'));
    const app = await createAppDb(dialect, 'sluice_usersql_');
    try {
      await app.exec(LEDGER_DDL[dialect]);
      await app.exec(ITEMS_DDL[dialect]);
      await app.exec("INSERT INTO items (id, name) VALUES (2, 'x')");
      // PostgreSQL runs a statement trigger's condition in the capture function, whose
      // search_path is pg_catalog: other tables are named with their schema.
      const schema = (app.ref as { schema?: string }).schema;
      const condition =
        dialect === 'postgres'
          ? [SUBQUERY_INSERT.replace('FROM items', `FROM ${schema}.items`)]
          : [SUBQUERY_INSERT, SUBQUERY_UPDATE];
      const file = subqueryTopology(dir, app, condition);
      for (const args of [['check', '--live'], ['install']]) {
        const r = await sluice([...args, file]);
        assert.is(r.code, 0, `${args.join(' ')}: ${r.out}${r.err}`);
      }
      await app.exec("INSERT INTO ledger (id, memo) VALUES (1, 'm')");
      await app.exec("INSERT INTO ledger (id, memo) VALUES (2, 'm')");
      await app.exec("UPDATE ledger SET memo = 'x' WHERE id = 1");
      await app.exec("UPDATE ledger SET memo = 'x' WHERE id = 2");
      assert.equal(await staged(app), [
        ['ledger', 'insert', '["2"]'],
        ...(dialect === 'postgres'
          ? [['ledger', 'update', '["1"]'] as [string, string, string]]
          : []),
        ['ledger', 'update', '["2"]'],
      ]);
    } finally {
      await app.destroy();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
}

test.run();
