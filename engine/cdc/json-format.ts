/**
 * The `format: json` value of a captured change: a self-describing JSON object that a consumer
 * outside Sluice reads without our code (after Debezium's change event value, without its
 * schema part). The record key is the change's key (a JSON array text, e.g. `["42"]`).
 *
 * ```json
 * {
 *   "op": "u",
 *   "before": { "id": "42", "holder": "ann", "amount": "10.5" },
 *   "after":  { "id": "42", "holder": "ann", "amount": "12" },
 *   "source": {
 *     "name": "app", "dialect": "postgres", "database": "shop", "schema": "public",
 *     "table": "ledger", "txId": "7712", "stagingId": "1031", "captureTimeMs": 1796116339607,
 *     "installation": "3f9a0c1e5b7d2468"
 *   }
 * }
 * ```
 *
 * - `op`: `c` insert, `u` update, `d` delete, `t` truncate, `r` a row read by an initial load.
 * - `before` / `after`: the row images as objects whose values are the columns' exact text as
 *   JSON strings, or null (never a JSON number: no value passes through a float); the image
 *   itself is null where the operation has none (c: no before; d: no after; t: neither).
 * - `source.database`: the database name (PostgreSQL and MariaDB: from the url; SQLite: the
 *   file's absolute path). `source.schema`: the table's schema when the topology says it
 *   (`schema.table`, or `database.schema` on PostgreSQL; SQLite `main`; MariaDB the database),
 *   else null. `source.table`: the table name without its schema. `txId`: PostgreSQL's
 *   txid_current() as text; null on SQLite and MariaDB, which give triggers none. `stagingId`:
 *   the staging id as decimal text, unique per change of one installation of a capture source.
 *   `captureTimeMs`: when the trigger ran, ms since the Unix epoch (database server clock).
 *   `installation`: the capture's installation id (16 hex characters, new whenever the staging
 *   table is created: engine/cdc/staging.ts), or null when none is installed; a recreated
 *   staging table counts its ids from 1 again, so (installation, stagingId) is the dedup
 *   identity.
 */
import type { CaptureSource, StagedChange } from './config.js';

/** `capture[].tables[].format`: the envelope Sluice's own actors read (default), or JSON. */
export type CaptureFormat = 'envelope' | 'json';

/** Allowed values of `capture[].tables[].format`. */
export const CAPTURE_FORMATS: readonly CaptureFormat[] = ['envelope', 'json'];

/** The `source` block of a JSON change value. */
export interface CaptureJsonSource {
  /** Capture source name in the topology. */
  name: string;
  dialect: 'sqlite' | 'postgres' | 'mariadb' | 'oracle';
  database: string;
  schema: string | null;
  table: string;
  txId: string | null;
  stagingId: string;
  captureTimeMs: number;
  /** Installation id of the capture, null when none is installed (or unknown, in a sink). */
  installation: string | null;
}

/** A JSON change value (see the module comment). */
export interface CaptureJsonValue {
  op: 'c' | 'u' | 'd' | 't' | 'r';
  before: Record<string, string | null> | null;
  after: Record<string, string | null> | null;
  source: CaptureJsonSource;
}

const OP_LETTERS: Readonly<Record<string, CaptureJsonValue['op']>> = {
  insert: 'c',
  update: 'u',
  delete: 'd',
  truncate: 't',
  read: 'r',
};

/** What a JSON value says about its source, computed once per capture source and table. */
export interface JsonSourceInfo {
  name: string;
  dialect: CaptureJsonSource['dialect'];
  database: string;
  /** Per configured table name: its schema (or null) and bare name. */
  tables: Map<string, { schema: string | null; table: string }>;
}

/** The database name of a connection url's path (`postgres://u@h:5432/shop` -> `shop`), or ''. */
function urlDatabase(url: string): string {
  try {
    return decodeURIComponent(new URL(url).pathname.replace(/^\//, ''));
  } catch {
    return '';
  }
}

/** {@link JsonSourceInfo} of `source`. */
export function jsonSourceInfo(source: CaptureSource): JsonSourceInfo {
  const db = source.database;
  const dialect = db.dialect === 'mysql' ? 'mariadb' : db.dialect;
  const database = db.dialect === 'sqlite' ? db.file : urlDatabase(db.url);
  const tables = new Map<string, { schema: string | null; table: string }>();
  for (const t of source.tables) {
    const dot = t.table.indexOf('.');
    if (dot > 0)
      tables.set(t.table, { schema: t.table.slice(0, dot), table: t.table.slice(dot + 1) });
    else if (db.dialect === 'sqlite') tables.set(t.table, { schema: 'main', table: t.table });
    else if (db.dialect === 'postgres')
      tables.set(t.table, { schema: db.schema ?? null, table: t.table });
    else if (db.dialect === 'oracle') {
      // Oracle: unqualified tables belong to database.schema, default the url's user.
      let user = '';
      try {
        user = decodeURIComponent(new URL(db.url).username);
      } catch {
        // an invalid url is refused by validation before this runs
      }
      tables.set(t.table, { schema: (db.schema ?? user).toUpperCase() || null, table: t.table });
    } else tables.set(t.table, { schema: database || null, table: t.table });
  }
  return { name: source.name, dialect, database, tables };
}

/**
 * The JSON value of `change` (see the module comment), stamped with `installation` ('': null).
 * Images are parsed from the staged JSON
 * text, whose values are already strings or null.
 * @throws Error naming the staging id when an image is not JSON object text (a damaged row).
 */
export function captureJsonValue(
  change: StagedChange,
  info: JsonSourceInfo,
  installation = '',
): CaptureJsonValue {
  const op = OP_LETTERS[change.op];
  if (op === undefined)
    throw new Error(
      `staged change ${change.stagingId}: unknown operation ${JSON.stringify(change.op)}`,
    );
  const image = (text: string | null, which: string): Record<string, string | null> | null => {
    if (text === null) return null;
    try {
      return JSON.parse(text) as Record<string, string | null>;
    } catch (err) {
      throw new Error(
        `staged change ${change.stagingId}: ${which} image is not JSON: ${(err as Error).message}`,
      );
    }
  };
  const t = info.tables.get(change.table) ?? { schema: null, table: change.table };
  return {
    op,
    before: image(change.before, 'before'),
    after: image(change.after, 'after'),
    source: {
      name: info.name,
      dialect: info.dialect,
      database: info.database,
      schema: t.schema,
      table: t.table,
      txId: change.txid === '' ? null : change.txid,
      stagingId: change.stagingId,
      captureTimeMs: change.timeMs,
      installation: installation === '' ? null : installation,
    },
  };
}

const encoder = new TextEncoder();

/**
 * {@link captureJsonValue} (same arguments) as the UTF-8 bytes of its JSON text. The staged images are JSON text
 * made by the triggers, so they are spliced in as they are instead of parsed and printed again.
 * @throws Error as captureJsonValue for an unknown operation.
 */
export function encodeCaptureJson(
  change: StagedChange,
  info: JsonSourceInfo,
  installation = '',
): Uint8Array {
  const op = OP_LETTERS[change.op];
  if (op === undefined)
    throw new Error(
      `staged change ${change.stagingId}: unknown operation ${JSON.stringify(change.op)}`,
    );
  const t = info.tables.get(change.table) ?? { schema: null, table: change.table };
  const source: CaptureJsonSource = {
    name: info.name,
    dialect: info.dialect,
    database: info.database,
    schema: t.schema,
    table: t.table,
    txId: change.txid === '' ? null : change.txid,
    stagingId: change.stagingId,
    captureTimeMs: change.timeMs,
    installation: installation === '' ? null : installation,
  };
  const text = `{"op":"${op}","before":${change.before ?? 'null'},"after":${change.after ?? 'null'},"source":${JSON.stringify(source)}}`;
  return encoder.encode(text);
}
