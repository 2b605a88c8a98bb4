/**
 * Capture figures per source and table, read from the captured database itself: staging depth
 * (rows staged, not yet shipped), age of the oldest staged row, and rows parked in the error
 * table `<stagingTable>_errors` when it exists (see engine/cdc/staging.ts for both layouts).
 *
 * One read-only connection per source, opened on first use and kept; a source whose database is
 * down is reported with its error and retried on the next read (never a reason to fail the
 * server). Reads are cached for `cacheMs` so a dashboard and a metrics scraper together cost one
 * round trip per source per interval.
 */
import Database from 'better-sqlite3';
import type pg from 'pg';
import type mysql from 'mysql2/promise';
import { mysqlDriver, pgDriver } from '../engine/cdc/drivers.js';
import {
  CDC_DEFAULTS,
  OracleStaging,
  parseMariaDbUrl,
  type CaptureSource,
} from '../engine/cdc/index.js';

/** Figures of one captured table. */
export interface CaptureTableStats {
  table: string;
  /** Target queue of the table's changes. */
  target: string;
  /** Rows in the staging table for this table. */
  stagingDepth: number;
  /** Now minus the capture time of the oldest staged row, ms; 0 when none is staged. */
  oldestStagedAgeMs: number;
  /** Rows parked in the error table; null when the error table does not exist. */
  parkedErrors: number | null;
}

/** Figures of one capture source. */
export interface CaptureSourceStats {
  source: string;
  dialect: CaptureSource['database']['dialect'];
  stagingTable: string;
  pumps: number;
  /** null when the database could not be read; `error` says why. */
  tables: CaptureTableStats[] | null;
  error: string | null;
  /** ISO time of the read. */
  readAt: string;
}

interface Row {
  table_name: string;
  n: number | string;
  oldest: number | string | null;
}

/** A read-only probe of one source's staging and error tables. */
interface Probe {
  read(): Promise<{ staged: Row[]; parked: Row[] | null }>;
  close(): Promise<void>;
}

const quote = (name: string) => `"${name.replace(/"/g, '""')}"`;

function sqliteProbe(source: CaptureSource & { database: { dialect: 'sqlite' } }): Probe {
  const db = new Database(source.database.file, {
    readonly: true,
    fileMustExist: true,
    timeout: 1000,
  });
  const staging = quote(source.stagingTable);
  const errors = `${source.stagingTable}_errors`;
  const staged = db.prepare(
    `SELECT table_name, count(*) AS n, min(time_ms) AS oldest FROM ${staging} GROUP BY table_name`,
  );
  const hasErrors = db.prepare(`SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?`);
  return {
    async read() {
      const parked = hasErrors.get(errors)
        ? (db
            .prepare(
              `SELECT table_name, count(*) AS n, NULL AS oldest FROM ${quote(errors)} GROUP BY table_name`,
            )
            .all() as Row[])
        : null;
      return { staged: staged.all() as Row[], parked };
    },
    async close() {
      db.close();
    },
  };
}

async function pgProbe(
  source: CaptureSource & { database: { dialect: 'postgres' } },
): Promise<Probe> {
  const client = new (pgDriver().Client)({
    connectionString: source.database.url,
    application_name: 'sluice-ops',
  });
  let broken: Error | null = null;
  client.on('error', (err: Error) => (broken = err));
  await client.connect();
  try {
    if (source.database.schema !== undefined)
      await client.query(`SET search_path TO ${quote(source.database.schema)}`);
    await client.query('SET default_transaction_read_only = on');
  } catch (err) {
    await client.end().catch(() => undefined);
    throw err;
  }
  // The staging table sits in the capture schema (database.captureSchema, "sluice" by default,
  // where capture keeps its own objects) or, in older installs, on the search_path: the first
  // that exists wins.
  const captureSchema = (source.database as { captureSchema?: string }).captureSchema ?? 'sluice';
  const resolve = async (table: string): Promise<string | null> => {
    for (const name of [`${quote(captureSchema)}.${quote(table)}`, quote(table)]) {
      const r = await client.query<{ t: string | null }>('SELECT to_regclass($1)::text AS t', [
        name,
      ]);
      if (r.rows[0]?.t) return name;
    }
    return null;
  };
  return {
    async read() {
      if (broken) throw broken;
      const stagingName = await resolve(source.stagingTable);
      if (stagingName === null)
        throw new Error(
          `staging table ${source.stagingTable} not found (is the capture installed? sluice install)`,
        );
      const staged = await client.query<Row>(
        `SELECT table_name, count(*) AS n, min(time_ms) AS oldest FROM ${stagingName} GROUP BY table_name`,
      );
      const errorsName = await resolve(`${source.stagingTable}_errors`);
      const parked = errorsName
        ? (
            await client.query<Row>(
              `SELECT table_name, count(*) AS n, NULL AS oldest FROM ${errorsName} GROUP BY table_name`,
            )
          ).rows
        : null;
      return { staged: staged.rows, parked };
    },
    async close() {
      await client.end().catch(() => undefined);
    },
  };
}

/** Oracle: the staging client's own per-table counts (engine/cdc/oracle.ts). */
async function oracleProbe(source: CaptureSource): Promise<Probe> {
  const staging = new OracleStaging(source);
  try {
    await staging.connected();
  } catch (err) {
    await staging.close();
    throw err;
  }
  return {
    read: () => staging.countsByTable(),
    close: () => staging.close(),
  };
}

/** MariaDB: the staging and error tables live in the capture database (database.captureSchema). */
async function mariadbProbe(source: CaptureSource): Promise<Probe> {
  const db = source.database as { url: string; captureSchema?: string };
  const url = parseMariaDbUrl(db.url);
  if (typeof url === 'string') throw new Error(`database.url: ${url}`);
  const conn = await mysqlDriver().createConnection({
    host: url.host,
    port: url.port,
    user: url.user,
    password: url.password,
    database: url.database,
    supportBigNumbers: true,
    bigNumberStrings: true,
  });
  let broken: Error | null = null;
  conn.on('error', (err: Error) => {
    broken = err;
  });
  const ident = (n: string) => `\`${n.replace(/`/g, '``')}\``;
  const home = db.captureSchema ?? CDC_DEFAULTS.captureSchema;
  const exists = async (table: string): Promise<boolean> => {
    const [rows] = await conn.query<mysql.RowDataPacket[]>(
      'SELECT 1 FROM information_schema.tables WHERE table_schema = ? AND table_name = ?',
      [home, table],
    );
    return rows.length > 0;
  };
  const counts = async (table: string, oldest: boolean): Promise<Row[]> => {
    const [rows] = await conn.query<mysql.RowDataPacket[]>(
      `SELECT table_name, count(*) AS n, ${oldest ? 'min(time_ms)' : 'NULL'} AS oldest ` +
        `FROM ${ident(home)}.${ident(table)} GROUP BY table_name`,
    );
    return rows as unknown as Row[];
  };
  return {
    async read() {
      if (broken) throw broken;
      if (!(await exists(source.stagingTable))) {
        throw new Error(
          `staging table ${home}.${source.stagingTable} not found (is the capture installed? sluice install)`,
        );
      }
      const errors = `${source.stagingTable}_errors`;
      return {
        staged: await counts(source.stagingTable, true),
        parked: (await exists(errors)) ? await counts(errors, false) : null,
      };
    },
    async close() {
      await conn.end().catch(() => undefined);
    },
  };
}

/** Reads capture figures of every source of a topology (see the module comment). */
export class CaptureStats {
  private readonly probes = new Map<string, Probe>();
  private cached: { atMs: number; value: Promise<CaptureSourceStats[]> } | null = null;

  /** @param cacheMs how long one read is served from cache, ms. */
  constructor(
    private readonly sources: CaptureSource[],
    private readonly cacheMs = 1000,
  ) {}

  /** Figures of every source, at most `cacheMs` old. Never rejects: errors are per source. */
  read(): Promise<CaptureSourceStats[]> {
    const nowMs = Date.now();
    if (this.cached && nowMs - this.cached.atMs < this.cacheMs) return this.cached.value;
    const value = Promise.all(this.sources.map((s) => this.readSource(s)));
    this.cached = { atMs: nowMs, value };
    return value;
  }

  /** Closes every connection. Idempotent. */
  async close(): Promise<void> {
    const all = [...this.probes.values()];
    this.probes.clear();
    await Promise.all(all.map((p) => p.close()));
  }

  private async readSource(source: CaptureSource): Promise<CaptureSourceStats> {
    const base = {
      source: source.name,
      dialect: source.database.dialect,
      stagingTable: source.stagingTable,
      pumps: source.pumps,
    };
    const nowMs = Date.now();
    try {
      let probe = this.probes.get(source.name);
      if (!probe) {
        probe =
          source.database.dialect === 'sqlite'
            ? sqliteProbe(source as CaptureSource & { database: { dialect: 'sqlite' } })
            : source.database.dialect === 'postgres'
              ? await pgProbe(source as CaptureSource & { database: { dialect: 'postgres' } })
              : source.database.dialect === 'oracle'
                ? await oracleProbe(source)
                : await mariadbProbe(source);
        this.probes.set(source.name, probe);
      }
      const { staged, parked } = await probe.read();
      const tables = source.tables.map((t): CaptureTableStats => {
        const s = staged.find((r) => r.table_name === t.table);
        const p = parked?.find((r) => r.table_name === t.table);
        const oldest = s?.oldest === null || s?.oldest === undefined ? null : Number(s.oldest);
        return {
          table: t.table,
          target: t.target,
          stagingDepth: s ? Number(s.n) : 0,
          oldestStagedAgeMs: oldest === null ? 0 : Math.max(0, nowMs - oldest),
          parkedErrors: parked === null ? null : p ? Number(p.n) : 0,
        };
      });
      return { ...base, tables, error: null, readAt: new Date(nowMs).toISOString() };
    } catch (err) {
      const probe = this.probes.get(source.name);
      this.probes.delete(source.name);
      await probe?.close().catch(() => undefined);
      return {
        ...base,
        tables: null,
        error: (err as Error).message,
        readAt: new Date(nowMs).toISOString(),
      };
    }
  }
}
