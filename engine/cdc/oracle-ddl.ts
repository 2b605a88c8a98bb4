/**
 * Oracle capture DDL, generated from the config and the introspected columns, without a server
 * (oracle.ts runs it). After MOVEX CDC on Oracle: one COMPOUND trigger per captured table whose
 * row section renders the row images into PL/SQL collections and whose AFTER STATEMENT section
 * (and every FLUSH_ROWS rows) writes them into the staging table with one FORALL INSERT, so a
 * 50,000-row statement costs 50 bulk inserts instead of 50,000 single ones.
 *
 * Every object lives in the capture schema (`database.captureSchema`, default `SLUICE`; in
 * Oracle a schema is a user), the triggers included (a trigger may be owned by another schema
 * than its table's: CREATE ANY TRIGGER): the staging table `<STAGING>`, the error table
 * `<STAGING>_ERRORS`, the package `<STAGING>_PKG` (value rendering, JSON string quoting, the
 * FNV-1a key hash), one compound trigger `<STAGING>_T_<TABLE>` per captured table and one
 * BEFORE TRUNCATE schema trigger `<STAGING>_G_<TABLE>` per captured table (case C9: Oracle has
 * no TRUNCATE trigger on a table, so TRUNCATE of a captured table is refused). The staging id is
 * an identity column (its sequence is the table's and goes with it).
 *
 * Names: configured names are unquoted identifiers and so upper-cased, as Oracle reads them
 * (`ledger` is LEDGER, `app.ledger` APP.LEDGER); a part written in double quotes is kept exact.
 * Column names in images and in `columns`/`key`: a column whose dictionary name is a plain
 * upper-case identifier is named in lower case (LEDGER.HOLDER is `holder`, as the other dialects
 * name it), any other exactly as the dictionary has it.
 *
 * Value text (exact; independent of the writing session's NLS settings and time zone):
 * see {@link oracleRender} and the README's Oracle table. NEVER RUN AGAINST A LIVE ORACLE here:
 * the generated text is checked structurally by test/cdc-oracle-ddl.test.ts only.
 */
import { CDC_DEFAULTS, conditionFor } from './config.js';
import type { CaptureOperation, CaptureTable } from './config.js';
import { keyHash } from './key-hash.js';
import { CaptureTableError, userSqlParens } from './sql.js';
import type { ColumnInfo, ResolvedTable } from './sql.js';

type RowOp = Exclude<CaptureOperation, 'truncate'>;

/** Oracle identifiers are at most 128 bytes (12.2 and later). */
export const ORACLE_NAME_BYTES_MAX = 128;

/** Rows a compound trigger buffers before it flushes mid-statement (bounds its PGA memory). */
export const ORACLE_FLUSH_ROWS = 1000;

/** Longest key text, bytes (the staging KEY column is VARCHAR2(4000 BYTE)). */
export const ORACLE_KEY_BYTES_MAX = 4000;

/** The error a truncate guard raises (RAISE_APPLICATION_ERROR range -20000..-20999). */
export const ORACLE_TRUNCATE_ERROR = -20901;

/** The error a trigger raises for a key text over ORACLE_KEY_BYTES_MAX. */
export const ORACLE_KEY_ERROR = -20902;

/** One column of an Oracle table, as introspected from ALL_TAB_COLUMNS. */
export interface OracleColumn extends ColumnInfo {
  /** Dictionary name (exact case), for SQL. `name` is the image / config name. */
  sqlName: string;
  /** DATA_TYPE, e.g. `NUMBER`, `TIMESTAMP(6) WITH TIME ZONE`, `RAW`. */
  type: string;
  /** DATA_LENGTH in bytes (VARCHAR2, CHAR, RAW: the declared length). */
  dataLength: number;
  /** CHAR_LENGTH (N types: characters). */
  charLength: number;
  /** DATA_SCALE (TIMESTAMP: fractional digits); null when not set. */
  dataScale: number | null;
}

/** `"NAME"`; throws on a name Oracle cannot quote (a double quote, NUL, empty, over 128 bytes). */
export function oracleIdent(name: string): string {
  if (
    name.length === 0 ||
    /["\u0000]/.test(name) ||
    Buffer.byteLength(name) > ORACLE_NAME_BYTES_MAX
  )
    throw new Error(
      `Oracle identifier must be 1-${ORACLE_NAME_BYTES_MAX} bytes without double quotes or NUL, name=${JSON.stringify(name)}`,
    );
  return `"${name}"`;
}

/** `'text'` with embedded single quotes doubled; throws on NUL. */
export function oracleLiteral(text: string): string {
  if (text.includes('\u0000'))
    throw new Error(`SQL literal must not contain NUL, text=${JSON.stringify(text)}`);
  return `'${text.replaceAll("'", "''")}'`;
}

/** How Oracle reads one name part: `"Exact"` kept, anything else upper-cased. */
export function oracleNamePart(part: string): string {
  const m = /^"([^"]+)"$/.exec(part);
  return m ? m[1]! : part.toUpperCase();
}

/** `owner.table` / `table` -> dictionary owner and table name; a bare name is in `owner`. */
export function oracleSplitTable(table: string, owner: string): { owner: string; table: string } {
  const parts = table.match(/"[^"]*"|[^.]+/g) ?? [table];
  if (parts.length === 2)
    return { owner: oracleNamePart(parts[0]!), table: oracleNamePart(parts[1]!) };
  return { owner, table: oracleNamePart(table) };
}

/** `"OWNER"."TABLE"` of a captured table. */
export function oracleQualifiedTable(table: string, owner: string): string {
  const t = oracleSplitTable(table, owner);
  return `${oracleIdent(t.owner)}.${oracleIdent(t.table)}`;
}

/** Image / config name of a dictionary column name (see the module comment). */
export function oracleColumnName(sqlName: string): string {
  return /^[A-Z][A-Z0-9_$#]*$/.test(sqlName) ? sqlName.toLowerCase() : sqlName;
}

/** A generated name within 128 bytes: a long one keeps a prefix plus an FNV-1a suffix. */
export function oracleName(base: string): string {
  const clean = base.toUpperCase().replace(/[^A-Z0-9_]/g, '_');
  if (clean.length <= ORACLE_NAME_BYTES_MAX && clean === base.toUpperCase()) return clean;
  return `${clean.slice(0, ORACLE_NAME_BYTES_MAX - 9)}_${keyHash(base).toString(16).padStart(8, '0').toUpperCase()}`;
}

/** The capture schema's names of one source (all dictionary names, unquoted). */
export interface OracleNames {
  /** Capture schema (user). */
  schema: string;
  /** Staging table. */
  staging: string;
  /** Error table. */
  errors: string;
  /** One-row table of the installation id (engine/cdc/staging.ts). */
  installation: string;
  /** Package of helper functions. */
  pkg: string;
}

/** Names of the capture objects of `stagingTable` in `captureSchema` (both upper-cased). */
export function oracleNames(captureSchema: string, stagingTable: string): OracleNames {
  const staging = stagingTable.toUpperCase();
  return {
    schema: captureSchema.toUpperCase(),
    staging,
    errors: oracleName(`${staging}_ERRORS`),
    installation: oracleName(`${staging}_INSTALLATION`),
    pkg: oracleName(`${staging}_PKG`),
  };
}

/** `"SCHEMA"."NAME"`. */
export function oracleRef(n: OracleNames, name: string): string {
  return `${oracleIdent(n.schema)}.${oracleIdent(name)}`;
}

/** Name of the compound capture trigger of `table` (in the capture schema). */
export function oracleTriggerName(n: OracleNames, table: string, owner: string): string {
  const t = oracleSplitTable(table, owner);
  return oracleName(`${n.staging}_T_${t.owner}_${t.table}`);
}

/** Name of the TRUNCATE guard trigger of `table` (in the capture schema). */
export function oracleGuardName(n: OracleNames, table: string, owner: string): string {
  const t = oracleSplitTable(table, owner);
  return oracleName(`${n.staging}_G_${t.owner}_${t.table}`);
}

/** Marker line in every capture trigger: the image column names, for `sluice check --live`. */
export const ORACLE_COLUMNS_MARK = '-- sluice image columns: ';

/** The image columns a capture trigger's source names (its ORACLE_COLUMNS_MARK line); null if none. */
export function oracleImageColumnsOf(source: string): string[] | null {
  const at = source.indexOf(ORACLE_COLUMNS_MARK);
  if (at < 0) return null;
  const line = source.slice(at + ORACLE_COLUMNS_MARK.length).split('\n')[0]!;
  return JSON.parse(line) as string[];
}

/** Column types the capture renders (DATA_TYPE without precision). Others are refused at install. */
export const ORACLE_SUPPORTED_TYPES = [
  'NUMBER',
  'FLOAT',
  'BINARY_FLOAT',
  'BINARY_DOUBLE',
  'DATE',
  'TIMESTAMP',
  'TIMESTAMP WITH TIME ZONE',
  'TIMESTAMP WITH LOCAL TIME ZONE',
  'INTERVAL YEAR TO MONTH',
  'INTERVAL DAY TO SECOND',
  'CHAR',
  'NCHAR',
  'VARCHAR2',
  'NVARCHAR2',
  'CLOB',
  'NCLOB',
  'RAW',
  'BLOB',
  'ROWID',
  'UROWID',
] as const;

/** `TIMESTAMP(6) WITH TIME ZONE` -> `TIMESTAMP WITH TIME ZONE`; `INTERVAL DAY(2) TO SECOND(6)` likewise. */
export function oracleTypeFamily(type: string): string {
  return type
    .replace(/\(\d+\)/g, '')
    .replace(/\s+/g, ' ')
    .trim();
}

/** Whether a column's rendered text may exceed 4000 bytes (then it is buffered as a CLOB). */
export function oracleIsLob(c: OracleColumn): boolean {
  const f = oracleTypeFamily(c.type);
  if (f === 'CLOB' || f === 'NCLOB' || f === 'BLOB') return true;
  if (f === 'VARCHAR2' || f === 'CHAR') return c.dataLength > 4000;
  if (f === 'NVARCHAR2' || f === 'NCHAR') return c.charLength * 4 > 4000;
  if (f === 'RAW') return 2 + 2 * c.dataLength > 4000;
  if (f === 'UROWID') return c.dataLength > 4000;
  return false;
}

/** Throws CaptureTableError for a captured column of a type the capture cannot render. */
export function oracleCheckTypes(t: ResolvedTable): void {
  const cols = [...t.columns, ...t.key.filter((k) => !t.columns.includes(k))] as OracleColumn[];
  cols.forEach((c) => {
    const f = oracleTypeFamily(c.type);
    if (!(ORACLE_SUPPORTED_TYPES as readonly string[]).includes(f)) {
      const i = t.config.columns?.indexOf(c.name);
      throw new CaptureTableError(
        `capture table "${t.config.table}": column "${c.name}" has type ${c.type}, which Oracle capture does not render ` +
          `(supported: ${ORACLE_SUPPORTED_TYPES.join(', ')}); leave it out with columns: [...]`,
        t.config.table,
        'columns',
        i === undefined || i < 0 ? undefined : i,
      );
    }
  });
  for (const k of t.key as OracleColumn[]) {
    if (oracleIsLob(k))
      throw new CaptureTableError(
        `capture table "${t.config.table}": key column "${k.name}" has type ${k.type}; a key must render in at most ${ORACLE_KEY_BYTES_MAX} bytes`,
        t.config.table,
        'key',
      );
  }
}

/** Session-independent number text: NLS_NUMERIC_CHARACTERS fixed to `.,`. */
const NLS_NUM = `'NLS_NUMERIC_CHARACTERS=''.,'''`;

/**
 * PL/SQL expression of the exact text of `ref` (`:NEW."COL"` / `:OLD."COL"`): VARCHAR2, or CLOB
 * when {@link oracleIsLob}; NULL stays NULL. `pkg` is the quoted package name.
 *
 * | family | text |
 * |---|---|
 * | NUMBER, FLOAT(p) | `pkg.num`: TO_CHAR 'TM9' (shortest, fixed notation up to 64 characters), a leading `.` given its `0` (`-0.5`, not `-.5`) |
 * | BINARY_FLOAT, BINARY_DOUBLE | `pkg.bin`: `NaN`, `Infinity`, `-Infinity`, else TO_CHAR 'TM9' of the value widened to BINARY_DOUBLE |
 * | DATE | `YYYY-MM-DDTHH24:MI:SS` (an Oracle DATE has seconds) |
 * | TIMESTAMP(p) | ISO 8601 with `T`, p fraction digits, no zone |
 * | TIMESTAMP(p) WITH [LOCAL] TIME ZONE | the instant in UTC with `Z` (SYS_EXTRACT_UTC), p fraction digits |
 * | INTERVAL | TO_CHAR as Oracle prints it, `+01 02:03:04.000000` |
 * | CHAR, VARCHAR2, NCHAR, NVARCHAR2, CLOB, NCLOB | the characters (N types converted to the database character set, which should be AL32UTF8) |
 * | RAW, BLOB | `\x` + lower-case hex (like PostgreSQL's bytea and the MariaDB dialect) |
 * | ROWID, UROWID | ROWIDTOCHAR |
 */
export function oracleRender(ref: string, c: OracleColumn, pkg: string): string {
  const f = oracleTypeFamily(c.type);
  const fsp = c.dataScale ?? 6;
  const frac = fsp > 0 ? `.FF${fsp}` : '';
  switch (f) {
    case 'NUMBER':
    case 'FLOAT':
      return `${pkg}.num(${ref})`;
    case 'BINARY_FLOAT':
    case 'BINARY_DOUBLE':
      return `${pkg}.bin(${ref})`;
    case 'DATE':
      return `TO_CHAR(${ref}, 'YYYY-MM-DD"T"HH24:MI:SS')`;
    case 'TIMESTAMP':
      return `TO_CHAR(${ref}, 'YYYY-MM-DD"T"HH24:MI:SS${frac}')`;
    case 'TIMESTAMP WITH TIME ZONE':
      return `TO_CHAR(SYS_EXTRACT_UTC(${ref}), 'YYYY-MM-DD"T"HH24:MI:SS${frac}"Z"')`;
    case 'TIMESTAMP WITH LOCAL TIME ZONE':
      return `TO_CHAR(SYS_EXTRACT_UTC(CAST(${ref} AS TIMESTAMP WITH TIME ZONE)), 'YYYY-MM-DD"T"HH24:MI:SS${frac}"Z"')`;
    case 'INTERVAL YEAR TO MONTH':
    case 'INTERVAL DAY TO SECOND':
      return `TO_CHAR(${ref})`;
    case 'RAW':
      return oracleIsLob(c) ? `${pkg}.raw_hex(${ref})` : `'\\x' || LOWER(RAWTOHEX(${ref}))`;
    case 'BLOB':
      return `${pkg}.blob_hex(${ref})`;
    case 'CLOB':
      return `${pkg}.clob_copy(${ref})`;
    case 'NCLOB':
      return `${pkg}.clob_copy(TO_CLOB(${ref}))`;
    case 'ROWID':
      return `ROWIDTOCHAR(${ref})`;
    case 'UROWID':
      return `CAST(${ref} AS VARCHAR2(4000))`;
    case 'NCHAR':
    case 'NVARCHAR2':
      return oracleIsLob(c) ? `TO_CLOB(${ref})` : `TO_CHAR(${ref})`;
    default:
      // VARCHAR2, CHAR (refused types never get here: oracleCheckTypes)
      return oracleIsLob(c) ? `TO_CLOB(${ref})` : ref;
  }
}

/**
 * A condition or key expression written over `NEW.` / `OLD.` / `ROW.` (as on the other dialects)
 * as PL/SQL over the trigger's `:NEW.` / `:OLD.`: each image reference outside '...' literals,
 * "..." identifiers and -- comments gets its colon; `ROW.` becomes `row`'s image.
 */
export function oracleRowRefs(sql: string, row?: 'NEW' | 'OLD'): string {
  return sql.replace(
    /('(?:[^']|'')*'|"(?:[^"]|"")*"|--[^\n]*)|(:?)\b(new|old|row)(\s*\.)/gi,
    (all, skip: string | undefined, colon: string, image: string, dot: string) => {
      if (skip !== undefined) return all;
      const up = image.toUpperCase();
      if (up === 'ROW') return row === undefined ? all : `:${row}${dot}`;
      return `:${up}${dot}`;
    },
  );
}

/** PL/SQL of the key text (JSON array) of `row` under t's key strategy. */
function keyText(t: ResolvedTable, row: 'NEW' | 'OLD', pkg: string): string {
  const k = t.keyStrategy;
  switch (k.kind) {
    case 'columns':
      return `'[' || ${k.columns
        .map(
          (c) =>
            `${pkg}.jstr(${oracleRender(`:${row}.${oracleIdent((c as OracleColumn).sqlName)}`, c as OracleColumn, pkg)})`,
        )
        .join(` || ',' || `)} || ']'`;
    case 'none':
      return `'[]'`;
    case 'fixed':
      return oracleLiteral(JSON.stringify([k.value]));
    case 'transactionId':
      return `'[' || ${pkg}.jstr(v_txid) || ']'`;
    case 'expression':
      return `'[' || ${pkg}.jstr(TO_CHAR(${userSqlParens(oracleRowRefs(k.sql, row))})) || ']'`;
  }
}

/** CREATE TABLE statements of the staging, error and installation-id tables (install runs each only when missing). */
export function oracleStagingDdl(n: OracleNames): { table: string; ddl: string }[] {
  const common = `"TABLE_NAME" VARCHAR2(512 CHAR) NOT NULL,
  "OP" VARCHAR2(8) NOT NULL,
  "KEY" VARCHAR2(${ORACLE_KEY_BYTES_MAX} BYTE) NOT NULL,
  "KEY_HASH" NUMBER(10) NOT NULL,
  "BEFORE" CLOB,
  "AFTER" CLOB,
  "TXID" VARCHAR2(64) NOT NULL,
  "TIME_MS" NUMBER(20) NOT NULL,
  "ATTEMPTS" NUMBER(10) DEFAULT 0 NOT NULL`;
  return [
    {
      table: n.staging,
      // BY DEFAULT: requeue puts a parked change back under its own id. ORDER: ids follow the
      // order they are drawn in on RAC too (per-key commit order needs that).
      ddl: `CREATE TABLE ${oracleRef(n, n.staging)} (
  "ID" NUMBER(20) GENERATED BY DEFAULT AS IDENTITY (START WITH 1 CACHE 1000 ORDER) PRIMARY KEY,
  ${common},
  "NEXT_ATTEMPT_MS" NUMBER(20),
  "LAST_ERROR" VARCHAR2(4000 CHAR)
)`,
    },
    {
      table: n.errors,
      ddl: `CREATE TABLE ${oracleRef(n, n.errors)} (
  "ID" NUMBER(20) PRIMARY KEY,
  ${common},
  "ERROR" VARCHAR2(4000 CHAR) NOT NULL,
  "PARKED_TIME_MS" NUMBER(20) NOT NULL
)`,
    },
    {
      table: n.installation,
      ddl: `CREATE TABLE ${oracleRef(n, n.installation)} (
  "ID" VARCHAR2(64 CHAR) NOT NULL
)`,
    },
  ];
}

/**
 * The package of helper functions the triggers call (spec, then body): exact value text, JSON
 * string quoting of key parts, the FNV-1a 32 key hash (equal to the JS keyHash: over the UTF-8
 * bytes; XOR as a + b - 2 * BITAND(a, b); products stay below 2^57, exact in NUMBER) and the
 * capture time in ms since the epoch.
 */
export function oraclePackageDdl(n: OracleNames): [string, string] {
  const name = oracleRef(n, n.pkg);
  const spec = `CREATE OR REPLACE PACKAGE ${name} AUTHID DEFINER AS
  FUNCTION num(x NUMBER) RETURN VARCHAR2 DETERMINISTIC;
  FUNCTION bin(x BINARY_DOUBLE) RETURN VARCHAR2 DETERMINISTIC;
  FUNCTION jstr(v VARCHAR2) RETURN VARCHAR2 DETERMINISTIC;
  FUNCTION fnv(k VARCHAR2) RETURN NUMBER DETERMINISTIC;
  FUNCTION raw_hex(r RAW) RETURN CLOB;
  FUNCTION blob_hex(b BLOB) RETURN CLOB;
  FUNCTION clob_copy(c CLOB) RETURN CLOB;
  FUNCTION now_ms RETURN NUMBER;
END;`;
  const body = `CREATE OR REPLACE PACKAGE BODY ${name} AS
  FUNCTION num(x NUMBER) RETURN VARCHAR2 DETERMINISTIC IS
    t VARCHAR2(200);
  BEGIN
    IF x IS NULL THEN RETURN NULL; END IF;
    t := TO_CHAR(x, 'TM9', ${NLS_NUM});
    IF SUBSTR(t, 1, 1) = '.' THEN t := '0' || t;
    ELSIF SUBSTR(t, 1, 2) = '-.' THEN t := '-0' || SUBSTR(t, 2);
    END IF;
    RETURN t;
  END num;

  FUNCTION bin(x BINARY_DOUBLE) RETURN VARCHAR2 DETERMINISTIC IS
    t VARCHAR2(200);
  BEGIN
    IF x IS NULL THEN RETURN NULL; END IF;
    IF x IS NAN THEN RETURN 'NaN'; END IF;
    IF x IS INFINITE THEN
      IF x > 0 THEN RETURN 'Infinity'; END IF;
      RETURN '-Infinity';
    END IF;
    t := TO_CHAR(x, 'TM9', ${NLS_NUM});
    IF SUBSTR(t, 1, 1) = '.' THEN t := '0' || t;
    ELSIF SUBSTR(t, 1, 2) = '-.' THEN t := '-0' || SUBSTR(t, 2);
    END IF;
    RETURN t;
  END bin;

  FUNCTION jstr(v VARCHAR2) RETURN VARCHAR2 DETERMINISTIC IS
    t VARCHAR2(32767);
    o VARCHAR2(32767);
    ch VARCHAR2(4 CHAR);
  BEGIN
    IF v IS NULL THEN RETURN 'null'; END IF;
    t := REPLACE(REPLACE(v, '\\', '\\\\'), '"', '\\"');
    IF REGEXP_LIKE(t, '[[:cntrl:]]') THEN
      FOR i IN 1 .. LENGTH(t) LOOP
        ch := SUBSTR(t, i, 1);
        IF ASCII(ch) < 32 OR ASCII(ch) = 127 THEN
          o := o || '\\u' || LOWER(LPAD(TRIM(TO_CHAR(ASCII(ch), 'XXXX')), 4, '0'));
        ELSE
          o := o || ch;
        END IF;
      END LOOP;
      t := o;
    END IF;
    RETURN '"' || t || '"';
  END jstr;

  FUNCTION fnv(k VARCHAR2) RETURN NUMBER DETERMINISTIC IS
    b RAW(32767);
    h NUMBER := 2166136261;
    x NUMBER;
  BEGIN
    IF k IS NULL THEN RETURN h; END IF;
    b := UTL_I18N.STRING_TO_RAW(k, 'AL32UTF8');
    FOR i IN 1 .. UTL_RAW.LENGTH(b) LOOP
      x := TO_NUMBER(RAWTOHEX(UTL_RAW.SUBSTR(b, i, 1)), 'XX');
      h := h + x - 2 * BITAND(h, x);
      h := MOD(h * 16777619, 4294967296);
    END LOOP;
    RETURN h;
  END fnv;

  FUNCTION raw_hex(r RAW) RETURN CLOB IS
  BEGIN
    IF r IS NULL THEN RETURN NULL; END IF;
    RETURN TO_CLOB('\\x') || TO_CLOB(LOWER(RAWTOHEX(r)));
  END raw_hex;

  FUNCTION blob_hex(b BLOB) RETURN CLOB IS
    o CLOB;
    len PLS_INTEGER;
    pos PLS_INTEGER := 1;
  BEGIN
    IF b IS NULL THEN RETURN NULL; END IF;
    DBMS_LOB.CREATETEMPORARY(o, TRUE, DBMS_LOB.CALL);
    DBMS_LOB.WRITEAPPEND(o, 2, '\\x');
    len := DBMS_LOB.GETLENGTH(b);
    WHILE pos <= len LOOP
      DBMS_LOB.APPEND(o, TO_CLOB(LOWER(RAWTOHEX(DBMS_LOB.SUBSTR(b, 2000, pos)))));
      pos := pos + 2000;
    END LOOP;
    RETURN o;
  END blob_hex;

  FUNCTION clob_copy(c CLOB) RETURN CLOB IS
    o CLOB;
  BEGIN
    IF c IS NULL THEN RETURN NULL; END IF;
    DBMS_LOB.CREATETEMPORARY(o, TRUE, DBMS_LOB.CALL);
    IF DBMS_LOB.GETLENGTH(c) > 0 THEN DBMS_LOB.APPEND(o, c); END IF;
    RETURN o;
  END clob_copy;

  FUNCTION now_ms RETURN NUMBER IS
    d INTERVAL DAY(9) TO SECOND(9);
  BEGIN
    d := SYS_EXTRACT_UTC(SYSTIMESTAMP) - TIMESTAMP '1970-01-01 00:00:00';
    RETURN EXTRACT(DAY FROM d) * 86400000 + EXTRACT(HOUR FROM d) * 3600000
      + EXTRACT(MINUTE FROM d) * 60000 + TRUNC(EXTRACT(SECOND FROM d) * 1000);
  END now_ms;
END;`;
  return [spec, body];
}

/**
 * The BEFORE TRUNCATE schema trigger of one captured table: refuses TRUNCATE of it with error
 * ORACLE_TRUNCATE_ERROR naming the table and why (case C9).
 */
export function oracleGuardDdl(n: OracleNames, cfg: CaptureTable, owner: string): string {
  const t = oracleSplitTable(cfg.table, owner);
  const why = `sluice capture refuses TRUNCATE of ${t.owner}.${t.table}: consumers would not be told the rows are gone; DELETE is captured, or run sluice uninstall first`;
  return `CREATE OR REPLACE TRIGGER ${oracleRef(n, oracleGuardName(n, cfg.table, owner))}
BEFORE TRUNCATE ON ${oracleIdent(t.owner)}.SCHEMA
BEGIN
  IF ora_dict_obj_type = 'TABLE' AND ora_dict_obj_owner = ${oracleLiteral(t.owner)} AND ora_dict_obj_name = ${oracleLiteral(t.table)} THEN
    RAISE_APPLICATION_ERROR(${ORACLE_TRUNCATE_ERROR}, ${oracleLiteral(why)});
  END IF;
END;`;
}

/**
 * The COMPOUND capture trigger of one resolved table (columns are OracleColumn). Sections:
 * - AFTER EACH ROW: per captured operation (INSERTING / UPDATING / DELETING) its condition (over
 *   the images that operation has), the no-op check of an update, the key text, and the images'
 *   column texts copied into the collections (`push`); a key-changing update pushes a delete of
 *   the old key and an insert of the new one (keyUpdate 'delete-create', case C8). Every
 *   ORACLE_FLUSH_ROWS rows it flushes.
 * - AFTER STATEMENT: `flush`, one FORALL INSERT of the buffered rows into staging, each image a
 *   JSON_OBJECT of the texts (NULL ON NULL), staging ids drawn from the identity in row order.
 * A statement that fails is rolled back with its buffered rows (compound trigger state is per
 * statement).
 */
export function oracleTriggerDdl(n: OracleNames, t: ResolvedTable, owner: string): string {
  const cfg = t.config;
  const pkg = oracleRef(n, n.pkg);
  const cols = t.columns as OracleColumn[];
  const ops = (['insert', 'update', 'delete'] as const).filter((op) => cfg.operations.includes(op));
  if (ops.length === 0)
    throw new Error(`capture table "${cfg.table}": no row operation to capture on oracle`);
  const suppress = cfg.suppressNoopUpdates ?? CDC_DEFAULTS.suppressNoopUpdates;
  const keyUpdate = cfg.keyUpdate ?? CDC_DEFAULTS.keyUpdate;
  const v = (image: 'o' | 'n', i: number) => `v_${image}${i + 1}`;
  const b = (image: 'o' | 'n', i: number) => `b_${image}${i + 1}`;
  const type = (c: OracleColumn) => (oracleIsLob(c) ? 'CLOB' : 'VARCHAR2(4000)');
  const ref = (row: 'NEW' | 'OLD', c: OracleColumn) => `:${row}.${oracleIdent(c.sqlName)}`;
  const decls = cols.flatMap((c, i) => [
    `  ${b('o', i)} ${oracleIsLob(c) ? 't_lob' : 't_txt'};`,
    `  ${b('n', i)} ${oracleIsLob(c) ? 't_lob' : 't_txt'};`,
    `  ${v('o', i)} ${type(c)};`,
    `  ${v('n', i)} ${type(c)};`,
  ]);
  const render = (row: 'NEW' | 'OLD', image: 'o' | 'n', indent: string) =>
    cols
      .map((c, i) => `${indent}${v(image, i)} := ${oracleRender(ref(row, c), c, pkg)};`)
      .join('\n');
  const clear = (image: 'o' | 'n', indent: string) =>
    cols.map((_c, i) => `${indent}${v(image, i)} := NULL;`).join('\n');
  const json = (image: 'o' | 'n') =>
    `JSON_OBJECT(${cols
      .map((c, i) => `KEY ${oracleLiteral(c.name)} VALUE ${b(image, i)}(i)`)
      .join(', ')} NULL ON NULL RETURNING CLOB)`;
  const hash =
    t.keyStrategy.kind === 'none' ? 'TRUNC(DBMS_RANDOM.VALUE(0, 4294967296))' : `${pkg}.fnv(p_key)`;
  const condition = (op: RowOp) => {
    const c = conditionFor(cfg, op);
    return c === undefined ? null : oracleRowRefs(c);
  };
  const guarded = (op: RowOp, body: string) => {
    const c = condition(op);
    if (c === null) return body;
    return `      IF ${userSqlParens(c)} THEN\n${body.replace(/^/gm, '  ')}\n      END IF;`;
  };
  const branches: string[] = [];
  if (ops.includes('insert')) {
    branches.push(`    IF INSERTING THEN
${guarded(
  'insert',
  `${render('NEW', 'n', '      ')}
${clear('o', '      ')}
      push('insert', ${keyText(t, 'NEW', pkg)}, 2);`,
)}`);
  }
  if (ops.includes('update')) {
    const compared = cols.map((c, i) =>
      oracleIsLob(c)
        ? `((${v('o', i)} IS NULL AND ${v('n', i)} IS NULL) OR (${v('o', i)} IS NOT NULL AND ${v('n', i)} IS NOT NULL AND DBMS_LOB.COMPARE(${v('o', i)}, ${v('n', i)}) = 0))`
        : `((${v('o', i)} IS NULL AND ${v('n', i)} IS NULL) OR ${v('o', i)} = ${v('n', i)})`,
    );
    compared.push('v_ko = v_kn');
    const stage =
      keyUpdate === 'update'
        ? `push('update', v_kn, 3);`
        : `IF v_ko = v_kn THEN
        push('update', v_kn, 3);
      ELSE
        push('delete', v_ko, 1);
        push('insert', v_kn, 2);
      END IF;`;
    const body = `${render('OLD', 'o', '      ')}
${render('NEW', 'n', '      ')}
      v_ko := ${keyText(t, 'OLD', pkg)};
      v_kn := ${keyText(t, 'NEW', pkg)};
      ${suppress ? `IF NOT (${compared.join('\n        AND ')}) THEN\n        ${stage.replace(/\n/g, '\n  ')}\n      END IF;` : stage}`;
    branches.push(`    ${branches.length > 0 ? 'ELSIF' : 'IF'} UPDATING THEN
${guarded('update', body)}`);
  }
  if (ops.includes('delete')) {
    branches.push(`    ${branches.length > 0 ? 'ELSIF' : 'IF'} DELETING THEN
${guarded(
  'delete',
  `${render('OLD', 'o', '      ')}
${clear('n', '      ')}
      push('delete', ${keyText(t, 'OLD', pkg)}, 1);`,
)}`);
  }
  const events = ops.map((op) => op.toUpperCase()).join(' OR ');
  return `CREATE OR REPLACE TRIGGER ${oracleRef(n, oracleTriggerName(n, cfg.table, owner))}
FOR ${events} ON ${oracleQualifiedTable(cfg.table, owner)}
COMPOUND TRIGGER
  ${ORACLE_COLUMNS_MARK}${JSON.stringify(cols.map((c) => c.name))}
  TYPE t_txt IS TABLE OF VARCHAR2(4000) INDEX BY PLS_INTEGER;
  TYPE t_lob IS TABLE OF CLOB INDEX BY PLS_INTEGER;
  TYPE t_num IS TABLE OF NUMBER INDEX BY PLS_INTEGER;
  flush_rows CONSTANT PLS_INTEGER := ${ORACLE_FLUSH_ROWS};
  n PLS_INTEGER := 0;
  v_now_ms NUMBER;
  v_txid VARCHAR2(64);
  v_ko VARCHAR2(32767);
  v_kn VARCHAR2(32767);
  b_op t_txt;
  b_key t_txt;
  b_hash t_num;
  b_img t_num;
${decls.join('\n')}

  -- One buffered change: op, key text, which images (1 before, 2 after, 3 both), the v_ texts.
  PROCEDURE push(p_op VARCHAR2, p_key VARCHAR2, p_img PLS_INTEGER) IS
  BEGIN
    IF LENGTHB(p_key) > ${ORACLE_KEY_BYTES_MAX} THEN
      RAISE_APPLICATION_ERROR(${ORACLE_KEY_ERROR}, ${oracleLiteral(`sluice capture of ${cfg.table}: key text over ${ORACLE_KEY_BYTES_MAX} bytes`)});
    END IF;
    n := n + 1;
    b_op(n) := p_op;
    b_key(n) := p_key;
    b_hash(n) := ${hash};
    b_img(n) := p_img;
${cols.map((_c, i) => `    ${b('o', i)}(n) := ${v('o', i)};\n    ${b('n', i)}(n) := ${v('n', i)};`).join('\n')}
  END push;

  -- The bulk write: one FORALL INSERT of everything buffered, then the buffers are emptied.
  PROCEDURE flush IS
  BEGIN
    IF n = 0 THEN RETURN; END IF;
    FORALL i IN 1 .. n
      INSERT INTO ${oracleRef(n, n.staging)} ("TABLE_NAME", "OP", "KEY", "KEY_HASH", "BEFORE", "AFTER", "TXID", "TIME_MS")
      VALUES (${oracleLiteral(cfg.table)}, b_op(i), b_key(i), b_hash(i),
        CASE WHEN b_img(i) IN (1, 3) THEN ${json('o')} END,
        CASE WHEN b_img(i) IN (2, 3) THEN ${json('n')} END,
        NVL(v_txid, ' '), v_now_ms);
    n := 0;
    b_op.DELETE;
    b_key.DELETE;
    b_hash.DELETE;
    b_img.DELETE;
${cols.map((_c, i) => `    ${b('o', i)}.DELETE;\n    ${b('n', i)}.DELETE;`).join('\n')}
  END flush;

  BEFORE STATEMENT IS
  BEGIN
    n := 0;
    v_now_ms := ${pkg}.now_ms;
  END BEFORE STATEMENT;

  AFTER EACH ROW IS
  BEGIN
    IF v_txid IS NULL THEN v_txid := DBMS_TRANSACTION.LOCAL_TRANSACTION_ID; END IF;
${branches.join('\n')}
    END IF;
    IF n >= flush_rows THEN flush; END IF;
  END AFTER EACH ROW;

  AFTER STATEMENT IS
  BEGIN
    flush;
  END AFTER STATEMENT;
END;`;
}

/**
 * Every statement `install` runs for a source, in order (for tests and `sluice install --dry-run`
 * style inspection): the staging and error tables (only when missing), the package, then per
 * table its TRUNCATE guard and its compound trigger. Schema creation is not included.
 */
export function oracleInstallDdl(n: OracleNames, tables: ResolvedTable[], owner: string): string[] {
  const out = oracleStagingDdl(n).map((s) => s.ddl);
  out.push(...oraclePackageDdl(n));
  for (const t of tables) {
    oracleCheckTypes(t);
    out.push(oracleGuardDdl(n, t.config, owner));
    out.push(oracleTriggerDdl(n, t, owner));
  }
  return out;
}

/**
 * The statements `uninstall` runs: per table its trigger and guard; with dropStaging also the
 * package and the tables (PURGE: no recycle-bin copies left in the schema). Dropping the schema
 * itself is decided by the client (only when install created it and it is empty).
 */
export function oracleUninstallDdl(
  n: OracleNames,
  tables: CaptureTable[],
  owner: string,
  dropStaging: boolean,
): string[] {
  const out: string[] = [];
  for (const t of tables) {
    out.push(`DROP TRIGGER ${oracleRef(n, oracleTriggerName(n, t.table, owner))}`);
    out.push(`DROP TRIGGER ${oracleRef(n, oracleGuardName(n, t.table, owner))}`);
  }
  if (dropStaging) {
    out.push(`DROP PACKAGE ${oracleRef(n, n.pkg)}`);
    out.push(`DROP TABLE ${oracleRef(n, n.staging)} PURGE`);
    out.push(`DROP TABLE ${oracleRef(n, n.errors)} PURGE`);
    out.push(`DROP TABLE ${oracleRef(n, n.installation)} PURGE`);
  }
  return out;
}
