/**
 * Capture configuration model: what to capture, where the staging table lives, how many pumps.
 *
 * Shapes follow the `engine/cdc` contract in docs/ARCHITECTURE.md. Every optional bound has its
 * default in {@link CDC_DEFAULTS} and nowhere else.
 */

import { MARIADB_TRUNCATE_REFUSAL, parseMariaDbUrl } from './mariadb-url.js';
import {
  ORACLE_INITIAL_LOAD_REFUSAL,
  ORACLE_TRUNCATE_REFUSAL,
  parseOracleUrl,
} from './oracle-url.js';
import { pgSubqueryAt, sqlTextProblem, type SqlTextDialect } from './sql-text.js';

/** One operation a capture trigger can record. */
export type CaptureOperation = 'insert' | 'update' | 'delete' | 'truncate';

/** All operations, in the order triggers are generated. */
export const CAPTURE_OPERATIONS: readonly CaptureOperation[] = [
  'insert',
  'update',
  'delete',
  'truncate',
];

/**
 * One captured table.
 *
 * - `table`: table name as written in SQL, unquoted; PostgreSQL accepts `schema.table`
 *   (default schema: the staging connection's `current_schema()`).
 * - `operations`: which operations get a trigger. `truncate` is PostgreSQL only (statement-level
 *   trigger writing one table-level event with key `"*"`); SQLite has no TRUNCATE and rejects it.
 * - `columns`: captured columns, in image order; default every column of the table
 *   (introspected: PostgreSQL information_schema.columns, SQLite pragma table_info).
 * - `key`: the key strategy ({@link KeyStrategy}); default `primaryKey`. The key decides the
 *   pump (and so the partition) and the order: one key's changes are shipped in staging-id order.
 *   Per-key commit order needs writers of one key to be serialized (true for `primaryKey` and
 *   unique columns: row locks; always on SQLite).
 * - `condition`: SQL boolean in the row triggers' WHEN clause: one text for every captured row
 *   operation, or one per operation ({@link ConditionsByOp}). A condition may name only the row
 *   images its operation has: NEW for insert, OLD for delete, both for update (checked at load by
 *   conditionProblems). Not applied to truncate (statement-level triggers have no rows).
 * - `target`: name of the queue the pump appends to (opaque to engine/cdc).
 * - `suppressNoopUpdates`: default true: an UPDATE that leaves every captured and key column's
 *   text unchanged writes no staging row (case C6).
 * - `triggers`: PostgreSQL trigger level of insert and delete capture ({@link TriggerLevel});
 *   default CDC_DEFAULTS.triggers ('statement').
 * - `keyUpdate`: an UPDATE that changes the key (case C8). 'delete-create' (default): a delete
 *   event under the old key (before image, on the old key's pump) then an insert event under the
 *   new key (after image, on the new key's pump), so a consumer keyed on the key retires the old
 *   key and a later insert of the old key comes after that delete. 'update': one update event
 *   under the new key whose before image holds the old key's values (old behaviour; it travels
 *   on the new key's pump only, unordered against the old key's changes).
 * - `initialLoad`: default false. true: `install` requests the table's initial load (once per
 *   install of its staging): the pumps deliver every existing row as a `read` event, in
 *   primary-key chunks, interleaved with the live changes in order (engine/cdc/initial-load.ts).
 *   Needs a primary key (or a unique NOT NULL `key: [columns]`); refused with key transactionId.
 */
export interface CaptureTable {
  table: string;
  operations: CaptureOperation[];
  columns?: string[];
  key?: KeyStrategy;
  condition?: string | ConditionsByOp;
  target: string;
  suppressNoopUpdates?: boolean;
  keyUpdate?: KeyUpdateMode;
  initialLoad?: boolean;
  triggers?: TriggerLevel;
  /**
   * Value format on a kafka bus (engine/cdc/json-format.ts): absent or 'envelope', the
   * FlatBuffers envelope Sluice's own actors read; 'json', a self-describing JSON value.
   */
  format?: 'envelope' | 'json';
}

/**
 * Level of PostgreSQL's insert and delete capture triggers (CaptureTable.triggers).
 * - 'statement' (default): one AFTER ... FOR EACH STATEMENT trigger with a transition table
 *   (`REFERENCING NEW TABLE` / `OLD TABLE`) runs one INSERT ... SELECT into staging per
 *   statement, rows in the statement's order; the condition is that INSERT's WHERE.
 * - 'row': one trigger call, and one INSERT into staging, per row; the condition is the trigger's
 *   WHEN.
 * Updates are captured by a row trigger either way: a statement's old and new transition tables
 * carry no row-to-row pairing, and case C8 needs each row's old and new key together. SQLite and
 * MariaDB have row triggers only and refuse 'statement'. Measured in bench/RESULTS.md
 * ("Capture triggers").
 */
export type TriggerLevel = 'row' | 'statement';

/** Allowed values of CaptureTable.triggers. */
export const TRIGGER_LEVELS: readonly TriggerLevel[] = ['row', 'statement'];

/**
 * Key strategy of a captured table (after MOVEX CDC's key strategies). The staging key is always a
 * JSON array text:
 * - `'primaryKey'` (default): the primary key columns' values, `["80"]`.
 * - `string[]` or `{ columns: [...] }`: those columns' values.
 * - `'none'`: no key, `[]`: changes are spread over the pumps and no order is kept between them.
 * - `{ fixed: 'value' }`: `["value"]` for every change: the table's changes go through one pump,
 *   in staging-id order (commit order on SQLite; on PostgreSQL for writers serialized by locks).
 * - `'transactionId'`: `["<txid>"]` (PostgreSQL txid_current(); refused on SQLite, which has no
 *   transaction identity): one transaction's changes stay together and in order.
 * - `{ expression: 'SQL' }`: `[<text of the expression>]`, the expression written over the row as
 *   `ROW.<column>` (evaluated over NEW for insert and update, OLD for delete and for the old key of
 *   a key-changing update).
 */
export type KeyStrategy =
  | 'primaryKey'
  | 'none'
  | 'transactionId'
  | string[]
  | { columns: string[] }
  | { fixed: string }
  | { expression: string };

/** The key strategies that are plain words. */
export const KEY_STRATEGY_WORDS = ['primaryKey', 'none', 'transactionId'] as const;

/** A condition per row operation; an operation without one captures every row. */
export interface ConditionsByOp {
  insert?: string;
  update?: string;
  delete?: string;
}

/** Row images each row operation has, for its condition. */
const IMAGES_OF: Record<'insert' | 'update' | 'delete', readonly ('NEW' | 'OLD')[]> = {
  insert: ['NEW'],
  update: ['NEW', 'OLD'],
  delete: ['OLD'],
};

/** The condition of `op` for a table, or undefined when its rows are all captured. */
export function conditionFor(
  t: CaptureTable,
  op: 'insert' | 'update' | 'delete',
): string | undefined {
  const c = t.condition;
  if (c === undefined) return undefined;
  return typeof c === 'string' ? c : c[op];
}

/**
 * Row images (NEW, OLD) a condition names, as `NEW.col` / `OLD.col`: case-insensitive, outside of
 * '...' literals, "..." identifiers and -- comments.
 */
export function imagesNamed(sql: string): Set<'NEW' | 'OLD'> {
  const bare = sql.replace(/'(?:[^']|'')*'|"(?:[^"]|"")*"|--[^\n]*/g, ' ');
  const out = new Set<'NEW' | 'OLD'>();
  for (const m of bare.matchAll(/\b(new|old)\s*\./gi))
    out.add(m[1]!.toUpperCase() as 'NEW' | 'OLD');
  return out;
}

/**
 * Problems of a table's `condition` against its `operations` (empty when valid or absent): a
 * condition naming an image its operation lacks, a blank one, a condition for an operation that is
 * not captured, one whose parentheses do not balance or that leaves a literal or comment open
 * (sqlTextProblem, by `dialect`'s lexical rules), and on PostgreSQL a subquery in the condition
 * of an operation captured by a row trigger (an update; an insert or delete with `triggers`
 * 'row'), whose WHEN refuses it. `sub` is the path below the `condition` field.
 */
export function conditionProblems(
  condition: unknown,
  operations: readonly unknown[],
  dialect?: unknown,
  triggers?: unknown,
): KeyStrategyProblem[] {
  const out: KeyStrategyProblem[] = [];
  if (condition === undefined) return out;
  const rowOps = (['insert', 'update', 'delete'] as const).filter((op) => operations.includes(op));
  const check = (sql: unknown, ops: readonly ('insert' | 'update' | 'delete')[], sub: string[]) => {
    if (typeof sql !== 'string' || sql.trim() === '') {
      out.push({ sub, message: 'must be a non-empty SQL boolean expression' });
      return;
    }
    const text = sqlTextProblem(sql, sqlTextDialect(dialect));
    if (text !== null) out.push({ sub, message: text });
    // A statement trigger's condition is a WHERE, which may have a subquery; a row trigger's is
    // its WHEN, which PostgreSQL parses with subqueries refused.
    const inWhen = ops.filter((op) => op === 'update' || triggers === 'row');
    const subquery = dialect === 'postgres' && inWhen.length > 0 ? pgSubqueryAt(sql) : -1;
    if (subquery >= 0) {
      const level = inWhen.some((op) => op !== 'update')
        ? ' (triggers: row); with triggers: statement, the default, an insert or delete condition may have one'
        : ' (always, at either trigger level)';
      out.push({
        sub,
        message: `has a subquery (the "(" at character ${subquery + 1}), which PostgreSQL refuses in a row trigger's WHEN (cannot use subquery in trigger WHEN condition): ${inWhen.map((op) => `${op === 'delete' ? 'a' : 'an'} ${op}`).join(' and ')} ${inWhen.length === 1 ? 'is' : 'are'} captured by a row trigger${level}`,
      });
    }
    for (const image of imagesNamed(sql)) {
      const lacking = ops.filter((op) => !IMAGES_OF[op].includes(image));
      if (lacking.length === 0) continue;
      const hint =
        sub.length === 0
          ? '; give one condition per operation: condition: { insert: ..., update: ..., delete: ... }'
          : '';
      out.push({
        sub,
        message: `names ${image}, which ${lacking.map((op) => `a${op === 'insert' ? 'n' : ''} ${op}`).join(' and ')} has not (insert has NEW, delete has OLD, update both)${hint}`,
      });
    }
  };
  if (typeof condition === 'string') check(condition, rowOps, []);
  else if (condition !== null && typeof condition === 'object' && !Array.isArray(condition)) {
    for (const [op, sql] of Object.entries(condition)) {
      if (op !== 'insert' && op !== 'update' && op !== 'delete') {
        out.push({ sub: [op], message: 'unknown operation (insert, update or delete)' });
      } else if (!operations.includes(op)) {
        out.push({
          sub: [op],
          message: `${op} is not in operations; its condition would never apply`,
        });
      } else check(sql, [op], [op]);
    }
  } else
    out.push({
      sub: [],
      message:
        'must be an SQL boolean expression or a map of them per operation (insert, update, delete)',
    });
  return out;
}

/** The lexical rules user SQL of a source of `dialect` is read by (PostgreSQL's when unknown). */
function sqlTextDialect(dialect: unknown): SqlTextDialect {
  const known: readonly unknown[] = ['sqlite', 'postgres', 'mariadb', 'mysql', 'oracle'];
  return known.includes(dialect) ? (dialect as SqlTextDialect) : 'postgres';
}

/** How an UPDATE that changes the key is captured (CaptureTable.keyUpdate). */
export type KeyUpdateMode = 'delete-create' | 'update';

/** Allowed values of CaptureTable.keyUpdate. */
export const KEY_UPDATE_MODES: readonly KeyUpdateMode[] = ['delete-create', 'update'];

/**
 * Where the captured database is.
 * - sqlite: `file` path of the database file (switched to WAL mode by `openStaging`);
 *   `busyTimeoutMs` (added field) is the connection's busy_timeout, default CDC_DEFAULTS.busyTimeoutMs.
 * - postgres: `url` libpq-style connection string; `schema` (optional) sets the connection's
 *   search_path, so unqualified captured table names resolve there; `captureSchema` (default
 *   CDC_DEFAULTS.captureSchema, "sluice") holds every object capture creates except the triggers
 *   themselves (staging and error tables, index, key hash and trigger functions); install creates
 *   it when missing and uninstall drops it again only if install created it and it is empty.
 */
export type DatabaseRef =
  | { dialect: 'sqlite'; file: string; busyTimeoutMs?: number }
  | { dialect: 'postgres'; url: string; schema?: string; captureSchema?: string }
  | { dialect: 'mariadb' | 'mysql'; url: string; captureSchema?: string }
  | OracleDatabaseRef;

/**
 * An Oracle database (engine/cdc/oracle.ts).
 * - `url`: `oracle://user[:password]@host[:port]/service_name`, the pumps' login.
 * - `passwordFile`: absolute path of a file holding the password (trailing newline dropped),
 *   read when connecting; give it or a password in the url, not both.
 * - `schema`: owner of unqualified captured tables; default the url's user.
 * - `captureSchema`: the user (Oracle: a schema is a user) owning every object capture creates,
 *   triggers included; default CDC_DEFAULTS.captureSchema (`SLUICE`). Names are unquoted
 *   identifiers, so they are upper-cased as Oracle does.
 */
export interface OracleDatabaseRef {
  dialect: 'oracle';
  url: string;
  passwordFile?: string;
  schema?: string;
  captureSchema?: string;
}

/**
 * What a pump does with a change its target refuses (cases C4, C10). After MOVEX CDC's divide
 * and conquer, delayed retries and error table.
 * - `retriesImmediate`: extra tries of a single refused change, at once, before a delayed retry.
 * - `attemptsMax`: delayed rounds (each 1 + retriesImmediate tries) before the change is parked
 *   in the error table; the round count is staging's `attempts` column.
 * - `retryDelayMs`, `retryDelayMaxMs`: the delay before round n+1 is
 *   min(retryDelayMs * 2^(n-1), retryDelayMaxMs), recorded in staging's `next_attempt_ms`.
 * - `holdKeyWhenParked`: true (default): later changes of a parked change's key stay staged until
 *   it is requeued or purged, so one key's changes are never delivered out of order; false: they
 *   flow once it is parked (the parked change, if requeued later, arrives after them).
 * - `retentionMs`: parked changes older than this are deleted by pump 0 (holding period).
 */
export interface CaptureErrorPolicy {
  retriesImmediate: number;
  attemptsMax: number;
  retryDelayMs: number;
  retryDelayMaxMs: number;
  holdKeyWhenParked: boolean;
  retentionMs: number;
}

/**
 * One capture source: a database, its captured tables and its staging table.
 * - `pumps`: number of pumps N; pump i owns keys with keyHash(key) % N == i.
 * - `batchSizeMax`: rows claimed per pump cycle.
 * - `pollIntervalMs`: pause after a cycle that found less than a full batch.
 * - `stagingTable`: unquoted name matching /^[A-Za-z_][A-Za-z0-9_]*$/; the error table is
 *   `<stagingTable>_errors`.
 * - `recordBytesMax`: largest encoded record a pump appends to a target; a larger change is
 *   refused by the target and handled by `errors` (case C10). Default CDC_DEFAULTS.recordBytesMax.
 * - `errors`: the refusal policy; absent fields take CDC_DEFAULTS.errors (see resolveErrorPolicy).
 */
export interface CaptureSource {
  name: string;
  database: DatabaseRef;
  tables: CaptureTable[];
  pumps: number;
  batchSizeMax: number;
  pollIntervalMs: number;
  stagingTable: string;
  recordBytesMax?: number;
  errors?: Partial<CaptureErrorPolicy>;
}

/**
 * One staged row change as claimed from the staging table.
 * - `stagingId`: decimal text of the staging id (never reused: SQLite AUTOINCREMENT, PostgreSQL
 *   identity column); the dedup identity of the event downstream.
 * - `key`: JSON array text of the key column values, each a JSON string or null
 *   (e.g. `["9007199254740993"]`); `"*"` for a truncate event.
 * - `keyHash`: {@link keyHash}(key), FNV-1a 32 over the key's UTF-8 bytes, 0..2^32-1 (key `[]`
 *   of key strategy none: hashed from the staging id or capture time instead).
 * - `before`/`after`: JSON object text, one member per captured column in column order, each
 *   value the column's exact text as a JSON string, or null where the column is NULL; `before` is
 *   null for insert/truncate, `after` null for delete/truncate.
 * - `txid`: PostgreSQL `txid_current()::text`; SQLite `""` (SQLite gives triggers no transaction
 *   identity; with one writer at a time one transaction's rows are contiguous in staging-id order).
 * - `timeMs`: capture time, ms since the Unix epoch (clock of the database server at trigger time).
 * - `attempts`: delayed retry rounds that failed so far (0 for a change never refused).
 * - `op` `read`: a row of an initial load (never staged): stagingId is `r<cursor id>` (not a
 *   staging id; never acked), before null, after the row's image.
 */
export interface StagedChange {
  stagingId: string;
  table: string;
  op: CaptureOperation | 'read';
  key: string;
  keyHash: number;
  before: string | null;
  after: string | null;
  txid: string;
  timeMs: number;
  attempts: number;
}

/** Defaults for every optional bound of engine/cdc, in one place. */
export const CDC_DEFAULTS = {
  /** DatabaseRef postgres captureSchema. */
  captureSchema: 'sluice',
  /** CaptureTable.suppressNoopUpdates */
  suppressNoopUpdates: true,
  /** CaptureTable.keyUpdate */
  keyUpdate: 'delete-create' as KeyUpdateMode,
  /** CaptureTable.triggers (PostgreSQL; see bench/RESULTS.md "Capture triggers" for why). */
  triggers: 'statement' as TriggerLevel,
  /** SQLite busy_timeout of staging connections, ms. */
  busyTimeoutMs: 5000,
  /** Largest accepted batchSizeMax / claim limit. */
  claimLimitMax: 100_000,
  /** Largest accepted pumps. */
  pumpsMax: 1024,
  /**
   * PostgreSQL: how long claim() retries taking a pump's advisory lock before throwing, ms.
   * Covers a restarted pump whose killed predecessor's session the server has not yet ended.
   */
  pumpLockWaitMs: 5000,
  /** Pause between those retries, ms. */
  pumpLockRetryMs: 50,
  /**
   * PostgreSQL: how long a staging session waits to connect, for the answer to one statement,
   * or for its close, before it counts the connection as lost, ms. A network partition (no
   * answer, no reset) is then reported as an outage and retried like a dropped connection,
   * instead of a silent wait (test/faults-netem.test.ts). Longer than any claim, delete or
   * initial-load chunk takes.
   */
  networkTimeoutMs: 10_000,
  /** CaptureSource.recordBytesMax: the journal's largest record (engine/journal RECORD_BYTES_MAX). */
  recordBytesMax: 1 << 28,
  /** CaptureSource.errors. */
  errors: {
    retriesImmediate: 2,
    attemptsMax: 5,
    retryDelayMs: 1000,
    retryDelayMaxMs: 60_000,
    holdKeyWhenParked: true,
    retentionMs: 7 * 24 * 3_600_000,
  } satisfies CaptureErrorPolicy,
  /** A pump whose database or target fails waits this long before its first reconnect, ms. */
  outageBackoffInitialMs: 100,
  /** The wait doubles per failed reconnect up to this, ms; the pump retries forever. */
  outageBackoffMaxMs: 5000,
  /** How often a pump re-reads the parked keys it holds (another process may requeue), ms. */
  parkedRefreshMs: 1000,
  /** How often pump 0 deletes parked changes older than errors.retentionMs, ms. */
  retentionCheckMs: 60_000,
  /** Initial load: rows of the table read per chunk (each pump keeps the ones of its keys). */
  loadChunkRows: 2000,
  /** Initial load: how often a pump re-reads the load table for new requests (sluice snapshot), ms. */
  loadRefreshMs: 1000,
} as const;

/** Limits of the error policy fields, inclusive. */
export const ERROR_POLICY_LIMITS = {
  retriesImmediate: [0, 100],
  attemptsMax: [1, 1000],
  retryDelayMs: [0, 24 * 3_600_000],
  retryDelayMaxMs: [0, 24 * 3_600_000],
  retentionMs: [1, 3650 * 24 * 3_600_000],
} as const;

/** `source.errors` with every default filled in. */
export function resolveErrorPolicy(source: CaptureSource): CaptureErrorPolicy {
  return { ...CDC_DEFAULTS.errors, ...source.errors };
}

/** Identifier shape accepted for staging table names (they are embedded in trigger names). */
export const STAGING_NAME_PATTERN = /^[A-Za-z_][A-Za-z0-9_]*$/;

/**
 * Checks a CaptureSource and returns it unchanged.
 * Throws `Error` listing every problem, each as `capture source "<name>": <path>: <problem>`.
 */
export function validateCaptureSource(source: CaptureSource): CaptureSource {
  const problems: string[] = [];
  const where = `capture source "${source?.name ?? '?'}"`;
  const bad = (path: string, problem: string) => problems.push(`${where}: ${path}: ${problem}`);
  if (typeof source?.name !== 'string' || source.name.length === 0)
    bad('name', 'must be a non-empty string');
  const db = source?.database;
  if (db?.dialect === 'sqlite') {
    if (typeof db.file !== 'string' || db.file.length === 0)
      bad('database.file', 'must be a non-empty path');
    if (
      db.busyTimeoutMs !== undefined &&
      !(Number.isInteger(db.busyTimeoutMs) && db.busyTimeoutMs >= 0)
    ) {
      bad('database.busyTimeoutMs', `must be an integer >= 0, busyTimeoutMs=${db.busyTimeoutMs}`);
    }
  } else if (db?.dialect === 'postgres') {
    if (typeof db.url !== 'string' || db.url.length === 0)
      bad('database.url', 'must be a non-empty connection string');
    if (db.schema !== undefined && (typeof db.schema !== 'string' || db.schema.length === 0)) {
      bad('database.schema', 'must be a non-empty string when given');
    }
    if (
      db.captureSchema !== undefined &&
      (typeof db.captureSchema !== 'string' || !STAGING_NAME_PATTERN.test(db.captureSchema))
    ) {
      bad(
        'database.captureSchema',
        `must match ${STAGING_NAME_PATTERN}, captureSchema=${JSON.stringify(db.captureSchema)}`,
      );
    }
  } else if (db?.dialect === 'mariadb' || db?.dialect === 'mysql') {
    const url =
      typeof db.url === 'string'
        ? parseMariaDbUrl(db.url)
        : 'must be a non-empty connection string';
    if (typeof url === 'string') bad('database.url', url);
    if (
      db.captureSchema !== undefined &&
      (typeof db.captureSchema !== 'string' || !STAGING_NAME_PATTERN.test(db.captureSchema))
    ) {
      bad(
        'database.captureSchema',
        `must match ${STAGING_NAME_PATTERN}, captureSchema=${JSON.stringify(db.captureSchema)}`,
      );
    }
  } else if (db?.dialect === 'oracle') {
    const url =
      typeof db.url === 'string' ? parseOracleUrl(db.url) : 'must be a non-empty connection string';
    if (typeof url === 'string') bad('database.url', url);
    else if (url.password !== '' && db.passwordFile !== undefined)
      bad('database.passwordFile', 'give the password in the url or in passwordFile, not both');
    if (
      db.passwordFile !== undefined &&
      (typeof db.passwordFile !== 'string' || db.passwordFile.length === 0)
    )
      bad('database.passwordFile', 'must be a non-empty path when given');
    for (const field of ['schema', 'captureSchema'] as const) {
      const v = db[field];
      if (v !== undefined && (typeof v !== 'string' || !STAGING_NAME_PATTERN.test(v)))
        bad(
          `database.${field}`,
          `must match ${STAGING_NAME_PATTERN}, ${field}=${JSON.stringify(v)}`,
        );
    }
  } else {
    bad(
      'database.dialect',
      `must be "sqlite", "postgres", "mariadb" or "oracle", dialect=${String((db as { dialect?: unknown })?.dialect)}`,
    );
  }
  checkInt(source?.pumps, 1, CDC_DEFAULTS.pumpsMax, 'pumps', bad);
  checkInt(source?.batchSizeMax, 1, CDC_DEFAULTS.claimLimitMax, 'batchSizeMax', bad);
  checkInt(source?.pollIntervalMs, 0, 3_600_000, 'pollIntervalMs', bad);
  if (source?.recordBytesMax !== undefined)
    checkInt(source.recordBytesMax, 1, CDC_DEFAULTS.recordBytesMax, 'recordBytesMax', bad);
  if (source?.errors !== undefined) {
    for (const [field, [min, max]] of Object.entries(ERROR_POLICY_LIMITS)) {
      const v = (source.errors as Record<string, unknown>)[field];
      if (v !== undefined) checkInt(v, min, max, `errors.${field}`, bad);
    }
    const hold = source.errors.holdKeyWhenParked;
    if (hold !== undefined && typeof hold !== 'boolean')
      bad('errors.holdKeyWhenParked', 'must be a boolean');
  }
  if (typeof source?.stagingTable !== 'string' || !STAGING_NAME_PATTERN.test(source.stagingTable)) {
    bad(
      'stagingTable',
      `must match ${STAGING_NAME_PATTERN}, stagingTable=${JSON.stringify(source?.stagingTable)}`,
    );
  }
  if (!Array.isArray(source?.tables) || source.tables.length === 0) {
    bad('tables', 'must list at least one table');
  } else {
    const seen = new Set<string>();
    source.tables.forEach((t, i) => {
      const p = `tables[${i}]`;
      if (typeof t?.table !== 'string' || t.table.length === 0)
        bad(`${p}.table`, 'must be a non-empty string');
      else if (seen.has(t.table)) bad(`${p}.table`, `"${t.table}" is listed twice`);
      else seen.add(t.table);
      if (!Array.isArray(t?.operations) || t.operations.length === 0) {
        bad(`${p}.operations`, 'must list at least one of insert, update, delete, truncate');
      } else {
        for (const op of t.operations) {
          if (!CAPTURE_OPERATIONS.includes(op))
            bad(`${p}.operations`, `unknown operation ${JSON.stringify(op)}`);
        }
        if (new Set(t.operations).size !== t.operations.length)
          bad(`${p}.operations`, 'lists an operation twice');
        if (db?.dialect === 'sqlite' && t.operations.includes('truncate')) {
          bad(
            `${p}.operations`,
            'truncate is not supported on sqlite (SQLite has no TRUNCATE; DELETE fires per-row delete triggers)',
          );
        }
        if (
          (db?.dialect === 'mariadb' || db?.dialect === 'mysql') &&
          t.operations.includes('truncate')
        ) {
          bad(`${p}.operations`, MARIADB_TRUNCATE_REFUSAL);
        }
        if (db?.dialect === 'oracle' && t.operations.includes('truncate'))
          bad(`${p}.operations`, ORACLE_TRUNCATE_REFUSAL);
      }
      for (const k of keyStrategyProblems(t?.key, db?.dialect))
        bad([`${p}.key`, ...k.sub].join('.'), k.message);
      for (const field of ['columns'] as const) {
        const list = t?.[field];
        if (list === undefined) continue;
        if (
          !Array.isArray(list) ||
          list.length === 0 ||
          list.some((c) => typeof c !== 'string' || c.length === 0)
        ) {
          bad(`${p}.${field}`, 'must be a non-empty list of column names when given');
        } else if (new Set(list).size !== list.length) {
          bad(`${p}.${field}`, 'lists a column twice');
        }
      }
      for (const c of conditionProblems(
        t?.condition,
        Array.isArray(t?.operations) ? t.operations : [],
        db?.dialect,
        t?.triggers,
      )) {
        bad([`${p}.condition`, ...c.sub].join('.'), c.message);
      }
      if (typeof t?.target !== 'string' || t.target.length === 0)
        bad(`${p}.target`, 'must be a non-empty queue name');
      if (t?.initialLoad !== undefined && typeof t.initialLoad !== 'boolean')
        bad(`${p}.initialLoad`, 'must be a boolean');
      if (t?.initialLoad === true && db?.dialect === 'oracle')
        bad(`${p}.initialLoad`, ORACLE_INITIAL_LOAD_REFUSAL);
      else if (t?.initialLoad === true && t.key === 'transactionId') {
        bad(
          `${p}.initialLoad`,
          'needs a key that names the row (primaryKey, columns, fixed, expression or none); key transactionId orders by transaction and a read event has none',
        );
      }
      if (t?.keyUpdate !== undefined && !KEY_UPDATE_MODES.includes(t.keyUpdate)) {
        bad(
          `${p}.keyUpdate`,
          `must be one of ${KEY_UPDATE_MODES.join(', ')}, keyUpdate=${JSON.stringify(t.keyUpdate)}`,
        );
      }
      if (t?.triggers !== undefined && !TRIGGER_LEVELS.includes(t.triggers)) {
        bad(
          `${p}.triggers`,
          `must be one of ${TRIGGER_LEVELS.join(', ')}, triggers=${JSON.stringify(t.triggers)}`,
        );
      } else if (t?.triggers === 'statement' && db !== undefined && db.dialect !== 'postgres') {
        bad(
          `${p}.triggers`,
          `statement is PostgreSQL only (${db.dialect} has row triggers only); leave it out or give row`,
        );
      }
    });
  }
  if (problems.length > 0) throw new Error(problems.join('\n'));
  return source;
}

/** One problem of a KeyStrategy: `sub` is the path below the `key` field. */
export interface KeyStrategyProblem {
  sub: (string | number)[];
  message: string;
}

/** Problems of a KeyStrategy value for `dialect` (empty when it is valid or absent). */
export function keyStrategyProblems(
  key: unknown,
  dialect: string | undefined,
): KeyStrategyProblem[] {
  const out: KeyStrategyProblem[] = [];
  const bad = (sub: (string | number)[], message: string) => out.push({ sub, message });
  if (key === undefined) return out;
  const columnsOk = (list: unknown, sub: (string | number)[]) => {
    if (
      !Array.isArray(list) ||
      list.length === 0 ||
      list.some((c) => typeof c !== 'string' || c.length === 0)
    ) {
      bad(sub, 'must be a non-empty list of column names');
    } else if (new Set(list).size !== list.length) {
      bad(sub, 'lists a column twice');
    }
  };
  const shapes = `${KEY_STRATEGY_WORDS.join(', ')}, a list of columns, {columns: [...]}, {fixed: "value"} or {expression: "SQL"}`;
  if (typeof key === 'string') {
    if (!(KEY_STRATEGY_WORDS as readonly string[]).includes(key))
      bad([], `must be one of ${shapes}, got ${JSON.stringify(key)}`);
    else if (key === 'transactionId' && dialect === 'sqlite') {
      bad(
        [],
        'transactionId is not supported on sqlite (SQLite gives triggers no transaction identity)',
      );
    } else if (key === 'transactionId' && (dialect === 'mariadb' || dialect === 'mysql')) {
      bad(
        [],
        'transactionId is not supported on mariadb (MariaDB gives SQL no identity of the running transaction)',
      );
    }
  } else if (Array.isArray(key)) {
    columnsOk(key, []);
  } else if (key !== null && typeof key === 'object' && Object.keys(key).length === 1) {
    const k = key as Record<string, unknown>;
    if ('columns' in k) columnsOk(k.columns, ['columns']);
    else if ('fixed' in k) {
      if (typeof k.fixed !== 'string') bad(['fixed'], 'must be a string');
    } else if ('expression' in k) {
      if (typeof k.expression !== 'string' || k.expression.trim() === '')
        bad(['expression'], 'must be a non-empty SQL expression');
      else {
        const text = sqlTextProblem(k.expression, sqlTextDialect(dialect));
        if (text !== null) bad(['expression'], text);
        const images = [...imagesNamed(k.expression)];
        if (images.length > 0)
          bad(
            ['expression'],
            `names ${images.join(' and ')}: a key expression reads its row as ROW.<column> (NEW's columns for an insert or update, OLD's for a delete), e.g. ROW.id`,
          );
      }
    } else bad([Object.keys(k)[0]!], `unknown key strategy (one of ${shapes})`);
  } else {
    bad([], `must be one of ${shapes}`);
  }
  return out;
}

function checkInt(
  value: unknown,
  min: number,
  max: number,
  path: string,
  bad: (p: string, m: string) => void,
): void {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    bad(path, `must be an integer in [${min}, ${max}], ${path}=${String(value)}`);
  }
}

/**
 * Checks the arguments of StagingClient.claim; throws `Error` naming the invariant.
 * Shared by both dialects so the messages are identical.
 */
export function checkClaimArgs(pump: number, pumps: number, limit: number): void {
  if (!Number.isInteger(pumps) || pumps < 1 || pumps > CDC_DEFAULTS.pumpsMax) {
    throw new Error(`pumps must be an integer in [1, ${CDC_DEFAULTS.pumpsMax}], pumps=${pumps}`);
  }
  if (!Number.isInteger(pump) || pump < 0 || pump >= pumps) {
    throw new Error(`pump must be an integer in [0, pumps), pump=${pump}, pumps=${pumps}`);
  }
  if (!Number.isInteger(limit) || limit < 1 || limit > CDC_DEFAULTS.claimLimitMax) {
    throw new Error(
      `limit must be an integer in [1, ${CDC_DEFAULTS.claimLimitMax}], limit=${limit}`,
    );
  }
}
