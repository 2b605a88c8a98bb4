/**
 * PostgreSQL capture: trigger DDL generation and the staging client over `pg`.
 *
 * One PL/pgSQL trigger function per captured table (SECURITY DEFINER, search_path pinned to
 * pg_catalog, every name schema-qualified, so writers need no grants on staging and their own
 * search_path does not matter), called by one trigger per captured operation: AFTER ... FOR EACH
 * STATEMENT with a transition table for insert and delete (CaptureTable.triggers 'statement',
 * the default: one INSERT ... SELECT into staging per statement) or AFTER ... FOR EACH ROW
 * ('row', and always for update), and AFTER TRUNCATE ... FOR EACH STATEMENT when truncate is
 * captured. See pgTriggerDdl.
 *
 * Value text (exact, never through a float): numeric `trim_scale(v)::text` (numeric(18,6) -0.5
 * prints `-0.5`, not `-0.500000`); timestamptz as ISO 8601 in UTC with `Z` (independent of the
 * writer's TimeZone); timestamp and date as ISO 8601 via to_json (independent of DateStyle);
 * every other type its text output `v::text` (bigint exact, bytea hex, json as its text).
 */
import type pg from 'pg';
import { pgDriver } from './drivers.js';
import { CDC_DEFAULTS, conditionFor, validateCaptureSource, checkClaimArgs } from './config.js';
import type { CaptureOperation, CaptureSource, CaptureTable, StagedChange } from './config.js';
import { keyHash } from './key-hash.js';
import {
  CaptureTableError,
  imageColumnsOf,
  jsonObjectExpr,
  keyTextExpr,
  quoteIdent,
  quoteLiteral,
  resolveTable,
  throwAll,
  triggerUserSqlField,
  userSqlParens,
  userSqlProbes,
  userSqlRefusals,
} from './sql.js';
import type {
  ColumnInfo,
  KeyDialect,
  KeyRow,
  ResolvedTable,
  TriggerStatement,
  UserSqlProbe,
} from './sql.js';
import type {
  HeldKeys,
  ParkedChange,
  ParkedSelection,
  StagingClient,
  TableDescription,
  UninstallOptions,
} from './staging.js';
import { installationTableName, newInstallationId } from './staging.js';
import { chunkKeyOf } from './initial-load.js';
import type { LoadHooks, LoadQuery, LoadTable } from './initial-load.js';

/** PostgreSQL identifiers are cut at 63 bytes (NAMEDATALEN - 1). */
const PG_NAME_BYTES_MAX = 63;

/** Serializes concurrent installs (CREATE OR REPLACE FUNCTION races fail with "tuple concurrently updated"). */
const INSTALL_LOCK_KEY = keyHash('sluice.cdc.install') | 0;

/**
 * lock_timeout of a pump's session, ms: a staged row locked by another session (`SELECT ... FOR
 * UPDATE`, an open transaction that updated it) makes the pump's delete fail after this long
 * with an error naming the blocking session, instead of waiting forever without a word; the pump
 * then retries as after any outage. Install and uninstall wait without a bound, as before.
 */
export const PG_LOCK_TIMEOUT_MS = 2000;

/** A generated name that fits in 63 bytes: long names keep a prefix plus an FNV-1a suffix. */
export function pgName(base: string): string {
  const clean = base.replace(/[^A-Za-z0-9_]/g, '_');
  if (Buffer.byteLength(clean) <= PG_NAME_BYTES_MAX && clean === base) return clean;
  const suffix = keyHash(base).toString(16).padStart(8, '0');
  return `${clean.slice(0, PG_NAME_BYTES_MAX - 9)}_${suffix}`;
}

/**
 * The search_path of every capture function (SECURITY DEFINER, so the writer's own path cannot
 * change what its names mean): the statement triggers' conditions and the key expression run
 * with it.
 */
export const PG_FUNCTION_SEARCH_PATH = 'pg_catalog, pg_temp';

/**
 * The probes of captured table `t`'s user-written SQL on PostgreSQL (engine/cdc/sql.ts
 * userSqlProbes), in the scope each text has in the generated trigger: a row trigger's condition
 * (an update's; with triggers 'row' every one) is its WHEN, parsed by CREATE TRIGGER in the
 * install session, where NEW and OLD are both in scope (a bare column name is ambiguous); a
 * statement trigger's condition is a WHERE over the transition table aliased new / old (a bare
 * column name is the row's) and the key expression an expression over the row, both run in the
 * capture function with search_path PG_FUNCTION_SEARCH_PATH (other tables, functions and types
 * are named with their schema). `schema` is the table's schema (pgTableSchema), so the probes
 * name the table under that search_path. What install runs before any trigger exists, and
 * `sluice check --live` without installing (run each with pgProbeRunner).
 */
export function pgUserSqlProbes(t: ResolvedTable, schema: string): UserSqlProbe[] {
  const level = t.config.triggers ?? CDC_DEFAULTS.triggers;
  const inFunction = (op: 'insert' | 'update' | 'delete' | 'key') =>
    op === 'key' || (level === 'statement' && op !== 'update');
  const name = t.config.table.slice(t.config.table.indexOf('.') + 1);
  return userSqlProbes(t, {
    table: `${quoteIdent(schema)}.${quoteIdent(name)}`,
    alias: (row) => row.toLowerCase(),
    keyRow: keyTextExpr(t, 'ROW', PG_KEY_DIALECT),
    bareNames: inFunction,
    searchPath: (of) => (inFunction(of) ? PG_FUNCTION_SEARCH_PATH : undefined),
  });
}

/** The schema of `table` (pgQualifiedTable's resolution through search_path); null when none. */
export async function pgTableSchema(client: pg.ClientBase, table: string): Promise<string | null> {
  const res = await client.query<{ s: string }>(
    `SELECT n.nspname::text AS s FROM pg_catalog.pg_class c
     JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = pg_catalog.to_regclass($1)`,
    [pgQualifiedTable(table)],
  );
  return res.rows[0]?.s ?? null;
}

/** PostgreSQL's errors of a name not found: undefined_table, undefined_function, undefined_object. */
const PG_NAME_NOT_FOUND = ['42P01', '42883', '42704'];

/**
 * Runs one probe of pgUserSqlProbes on `client`, with the probe's search_path, undoing whatever it
 * did: inside a transaction (`inTransaction`, install's) in a savepoint, so a refused probe leaves
 * the transaction usable for the next; else in a transaction of its own, rolled back. A name the
 * capture function's search_path does not find is refused with that said.
 */
export function pgProbeRunner(
  client: pg.ClientBase,
  inTransaction: boolean,
): (p: UserSqlProbe) => Promise<void> {
  return async (p) => {
    await client.query(inTransaction ? 'SAVEPOINT sluice_probe' : 'BEGIN READ ONLY');
    try {
      if (p.searchPath !== undefined)
        await client.query("SELECT pg_catalog.set_config('search_path', $1, true)", [p.searchPath]);
      await client.query(p.sql);
    } catch (err) {
      const code = (err as { code?: string }).code;
      if (p.searchPath === undefined || !PG_NAME_NOT_FOUND.includes(code ?? '')) throw err;
      throw new Error(
        `${(err as Error).message} (it runs in the capture function, whose search_path is ${p.searchPath}: name other tables, functions and types with their schema)`,
        { cause: err },
      );
    } finally {
      if (inTransaction) {
        await client.query('ROLLBACK TO SAVEPOINT sluice_probe');
        await client.query('RELEASE SAVEPOINT sluice_probe');
      } else await client.query('ROLLBACK');
    }
  };
}

/** `schema.table` -> quoted `"schema"."table"`; a bare name stays unqualified (search_path). */
export function pgQualifiedTable(table: string): string {
  const dot = table.indexOf('.');
  return dot < 0
    ? quoteIdent(table)
    : `${quoteIdent(table.slice(0, dot))}.${quoteIdent(table.slice(dot + 1))}`;
}

/** Name of the trigger function for `table` (lives in the staging schema). */
export function pgFunctionName(stagingTable: string, table: string): string {
  return pgName(`sluice_cdc_${stagingTable}_${table}`);
}

/**
 * Name of the trigger capturing `op` into `schema`.`stagingTable` (trigger names are per table,
 * so the capture schema is in it: several capture schemas may capture one table, each with its
 * own triggers): `sluice_cdc_<schema>_<staging>_<op>_<8 hex>`, the hex an FNV-1a of the exact
 * schema, staging table and operation, so schema `a_b` with staging `c` never shares a name with
 * schema `a` and staging `b_c`. Within 63 bytes: a long schema or staging name is cut, never the
 * operation or the hash. Versions before this named it `sluice_cdc_<staging>_<op>` (no schema);
 * install and uninstall find those by their function (PG_OWN_TRIGGERS_SQL), never by that name.
 */
export function pgTriggerName(schema: string, stagingTable: string, op: CaptureOperation): string {
  const hash = keyHash(JSON.stringify([schema, stagingTable, op]))
    .toString(16)
    .padStart(8, '0');
  const tail = `_${op}_${hash}`;
  const head = `sluice_cdc_${schema}_${stagingTable}`.replace(/[^A-Za-z0-9_]/g, '_');
  return `${head.slice(0, PG_NAME_BYTES_MAX - tail.length)}${tail}`;
}

/** pg_trigger.tgtype bit of each captured operation. */
const PG_TRIGGER_TYPE_BITS: Record<CaptureOperation, number> = {
  insert: 4,
  delete: 8,
  update: 16,
  truncate: 32,
};

/**
 * SQL selecting the triggers on table $1 (pgQualifiedTable text) whose function is $2.$3 (the
 * capture function of one source in its capture schema): `name`, `ops` (the operations each
 * fires on) and `enabled` (false when ALTER TABLE ... DISABLE TRIGGER). This is how a source
 * tells its own triggers, whatever their name (also the names of versions before the capture
 * schema was in them), from another capture schema's on the same table.
 */
const PG_OWN_TRIGGERS_SQL = `SELECT t.tgname::text AS name, t.tgenabled <> 'D' AS enabled,
  ARRAY_REMOVE(ARRAY[${Object.entries(PG_TRIGGER_TYPE_BITS)
    .map(([op, bit]) => `CASE WHEN t.tgtype::int & ${bit} <> 0 THEN '${op}' END`)
    .join(', ')}], NULL) AS ops
FROM pg_catalog.pg_trigger t JOIN pg_catalog.pg_proc p ON p.oid = t.tgfoid
JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
WHERE t.tgrelid = to_regclass($1) AND NOT t.tgisinternal AND n.nspname = $2 AND p.proname = $3
ORDER BY t.tgname`;

/** Exact text of one value; `ref` is `NEW."col"` / `OLD."col"`; NULL stays NULL. */
function pgText(ref: string, c: ColumnInfo): string {
  switch (c.type) {
    case 'numeric':
      return `pg_catalog.trim_scale(${ref})::text`;
    case 'bytea':
      // bytea's own text follows the session's bytea_output.
      return `(E'\\\\x' || pg_catalog.encode(${ref}, 'hex'))`;
    case 'money':
      // money's own text follows the session's lc_monetary; its numeric value does not.
      return `(${ref})::numeric::text`;
    case 'timestamptz':
      return `(CASE WHEN pg_catalog.isfinite(${ref}) THEN (pg_catalog.to_json(${ref} AT TIME ZONE 'UTC') #>> '{}') || 'Z' ELSE ${ref}::text END)`;
    case 'timestamp':
    case 'date':
      return `(pg_catalog.to_json(${ref}) #>> '{}')`;
    default:
      return `${ref}::text`;
  }
}

/** JSON string literal text of one value, or the text `null`. to_json(text) escapes control chars. */
function pgJson(row: KeyRow, c: ColumnInfo): string {
  return `coalesce(pg_catalog.to_json(${pgText(`${row}.${quoteIdent(c.name)}`, c)})::text, 'null')`;
}

const PG_KEY_DIALECT: KeyDialect = {
  json: pgJson,
  jsonOfText: (sql) => `coalesce(pg_catalog.to_json((${sql})::text)::text, 'null')`,
  txid: 'pg_catalog.txid_current()::text',
};

const PG_NOW_MS = `pg_catalog.floor(pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()) * 1000)::bigint`;

/** Comment install puts on a capture schema it created; uninstall drops only a schema with it. */
const PG_SCHEMA_MARK = 'created by sluice install: capture staging, error tables and functions';

/** The schema of a source's capture objects: database.captureSchema, default "sluice". */
export function pgCaptureSchema(source: CaptureSource): string {
  const db = source.database;
  return (db.dialect === 'postgres' ? db.captureSchema : undefined) ?? CDC_DEFAULTS.captureSchema;
}

/** Key bytes hashed inline by pgFnvInlineSql; longer keys call the hash function. */
const PG_FNV_INLINE_BYTES = 24;

/**
 * FNV-1a 32 of a key of at most PG_FNV_INLINE_BYTES bytes as one SQL expression (NULL for a
 * longer key): `kb` is the key's UTF-8 bytes and `n` their count (plain references: they are read
 * many times). One unrolled branch per length (`CASE n WHEN 9 THEN <9 steps> ...`), so a key
 * costs its own length in steps of get_byte, XOR, multiply and mask.
 */
export function pgFnvInlineSql(kb: string, n: string): string {
  const branches: string[] = [];
  let h = '2166136261::bigint';
  for (let len = 1; len <= PG_FNV_INLINE_BYTES; len++) {
    h = `((${h} # pg_catalog.get_byte(${kb}, ${len - 1})) * 16777619 & 4294967295)`;
    branches.push(`WHEN ${len} THEN ${h}`);
  }
  return `(CASE ${n} WHEN 0 THEN 2166136261::bigint ${branches.join(' ')} END)`;
}

/** Quoted name of the key hash function of `stagingTable` (one per source, so uninstall can drop it). */
export function pgHashFunctionRef(schema: string, stagingTable: string): string {
  return `${quoteIdent(schema)}.${quoteIdent(pgName(`${stagingTable}_fnv1a32`))}`;
}

/**
 * `<staging>_fnv1a32(text) -> bigint` in `schema`: FNV-1a 32 over the UTF-8 bytes, identical to
 * the JS keyHash(). h < 2^32 and prime < 2^25, so h * prime fits in a bigint before the mask.
 * Keys of up to PG_FNV_INLINE_BYTES bytes take one unrolled branch per length
 * (pgFnvInlineSql); longer ones the byte loop. Why: the loop alone cost about 6 µs a key
 * (measured over 500,000 keys), more than the row insert it serves; the same unrolled expression
 * written into each trigger's INSERT was cheaper per row but made every statement plan it again
 * (1.9 ms per single-row INSERT with statement triggers, measured).
 */
export function pgHashFunctionDdl(schema: string, stagingTable: string): string {
  return `CREATE OR REPLACE FUNCTION ${pgHashFunctionRef(schema, stagingTable)}(k text) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $sluice$
DECLARE
  b bytea := pg_catalog.convert_to(k, 'UTF8');
  n integer := pg_catalog.length(b);
  h bigint := 2166136261;
BEGIN
  IF n <= ${PG_FNV_INLINE_BYTES} THEN
    RETURN ${pgFnvInlineSql('b', 'n')};
  END IF;
  FOR i IN 0 .. n - 1 LOOP
    h := ((h # pg_catalog.get_byte(b, i)) * 16777619) & 4294967295;
  END LOOP;
  RETURN h;
END
$sluice$`;
}

/** CREATE TABLE/INDEX statements for the staging and error tables in `schema`. */
export function pgStagingDdl(schema: string, stagingTable: string, pumps: number): string[] {
  const s = `${quoteIdent(schema)}.${quoteIdent(stagingTable)}`;
  const e = `${quoteIdent(schema)}.${quoteIdent(`${stagingTable}_errors`)}`;
  const common = `table_name text NOT NULL, op text NOT NULL, key text NOT NULL, key_hash bigint NOT NULL,
  before text, after text, txid text NOT NULL, time_ms bigint NOT NULL, attempts integer NOT NULL DEFAULT 0`;
  const stmts = [
    `CREATE TABLE IF NOT EXISTS ${s} (\n  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,\n  ${common}\n)`,
    // Added separately so staging tables created before the error handling get them too.
    `ALTER TABLE ${s} ADD COLUMN IF NOT EXISTS next_attempt_ms bigint, ADD COLUMN IF NOT EXISTS last_error text`,
    `CREATE TABLE IF NOT EXISTS ${e} (\n  id bigint PRIMARY KEY,\n  ${common},\n  error text NOT NULL,\n  parked_time_ms bigint NOT NULL\n)`,
  ];
  // Lets claim() read one pump's rows in id order without scanning the other pumps' backlog.
  if (pumps > 1) {
    stmts.push(
      `CREATE INDEX IF NOT EXISTS ${quoteIdent(pgName(`${stagingTable}_pumps${pumps}_idx`))} ON ${s} ((key_hash % ${pumps}), id)`,
    );
  }
  return stmts;
}

/** Types pgText renders specially; every other type is rendered by its text output. */
const PG_TEXT_TYPES = ['numeric', 'money', 'bytea', 'timestamptz', 'timestamp', 'date'] as const;

/**
 * Session settings pinned on every capture function (SET clauses apply while it runs), so no
 * value's text depends on the writing session: TimeZone, DateStyle, IntervalStyle,
 * extra_float_digits (shortest exact float text) and bytea_output.
 */
const PG_PINNED_SETTINGS = `SET search_path = ${PG_FUNCTION_SEARCH_PATH} SET TimeZone = 'UTC' SET DateStyle = 'ISO, YMD'
SET IntervalStyle = 'iso_8601' SET extra_float_digits = 1 SET bytea_output = 'hex'`;

/**
 * Types whose text pgText makes independent of every session setting by itself. Why not always
 * pin settings: a SET clause is applied and undone at every call; pinning TimeZone alone made a
 * 50,000-row INSERT with capture 1.7x slower (measured, 4.4 s -> 7.4 s on the loaded test box).
 */
const PG_SESSION_FREE_TYPES = new Set([
  'int2',
  'int4',
  'int8',
  'oid',
  'text',
  'varchar',
  'bpchar',
  'char',
  'name',
  'bool',
  'uuid',
  'json',
  'jsonb',
  'numeric',
  'money',
  'timestamptz',
  'timestamp',
  'date',
  'time',
  'timetz',
  'bytea',
  'inet',
  'cidr',
  'macaddr',
  'macaddr8',
  'bit',
  'varbit',
  'xml',
]);

/**
 * SET clauses a capture function needs for `columns`: floats pin extra_float_digits (shortest
 * exact text), intervals IntervalStyle, and any other type (arrays, ranges, enums, composites,
 * extensions, whose text may embed session-dependent values) every setting.
 */
function pgSettingsFor(columns: ColumnInfo[], key: ColumnInfo[]): string {
  const types = new Set([...columns, ...key].map((c) => c.type));
  if (
    [...types].some(
      (t) => !PG_SESSION_FREE_TYPES.has(t) && t !== 'float4' && t !== 'float8' && t !== 'interval',
    )
  ) {
    return PG_PINNED_SETTINGS;
  }
  const sets = [`SET search_path = ${PG_FUNCTION_SEARCH_PATH}`];
  if (types.has('float4') || types.has('float8')) sets.push('SET extra_float_digits = 1');
  if (types.has('interval')) sets.push(`SET IntervalStyle = 'iso_8601'`);
  return sets.join(' ');
}

/** Placeholder for the value reference in rendering templates. */
const REF = '\u00a7';

/** Quoted name of the function that renders images from a table's current columns. */
export function pgDynamicFunctionRef(schema: string, stagingTable: string): string {
  return `${quoteIdent(schema)}.${quoteIdent(pgName(`${stagingTable}_images`))}`;
}

/**
 * `<staging>_images(rel, tbl, op, cols, keycols, keynums, o, n)`: the key texts and images of a
 * row change rendered from the columns `rel` has now (dynamic SQL, slow), used by a capture
 * function when the table's columns changed since install (issue item 9): a dropped or renamed
 * column is left out of the images instead of failing the application's statement, and a new
 * column is captured when the table captures all columns (`cols` NULL). Renderings are pgText's,
 * taken from the same source.
 *
 * Key columns are found by their attribute numbers at install (`keynums`, pg_attribute.attnum,
 * which a RENAME COLUMN keeps), in key order; `keycols` are their names at install, for the
 * error text only. When one of them is gone (DROP COLUMN), the change has no key: rather than
 * staging it under key `[]` (the wrong key, and unordered), the function parks it in the error
 * table under key `*` with both images and an error naming `tbl` (the configured table name),
 * the operation and the column, returns `parked` true, and the caller stages nothing. The
 * application's statement succeeds either way. The catalog is read once per call, which is once
 * per row: this path is taken only after a schema change, until `sluice install`.
 */
export function pgDynamicFunctionDdl(schema: string, stagingTable: string): string {
  const template = (type: string) => quoteLiteral(pgText(REF, { name: '', type, pkPosition: 0 }));
  const typeCase = PG_TEXT_TYPES.map((t) => `WHEN ${quoteLiteral(t)} THEN ${template(t)}`).join(
    '\n      ',
  );
  const staging = `${quoteIdent(schema)}.${quoteIdent(stagingTable)}`;
  const errors = `${quoteIdent(schema)}.${quoteIdent(`${stagingTable}_errors`)}`;
  const fix =
    ', so this change has no key; it was parked here instead of staged under key []: give the table a key (or restore the column) and run sluice install, then requeue or purge it';
  return `CREATE OR REPLACE FUNCTION ${pgDynamicFunctionRef(schema, stagingTable)}(
  rel oid, tbl text, op text, cols text[], keycols text[], keynums int2[], o anyelement, n anyelement,
  OUT ko text, OUT k text, OUT b text, OUT a text, OUT parked boolean)
LANGUAGE plpgsql ${PG_PINNED_SETTINGS} AS $sluice$
DECLARE
  img text[] := ARRAY[NULL, NULL];
  kx text[] := ARRAY[NULL, NULL];
  ke text[];
  pos int;
  missing int;
  r record;
  e text;
  now_ms bigint;
BEGIN
  parked := false;
  FOR side IN 1 .. 2 LOOP
    ke := '{}';
    FOR r IN
      SELECT at.attnum AS num, at.attname::text AS name, coalesce(bt.typname, t.typname)::text AS typ
      FROM pg_attribute at JOIN pg_type t ON t.oid = at.atttypid
      LEFT JOIN pg_type bt ON t.typtype = 'd' AND bt.oid = t.typbasetype
      WHERE at.attrelid = rel AND at.attnum > 0 AND NOT at.attisdropped
      ORDER BY at.attnum
    LOOP
      e := replace(CASE r.typ
      ${typeCase}
      ELSE ${template('text')} END, ${quoteLiteral(REF)}, format('($%s).%I', side, r.name));
      e := 'coalesce(pg_catalog.to_json(' || e || ')::text, ''null'')';
      IF cols IS NULL OR r.name = ANY (cols) THEN
        img[side] := coalesce(img[side] || ' || '','' || ', '') || quote_literal(pg_catalog.to_json(r.name)::text || ':') || ' || ' || e;
      END IF;
      pos := pg_catalog.array_position(keynums, r.num);
      IF pos IS NOT NULL THEN
        ke[pos] := e;
      END IF;
    END LOOP;
    FOR i IN 1 .. coalesce(pg_catalog.cardinality(keynums), 0) LOOP
      IF ke[i] IS NULL THEN
        missing := i;
      ELSE
        kx[side] := coalesce(kx[side] || ' || '','' || ', '') || ke[i];
      END IF;
    END LOOP;
  END LOOP;
  IF op <> 'INSERT' THEN
    EXECUTE 'SELECT ''{'' || ' || coalesce(img[1], '''''') || ' || ''}'', ''['' || ' || coalesce(kx[1], '''''') || ' || '']'''
      INTO b, ko USING o, n;
  END IF;
  IF op <> 'DELETE' THEN
    EXECUTE 'SELECT ''{'' || ' || coalesce(img[2], '''''') || ' || ''}'', ''['' || ' || coalesce(kx[2], '''''') || ' || '']'''
      INTO a, k USING o, n;
  END IF;
  IF missing IS NOT NULL THEN
    now_ms := ${PG_NOW_MS};
    INSERT INTO ${errors} (id, table_name, op, key, key_hash, before, after, txid, time_ms, attempts, error, parked_time_ms)
    VALUES (pg_catalog.nextval(pg_catalog.pg_get_serial_sequence(${quoteLiteral(staging)}, 'id')),
      tbl, pg_catalog.lower(op), '*', ${keyHash('*')}, b, a, pg_catalog.txid_current()::text, now_ms, 0,
      pg_catalog.format('capture of table %s (%s): key column %s no longer exists (dropped after install)',
        pg_catalog.to_json(tbl)::text, pg_catalog.lower(op), pg_catalog.to_json(keycols[missing])::text) || ${quoteLiteral(fix)},
      now_ms);
    ko := NULL;
    k := NULL;
    parked := true;
  END IF;
END
$sluice$`;
}

/** `c`'s attribute number (introspectPgTable sets it); a key column without one is a bug. */
function pgAttnum(t: ResolvedTable, c: ColumnInfo): number {
  if (c.attnum === undefined || !Number.isInteger(c.attnum) || c.attnum <= 0)
    throw new Error(
      `capture table "${t.config.table}": key column "${c.name}" has no attribute number (introspect it with introspectPgTable), attnum=${c.attnum}`,
    );
  return c.attnum;
}

/** Prefix of the comment in a capture function naming its key columns (see pgInstalledKey). */
const PG_KEY_COMMENT = '-- sluice key columns at install: ';

/**
 * The key columns a capture function's source (pg_proc.prosrc) keys on, as install recorded
 * them: names and attribute numbers in key order. Null when the function keys on no column
 * (key strategy none, fixed, transactionId, expression) or predates the record.
 */
export function pgInstalledKey(src: string): { names: string[]; attnums: number[] } | null {
  const at = src.indexOf(PG_KEY_COMMENT);
  if (at < 0) return null;
  const line = src.slice(at + PG_KEY_COMMENT.length).split('\n', 1)[0]!;
  const parsed = JSON.parse(line) as { names: string[]; attnums: number[] };
  return { names: parsed.names, attnums: parsed.attnums };
}

/**
 * The operator of a capture function's column-count check (pgTriggerDdl), only present in the
 * function of a table that captures all columns: describeTable reads it from the source.
 */
const PG_ARITY_MARK = 'OPERATOR(pg_catalog.*=)';

/** Label of a capture function's outer block: its variables are read as `sluice_fn.<name>`. */
const PG_FN_LABEL = 'sluice_fn';

/**
 * CREATE FUNCTION + DROP/CREATE TRIGGER statements for one resolved table. `relnatts` is the
 * table's pg_class.relnatts at install (attribute slots, dropped ones included); when given and
 * the table captures all columns, a changed column count sends the function to the dynamic path,
 * so a column added later is captured too.
 *
 * Trigger levels (CaptureTable.triggers, default CDC_DEFAULTS.triggers): with 'statement',
 * insert and delete are captured by AFTER ... FOR EACH STATEMENT triggers with a transition table
 * (`sluice_new` / `sluice_old`): one INSERT ... SELECT into staging per statement, staging ids in
 * the transition table's order (the statement's row order), the condition as its WHERE over the
 * rows aliased `new` / `old` (`#variable_conflict use_column`, so `NEW.col` names the row's
 * column). Updates always use the row trigger. With 'row' every operation has an AFTER ... FOR
 * EACH ROW trigger and the condition is its WHEN.
 *
 * Schema changes (issue item 9): the static image code runs in a block that catches
 * undefined_column (a dropped or renamed column) and then renders from the current columns
 * (pgDynamicFunctionDdl); a statement trigger does so row by row over its transition table. A
 * column added to a table that captures all columns is detected per statement by relnatts, and
 * per row by comparing the row with a row of the installed columns (`*=` refuses records of
 * different column counts, without a catalog query). No-op updates are suppressed inside the
 * function, not in the trigger's WHEN, because PostgreSQL records a WHEN's columns as
 * dependencies and would refuse (or, with CASCADE, drop the trigger on) ALTER TABLE ... DROP COLUMN.
 */
export function pgTriggerDdl(
  schema: string,
  stagingTable: string,
  t: ResolvedTable,
  relnatts?: number,
): string[] {
  return pgTriggerStatements(schema, stagingTable, t, relnatts).map((s) => s.sql);
}

/**
 * pgTriggerDdl's statements, each with the user-written SQL in it: a row trigger's CREATE TRIGGER
 * has its condition in its WHEN (field and span); the function, whose conditions and key
 * expression CREATE FUNCTION checks for syntax only (as the probes did before), none.
 */
export function pgTriggerStatements(
  schema: string,
  stagingTable: string,
  t: ResolvedTable,
  relnatts?: number,
): TriggerStatement[] {
  const cfg = t.config;
  const staging = `${quoteIdent(schema)}.${quoteIdent(stagingTable)}`;
  const hash = pgHashFunctionRef(schema, stagingTable);
  const fn = `${quoteIdent(schema)}.${quoteIdent(pgFunctionName(stagingTable, cfg.table))}`;
  const table = pgQualifiedTable(cfg.table);
  const tableLit = quoteLiteral(cfg.table);
  const level = cfg.triggers ?? CDC_DEFAULTS.triggers;
  const isStatement = (op: CaptureOperation) =>
    level === 'statement' && (op === 'insert' || op === 'delete');
  // Key strategy none: no order to keep, so the pump is picked by the capture time instead.
  const none = t.keyStrategy.kind === 'none';
  const keyHashSql = (key: string) =>
    none ? `${hash}(pg_catalog.clock_timestamp()::text)` : `${hash}(${key})`;
  const columns = `(table_name, op, key, key_hash, before, after, txid, time_ms)`;
  const stage = (op: CaptureOperation, key: string, before: string, after: string) =>
    `    INSERT INTO ${staging} ${columns}
    VALUES (${tableLit}, '${op}', ${key}, ${keyHashSql(key)}, ${before}, ${after},
      pg_catalog.txid_current()::text, ${PG_NOW_MS});`;
  const byColumns = t.keyStrategy.kind === 'columns';
  const keyNew = keyTextExpr(t, 'NEW', PG_KEY_DIALECT);
  const keyOld = keyTextExpr(t, 'OLD', PG_KEY_DIALECT);
  const imgNew = jsonObjectExpr(t.columns, (c) => pgJson('NEW', c));
  const imgOld = jsonObjectExpr(t.columns, (c) => pgJson('OLD', c));
  const allColumns = cfg.columns === undefined;
  const textArray = (names: string[]) => `ARRAY[${names.map(quoteLiteral).join(', ')}]::text[]`;
  const colsArg = allColumns ? 'NULL::text[]' : textArray(t.columns.map((c) => c.name));
  // Key columns by name (for the error text) and by attribute number (what the dynamic path
  // matches: a RENAME COLUMN keeps it), in key order.
  const keyComment = byColumns
    ? `    ${PG_KEY_COMMENT}${JSON.stringify({ names: t.key.map((c) => c.name), attnums: t.key.map((c) => pgAttnum(t, c)) })}\n`
    : '';
  const keyColsArg = byColumns
    ? `${textArray(t.key.map((c) => c.name))}, ARRAY[${t.key.map((c) => pgAttnum(t, c)).join(', ')}]::int2[]`
    : 'NULL::text[], NULL::int2[]';
  const dyn = pgDynamicFunctionRef(schema, stagingTable);
  const arityChecked = allColumns && relnatts !== undefined;
  // A row of the installed columns; `*=` with the live row raises datatype_mismatch when the
  // table has gained a column (dropped ones raise undefined_column when named).
  const arity = (row: 'NEW' | 'OLD') =>
    `(${row} ${PG_ARITY_MARK} ROW(${t.columns.map((c) => `${row}.${quoteIdent(c.name)}`).join(', ')}))`;
  const arityCheck = arityChecked
    ? `    IF TG_OP = 'DELETE' THEN
      IF ${arity('OLD')} THEN NULL; END IF;
    ELSIF ${arity('NEW')} THEN NULL;
    END IF;\n`
    : '';
  // Keys that name no column (fixed, none, transactionId, expression) are computed outside.
  const keyN = byColumns ? `k := ${keyNew}; ` : '';
  const keyO = byColumns ? `ko := ${keyOld}; ` : '';
  const keysOutside = byColumns
    ? ''
    : `  IF TG_OP <> 'DELETE' THEN k := ${keyNew}; END IF;
  IF TG_OP <> 'INSERT' THEN ko := ${keyOld}; END IF;\n`;
  const suppress = cfg.suppressNoopUpdates ?? CDC_DEFAULTS.suppressNoopUpdates;
  const suppressSql = suppress
    ? `  IF TG_OP = 'UPDATE' AND a = b AND k IS NOT DISTINCT FROM ko THEN RETURN NULL; END IF;\n`
    : '';
  const keyUpdate = cfg.keyUpdate ?? CDC_DEFAULTS.keyUpdate;
  // Case C8: a key change retires the old key (delete on its pump) and creates the new one.
  const update =
    keyUpdate === 'update'
      ? stage('update', 'k', 'b', 'a')
      : `    IF ko IS DISTINCT FROM k THEN
${stage('delete', 'ko', 'b', 'NULL')}
${stage('insert', 'k', 'NULL', 'a')}
    ELSE
${stage('update', 'k', 'b', 'a')}
    END IF;`;

  /** The statement path of `op`: one INSERT ... SELECT over its transition table. */
  const statementSql = (op: 'insert' | 'delete'): string => {
    const alias = op === 'insert' ? 'new' : 'old';
    const transition = op === 'insert' ? 'sluice_new' : 'sluice_old';
    const condition = conditionFor(cfg, op);
    const where = condition !== undefined ? `\n      WHERE ${userSqlParens(condition)}` : '';
    const key = op === 'insert' ? keyNew : keyOld;
    const img = op === 'insert' ? imgNew : imgOld;
    // OFFSET 0 keeps s a subquery, so the key text is rendered once for the key and its hash.
    return `    INSERT INTO ${staging} ${columns}
    SELECT ${tableLit}, '${op}', s.k, ${keyHashSql('s.k')}, ${op === 'insert' ? 'NULL, s.i' : 's.i, NULL'},
      ${PG_FN_LABEL}.txid_v, ${PG_FN_LABEL}.now_v
    FROM (SELECT ${key} AS k, ${img} AS i FROM ${transition} AS ${alias}${where} OFFSET 0) s;`;
  };
  /**
   * The statement path's fallback when the table's columns changed since install: row by row,
   * images from the current columns; the condition and an expression key through EXECUTE over
   * the row aliased new / old (a condition naming a dropped column captures the row).
   */
  const statementFallback = (op: 'insert' | 'delete'): string => {
    const alias = op === 'insert' ? 'new' : 'old';
    const transition = op === 'insert' ? 'sluice_new' : 'sluice_old';
    const condition = conditionFor(cfg, op);
    const keyVar = op === 'insert' ? 'k' : 'ko';
    const overRow = (sql: string) => quoteLiteral(`SELECT ${sql} FROM (SELECT ($1).*) AS ${alias}`);
    const cond =
      condition === undefined
        ? ''
        : `        BEGIN
          EXECUTE ${overRow(userSqlParens(condition))} INTO ok USING r.row;
        EXCEPTION WHEN undefined_column THEN ok := true;
        END;
        CONTINUE WHEN ok IS NOT TRUE;\n`;
    const keyOutside = byColumns
      ? ''
      : `        EXECUTE ${overRow(op === 'insert' ? keyNew : keyOld)} INTO ${keyVar} USING r.row;\n`;
    // The row is cast to the table's type under its current name (TG_RELID), so a renamed
    // table changes nothing here.
    return `      FOR r IN EXECUTE 'SELECT t::' || TG_RELID::pg_catalog.regclass::text || ' AS "row" FROM ${transition} AS t' LOOP
${cond}        SELECT d.ko, d.k, d.b, d.a, d.parked INTO ko, k, b, a, ok FROM ${dyn}(TG_RELID, ${tableLit}, TG_OP, ${colsArg}, ${keyColsArg}, r.row, r.row) d;
        CONTINUE WHEN ok;
${keyOutside}${op === 'insert' ? stage('insert', 'k', 'NULL', 'a') : stage('delete', 'ko', 'b', 'NULL')}
      END LOOP;`;
  };
  const anyStatement =
    (isStatement('insert') && cfg.operations.includes('insert')) ||
    (isStatement('delete') && cfg.operations.includes('delete'));
  const nattsStatement =
    allColumns && relnatts !== undefined
      ? `      IF (SELECT c.relnatts FROM pg_catalog.pg_class c WHERE c.oid = TG_RELID) <> ${relnatts} THEN
        RAISE SQLSTATE '42703';
      END IF;\n`
      : '';
  const statementPath = !anyStatement
    ? ''
    : `  IF TG_LEVEL = 'STATEMENT' THEN
    txid_v := pg_catalog.txid_current()::text;
    now_v := ${PG_NOW_MS};
    -- JIT would compile the INSERT ... SELECT of every bulk statement again (its cost passes
    -- jit_above_cost): seconds for a large expression (measured 20x CPU), never paid back.
    jit_v := pg_catalog.current_setting('jit');
    BEGIN
      jit_v2 := pg_catalog.set_config('jit', 'off', true);
${nattsStatement}      IF TG_OP = 'INSERT' THEN
${isStatement('insert') && cfg.operations.includes('insert') ? statementSql('insert') : '      NULL;'}
      ELSE
${isStatement('delete') && cfg.operations.includes('delete') ? statementSql('delete') : '      NULL;'}
      END IF;
      jit_v2 := pg_catalog.set_config('jit', jit_v, true);
    EXCEPTION WHEN undefined_column THEN
      -- The table's columns changed since install: render each row from the columns it has now.
      IF TG_OP = 'INSERT' THEN
${isStatement('insert') && cfg.operations.includes('insert') ? statementFallback('insert') : '      NULL;'}
      ELSE
${isStatement('delete') && cfg.operations.includes('delete') ? statementFallback('delete') : '      NULL;'}
      END IF;
    END;
    RETURN NULL;
  END IF;\n`;
  const body = `${anyStatement ? '#variable_conflict use_column\n' : ''}<<${PG_FN_LABEL}>>
DECLARE
  k text;
  ko text;
  b text;
  a text;
  txid_v text;
  now_v bigint;
  jit_v text;
  jit_v2 text;
  ok boolean;
  r record;
BEGIN
  IF TG_OP = 'TRUNCATE' THEN
${stage('truncate', `'*'`, 'NULL', 'NULL')}
    RETURN NULL;
  END IF;
${statementPath}  BEGIN
${arityCheck}    IF TG_OP <> 'DELETE' THEN ${keyN}a := ${imgNew}; END IF;
    IF TG_OP <> 'INSERT' THEN ${keyO}b := ${imgOld}; END IF;
  EXCEPTION WHEN undefined_column OR datatype_mismatch THEN
    -- The table's columns changed since install: render from the columns it has now.
    SELECT d.ko, d.k, d.b, d.a, d.parked INTO ko, k, b, a, ok FROM ${dyn}(TG_RELID, ${tableLit}, TG_OP, ${colsArg}, ${keyColsArg}, OLD, NEW) d;
    -- ok: a key column is gone, the dynamic function parked the change in the error table.
${keyComment}    IF ok THEN RETURN NULL; END IF;
  END;
${keysOutside}${suppressSql}  IF TG_OP = 'INSERT' THEN
${stage('insert', 'k', 'NULL', 'a')}
  ELSIF TG_OP = 'UPDATE' THEN
${update}
  ELSE
${stage('delete', 'ko', 'b', 'NULL')}
  END IF;
  RETURN NULL;
END`;
  if (body.includes('$sluice$'))
    throw new Error(`capture table "${cfg.table}": names must not contain "$sluice$"`);
  const out: TriggerStatement[] = [
    {
      sql: `CREATE OR REPLACE FUNCTION ${fn}() RETURNS trigger LANGUAGE plpgsql
SECURITY DEFINER ${pgSettingsFor(t.columns, t.key)} AS $sluice$
${body}
$sluice$`,
      field: 'table',
    },
  ];
  const push = (sql: string) => out.push({ sql, field: 'table' });
  for (const op of ['insert', 'update', 'delete', 'truncate'] as const) {
    const name = quoteIdent(pgTriggerName(schema, stagingTable, op));
    push(`DROP TRIGGER IF EXISTS ${name} ON ${table}`);
    if (!cfg.operations.includes(op)) continue;
    if (op === 'truncate') {
      push(
        `CREATE TRIGGER ${name} AFTER TRUNCATE ON ${table} FOR EACH STATEMENT EXECUTE FUNCTION ${fn}()`,
      );
      continue;
    }
    if (isStatement(op)) {
      const transition = op === 'insert' ? 'NEW TABLE AS sluice_new' : 'OLD TABLE AS sluice_old';
      push(
        `CREATE TRIGGER ${name} AFTER ${op.toUpperCase()} ON ${table} REFERENCING ${transition} FOR EACH STATEMENT\nEXECUTE FUNCTION ${fn}()`,
      );
      continue;
    }
    const head = `CREATE TRIGGER ${name} AFTER ${op.toUpperCase()} ON ${table} FOR EACH ROW`;
    const tail = `\nEXECUTE FUNCTION ${fn}()`;
    const condition = conditionFor(cfg, op);
    if (condition === undefined) {
      push(head + tail);
      continue;
    }
    const from = `${head}\nWHEN (`.length;
    out.push({
      sql: `${head}\nWHEN ${userSqlParens(condition)}${tail}`,
      field: triggerUserSqlField(t, op, false),
      span: [from, from + condition.length],
    });
  }
  return out;
}

/** Introspects `table` (resolved through search_path), attnum included; empty when it does not exist. */
export async function introspectPgTable(
  client: pg.ClientBase,
  table: string,
): Promise<ColumnInfo[]> {
  const res = await client.query<{
    name: string;
    type: string;
    pk_position: number;
    attnum: number;
  }>(
    `SELECT a.attname AS name, coalesce(bt.typname, t.typname)::text AS type, a.attnum::int AS attnum,
       coalesce((SELECT k.n FROM pg_index i, unnest(i.indkey) WITH ORDINALITY AS k(attnum, n)
                 WHERE i.indrelid = a.attrelid AND i.indisprimary AND k.attnum = a.attnum), 0)::int AS pk_position
     FROM pg_attribute a
     JOIN pg_type t ON t.oid = a.atttypid
     LEFT JOIN pg_type bt ON t.typtype = 'd' AND bt.oid = t.typbasetype
     WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped
     ORDER BY a.attnum`,
    [pgQualifiedTable(table)],
  );
  return res.rows.map((r) => ({
    name: r.name,
    type: r.type,
    pkPosition: r.pk_position,
    attnum: r.attnum,
  }));
}

interface PgStagedRow {
  staging_id: string;
  table_name: string;
  op: CaptureOperation;
  key: string;
  key_hash: string;
  before: string | null;
  after: string | null;
  txid: string;
  time_ms: string;
  attempts: number;
}

/**
 * StagingClient over one `pg` connection.
 *
 * claim() is a plain `SELECT ... WHERE key_hash % N = pump ORDER BY id LIMIT n` and ack() a
 * `DELETE ... WHERE id = ANY(ids)`: a pump owns its key partition alone, so no row locks are
 * needed, and the delete runs only when the caller says the target has the rows. Exclusive
 * ownership is enforced: the first claim for a pump index takes the session advisory lock
 * (hash of "sluice.cdc:<schema>.<staging>", pump); a second session claiming the same pump gets
 * an Error after CDC_DEFAULTS.pumpLockWaitMs. (FOR UPDATE SKIP LOCKED was rejected: a second claimer would skip a locked row of a
 * key and take that key's next row, breaking per-key order.) The lock dies with the connection.
 */
export class PgStaging implements StagingClient {
  readonly source: CaptureSource;
  private readonly client: pg.Client;
  private readonly ready: Promise<string>;
  private readonly pumpsHeld = new Set<number>();
  private connectionError: Error | null = null;
  private closed = false;
  /** Initial loads (initial-load.ts): chunks read in one REPEATABLE READ snapshot with the claim. */
  readonly load: LoadHooks = this.loadHooks();
  /** claim() skips `excludeIds` (the pump's pipelined claim). */
  readonly claimSkipsIds = true;

  constructor(source: CaptureSource) {
    validateCaptureSource(source);
    const db = source.database;
    if (db.dialect !== 'postgres')
      throw new Error(`PgStaging needs dialect "postgres", dialect=${db.dialect}`);
    this.source = source;
    // Bounded waits (CDC_DEFAULTS.networkTimeoutMs): a partitioned network answers nothing, and
    // without a client-side timeout a claim would wait for it forever, reported as live.
    this.client = new (pgDriver().Client)({
      connectionString: db.url,
      connectionTimeoutMillis: CDC_DEFAULTS.networkTimeoutMs,
      query_timeout: CDC_DEFAULTS.networkTimeoutMs,
      keepAlive: true,
    });
    // Without a listener a dropped connection's 'error' event would crash the process.
    this.client.on('error', (err: Error) => {
      this.connectionError = err;
    });
    this.ready = this.connect(db.schema);
    // Callers see the failure on their first call; do not let it surface as unhandled.
    this.ready.catch(() => undefined);
  }

  private async connect(schema: string | undefined): Promise<string> {
    await this.client.connect();
    await this.client.query(`SET lock_timeout = ${PG_LOCK_TIMEOUT_MS}`);
    // The server ends this session about 11 s after its client stopped answering (a partition, a
    // killed host) instead of the OS default of hours, so the pump's advisory lock is free for
    // its successor's session by then.
    await this.client.query(
      'SET tcp_keepalives_idle = 5; SET tcp_keepalives_interval = 2; SET tcp_keepalives_count = 3',
    );
    if (schema !== undefined) await this.client.query(`SET search_path TO ${quoteIdent(schema)}`);
    const res = await this.client.query<{ s: string | null }>('SELECT current_schema() AS s');
    const current = res.rows[0]?.s ?? null;
    if (current === null) {
      throw new Error(
        `capture source "${this.source.name}": no current schema (schema ${JSON.stringify(schema ?? null)} does not exist?)`,
      );
    }
    return pgCaptureSchema(this.source);
  }

  /** Schema of the staging table, once connected. */
  async stagingSchema(): Promise<string> {
    return this.open();
  }

  private async open(): Promise<string> {
    if (this.closed) throw new Error(`staging client for source "${this.source.name}" is closed`);
    if (this.connectionError)
      throw new Error(
        `capture source "${this.source.name}": connection lost: ${this.connectionError.message}`,
      );
    return this.ready;
  }

  private stagingRef(schema: string): string {
    return `${quoteIdent(schema)}.${quoteIdent(this.source.stagingTable)}`;
  }

  async install(): Promise<void> {
    const schema = await this.open();
    await this.inTransaction(async () => {
      await this.client.query('SELECT pg_advisory_xact_lock($1)', [INSTALL_LOCK_KEY]);
      // A statement trigger's condition is resolved only when it runs: every table's user SQL
      // is checked first, each refusal at its field, all of them together. A refusal anywhere
      // rolls the whole install back (one transaction).
      const tables: ResolvedTable[] = [];
      const refusals: CaptureTableError[] = [];
      const run = pgProbeRunner(this.client, true);
      for (const cfg of this.source.tables) {
        const resolved = resolveTable(cfg, await introspectPgTable(this.client, cfg.table));
        tables.push(resolved);
        const probes = pgUserSqlProbes(resolved, (await pgTableSchema(this.client, cfg.table))!);
        refusals.push(...(await userSqlRefusals(resolved, probes, run)));
      }
      throwAll(refusals);
      const exists = await this.client.query(
        'SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1',
        [schema],
      );
      if (exists.rowCount === 0) {
        // Marked, so uninstall removes the schema only when install created it.
        await this.client.query(`CREATE SCHEMA ${quoteIdent(schema)}`);
        await this.client.query(
          `COMMENT ON SCHEMA ${quoteIdent(schema)} IS ${quoteLiteral(PG_SCHEMA_MARK)}`,
        );
      }
      await this.client.query(pgHashFunctionDdl(schema, this.source.stagingTable));
      const existed = await this.client.query('SELECT to_regclass($1) IS NOT NULL AS e', [
        this.stagingRef(schema),
      ]);
      for (const stmt of pgStagingDdl(schema, this.source.stagingTable, this.source.pumps))
        await this.client.query(stmt);
      // A staging table created now counts its ids from 1 again: a new installation id.
      const inst = this.installationRef(schema);
      await this.client.query(`CREATE TABLE IF NOT EXISTS ${inst} (id text NOT NULL)`);
      if (existed.rows[0]?.e !== true) await this.client.query(`DELETE FROM ${inst}`);
      await this.client.query(
        `INSERT INTO ${inst} (id) SELECT $1 WHERE NOT EXISTS (SELECT 1 FROM ${inst})`,
        [newInstallationId()],
      );
      await this.client.query(pgDynamicFunctionDdl(schema, this.source.stagingTable));
      for (const resolved of tables) {
        const cfg = resolved.config;
        const natts = await this.client.query<{ n: number }>(
          'SELECT relnatts::int AS n FROM pg_catalog.pg_class WHERE oid = to_regclass($1)',
          [pgQualifiedTable(cfg.table)],
        );
        // This schema's triggers under any name (a previous version's names had no schema in
        // them); pgTriggerDdl creates them again in the same transaction, so no change is missed.
        await this.dropOwnTriggers(schema, cfg);
        const stmts = pgTriggerStatements(
          schema,
          this.source.stagingTable,
          resolved,
          natts.rows[0]?.n,
        );
        for (const stmt of stmts) {
          try {
            await this.client.query(stmt.sql);
          } catch (err) {
            // At the condition when the error's position is in a row trigger's WHEN (one with a
            // subquery is refused at load already), else at the table (e.g. a view: no triggers).
            const at = Number((err as { position?: string }).position) - 1;
            const inSql = stmt.span !== undefined && at >= stmt.span[0] && at < stmt.span[1];
            throw new CaptureTableError(
              `capture table "${cfg.table}": creating its capture function and triggers failed: ${(err as Error).message}`,
              cfg.table,
              inSql ? stmt.field : 'table',
            );
          }
        }
      }
    });
  }

  async uninstall(options: UninstallOptions = {}): Promise<void> {
    const schema = await this.open();
    await this.inTransaction(async () => {
      await this.client.query('SELECT pg_advisory_xact_lock($1)', [INSTALL_LOCK_KEY]);
      for (const cfg of this.source.tables) await this.dropTriggers(schema, cfg);
      if (options.dropStaging) {
        await this.client.query(`DROP TABLE IF EXISTS ${this.stagingRef(schema)}`);
        await this.client.query(
          `DROP TABLE IF EXISTS ${quoteIdent(schema)}.${quoteIdent(`${this.source.stagingTable}_errors`)}`,
        );
        await this.client.query(`DROP TABLE IF EXISTS ${this.load.loadTable}`);
        await this.client.query(`DROP TABLE IF EXISTS ${this.installationRef(schema)}`);
        await this.client.query(
          `DROP FUNCTION IF EXISTS ${pgHashFunctionRef(schema, this.source.stagingTable)}(text)`,
        );
        await this.client.query(
          `DROP FUNCTION IF EXISTS ${pgDynamicFunctionRef(schema, this.source.stagingTable)}(oid, text, text, text[], text[], int2[], anyelement, anyelement)`,
        );
        // The signature before key columns were matched by attribute number (older installs).
        await this.client.query(
          `DROP FUNCTION IF EXISTS ${pgDynamicFunctionRef(schema, this.source.stagingTable)}(oid, text, text[], text[], anyelement, anyelement)`,
        );
        const mark = await this.client.query<{ c: string | null }>(
          `SELECT pg_catalog.obj_description(oid, 'pg_namespace') AS c FROM pg_catalog.pg_namespace WHERE nspname = $1`,
          [schema],
        );
        if (mark.rows[0]?.c === PG_SCHEMA_MARK) {
          // RESTRICT: a schema that still holds anything (another source, a user's object) stays.
          await this.client.query('SAVEPOINT sluice_drop_schema');
          try {
            await this.client.query(`DROP SCHEMA ${quoteIdent(schema)} RESTRICT`);
          } catch {
            await this.client.query('ROLLBACK TO SAVEPOINT sluice_drop_schema');
          }
        }
      }
    });
  }

  /**
   * The triggers on `cfg.table` that call this source's capture function in `schema`, whatever
   * their name (PG_OWN_TRIGGERS_SQL); empty when the table or the function does not exist.
   */
  private async ownTriggers(
    schema: string,
    cfg: CaptureTable,
  ): Promise<{ name: string; enabled: boolean; ops: CaptureOperation[] }[]> {
    const res = await this.client.query<{
      name: string;
      enabled: boolean;
      ops: CaptureOperation[];
    }>(PG_OWN_TRIGGERS_SQL, [
      pgQualifiedTable(cfg.table),
      schema,
      pgFunctionName(this.source.stagingTable, cfg.table),
    ]);
    return res.rows;
  }

  /**
   * Drops this source's triggers on `cfg.table`: those calling its function in `schema` (any
   * name: also a previous version's `sluice_cdc_<staging>_<op>`), and its current names. A
   * trigger of another capture schema on the same table calls that schema's function and stays,
   * even when it has the previous version's name.
   */
  private async dropOwnTriggers(schema: string, cfg: CaptureTable): Promise<void> {
    const exists = await this.client.query<{ r: string | null }>(
      'SELECT to_regclass($1)::text AS r',
      [pgQualifiedTable(cfg.table)],
    );
    if (!exists.rows[0]?.r) return;
    const names = new Set((await this.ownTriggers(schema, cfg)).map((t) => t.name));
    for (const op of ['insert', 'update', 'delete', 'truncate'] as const)
      names.add(pgTriggerName(schema, this.source.stagingTable, op));
    for (const name of names) {
      await this.client.query(
        `DROP TRIGGER IF EXISTS ${quoteIdent(name)} ON ${pgQualifiedTable(cfg.table)}`,
      );
    }
  }

  private async dropTriggers(schema: string, cfg: CaptureTable): Promise<void> {
    await this.dropOwnTriggers(schema, cfg);
    await this.client.query(
      `DROP FUNCTION IF EXISTS ${quoteIdent(schema)}.${quoteIdent(pgFunctionName(this.source.stagingTable, cfg.table))}()`,
    );
  }

  async claim(
    pump: number,
    pumps: number,
    limit: number,
    excludeKeys?: ReadonlySet<string>,
    excludeIds?: readonly string[],
  ): Promise<StagedChange[]> {
    const schema = await this.open();
    checkClaimArgs(pump, pumps, limit);
    if (!this.pumpsHeld.has(pump)) {
      const lockKey = keyHash(`sluice.cdc:${schema}.${this.source.stagingTable}`) | 0;
      const deadline = Date.now() + CDC_DEFAULTS.pumpLockWaitMs;
      for (;;) {
        const got = await this.client.query<{ ok: boolean }>(
          'SELECT pg_try_advisory_lock($1::int, $2::int) AS ok',
          [lockKey, pump],
        );
        if (got.rows[0]?.ok) break;
        if (Date.now() >= deadline) {
          throw new Error(
            `capture source "${this.source.name}": pump ${pump} of staging ${schema}.${this.source.stagingTable} is held by another session (waited ${CDC_DEFAULTS.pumpLockWaitMs} ms)`,
          );
        }
        await new Promise((r) => setTimeout(r, CDC_DEFAULTS.pumpLockRetryMs));
      }
      this.pumpsHeld.add(pump);
    }
    // pumps is a validated integer literal so the planner can use the (key_hash % N, id) index.
    const params: unknown[] = [limit];
    const conds: string[] = [];
    if (pumps > 1) {
      params.push(pump);
      conds.push(`key_hash % ${pumps} = $${params.length}`);
    }
    if (excludeKeys !== undefined && excludeKeys.size > 0) {
      params.push([...excludeKeys]);
      conds.push(`NOT (key = ANY($${params.length}::text[]))`);
    }
    if (excludeIds !== undefined && excludeIds.length > 0) {
      // An unnamed statement is planned with its parameters as constants, so PostgreSQL 14+
      // evaluates this with a hash table of the ids, not a scan of the array per row.
      params.push(excludeIds);
      conds.push(`id <> ALL($${params.length}::bigint[])`);
    }
    const where = conds.length > 0 ? `WHERE ${conds.join(' AND ')}` : '';
    const res = await this.client.query<PgStagedRow>(
      `SELECT id::text AS staging_id, table_name, op, key, key_hash::text AS key_hash, before, after, txid,
              time_ms::text AS time_ms, attempts
       FROM ${this.stagingRef(schema)} ${where} ORDER BY id LIMIT $1`,
      params,
    );
    return res.rows.map((r) => ({
      stagingId: r.staging_id,
      table: r.table_name,
      op: r.op,
      key: r.key,
      keyHash: Number(r.key_hash),
      before: r.before,
      after: r.after,
      txid: r.txid,
      timeMs: Number(r.time_ms),
      attempts: r.attempts,
    }));
  }

  async ack(stagingIds: string[]): Promise<number> {
    const schema = await this.open();
    if (stagingIds.length === 0) return 0;
    try {
      const res = await this.client.query(
        `DELETE FROM ${this.stagingRef(schema)} WHERE id = ANY($1::bigint[])`,
        [stagingIds],
      );
      return res.rowCount ?? 0;
    } catch (err) {
      if ((err as { code?: string }).code !== '55P03') throw err;
      const who = await this.rowLockHolders(schema, stagingIds).catch(
        (e: Error) => `(could not be read: ${e.message})`,
      );
      throw new Error(
        `capture source "${this.source.name}": deleting ${stagingIds.length} shipped rows from ` +
          `${schema}.${this.source.stagingTable} waited lock_timeout ${PG_LOCK_TIMEOUT_MS} ms for row locks held by ${who}`,
      );
    }
  }

  /**
   * The sessions whose open transactions lock some of these staged rows (the rows' xmax is the
   * locking transaction), one description each; a lock shared by several transactions (a
   * multixact) or one released meanwhile is named as such.
   */
  private async rowLockHolders(schema: string, stagingIds: string[]): Promise<string> {
    const res = await this.client.query<{
      pid: number;
      usename: string | null;
      application_name: string | null;
      state: string | null;
      xact_start: Date | null;
      query: string | null;
    }>(
      `SELECT a.pid, a.usename, a.application_name, a.state, a.xact_start, left(a.query, 120) AS query
       FROM pg_catalog.pg_locks l JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
       WHERE l.locktype = 'transactionid' AND l.granted AND l.pid <> pg_catalog.pg_backend_pid()
         AND l.transactionid::text IN (SELECT DISTINCT xmax::text FROM ${this.stagingRef(schema)} WHERE id = ANY($1::bigint[]))`,
      [stagingIds],
    );
    if (res.rows.length === 0) return 'another session (a shared lock, or one released meanwhile)';
    return res.rows
      .map(
        (r) =>
          `pid ${r.pid} (user ${r.usename ?? '?'}, application ${JSON.stringify(r.application_name ?? '')}, ` +
          `${r.state ?? '?'}, transaction since ${r.xact_start ? r.xact_start.toISOString() : '?'}, last query ${JSON.stringify(r.query ?? '')})`,
      )
      .join(', ');
  }

  private errorsRef(schema: string): string {
    return `${quoteIdent(schema)}.${quoteIdent(`${this.source.stagingTable}_errors`)}`;
  }

  async recordFailure(
    stagingId: string,
    attempts: number,
    nextAttemptMs: number,
    error: string,
  ): Promise<void> {
    const schema = await this.open();
    await this.client.query(
      `UPDATE ${this.stagingRef(schema)} SET attempts = $2, next_attempt_ms = $3, last_error = $4 WHERE id = $1::bigint`,
      [stagingId, attempts, nextAttemptMs, error],
    );
  }

  async park(stagingId: string, attempts: number, error: string, nowMs: number): Promise<boolean> {
    const schema = await this.open();
    // One statement: the delete and the insert commit together.
    const res = await this.client.query(
      `WITH moved AS (DELETE FROM ${this.stagingRef(schema)} WHERE id = $1::bigint RETURNING *)
       INSERT INTO ${this.errorsRef(schema)} (id, table_name, op, key, key_hash, before, after, txid, time_ms, attempts, error, parked_time_ms)
       SELECT id, table_name, op, key, key_hash, before, after, txid, time_ms, $2, $3, $4 FROM moved
       ON CONFLICT (id) DO UPDATE SET attempts = EXCLUDED.attempts, error = EXCLUDED.error,
         parked_time_ms = EXCLUDED.parked_time_ms`,
      [stagingId, attempts, error, nowMs],
    );
    return (res.rowCount ?? 0) > 0;
  }

  async heldKeys(pump: number, pumps: number): Promise<HeldKeys> {
    const schema = await this.open();
    checkClaimArgs(pump, pumps, 1);
    const retrying = new Map<string, number>();
    const parked = new Set<string>();
    const failed = await this.client.query<{ key: string; t: string | null }>(
      `SELECT key, min(next_attempt_ms)::text AS t FROM ${this.stagingRef(schema)}
       WHERE attempts > 0 AND key_hash % $1 = $2 GROUP BY key`,
      [pumps, pump],
    );
    for (const r of failed.rows) retrying.set(r.key, Number(r.t ?? 0));
    const held = await this.client.query<{ key: string }>(
      `SELECT DISTINCT key FROM ${this.errorsRef(schema)} WHERE key_hash % $1 = $2`,
      [pumps, pump],
    );
    for (const r of held.rows) parked.add(r.key);
    return { retrying, parked };
  }

  /** WHERE clause of a ParkedSelection, its parameters numbered from $1. */
  private selectionWhere(sel: ParkedSelection): [string, unknown[]] {
    const conds: string[] = [];
    const params: unknown[] = [];
    if (sel.ids !== undefined) {
      params.push(sel.ids);
      conds.push(`id = ANY($${params.length}::bigint[])`);
    }
    if (sel.parkedBeforeMs !== undefined) {
      params.push(sel.parkedBeforeMs);
      conds.push(`parked_time_ms < $${params.length}`);
    }
    return [conds.length > 0 ? `WHERE ${conds.join(' AND ')}` : '', params];
  }

  async listParked(selection: ParkedSelection = {}, limit = 1000): Promise<ParkedChange[]> {
    const schema = await this.open();
    const [where, params] = this.selectionWhere(selection);
    const res = await this.client.query<PgStagedRow & { error: string; parked_time_ms: string }>(
      `SELECT id::text AS staging_id, table_name, op, key, key_hash::text AS key_hash, before, after, txid,
              time_ms::text AS time_ms, attempts, error, parked_time_ms::text AS parked_time_ms
       FROM ${this.errorsRef(schema)} ${where} ORDER BY id LIMIT ${Math.max(1, Math.trunc(limit))}`,
      params,
    );
    return res.rows.map((r) => ({
      stagingId: r.staging_id,
      table: r.table_name,
      op: r.op,
      key: r.key,
      keyHash: Number(r.key_hash),
      before: r.before,
      after: r.after,
      txid: r.txid,
      timeMs: Number(r.time_ms),
      attempts: r.attempts,
      error: r.error,
      parkedTimeMs: Number(r.parked_time_ms),
    }));
  }

  async parkedCount(): Promise<number> {
    const schema = await this.open();
    const res = await this.client.query<{ n: string }>(
      `SELECT count(*)::text AS n FROM ${this.errorsRef(schema)}`,
    );
    return Number(res.rows[0]?.n ?? 0);
  }

  async requeue(selection: ParkedSelection = {}): Promise<number> {
    const schema = await this.open();
    const [where, params] = this.selectionWhere(selection);
    // The original id keeps the change ahead of every later change of its key (ids only grow).
    const res = await this.client.query(
      `WITH moved AS (DELETE FROM ${this.errorsRef(schema)} ${where} RETURNING *)
       INSERT INTO ${this.stagingRef(schema)} (id, table_name, op, key, key_hash, before, after, txid, time_ms, attempts)
       OVERRIDING SYSTEM VALUE
       SELECT id, table_name, op, key, key_hash, before, after, txid, time_ms, 0 FROM moved`,
      params,
    );
    return res.rowCount ?? 0;
  }

  async purge(selection: ParkedSelection = {}): Promise<number> {
    const schema = await this.open();
    const [where, params] = this.selectionWhere(selection);
    const res = await this.client.query(`DELETE FROM ${this.errorsRef(schema)} ${where}`, params);
    return res.rowCount ?? 0;
  }

  async describeTable(table: string): Promise<TableDescription> {
    const schema = await this.open();
    const live = (await introspectPgTable(this.client, table)).map((c) => c.name);
    const fn = await this.client.query<{ src: string }>(
      `SELECT p.prosrc AS src FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
       WHERE n.nspname = $1 AND p.proname = $2`,
      [schema, pgFunctionName(this.source.stagingTable, table)],
    );
    const src = fn.rows[0]?.src;
    if (src === undefined || live.length === 0) return { live, installed: null };
    // The function alone says nothing about capture: its triggers may have been dropped (or,
    // before the capture schema was in their names, replaced by another schema's install).
    const cfg = this.source.tables.find((t) => t.table === table);
    const firing = new Set<string>();
    if (cfg !== undefined) {
      for (const t of await this.ownTriggers(schema, cfg))
        if (t.enabled) for (const op of t.ops) firing.add(op);
    }
    const triggers = {
      captureSchema: schema,
      triggersMissing: (cfg?.operations ?? []).filter((op) => !firing.has(op)),
      // pgTriggerDdl's column-count check (an all-column table) sends a row with an added
      // column to the dynamic path, which renders every current column.
      capturesAddedColumns: cfg?.columns === undefined && src.includes(PG_ARITY_MARK),
    };
    const recorded = pgInstalledKey(src);
    if (recorded === null) return { live, installed: imageColumnsOf(src), ...triggers };
    // The installed key columns by attribute number: renamed (another name) or dropped (none).
    const now = await this.client.query<{ n: number; name: string }>(
      `SELECT a.attnum::int AS n, a.attname::text AS name FROM pg_catalog.pg_attribute a
       WHERE a.attrelid = to_regclass($1) AND a.attnum = ANY ($2::int2[]) AND NOT a.attisdropped`,
      [pgQualifiedTable(table), recorded.attnums],
    );
    const byNum = new Map(now.rows.map((r) => [r.n, r.name]));
    const key = recorded.names.map((installed, i) => ({
      installed,
      live: byNum.get(recorded.attnums[i]!) ?? null,
    }));
    return { live, installed: imageColumnsOf(src), key, ...triggers };
  }

  private installationRef(schema: string): string {
    return `${quoteIdent(schema)}.${quoteIdent(installationTableName(this.source.stagingTable))}`;
  }

  async installationId(): Promise<string> {
    const schema = await this.open();
    const ref = this.installationRef(schema);
    const exists = await this.client.query('SELECT to_regclass($1) IS NOT NULL AS e', [ref]);
    if (exists.rows[0]?.e !== true) return '';
    const res = await this.client.query<{ id: string }>(`SELECT id FROM ${ref} LIMIT 1`);
    return res.rows[0]?.id ?? '';
  }

  async stagedCount(): Promise<number> {
    const schema = await this.open();
    const res = await this.client.query<{ n: string }>(
      `SELECT count(*)::text AS n FROM ${this.stagingRef(schema)}`,
    );
    return Number(res.rows[0]?.n ?? 0);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    try {
      await this.ready;
    } catch {
      // connect failed: nothing to end
    }
    // end() waits for the server's FIN, which a partitioned network never delivers: after
    // networkTimeoutMs the socket is destroyed instead.
    const stream = (this.client as unknown as { connection?: { stream?: { destroy(): void } } })
      .connection?.stream;
    const timer = setTimeout(() => stream?.destroy(), CDC_DEFAULTS.networkTimeoutMs);
    await this.client.end().catch(() => undefined);
    clearTimeout(timer);
  }

  /**
   * The initial-load hooks: the snapshot is a REPEATABLE READ transaction with the settings the
   * capture functions pin (SET LOCAL), so chunk images render exactly as the triggers' do.
   */
  private loadHooks(): LoadHooks {
    // eslint-disable-next-line @typescript-eslint/no-this-alias -- the getter below has its own `this`
    const self = this;
    const query: LoadQuery = async (sql, params = []) => {
      await this.open();
      return (await this.client.query(sql, params)).rows as Record<string, unknown>[];
    };
    return {
      dialect: 'postgres',
      get loadTable(): string {
        return `${quoteIdent(pgCaptureSchema(self.source))}.${quoteIdent(`${self.source.stagingTable}_loads`)}`;
      },
      param: (n) => `$${n}`,
      query,
      snapshot: async (work) => {
        await this.open();
        await this.client
          .query(`BEGIN ISOLATION LEVEL REPEATABLE READ; SET LOCAL TimeZone = 'UTC'; SET LOCAL DateStyle = 'ISO, YMD';
          SET LOCAL IntervalStyle = 'iso_8601'; SET LOCAL extra_float_digits = 1; SET LOCAL bytea_output = 'hex'`);
        try {
          const out = await work(query);
          await this.client.query('COMMIT');
          return out;
        } catch (err) {
          await this.client.query('ROLLBACK').catch(() => undefined);
          throw err;
        }
      },
      resolveLoad: async (cfg) => {
        await this.open();
        const cols = await introspectPgTable(this.client, cfg.table);
        const resolved = resolveTable(cfg, cols);
        const names =
          resolved.keyStrategy.kind === 'columns'
            ? resolved.keyStrategy.columns.map((c) => c.name)
            : [];
        const res =
          names.length === 0
            ? { rows: [] }
            : await this.client.query<{ ok: boolean }>(
                `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_index i WHERE i.indrelid = to_regclass($1) AND i.indisunique
             AND i.indpred IS NULL AND i.indexprs IS NULL
             AND (SELECT array_agg(a.attname::text ORDER BY a.attname) FROM pg_catalog.pg_attribute a
                  WHERE a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)) = (SELECT array_agg(x ORDER BY x) FROM unnest($2::text[]) x))
           AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a WHERE a.attrelid = to_regclass($1)
             AND a.attname = ANY ($2::text[]) AND NOT a.attnotnull) AS ok`,
                [pgQualifiedTable(cfg.table), names],
              );
        return { resolved, chunkKey: chunkKeyOf(resolved, cols, () => res.rows[0]?.ok === true) };
      },
      tableSql: (t: LoadTable) => pgQualifiedTable(t.resolved.config.table),
      chunk: (t: LoadTable, cursor: string[] | null, limit: number) => {
        const r = t.resolved;
        const keyCols = t.chunkKey.map((c) => `NEW.${quoteIdent(c.name)}`);
        const where =
          cursor === null
            ? ''
            : `WHERE (${keyCols.join(', ')}) > (${cursor.map((_, i) => `$${i + 1}`).join(', ')}) `;
        const sql =
          `SELECT ${keyTextExpr(r, 'NEW', PG_KEY_DIALECT)} AS k, ${jsonObjectExpr(r.columns, (c) => pgJson('NEW', c))} AS a, ` +
          `${keyCols.map((k, i) => `${k}::text AS c${i}`).join(', ')} FROM ${pgQualifiedTable(r.config.table)} AS NEW ${where}` +
          `ORDER BY ${keyCols.join(', ')} LIMIT ${Math.trunc(limit)}`;
        return { sql, params: cursor ?? [] };
      },
    };
  }

  private async inTransaction(work: () => Promise<void>): Promise<void> {
    await this.client.query('BEGIN');
    try {
      // DDL (install, uninstall) waits for its locks as long as it takes.
      await this.client.query('SET LOCAL lock_timeout = 0');
      await work();
      await this.client.query('COMMIT');
    } catch (err) {
      await this.client.query('ROLLBACK').catch(() => undefined);
      throw err;
    }
  }
}
