/**
 * MariaDB capture: trigger DDL generation and the staging client over `mysql2`.
 *
 * Per captured table, one AFTER ... FOR EACH ROW trigger per captured row operation (MariaDB
 * has no statement-level triggers and no WHEN clause: the no-op check and `condition` are an IF
 * in the body). Triggers run with their definer's rights, so writers need no grants on staging.
 * They are created with CREATE OR REPLACE TRIGGER, which swaps a trigger under the table's
 * metadata lock: a reinstall never leaves a moment without capture.
 *
 * Every object except the triggers lives in the capture database (`database.captureSchema`,
 * default "sluice"; created by install when missing, marked by its comment, and dropped by
 * uninstall only if install created it and it is empty): the staging and error tables, the
 * FNV-1a function `<staging>_fnv1a32`, and one TRUNCATE guard table per captured table (case C9,
 * below). Unqualified captured tables are in the url's database; others may be named `db.table`.
 *
 * Value text (exact, never through a float, independent of the writing session's time_zone and
 * character set), rendered by {@link mariaDbText}:
 *  - integers, DOUBLE: CAST AS CHAR (DOUBLE prints the shortest text that round-trips);
 *  - DECIMAL(p,s), s > 0: trailing fraction zeros trimmed (-0.500000 -> -0.5, like PostgreSQL);
 *  - FLOAT (single precision): the stored value widened to DOUBLE, e.g. 0.1 -> 0.10000000149011612
 *    (MariaDB's own FLOAT text keeps 6 digits, which loses values);
 *  - TIMESTAMP: ISO 8601 in UTC with `Z`, from UNIX_TIMESTAMP (the stored UTC instant, so the
 *    session time_zone plays no part); DATETIME: ISO 8601 with `T`, no zone; DATE, TIME, YEAR as
 *    printed; the column's fractional digits are kept as declared;
 *  - BIT(n): n binary digits; BINARY/VARBINARY/BLOB types and geometry: `\x` + lower-case hex;
 *  - text, ENUM, SET, JSON, UUID, INET: the characters, converted to utf8mb4.
 *
 * txid is "" (as on SQLite): MariaDB gives SQL no identity of the current transaction
 * (information_schema.INNODB_TRX is a cache refreshed at most every 0.1 s, so it cannot tell two
 * transactions of one session apart).
 *
 * Case C9: MariaDB has no TRUNCATE trigger, so a TRUNCATE cannot be captured. It is refused
 * instead: install creates an empty guard table with a foreign key referencing the captured
 * table's primary key, and InnoDB refuses TRUNCATE of a table that another table references
 * (error 1701 naming the constraint `sluice_capture_refuses_truncate_<table>`). DELETE FROM is
 * captured row by row as usual. Side effect: DROP TABLE of a captured table is refused too
 * until `uninstall`. A session with foreign_key_checks=0 bypasses the guard (documented limit).
 */
import type mysql from 'mysql2/promise';
import { mysqlDriver } from './drivers.js';
import { CDC_DEFAULTS, conditionFor, validateCaptureSource, checkClaimArgs } from './config.js';
import type { CaptureOperation, CaptureSource, CaptureTable, StagedChange } from './config.js';
import { keyHash } from './key-hash.js';
import { parseMariaDbUrl } from './mariadb-url.js';
import {
  CaptureTableError,
  imageColumnsOf,
  resolveTable,
  throwAll,
  triggerUserSqlField,
  userSqlParens,
  userSqlProbes,
  userSqlRefusals,
} from './sql.js';
import type { ColumnInfo, KeyRow, ResolvedTable, TriggerStatement, UserSqlProbe } from './sql.js';

/**
 * The probes of captured table `t`'s user-written SQL on MariaDB/MySQL (engine/cdc/sql.ts
 * userSqlProbes; a bare table name in `database`, the key text of the MariaDB triggers): what
 * install runs before any trigger exists, and `sluice check --live` without installing.
 */
export function mariaDbUserSqlProbes(database: string, t: ResolvedTable): UserSqlProbe[] {
  return userSqlProbes(t, {
    table: mariaDbQualifiedTable(database, t.config.table),
    alias: mariaDbIdent,
    keyRow: mariaDbKeyText(t, 'ROW'),
  });
}
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

type RowOp = Exclude<CaptureOperation, 'truncate'>;
const ROW_OPS: readonly RowOp[] = ['insert', 'update', 'delete'];

/** MariaDB identifiers (tables, triggers, constraints) are at most 64 characters. */
const NAME_CHARS_MAX = 64;

/**
 * sql_mode the triggers are created under (a trigger keeps its creation sql_mode): backslash
 * escapes on (the generated literals rely on them), no ANSI_QUOTES, strict.
 */
const TRIGGER_SQL_MODE = 'STRICT_ALL_TABLES,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION';

/** Named lock (GET_LOCK) serializing installs and uninstalls on one server. */
const INSTALL_LOCK = 'sluice.cdc.install';
/** Seconds install() waits for INSTALL_LOCK. */
const INSTALL_LOCK_WAIT_S = 60;

/** `name` quoted with backticks, embedded backticks doubled. */
export function mariaDbIdent(name: string): string {
  if (name.includes('\u0000')) {
    throw new Error(`identifier must not contain NUL, name=${JSON.stringify(name)}`);
  }
  return `\`${name.replaceAll('`', '``')}\``;
}

/** `'text'` for MariaDB's default sql_mode: backslashes and single quotes escaped. */
export function mariaDbLiteral(text: string): string {
  if (text.includes('\u0000')) {
    throw new Error(`SQL literal must not contain NUL, text=${JSON.stringify(text)}`);
  }
  return `'${text.replaceAll('\\', '\\\\').replaceAll("'", "''")}'`;
}

/** A generated name within 64 characters: long names keep a prefix plus an FNV-1a suffix. */
export function mariaDbName(base: string): string {
  const clean = base.replace(/[^A-Za-z0-9_]/g, '_');
  if (clean.length <= NAME_CHARS_MAX && clean === base) return clean;
  const suffix = keyHash(base).toString(16).padStart(8, '0');
  return `${clean.slice(0, NAME_CHARS_MAX - 9)}_${suffix}`;
}

/** `db.table` -> [`db`, `table`]; a bare name -> [null, name] (resolved in the staging database). */
export function mariaDbSplitTable(table: string): [string | null, string] {
  const dot = table.indexOf('.');
  return dot < 0 ? [null, table] : [table.slice(0, dot), table.slice(dot + 1)];
}

/** `db.table` quoted; a bare name is qualified with `database`. */
export function mariaDbQualifiedTable(database: string, table: string): string {
  const [db, name] = mariaDbSplitTable(table);
  return `${mariaDbIdent(db ?? database)}.${mariaDbIdent(name)}`;
}

/**
 * Trigger name for `op` of `table` capturing into `database`.`stagingTable` (trigger names are
 * per database in MariaDB, not per table, and the capture database is in them: several capture
 * databases may capture one table, each with its own triggers):
 * `sluice_cdc_<database>_<staging>_<table>_<op>_<8 hex>`, the hex an FNV-1a of the exact names
 * and operation (so `a_b` + `c` never shares a name with `a` + `b_c`). Within 64 characters: long
 * names are cut, never the operation or the hash. Versions before this named it
 * `sluice_cdc_<staging>_<table>_<op>`; install and uninstall find those by their body
 * (mariaDbOwnTriggers), never by that name.
 */
export function mariaDbTriggerName(
  database: string,
  stagingTable: string,
  table: string,
  op: RowOp,
): string {
  const hash = keyHash(JSON.stringify([database, stagingTable, table, op]))
    .toString(16)
    .padStart(8, '0');
  const tail = `_${op}_${hash}`;
  const head = `sluice_cdc_${database}_${stagingTable}_${table}`.replace(/[^A-Za-z0-9_]/g, '_');
  return `${head.slice(0, NAME_CHARS_MAX - tail.length)}${tail}`;
}

/** A capture trigger on one table as information_schema.TRIGGERS lists it. */
export interface MariaDbTrigger {
  /** TRIGGER_NAME (in the captured table's database). */
  name: string;
  /** The operation it fires on. */
  op: RowOp;
  /** ACTION_STATEMENT: the body, BEGIN ... END. */
  body: string;
}

/**
 * The capture triggers on `table` (`db.table`, or a bare name in `home`) that stage into
 * `database`.`stagingTable`: named `sluice_cdc_...` and with a body that inserts into that
 * staging table (compared byte for byte). This is how a source tells its own triggers, whatever
 * their name (also a previous version's names without the capture database), from another
 * capture database's on the same table.
 */
export async function mariaDbOwnTriggers(
  conn: mysql.Connection,
  database: string,
  stagingTable: string,
  home: string,
  table: string,
): Promise<MariaDbTrigger[]> {
  const [db, name] = mariaDbSplitTable(table);
  const [rows] = await conn.query<mysql.RowDataPacket[]>(
    `SELECT TRIGGER_NAME AS name, LOWER(EVENT_MANIPULATION) AS op, ACTION_STATEMENT AS body
     FROM information_schema.TRIGGERS WHERE EVENT_OBJECT_SCHEMA = ? AND EVENT_OBJECT_TABLE = ?
     ORDER BY TRIGGER_NAME`,
    [db ?? home, name],
  );
  const marker = `INSERT INTO ${mariaDbIdent(database)}.${mariaDbIdent(stagingTable)} (table_name`;
  return rows
    .map((r) => ({ name: String(r.name), op: String(r.op) as RowOp, body: String(r.body) }))
    .filter((t) => t.name.startsWith('sluice_cdc_') && t.body.includes(marker));
}

/** Name of the TRUNCATE guard table of `table` (in the staging database). */
export function mariaDbGuardName(stagingTable: string, table: string): string {
  return mariaDbName(`${stagingTable}_guard_${table.replace('.', '__')}`);
}

/**
 * Name of the guard's foreign key of `table`; MariaDB's TRUNCATE error names it, so it says why.
 * InnoDB constraint names are unique per database, hence the table in it.
 */
export function mariaDbGuardConstraint(table: string): string {
  return mariaDbName(`sluice_capture_refuses_truncate_${table.replace('.', '__')}`);
}

/** `decimal(18,6)` -> 6; other types 0. */
function decimalScale(type: string): number {
  const m = /^(?:decimal|numeric)\(\s*\d+\s*,\s*(\d+)\s*\)/.exec(type);
  return m ? Number(m[1]) : 0;
}

/** `timestamp(3)` / `datetime(6)` -> 3 / 6; without digits 0. */
function fractionDigits(type: string): number {
  const m = /^\w+\((\d+)\)/.exec(type);
  return m ? Number(m[1]) : 0;
}

const BINARY_TYPES = new Set([
  'binary',
  'varbinary',
  'tinyblob',
  'blob',
  'mediumblob',
  'longblob',
  'geometry',
  'point',
  'linestring',
  'polygon',
  'multipoint',
  'multilinestring',
  'multipolygon',
  'geometrycollection',
]);

const utf8 = (expr: string) => `CAST(${expr} AS CHAR CHARACTER SET utf8mb4)`;

/**
 * Exact text of one value as a utf8mb4 string expression; `ref` is NEW.`col` / OLD.`col`;
 * NULL stays NULL. `c.type` is the column's COLUMN_TYPE, lower case (`decimal(18,6)`,
 * `bigint(20) unsigned`, `timestamp(3)`, `bit(5)`, ...).
 */
export function mariaDbText(ref: string, c: ColumnInfo): string {
  const family = /^[a-z]+/.exec(c.type)?.[0] ?? '';
  switch (family) {
    case 'decimal':
    case 'numeric': {
      if (decimalScale(c.type) === 0) return utf8(ref);
      return `TRIM(TRAILING '.' FROM TRIM(TRAILING '0' FROM ${utf8(ref)}))`;
    }
    case 'float':
      return utf8(`CAST(${ref} AS DOUBLE)`);
    case 'timestamp': {
      // The zero timestamp has UNIX_TIMESTAMP 0; no real TIMESTAMP value has (range starts at 1 s).
      const fsp = fractionDigits(c.type);
      const micros = `CAST(UNIX_TIMESTAMP(${ref}) * 1000000 AS SIGNED)`;
      const utc = `DATE_ADD(TIMESTAMP'1970-01-01 00:00:00', INTERVAL ${micros} MICROSECOND)`;
      const iso = `REPLACE(${utf8(`CAST(${utc} AS DATETIME(${fsp}))`)}, ' ', 'T')`;
      return `IF(UNIX_TIMESTAMP(${ref}) = 0, ${utf8(ref)}, CONCAT(${iso}, 'Z'))`;
    }
    case 'datetime':
      return `REPLACE(${utf8(ref)}, ' ', 'T')`;
    case 'bit': {
      const m = /^bit\((\d+)\)/.exec(c.type);
      return `LPAD(BIN(${ref} + 0), ${m ? Number(m[1]) : 1}, '0')`;
    }
    default:
      if (BINARY_TYPES.has(family)) return `CONCAT('\\\\x', LOWER(HEX(${ref})))`;
      if (/char|text|enum|set|json/.test(family)) return `CONVERT(${ref} USING utf8mb4)`;
      return utf8(ref);
  }
}

/** Families whose text is only digits, signs, `.`, `:`, `-`, `T`, `Z`, `e`: JSON needs no escapes. */
const PLAIN_TEXT_TYPES = new Set([
  'tinyint',
  'smallint',
  'mediumint',
  'int',
  'integer',
  'bigint',
  'decimal',
  'numeric',
  'float',
  'double',
  'real',
  'timestamp',
  'datetime',
  'date',
  'time',
  'year',
  'bit',
]);

/**
 * JSON string literal text of one value, or the text `null`. Text types go through JSON_QUOTE
 * (escapes quotes, backslashes and control characters); the plain families and hex are wrapped
 * in quotes directly, which halves the trigger's cost per column (JSON_QUOTE is the slow part).
 */
function mariaDbJson(row: KeyRow, c: ColumnInfo): string {
  const ref = `${row}.${mariaDbIdent(c.name)}`;
  const family = /^[a-z]+/.exec(c.type)?.[0] ?? '';
  if (BINARY_TYPES.has(family)) {
    return `IFNULL(CONCAT(${mariaDbLiteral('"\\\\x')}, LOWER(HEX(${ref})), '"'), 'null')`;
  }
  if (PLAIN_TEXT_TYPES.has(family))
    return `IFNULL(CONCAT('"', ${mariaDbText(ref, c)}, '"'), 'null')`;
  return `IFNULL(JSON_QUOTE(${mariaDbText(ref, c)}), 'null')`;
}

/** CONCAT('{"c1":', <json c1>, ',"c2":', ..., '}'): the row image as JSON object text. */
function jsonObject(columns: ColumnInfo[], value: (c: ColumnInfo) => string): string {
  const parts = columns.map((c, i) => {
    const name = mariaDbLiteral((i === 0 ? '{' : ',') + JSON.stringify(c.name) + ':');
    return `${name}, ${value(c)}`;
  });
  return `CONCAT(${parts.join(',\n      ')}, '}')`;
}

/** CONCAT('[', <json k1>, ',', ..., ']'): the key as JSON array text. */
function jsonArray(columns: ColumnInfo[], value: (c: ColumnInfo) => string): string {
  return `CONCAT('[', ${columns.map(value).join(`, ',', `)}, ']')`;
}

/**
 * SQL of the staging key text (a JSON array text) of `row` under t's key strategy (see
 * KeyStrategy); an expression key's `ROW.` becomes `row.`. transactionId is refused at load.
 */
function mariaDbKeyText(t: ResolvedTable, row: KeyRow): string {
  const k = t.keyStrategy;
  switch (k.kind) {
    case 'columns':
      return jsonArray(k.columns, (c) => mariaDbJson(row, c));
    case 'none':
      return `'[]'`;
    case 'fixed':
      return mariaDbLiteral(JSON.stringify([k.value]));
    case 'expression':
      return `CONCAT('[', IFNULL(JSON_QUOTE(${utf8(userSqlParens(k.sql.replace(/\bROW\./gi, `${row}.`)))}), 'null'), ']')`;
    case 'transactionId':
      throw new Error(
        `capture table "${t.config.table}": key: transactionId is not supported on mariadb`,
      );
  }
}

/** key_hash of an unkeyed change (key strategy none): random, so changes spread over the pumps. */
const UNKEYED_HASH = 'FLOOR(RAND() * 4294967296)';

/** Capture time, ms since the epoch: the statement's start time, independent of time_zone. */
const MARIADB_NOW_MS = 'FLOOR(@@timestamp * 1000)';

/**
 * `<staging>_fnv1a32(text) -> bigint unsigned` in `database`: FNV-1a 32 over the UTF-8 bytes,
 * identical to the JS keyHash(). h < 2^32 and the prime < 2^25, so h * prime < 2^57 fits.
 */
export function mariaDbHashFunctionRef(database: string, stagingTable: string): string {
  return `${mariaDbIdent(database)}.${mariaDbIdent(mariaDbName(`${stagingTable}_fnv1a32`))}`;
}

/** The hash function of `stagingTable` in `database` (see mariaDbHashFunctionRef). */
export function mariaDbHashFunctionDdl(database: string, stagingTable: string): string {
  // Eight bytes per loop turn in one SET: the stored-program interpreter's cost is per statement.
  let eight = 'h';
  for (let j = 0; j < 8; j++)
    eight = `(((${eight}) ^ ORD(SUBSTRING(b, i + ${j}, 1))) * 16777619) & 4294967295`;
  return `CREATE OR REPLACE FUNCTION ${mariaDbHashFunctionRef(database, stagingTable)}(k LONGTEXT CHARACTER SET utf8mb4)
RETURNS BIGINT UNSIGNED DETERMINISTIC NO SQL SQL SECURITY INVOKER
BEGIN
  DECLARE b LONGBLOB DEFAULT CAST(k AS BINARY);
  DECLARE h BIGINT UNSIGNED DEFAULT 2166136261;
  DECLARE i INT UNSIGNED DEFAULT 1;
  DECLARE n INT UNSIGNED DEFAULT LENGTH(b);
  WHILE i + 7 <= n DO
    SET h = ${eight};
    SET i = i + 8;
  END WHILE;
  WHILE i <= n DO
    SET h = ((h ^ ORD(SUBSTRING(b, i, 1))) * 16777619) & 4294967295;
    SET i = i + 1;
  END WHILE;
  RETURN h;
END`;
}

/** CREATE TABLE statements for the staging and error tables in `database` (IF NOT EXISTS). */
export function mariaDbStagingDdl(database: string, stagingTable: string): string[] {
  const s = `${mariaDbIdent(database)}.${mariaDbIdent(stagingTable)}`;
  const e = `${mariaDbIdent(database)}.${mariaDbIdent(`${stagingTable}_errors`)}`;
  const common = `table_name VARCHAR(255) NOT NULL, op VARCHAR(8) NOT NULL, \`key\` LONGTEXT NOT NULL,
  key_hash BIGINT UNSIGNED NOT NULL, \`before\` LONGTEXT NULL, \`after\` LONGTEXT NULL,
  txid VARCHAR(32) NOT NULL, time_ms BIGINT NOT NULL, attempts INT NOT NULL DEFAULT 0`;
  // utf8mb4_bin: staged text is compared byte for byte (no case folding, no pad-space equality).
  const options = 'ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin';
  return [
    `CREATE TABLE IF NOT EXISTS ${s} (\n  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,\n  ${common}\n) ${options}`,
    // Added separately so staging tables created before the error handling get them too.
    `ALTER TABLE ${s} ADD COLUMN IF NOT EXISTS next_attempt_ms BIGINT NULL, ADD COLUMN IF NOT EXISTS last_error LONGTEXT NULL`,
    `CREATE TABLE IF NOT EXISTS ${e} (\n  id BIGINT UNSIGNED NOT NULL PRIMARY KEY,\n  ${common},\n  error LONGTEXT NOT NULL,\n  parked_time_ms BIGINT NOT NULL\n) ${options}`,
  ];
}

/**
 * CREATE OR REPLACE TRIGGER statements for one resolved table (captured operations) and DROP
 * TRIGGER IF EXISTS for the operations not captured. `database` is the capture database;
 * unqualified captured tables are in `home` (default: the capture database).
 */
export function mariaDbTriggerDdl(
  database: string,
  stagingTable: string,
  t: ResolvedTable,
  home = database,
): string[] {
  return mariaDbTriggerStatements(database, stagingTable, t, home).map((s) => s.sql);
}

/**
 * mariaDbTriggerDdl's statements, each with where a refusal of it points: a trigger at its
 * condition or expression key when it embeds one of them (the IF and the key text are in its
 * body), else at `table`.
 */
export function mariaDbTriggerStatements(
  database: string,
  stagingTable: string,
  t: ResolvedTable,
  home = database,
): TriggerStatement[] {
  const cfg = t.config;
  const [tableDb] = mariaDbSplitTable(cfg.table);
  const triggerDb = mariaDbIdent(tableDb ?? home);
  const staging = `${mariaDbIdent(database)}.${mariaDbIdent(stagingTable)}`;
  const hash = mariaDbHashFunctionRef(database, stagingTable);
  const table = mariaDbQualifiedTable(home, cfg.table);
  const suppress = cfg.suppressNoopUpdates ?? CDC_DEFAULTS.suppressNoopUpdates;
  const out: TriggerStatement[] = [];
  for (const op of ROW_OPS) {
    const name = `${triggerDb}.${mariaDbIdent(mariaDbTriggerName(database, stagingTable, cfg.table, op))}`;
    if (!cfg.operations.includes(op)) {
      out.push({ sql: `DROP TRIGGER IF EXISTS ${name}`, field: 'table' });
      continue;
    }
    const keyOf = (row: 'NEW' | 'OLD') => mariaDbKeyText(t, row);
    const imgOld = jsonObject(t.columns, (c) => mariaDbJson('OLD', c));
    const imgNew = jsonObject(t.columns, (c) => mariaDbJson('NEW', c));
    // `key` is a variable holding the key text (hashed once, stored once).
    const stage = (o: RowOp, key: 'k' | 'ko', before: string, after: string) =>
      `INSERT INTO ${staging} (table_name, op, \`key\`, key_hash, \`before\`, \`after\`, txid, time_ms)
    VALUES (${mariaDbLiteral(cfg.table)}, '${o}', ${key}, ${t.keyStrategy.kind === 'none' ? UNKEYED_HASH : `${hash}(${key})`},
      ${before},
      ${after},
      '', ${MARIADB_NOW_MS});`;
    let body: string;
    if (op === 'insert')
      body = `SET k = ${keyOf('NEW')};
    ${stage('insert', 'k', 'NULL', imgNew)}`;
    else if (op === 'delete')
      body = `SET k = ${keyOf('OLD')};
    ${stage('delete', 'k', imgOld, 'NULL')}`;
    else if ((cfg.keyUpdate ?? CDC_DEFAULTS.keyUpdate) === 'update') {
      body = `SET k = ${keyOf('NEW')};
    ${stage('update', 'k', imgOld, imgNew)}`;
    } else {
      // Case C8: a key change retires the old key (delete on its pump) and creates the new one.
      body = `SET k = ${keyOf('NEW')};
    SET ko = ${keyOf('OLD')};
    IF CAST(ko AS BINARY) <=> CAST(k AS BINARY) THEN
    ${stage('update', 'k', imgOld, imgNew)}
    ELSE
    ${stage('delete', 'ko', imgOld, 'NULL')}
    ${stage('insert', 'k', 'NULL', imgNew)}
    END IF;`;
    }
    const when: string[] = [];
    if (op === 'update' && suppress) {
      const compared = [...t.columns, ...t.key.filter((k) => !t.columns.includes(k))];
      when.push(
        `NOT (${compared
          .map((c) => {
            const col = mariaDbIdent(c.name);
            // Binary: a case-only or trailing-space change is a change whatever the collation.
            return `CAST(${mariaDbText(`OLD.${col}`, c)} AS BINARY) <=> CAST(${mariaDbText(`NEW.${col}`, c)} AS BINARY)`;
          })
          .join('\n      AND ')})`,
      );
    }
    const condition = conditionFor(cfg, op);
    if (condition !== undefined) when.push(condition);
    const whenSql = when.length > 0 ? when.map(userSqlParens).join(' AND ') : 'TRUE';
    out.push({
      sql: `CREATE OR REPLACE TRIGGER ${name} AFTER ${op.toUpperCase()} ON ${table} FOR EACH ROW
BEGIN
  DECLARE k LONGTEXT CHARACTER SET utf8mb4;
  DECLARE ko LONGTEXT CHARACTER SET utf8mb4;
${schemaChangeHandler(database, stagingTable, cfg.table, op)}
  IF ${whenSql} THEN
    ${body}
  END IF;
END`,
      field: triggerUserSqlField(t, op, true),
    });
  }
  return out;
}

/**
 * MariaDB's errors of an SQL text (not of the server or the objects): syntax, unknown column,
 * undeclared variable, unknown function, wrong argument count, unknown table in a name.
 */
const MARIADB_SQL_TEXT_ERRNOS: readonly number[] = [1064, 1054, 1327, 1305, 1582, 1583, 1109];

/** Comment of a capture database created by install (uninstall drops only such a database). */
const CAPTURE_DB_MARK =
  'created by sluice install: capture staging, error and guard tables, functions';

/** MariaDB's error for a column the trigger names that the table no longer has. */
const ER_BAD_FIELD_ERROR = 1054;

/**
 * The trigger's handler for a captured column dropped or renamed after install (MariaDB
 * resolves NEW.col when the trigger runs, so such a trigger would fail every write of the
 * application). The handler lets the application's statement succeed and parks a marker in the
 * error table instead: key `"*"`, no images, the error naming the table, the operation and
 * MariaDB's message, under a staging id of its own (drawn by a staging insert it deletes again
 * in the same transaction). `sluice errors list` shows it; `install` regenerates the triggers.
 * Only error 1054 is handled: any other failure still fails the statement (nothing is lost
 * silently, and a deadlock is never swallowed).
 */
function schemaChangeHandler(
  database: string,
  stagingTable: string,
  table: string,
  op: RowOp,
): string {
  const staging = `${mariaDbIdent(database)}.${mariaDbIdent(stagingTable)}`;
  const errors = `${mariaDbIdent(database)}.${mariaDbIdent(`${stagingTable}_errors`)}`;
  const why = `capture trigger of ${table} (${op}) failed, this change was not captured: `;
  const fix =
    '; the table changed after install (a captured column dropped or renamed): run sluice install';
  return `  DECLARE EXIT HANDLER FOR ${ER_BAD_FIELD_ERROR}
  BEGIN
    DECLARE msg TEXT CHARACTER SET utf8mb4;
    GET DIAGNOSTICS CONDITION 1 msg = MESSAGE_TEXT;
    INSERT INTO ${staging} (table_name, op, \`key\`, key_hash, \`before\`, \`after\`, txid, time_ms)
    VALUES (${mariaDbLiteral(table)}, '${op}', '*', ${keyHash('*')}, NULL, NULL, '', ${MARIADB_NOW_MS});
    INSERT INTO ${errors} (id, table_name, op, \`key\`, key_hash, \`before\`, \`after\`, txid, time_ms, attempts, error, parked_time_ms)
    SELECT id, table_name, op, \`key\`, key_hash, \`before\`, \`after\`, txid, time_ms, 0,
      CONCAT(${mariaDbLiteral(why)}, msg, ${mariaDbLiteral(fix)}), time_ms
    FROM ${staging} WHERE id = LAST_INSERT_ID();
    DELETE FROM ${staging} WHERE id = LAST_INSERT_ID();
  END;`;
}

/** A captured table as introspected: columns, engine, and its primary key's column types. */
export interface MariaDbTableInfo {
  columns: ColumnInfo[];
  /** `CHARACTER SET x COLLATE y` of each text column by name (the guard's foreign key needs them). */
  charsets: Map<string, string>;
  /** Storage engine (`InnoDB`, ...); null when the table does not exist. */
  engine: string | null;
}

/**
 * Introspects `table` (`db.table`, or a bare name in `database`) from information_schema.
 * ColumnInfo.type is COLUMN_TYPE in lower case. Empty columns when the table does not exist.
 */
export async function introspectMariaDbTable(
  conn: mysql.Connection,
  database: string,
  table: string,
): Promise<MariaDbTableInfo> {
  const [db, name] = mariaDbSplitTable(table);
  const [rows] = await conn.query<mysql.RowDataPacket[]>(
    `SELECT c.COLUMN_NAME AS name, LOWER(c.COLUMN_TYPE) AS type, c.CHARACTER_SET_NAME AS cs,
       c.COLLATION_NAME AS coll,
       IFNULL((SELECT k.ORDINAL_POSITION FROM information_schema.KEY_COLUMN_USAGE k
               WHERE k.TABLE_SCHEMA = c.TABLE_SCHEMA AND k.TABLE_NAME = c.TABLE_NAME
                 AND k.CONSTRAINT_NAME = 'PRIMARY' AND k.COLUMN_NAME = c.COLUMN_NAME), 0) AS pk_position
     FROM information_schema.COLUMNS c
     WHERE c.TABLE_SCHEMA = ? AND c.TABLE_NAME = ?
     ORDER BY c.ORDINAL_POSITION`,
    [db ?? database, name],
  );
  const [tables] = await conn.query<mysql.RowDataPacket[]>(
    'SELECT ENGINE AS engine FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?',
    [db ?? database, name],
  );
  return {
    columns: rows.map((r) => ({
      name: String(r.name),
      type: String(r.type),
      pkPosition: Number(r.pk_position),
    })),
    engine: tables[0] ? String(tables[0].engine) : null,
    charsets: new Map(
      rows
        .filter((r) => r.cs !== null && r.coll !== null)
        .map((r) => [String(r.name), `CHARACTER SET ${String(r.cs)} COLLATE ${String(r.coll)}`]),
    ),
  };
}

/**
 * The TRUNCATE guard of one table: an empty InnoDB table in the staging database whose foreign
 * key references the captured table's primary key (same column types), so InnoDB refuses
 * TRUNCATE of the captured table. Throws when the table has no primary key.
 */
export function mariaDbGuardDdl(
  database: string,
  stagingTable: string,
  cfg: CaptureTable,
  info: MariaDbTableInfo,
  home = database,
): string[] {
  const pk = info.columns
    .filter((c) => c.pkPosition > 0)
    .sort((a, b) => a.pkPosition - b.pkPosition);
  if (pk.length === 0) {
    throw new Error(
      `capture table "${cfg.table}": MariaDB needs a primary key on a captured table ` +
        '(its TRUNCATE guard references it; MariaDB has no TRUNCATE trigger)',
    );
  }
  const guard = `${mariaDbIdent(database)}.${mariaDbIdent(mariaDbGuardName(stagingTable, cfg.table))}`;
  const cols = pk
    .map((c) => `${mariaDbIdent(c.name)} ${c.type} ${info.charsets.get(c.name) ?? ''} NULL`)
    .join(', ');
  const list = pk.map((c) => mariaDbIdent(c.name)).join(', ');
  return [
    `DROP TABLE IF EXISTS ${guard}`,
    `CREATE TABLE ${guard} (${cols}, KEY (${list}), CONSTRAINT ${mariaDbIdent(mariaDbGuardConstraint(cfg.table))} ` +
      `FOREIGN KEY (${list}) REFERENCES ${mariaDbQualifiedTable(home, cfg.table)} (${list})) ENGINE=InnoDB`,
  ];
}

/** `1,2,3` from staging ids; throws unless each is decimal digits (they are inlined in SQL). */
function idList(stagingIds: string[]): string {
  for (const id of stagingIds) {
    if (!/^\d{1,20}$/.test(id))
      throw new Error(`staging id must be decimal digits, id=${JSON.stringify(id)}`);
  }
  return stagingIds.join(',');
}

/** WHERE clause and `?` parameters of a ParkedSelection. */
function selectionWhere(sel: ParkedSelection): [string, unknown[]] {
  const conds: string[] = [];
  const params: unknown[] = [];
  if (sel.ids !== undefined)
    conds.push(sel.ids.length === 0 ? 'FALSE' : `id IN (${idList(sel.ids)})`);
  if (sel.parkedBeforeMs !== undefined) {
    conds.push('parked_time_ms < ?');
    params.push(sel.parkedBeforeMs);
  }
  return [conds.length > 0 ? `WHERE ${conds.join(' AND ')}` : '', params];
}

/** A staging or error table row (as selected by claim/listParked) as a StagedChange. */
function stagedChange(r: mysql.RowDataPacket): StagedChange {
  return {
    stagingId: String(r.staging_id),
    table: String(r.table_name),
    op: r.op as CaptureOperation,
    key: String(r.key),
    keyHash: Number(r.key_hash),
    before: r.before === null ? null : String(r.before),
    after: r.after === null ? null : String(r.after),
    txid: String(r.txid),
    timeMs: Number(r.time_ms),
    attempts: Number(r.attempts),
  };
}

/**
 * StagingClient over one mysql2 connection (READ COMMITTED, utf8mb4).
 *
 * claim() is `SELECT ... WHERE key_hash % N = pump ORDER BY id LIMIT n`, a consistent read that
 * takes no locks, and ack() a `DELETE ... WHERE id IN (...)` by primary key (READ COMMITTED: no
 * gap locks, so an ack of ids already gone never blocks the triggers' inserts). A pump owns its
 * key partition alone: its first claim takes the named lock
 * `sluice.cdc.<hash of database.staging>.<pump>` (GET_LOCK, released when the session ends); a
 * second session claiming the same pump gets an Error after CDC_DEFAULTS.pumpLockWaitMs.
 */
export class MariaDbStaging implements StagingClient {
  readonly source: CaptureSource;
  /** The url's database: where unqualified captured tables are. */
  readonly home: string;
  /** The capture database: staging, error and guard tables, the hash function. */
  readonly database: string;
  private readonly ready: Promise<mysql.Connection>;
  private readonly pumpsHeld = new Set<number>();
  private connectionError: Error | null = null;
  private closed = false;
  /** Initial loads (initial-load.ts): chunks read in one consistent snapshot with the claim. */
  readonly load: LoadHooks = this.loadHooks();

  constructor(source: CaptureSource) {
    validateCaptureSource(source);
    const db = source.database;
    if (db.dialect !== 'mariadb' && db.dialect !== 'mysql') {
      throw new Error(`MariaDbStaging needs dialect "mariadb", dialect=${db.dialect}`);
    }
    const url = parseMariaDbUrl(db.url);
    if (typeof url === 'string')
      throw new Error(`capture source "${source.name}": database.url: ${url}`);
    this.source = source;
    this.home = url.database;
    this.database = db.captureSchema ?? CDC_DEFAULTS.captureSchema;
    this.ready = this.connect(url);
    // Callers see the failure on their first call; do not let it surface as unhandled.
    this.ready.catch(() => undefined);
  }

  private async connect(
    url: Exclude<ReturnType<typeof parseMariaDbUrl>, string>,
  ): Promise<mysql.Connection> {
    const conn = await mysqlDriver().createConnection({
      host: url.host,
      port: url.port,
      user: url.user,
      password: url.password,
      database: url.database,
      charset: 'utf8mb4',
      supportBigNumbers: true,
      bigNumberStrings: true,
    });
    // Without a listener a dropped connection's 'error' event would crash the process.
    conn.on('error', (err: Error) => {
      this.connectionError = err;
    });
    try {
      const [rows] = await conn.query<mysql.RowDataPacket[]>('SELECT VERSION() AS v');
      const version = String(rows[0]?.v ?? '');
      if (!/mariadb/i.test(version)) {
        throw new Error(
          `capture source "${this.source.name}": server version ${version} is not MariaDB; ` +
            'the mariadb dialect needs MariaDB >= 10.5 (CREATE OR REPLACE TRIGGER)',
        );
      }
      await conn.query('SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED');
      await conn.query(`SET SESSION sql_mode = '${TRIGGER_SQL_MODE}'`);
    } catch (err) {
      await conn.end().catch(() => undefined);
      throw err;
    }
    return conn;
  }

  private async open(): Promise<mysql.Connection> {
    if (this.closed) throw new Error(`staging client for source "${this.source.name}" is closed`);
    if (this.connectionError) {
      throw new Error(
        `capture source "${this.source.name}": connection lost: ${this.connectionError.message}`,
      );
    }
    return this.ready;
  }

  /** Connects (or fails, naming the source). For openStaging. */
  async connected(): Promise<void> {
    await this.open();
  }

  private stagingRef(): string {
    return `${mariaDbIdent(this.database)}.${mariaDbIdent(this.source.stagingTable)}`;
  }

  async install(): Promise<void> {
    const conn = await this.open();
    await this.withInstallLock(conn, async () => {
      // DDL commits implicitly in MariaDB: check every table before changing anything.
      const resolved: { table: ResolvedTable; info: MariaDbTableInfo }[] = [];
      const refusals: CaptureTableError[] = [];
      for (const cfg of this.source.tables) {
        const info = await introspectMariaDbTable(conn, this.home, cfg.table);
        const table = resolveTable(cfg, info.columns);
        if (info.engine !== 'InnoDB') {
          throw new Error(
            `capture table "${cfg.table}": engine is ${info.engine}; capture needs InnoDB ` +
              '(a change of a non-transactional table survives the rollback of its staging row)',
          );
        }
        // MariaDB resolves a trigger's names only when a write fires it, and a syntax error
        // would stop the DDL below half way (each statement commits): conditions and an
        // expression key are checked here, at their fields, before anything is created
        // (every refusal of every table together).
        const probes = mariaDbUserSqlProbes(this.home, table);
        refusals.push(...(await userSqlRefusals(table, probes, (p) => conn.query(p.sql))));
        resolved.push({ table, info });
      }
      throwAll(refusals);
      await this.createCaptureDatabase(conn);
      await conn.query(mariaDbHashFunctionDdl(this.database, this.source.stagingTable));
      const [had] = await conn.query<mysql.RowDataPacket[]>(
        'SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?',
        [this.database, this.source.stagingTable],
      );
      for (const stmt of mariaDbStagingDdl(this.database, this.source.stagingTable))
        await conn.query(stmt);
      // A staging table created now counts its ids from 1 again: a new installation id.
      const inst = this.installationRef();
      await conn.query(
        `CREATE TABLE IF NOT EXISTS ${inst} (id VARCHAR(64) NOT NULL) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
      );
      if (had.length === 0) await conn.query(`DELETE FROM ${inst}`);
      await conn.query(
        `INSERT INTO ${inst} (id) SELECT ? FROM DUAL WHERE NOT EXISTS (SELECT 1 FROM ${inst})`,
        [newInstallationId()],
      );
      for (const { table, info } of resolved) {
        try {
          const staging = this.source.stagingTable;
          for (const stmt of mariaDbGuardDdl(this.database, staging, table.config, info, this.home))
            await conn.query(stmt);
          for (const stmt of mariaDbTriggerStatements(this.database, staging, table, this.home)) {
            try {
              await conn.query(stmt.sql);
            } catch (err) {
              // A refusal of the trigger's SQL text (MariaDB parses a trigger only here) points
              // at its condition or expression key, when it has one of them.
              const errno = (err as { errno?: number }).errno ?? 0;
              throw new CaptureTableError(
                `capture table "${table.config.table}": install failed: ${(err as Error).message}`,
                table.config.table,
                MARIADB_SQL_TEXT_ERRNOS.includes(errno) ? stmt.field : 'table',
              );
            }
          }
          // This database's triggers under other names (a previous version's had no capture
          // database in them) go only now: until here they captured beside the new ones (a
          // change in between may be staged twice, never lost).
          const current = new Set(
            ROW_OPS.map((op) => mariaDbTriggerName(this.database, staging, table.config.table, op)),
          );
          await this.dropOwnTriggers(conn, table.config.table, (n) => !current.has(n));
        } catch (err) {
          if (err instanceof CaptureTableError) throw err;
          throw new Error(
            `capture table "${table.config.table}": install failed: ${(err as Error).message}`,
          );
        }
      }
    });
  }

  async uninstall(options: UninstallOptions = {}): Promise<void> {
    const conn = await this.open();
    await this.withInstallLock(conn, async () => {
      for (const cfg of this.source.tables) {
        await this.dropOwnTriggers(conn, cfg.table, () => true);
        const guard = mariaDbIdent(mariaDbGuardName(this.source.stagingTable, cfg.table));
        await conn.query(`DROP TABLE IF EXISTS ${mariaDbIdent(this.database)}.${guard}`);
      }
      if (options.dropStaging) {
        await conn.query(`DROP TABLE IF EXISTS ${this.stagingRef()}`);
        await conn.query(`DROP TABLE IF EXISTS ${this.errorsRef()}`);
        await conn.query(`DROP TABLE IF EXISTS ${this.load.loadTable}`);
        await conn.query(`DROP TABLE IF EXISTS ${this.installationRef()}`);
        await conn.query(
          `DROP FUNCTION IF EXISTS ${mariaDbHashFunctionRef(this.database, this.source.stagingTable)}`,
        );
        await this.dropCaptureDatabaseIfOurs(conn);
      }
    });
  }

  /**
   * Drops the triggers on `table` that stage into this source's staging table (any name, see
   * mariaDbOwnTriggers) and whose name `which` accepts, plus its current names when `which`
   * accepts them. Another capture database's triggers on the table stay, whatever their name.
   */
  private async dropOwnTriggers(
    conn: mysql.Connection,
    table: string,
    which: (name: string) => boolean,
  ): Promise<void> {
    const staging = this.source.stagingTable;
    const [tableDb] = mariaDbSplitTable(table);
    const names = new Set(
      (await mariaDbOwnTriggers(conn, this.database, staging, this.home, table)).map((t) => t.name),
    );
    for (const op of ROW_OPS) names.add(mariaDbTriggerName(this.database, staging, table, op));
    for (const name of names) {
      if (!which(name)) continue;
      await conn.query(
        `DROP TRIGGER IF EXISTS ${mariaDbIdent(tableDb ?? this.home)}.${mariaDbIdent(name)}`,
      );
    }
  }

  /** Creates the capture database when missing, marked by its comment as created by install. */
  private async createCaptureDatabase(conn: mysql.Connection): Promise<void> {
    const [rows] = await conn.query<mysql.RowDataPacket[]>(
      'SELECT 1 FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?',
      [this.database],
    );
    if (rows.length > 0) return;
    await conn.query(
      `CREATE DATABASE IF NOT EXISTS ${mariaDbIdent(this.database)} CHARACTER SET utf8mb4 ` +
        `COMMENT ${mariaDbLiteral(CAPTURE_DB_MARK)}`,
    );
  }

  /** Drops the capture database if install created it (its comment) and nothing is left in it. */
  private async dropCaptureDatabaseIfOurs(conn: mysql.Connection): Promise<void> {
    const [mark] = await conn.query<mysql.RowDataPacket[]>(
      'SELECT SCHEMA_COMMENT AS c FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?',
      [this.database],
    );
    if (mark[0]?.c !== CAPTURE_DB_MARK) return;
    const [left] = await conn.query<mysql.RowDataPacket[]>(
      `SELECT (SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ?)
         + (SELECT COUNT(*) FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = ?)
         + (SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = ?)
         + (SELECT COUNT(*) FROM information_schema.EVENTS WHERE EVENT_SCHEMA = ?) AS n`,
      [this.database, this.database, this.database, this.database],
    );
    if (Number(left[0]?.n) === 0) await conn.query(`DROP DATABASE ${mariaDbIdent(this.database)}`);
  }

  private async withInstallLock(conn: mysql.Connection, work: () => Promise<void>): Promise<void> {
    const [got] = await conn.query<mysql.RowDataPacket[]>('SELECT GET_LOCK(?, ?) AS ok', [
      INSTALL_LOCK,
      INSTALL_LOCK_WAIT_S,
    ]);
    if (Number(got[0]?.ok) !== 1) {
      throw new Error(
        `capture source "${this.source.name}": another install holds lock ${INSTALL_LOCK} ` +
          `(waited ${INSTALL_LOCK_WAIT_S} s)`,
      );
    }
    try {
      await work();
    } finally {
      await conn.query('SELECT RELEASE_LOCK(?)', [INSTALL_LOCK]).catch(() => undefined);
    }
  }

  private async holdPump(conn: mysql.Connection, pump: number): Promise<void> {
    const lock = `sluice.cdc.${keyHash(`${this.database}.${this.source.stagingTable}`).toString(16)}.${pump}`;
    const deadline = Date.now() + CDC_DEFAULTS.pumpLockWaitMs;
    for (;;) {
      const [got] = await conn.query<mysql.RowDataPacket[]>('SELECT GET_LOCK(?, 0) AS ok', [lock]);
      if (Number(got[0]?.ok) === 1) break;
      if (Date.now() >= deadline) {
        const staging = `${this.database}.${this.source.stagingTable}`;
        throw new Error(
          `capture source "${this.source.name}": pump ${pump} of staging ${staging} ` +
            `is held by another session (waited ${CDC_DEFAULTS.pumpLockWaitMs} ms)`,
        );
      }
      await new Promise((r) => setTimeout(r, CDC_DEFAULTS.pumpLockRetryMs));
    }
    this.pumpsHeld.add(pump);
  }

  async claim(
    pump: number,
    pumps: number,
    limit: number,
    excludeKeys?: ReadonlySet<string>,
  ): Promise<StagedChange[]> {
    const conn = await this.open();
    checkClaimArgs(pump, pumps, limit);
    if (!this.pumpsHeld.has(pump)) await this.holdPump(conn, pump);
    const conds: string[] = [];
    const params: unknown[] = [];
    if (pumps > 1) {
      conds.push('key_hash % ? = ?');
      params.push(pumps, pump);
    }
    if (excludeKeys !== undefined && excludeKeys.size > 0) {
      conds.push('`key` NOT IN (?)');
      params.push([...excludeKeys]);
    }
    params.push(limit);
    const [rows] = await conn.query<mysql.RowDataPacket[]>(
      `SELECT CAST(id AS CHAR) AS staging_id, table_name, op, \`key\`, key_hash, \`before\`, \`after\`, txid, time_ms, attempts
       FROM ${this.stagingRef()} ${conds.length > 0 ? `WHERE ${conds.join(' AND ')}` : ''} ORDER BY id LIMIT ?`,
      params,
    );
    return rows.map((r) => stagedChange(r));
  }

  async ack(stagingIds: string[]): Promise<number> {
    const conn = await this.open();
    if (stagingIds.length === 0) return 0;
    const [res] = await conn.query<mysql.ResultSetHeader>(
      `DELETE FROM ${this.stagingRef()} WHERE id IN (${idList(stagingIds)})`,
    );
    return res.affectedRows;
  }

  private errorsRef(): string {
    return `${mariaDbIdent(this.database)}.${mariaDbIdent(`${this.source.stagingTable}_errors`)}`;
  }

  async recordFailure(
    stagingId: string,
    attempts: number,
    nextAttemptMs: number,
    error: string,
  ): Promise<void> {
    const conn = await this.open();
    await conn.query(
      `UPDATE ${this.stagingRef()} SET attempts = ?, next_attempt_ms = ?, last_error = ? WHERE id = ${idList([stagingId])}`,
      [attempts, nextAttemptMs, error],
    );
  }

  async park(stagingId: string, attempts: number, error: string, nowMs: number): Promise<boolean> {
    const conn = await this.open();
    const id = idList([stagingId]);
    return this.inTransaction(conn, async () => {
      await conn.query(
        `INSERT INTO ${this.errorsRef()} (id, table_name, op, \`key\`, key_hash, \`before\`, \`after\`, txid, time_ms, attempts, error, parked_time_ms)
         SELECT id, table_name, op, \`key\`, key_hash, \`before\`, \`after\`, txid, time_ms, ?, ?, ? FROM ${this.stagingRef()} WHERE id = ${id}
         ON DUPLICATE KEY UPDATE attempts = VALUES(attempts), error = VALUES(error), parked_time_ms = VALUES(parked_time_ms)`,
        [attempts, error, nowMs],
      );
      const [del] = await conn.query<mysql.ResultSetHeader>(
        `DELETE FROM ${this.stagingRef()} WHERE id = ${id}`,
      );
      return del.affectedRows > 0;
    });
  }

  async heldKeys(pump: number, pumps: number): Promise<HeldKeys> {
    const conn = await this.open();
    checkClaimArgs(pump, pumps, 1);
    const retrying = new Map<string, number>();
    const parked = new Set<string>();
    const [failed] = await conn.query<mysql.RowDataPacket[]>(
      `SELECT \`key\`, MIN(next_attempt_ms) AS t FROM ${this.stagingRef()} WHERE attempts > 0 AND key_hash % ? = ? GROUP BY \`key\``,
      [pumps, pump],
    );
    for (const r of failed) retrying.set(String(r.key), Number(r.t ?? 0));
    const [held] = await conn.query<mysql.RowDataPacket[]>(
      `SELECT DISTINCT \`key\` FROM ${this.errorsRef()} WHERE key_hash % ? = ?`,
      [pumps, pump],
    );
    for (const r of held) parked.add(String(r.key));
    return { retrying, parked };
  }

  async listParked(selection: ParkedSelection = {}, limit = 1000): Promise<ParkedChange[]> {
    const conn = await this.open();
    const [where, params] = selectionWhere(selection);
    const [rows] = await conn.query<mysql.RowDataPacket[]>(
      `SELECT CAST(id AS CHAR) AS staging_id, table_name, op, \`key\`, key_hash, \`before\`, \`after\`, txid, time_ms, attempts,
         error, parked_time_ms
       FROM ${this.errorsRef()} ${where} ORDER BY id LIMIT ${Math.max(1, Math.trunc(limit))}`,
      params,
    );
    return rows.map((r) => ({
      ...stagedChange(r),
      error: String(r.error),
      parkedTimeMs: Number(r.parked_time_ms),
    }));
  }

  async parkedCount(): Promise<number> {
    const conn = await this.open();
    const [rows] = await conn.query<mysql.RowDataPacket[]>(
      `SELECT COUNT(*) AS n FROM ${this.errorsRef()}`,
    );
    return Number(rows[0]?.n ?? 0);
  }

  async requeue(selection: ParkedSelection = {}): Promise<number> {
    const conn = await this.open();
    const [where, params] = selectionWhere(selection);
    return this.inTransaction(conn, async () => {
      // FOR UPDATE: the rows copied are the rows deleted, whatever parks meanwhile.
      const [rows] = await conn.query<mysql.RowDataPacket[]>(
        `SELECT CAST(id AS CHAR) AS id FROM ${this.errorsRef()} ${where} FOR UPDATE`,
        params,
      );
      if (rows.length === 0) return 0;
      const ids = idList(rows.map((r) => String(r.id)));
      // The original id keeps the change ahead of every later change of its key (ids only grow).
      await conn.query(
        `INSERT INTO ${this.stagingRef()} (id, table_name, op, \`key\`, key_hash, \`before\`, \`after\`, txid, time_ms, attempts)
         SELECT id, table_name, op, \`key\`, key_hash, \`before\`, \`after\`, txid, time_ms, 0 FROM ${this.errorsRef()} WHERE id IN (${ids})`,
      );
      const [del] = await conn.query<mysql.ResultSetHeader>(
        `DELETE FROM ${this.errorsRef()} WHERE id IN (${ids})`,
      );
      return del.affectedRows;
    });
  }

  async purge(selection: ParkedSelection = {}): Promise<number> {
    const conn = await this.open();
    const [where, params] = selectionWhere(selection);
    const [res] = await conn.query<mysql.ResultSetHeader>(
      `DELETE FROM ${this.errorsRef()} ${where}`,
      params,
    );
    return res.affectedRows;
  }

  /**
   * The initial-load hooks: the snapshot is a REPEATABLE READ transaction started WITH
   * CONSISTENT SNAPSHOT (the session stays READ COMMITTED otherwise). Cursor values travel as
   * text (hex for binary keys) and are cast back to the column's type, so a BIGINT key is never
   * compared as a double.
   */
  private loadHooks(): LoadHooks {
    // eslint-disable-next-line @typescript-eslint/no-this-alias -- the getter below has its own `this`
    const self = this;
    const query: LoadQuery = async (sql, params = []) => {
      const conn = await this.open();
      const [rows] = await conn.query(sql, params);
      return Array.isArray(rows) ? (rows as Record<string, unknown>[]) : [];
    };
    const family = (c: ColumnInfo) => /^[a-z]+/.exec(c.type)?.[0] ?? '';
    const cursorOf = (c: ColumnInfo, ref: string) =>
      BINARY_TYPES.has(family(c)) ? `HEX(${ref})` : utf8(ref);
    const paramOf = (c: ColumnInfo) => {
      const f = family(c);
      if (BINARY_TYPES.has(f)) return 'UNHEX(?)';
      if (/int$/.test(f))
        return c.type.includes('unsigned') ? 'CAST(? AS UNSIGNED)' : 'CAST(? AS SIGNED)';
      if (f === 'decimal' || f === 'numeric') return 'CAST(? AS DECIMAL(65,30))';
      if (f === 'float' || f === 'double' || f === 'real') return 'CAST(? AS DOUBLE)';
      return '?';
    };
    return {
      dialect: 'mariadb',
      get loadTable(): string {
        return `${mariaDbIdent(self.database)}.${mariaDbIdent(`${self.source.stagingTable}_loads`)}`;
      },
      param: () => '?',
      query,
      snapshot: async (work) => {
        const conn = await this.open();
        await conn.query('SET TRANSACTION ISOLATION LEVEL REPEATABLE READ');
        await conn.query('START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY');
        try {
          const out = await work(query);
          await conn.query('COMMIT');
          return out;
        } catch (err) {
          await conn.query('ROLLBACK').catch(() => undefined);
          throw err;
        }
      },
      resolveLoad: async (cfg) => {
        const conn = await this.open();
        const cols = (await introspectMariaDbTable(conn, this.home, cfg.table)).columns;
        // A captured MariaDB table always has a primary key (the TRUNCATE guard references it).
        const resolved = resolveTable(cfg, cols);
        return { resolved, chunkKey: chunkKeyOf(resolved, cols, () => false) };
      },
      tableSql: (t: LoadTable) => mariaDbQualifiedTable(this.home, t.resolved.config.table),
      chunk: (t: LoadTable, cursor: string[] | null, limit: number) => {
        const r = t.resolved;
        const refs = t.chunkKey.map((c) => `NEW.${mariaDbIdent(c.name)}`);
        const params: unknown[] = [];
        let where = '';
        if (cursor !== null) {
          // Expanded (a > x OR a = x AND b > y ...): MariaDB's range optimizer does not take row comparisons.
          const ors = t.chunkKey.map((c, i) => {
            const ands = t.chunkKey.slice(0, i).map((p, j) => {
              params.push(cursor[j]);
              return `${refs[j]} = ${paramOf(p)}`;
            });
            params.push(cursor[i]);
            return `(${[...ands, `${refs[i]} > ${paramOf(c)}`].join(' AND ')})`;
          });
          where = `WHERE ${ors.join(' OR ')} `;
        }
        const sql =
          `SELECT ${mariaDbKeyText(r, 'NEW')} AS k, ${jsonObject(r.columns, (c) => mariaDbJson('NEW', c))} AS a, ` +
          `${t.chunkKey.map((c, i) => `${cursorOf(c, refs[i]!)} AS c${i}`).join(', ')} FROM ${mariaDbQualifiedTable(this.home, r.config.table)} AS NEW ${where}` +
          `ORDER BY ${refs.join(', ')} LIMIT ${Math.trunc(limit)}`;
        return { sql, params };
      },
    };
  }

  private async inTransaction<T>(conn: mysql.Connection, work: () => Promise<T>): Promise<T> {
    await conn.query('BEGIN');
    try {
      const out = await work();
      await conn.query('COMMIT');
      return out;
    } catch (err) {
      await conn.query('ROLLBACK').catch(() => undefined);
      throw err;
    }
  }

  async describeTable(table: string): Promise<TableDescription> {
    const conn = await this.open();
    const live = (await introspectMariaDbTable(conn, this.home, table)).columns.map((c) => c.name);
    const staging = this.source.stagingTable;
    const own = await mariaDbOwnTriggers(conn, this.database, staging, this.home, table);
    // Any one trigger tells: every captured operation's trigger carries the same image columns.
    const first = mariaDbTriggerName(this.database, staging, table, 'insert');
    const body = own.find((t) => t.name === first) ?? own[0];
    const cfg = this.source.tables.find((t) => t.table === table);
    const wanted = (cfg?.operations ?? []).filter((op): op is RowOp => op !== 'truncate');
    const missing = wanted.filter((op) => !own.some((t) => t.op === op));
    if (body === undefined) {
      // No trigger at all: installed, and its triggers dropped, when its TRUNCATE guard is there.
      const [guard] = await conn.query<mysql.RowDataPacket[]>(
        'SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?',
        [this.database, mariaDbGuardName(staging, table)],
      );
      if (guard.length === 0 || live.length === 0) return { live, installed: null };
      return { live, installed: null, captureSchema: this.database, triggersMissing: missing };
    }
    return {
      live,
      installed: imageColumnsOf(body.body),
      captureSchema: this.database,
      triggersMissing: missing,
    };
  }

  private installationRef(): string {
    return `${mariaDbIdent(this.database)}.${mariaDbIdent(installationTableName(this.source.stagingTable))}`;
  }

  async installationId(): Promise<string> {
    const conn = await this.open();
    const [had] = await conn.query<mysql.RowDataPacket[]>(
      'SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?',
      [this.database, installationTableName(this.source.stagingTable)],
    );
    if (had.length === 0) return '';
    const [rows] = await conn.query<mysql.RowDataPacket[]>(
      `SELECT id FROM ${this.installationRef()} LIMIT 1`,
    );
    const id: unknown = rows[0]?.id;
    return typeof id === 'string' ? id : '';
  }

  async stagedCount(): Promise<number> {
    const conn = await this.open();
    const [rows] = await conn.query<mysql.RowDataPacket[]>(
      `SELECT COUNT(*) AS n FROM ${this.stagingRef()}`,
    );
    return Number(rows[0]?.n ?? 0);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    let conn: mysql.Connection;
    try {
      conn = await this.ready;
    } catch {
      return; // connect failed: nothing to end
    }
    await conn.end().catch(() => undefined);
  }
}
