/**
 * Shared setup for the cdc tests (not a test file itself): a private PostgreSQL schema per test,
 * a temp-dir SQLite file per test, the capture cases' `ledger` table in both dialects, and a
 * capture source over it.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import Database from 'better-sqlite3';
import pg from 'pg';
import { createMariaAppDb } from './cdc-mariadb-helpers.js';
import type {
  CaptureSource,
  CaptureTable,
  DatabaseRef,
  StagedChange,
  StagingClient,
} from '../engine/cdc/index.js';

export const PG_URL = process.env.SLUICE_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

export type Dialect = 'sqlite' | 'postgres' | 'mariadb';
export const DIALECTS: Dialect[] = ['sqlite', 'postgres'];

/** The capture cases' table. SQLite: exact decimals are TEXT (NUMERIC affinity would lose digits). */
export const LEDGER_DDL: Record<Dialect, string> = {
  postgres: `CREATE TABLE ledger (id bigint PRIMARY KEY, holder text, memo text, amount numeric(18,6), booked timestamp, booked_tz timestamptz)`,
  sqlite: `CREATE TABLE ledger (id INTEGER PRIMARY KEY, holder TEXT, memo TEXT, amount TEXT, booked TEXT, booked_tz TEXT)`,
  mariadb: `CREATE TABLE ledger (id bigint PRIMARY KEY, holder text, memo longtext, amount decimal(18,6), booked datetime(6), booked_tz timestamp(6) NULL)`,
};

/** A writer connection of the application under capture. */
export interface AppDb {
  dialect: Dialect;
  ref: DatabaseRef;
  /** Runs SQL (one or more statements). */
  exec(sql: string): Promise<void>;
  /** Rows of a query. */
  query<T>(sql: string): Promise<T[]>;
  /** Another writer connection to the same database. */
  connect(): Promise<AppDb>;
  close(): Promise<void>;
  /** Closes and removes the schema / temp dir. */
  destroy(): Promise<void>;
}

/** A fresh database of `dialect`; `prefix` starts its schema / database name (random suffix). */
export async function createAppDb(dialect: Dialect, prefix = 'sluice_cdc_'): Promise<AppDb> {
  if (dialect === 'mariadb') return createMariaAppDb(prefix);
  return dialect === 'sqlite' ? createSqliteAppDb() : createPgAppDb(prefix);
}

function sqliteAppDb(file: string, cleanup: () => void): AppDb {
  const db = new Database(file, { timeout: 5000 });
  db.pragma('journal_mode = WAL');
  const self: AppDb = {
    dialect: 'sqlite',
    ref: { dialect: 'sqlite', file },
    async exec(sql) {
      db.exec(sql);
    },
    async query<T>(sql: string) {
      return db.prepare(sql).all() as T[];
    },
    async connect() {
      return sqliteAppDb(file, () => undefined);
    },
    async close() {
      if (db.open) db.close();
    },
    async destroy() {
      await self.close();
      cleanup();
    },
  };
  return self;
}

function createSqliteAppDb(): AppDb {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-cdc-'));
  return sqliteAppDb(join(dir, 'app.db'), () => rmSync(dir, { recursive: true, force: true }));
}

async function pgAppDb(schema: string, cleanup: (() => Promise<void>) | null): Promise<AppDb> {
  const client = new pg.Client({ connectionString: PG_URL });
  client.on('error', () => undefined);
  await client.connect();
  await client.query(`SET search_path TO "${schema}"`);
  let closed = false;
  const self: AppDb = {
    dialect: 'postgres',
    ref: { dialect: 'postgres', url: PG_URL, schema, captureSchema: `${schema}_sluice` },
    async exec(sql) {
      await client.query(sql);
    },
    async query<T>(sql: string) {
      return (await client.query(sql)).rows as T[];
    },
    async connect() {
      return pgAppDb(schema, null);
    },
    async close() {
      if (!closed) {
        closed = true;
        await client.end();
      }
    },
    async destroy() {
      await self.close();
      if (cleanup) await cleanup();
    },
  };
  return self;
}

async function createPgAppDb(prefix: string): Promise<AppDb> {
  const schema = `${prefix}${randomBytes(6).toString('hex')}`;
  const admin = new pg.Client({ connectionString: PG_URL });
  await admin.connect();
  await admin.query(`CREATE SCHEMA "${schema}"`);
  await admin.end();
  return pgAppDb(schema, async () => {
    const c = new pg.Client({ connectionString: PG_URL });
    await c.connect();
    await c.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await c.query(`DROP SCHEMA IF EXISTS "${schema}_sluice" CASCADE`);
    await c.end();
  });
}

/** The staging table as `app`'s own connection names it (PostgreSQL: in the capture schema). */
export function stagingName(app: AppDb, table = 'sluice_staging'): string {
  if (app.ref.dialect === 'mariadb' || app.ref.dialect === 'mysql')
    return `\`${app.ref.captureSchema}\`.\`${table}\``;
  return app.ref.dialect === 'postgres' ? `"${app.ref.captureSchema}"."${table}"` : `"${table}"`;
}

/** A capture source over `tables` in `app`'s database. */
export function sourceFor(
  app: AppDb,
  tables: Partial<CaptureTable>[],
  extra: Partial<CaptureSource> = {},
): CaptureSource {
  return {
    name: 'test',
    database: app.ref,
    tables: tables.map((t) => ({
      table: 'ledger',
      operations: ['insert', 'update', 'delete'],
      target: 'ledger-events',
      ...t,
    })),
    pumps: 1,
    batchSizeMax: 100,
    pollIntervalMs: 10,
    stagingTable: 'sluice_staging',
    ...extra,
  };
}

/** Claims everything staged for pump 0 of 1 and acks it. */
export async function drain(staging: StagingClient, limit = 1000): Promise<StagedChange[]> {
  const rows = await staging.claim(0, 1, limit);
  await staging.ack(rows.map((r) => r.stagingId));
  return rows;
}

/** The parts of a change the case expectations talk about, images parsed. */
export function view(c: StagedChange): {
  table: string;
  op: string;
  key: unknown;
  before: unknown;
  after: unknown;
} {
  return {
    table: c.table,
    op: c.op,
    key: c.key === '*' ? '*' : JSON.parse(c.key),
    before: c.before === null ? null : JSON.parse(c.before),
    after: c.after === null ? null : JSON.parse(c.after),
  };
}

/** A full ledger row image; unspecified columns are null. */
export function ledgerRow(
  values: Partial<
    Record<'id' | 'holder' | 'memo' | 'amount' | 'booked' | 'booked_tz', string | null>
  >,
): Record<string, string | null> {
  return {
    id: null,
    holder: null,
    memo: null,
    amount: null,
    booked: null,
    booked_tz: null,
    ...values,
  };
}

export function sleepMs(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** In-memory PumpSink: durable for the life of the process, which is all these tests need. */
export interface MemorySink {
  changes: StagedChange[];
  appendBatch(changes: StagedChange[]): void;
  recentStagingIds(limit: number): Set<string>;
}

export function memorySink(): MemorySink {
  const changes: StagedChange[] = [];
  return {
    changes,
    appendBatch(batch) {
      changes.push(...batch);
    },
    recentStagingIds(limit) {
      return new Set(changes.slice(-limit).map((c) => c.stagingId));
    },
  };
}

/**
 * A memorySink whose target refuses (RecordRefusedError) any batch holding a change whose after
 * image exceeds `limit.bytes` characters, as a target with a record size limit does (only the
 * after image, so a later update of the row can be small); `calls` lists the staging ids of every appendBatch call, refused or not; `down` makes
 * every call fail with a plain Error (an outage, not a refusal).
 */
export interface LimitedSink extends MemorySink {
  limit: { bytes: number };
  calls: string[][];
  down: boolean;
}

export function limitedSink(bytes: number, refused: new (message: string) => Error): LimitedSink {
  const base = memorySink();
  const sink: LimitedSink = {
    ...base,
    limit: { bytes },
    calls: [],
    down: false,
    appendBatch(batch) {
      sink.calls.push(batch.map((c) => c.stagingId));
      if (sink.down) throw new Error('target unreachable (ECONNREFUSED)');
      for (const c of batch) {
        const size = c.after?.length ?? 0;
        if (size > sink.limit.bytes)
          throw new refused(`record of ${size} bytes exceeds ${sink.limit.bytes}`);
      }
      base.appendBatch(batch);
    },
  };
  return sink;
}

/** A captured ledger change as `sluice tail` prints its value. */
export interface LedgerEvent {
  stagingId: string;
  key: string;
  op: string;
  after: string | null;
}

/**
 * Checks captured ledger events against the database (the outage and network-fault tests): no
 * staging id twice, none missing (one writer, no rollbacks: staging ids are gapless), per-key
 * staging-id order, and the table rebuilt from the events by key equals the database's `ledger`.
 * @throws AssertionError naming the first violation.
 */
export async function assertLedgerExactlyOnce(app: AppDb, events: LedgerEvent[]): Promise<void> {
  const ids = events.map((e) => BigInt(e.stagingId));
  if (new Set(ids).size !== ids.length) throw new Error('a staging id was delivered twice');
  const byKey = new Map<string, bigint[]>();
  for (const e of events) byKey.set(e.key, [...(byKey.get(e.key) ?? []), BigInt(e.stagingId)]);
  for (const [key, list] of byKey)
    if (!list.every((v, i) => i === 0 || list[i - 1]! < v))
      throw new Error(`key ${key} not in staging-id order: ${list.join(',')}`);
  const sorted = [...ids].sort((a, b) => (a < b ? -1 : 1));
  const span = sorted.length === 0 ? 0n : sorted[sorted.length - 1]! - sorted[0]! + 1n;
  if (span !== BigInt(ids.length))
    throw new Error(`staging ids missing: ${ids.length} delivered over a span of ${span}`);
  const state = new Map<string, string>();
  for (const e of [...events].sort((a, b) =>
    BigInt(a.stagingId) < BigInt(b.stagingId) ? -1 : 1,
  )) {
    if (e.op === 'delete') state.delete(e.key);
    else state.set(e.key, (JSON.parse(e.after!) as { holder: string }).holder);
  }
  const rows = await app.query<{ id: string; holder: string }>(
    app.dialect === 'postgres'
      ? `SELECT id::text AS id, holder FROM ledger ORDER BY id`
      : `SELECT CAST(id AS CHAR) AS id, holder FROM ledger ORDER BY id`,
  );
  const got = JSON.stringify([...state.entries()].sort());
  const want = JSON.stringify(rows.map((r) => [`["${r.id}"]`, r.holder]).sort());
  if (got !== want) throw new Error(`consumer table differs from the database:\n${got}\n${want}`);
}

/**
 * `line:col` (1-based) of `token` in the first line of `file` that contains `lineToken`: where a
 * located error (`file:line:col: field: ...`) must point. Throws when the file has no such line.
 */
export function positionIn(file: string, lineToken: string, token = lineToken): string {
  const lines = readFileSync(file, 'utf8').split('\n');
  const line = lines.findIndex((l) => l.includes(lineToken));
  if (line < 0 || !lines[line]!.includes(token))
    throw new Error(`test bug: "${token}" not in ${file}`);
  return `${line + 1}:${lines[line]!.indexOf(token) + 1}`;
}
