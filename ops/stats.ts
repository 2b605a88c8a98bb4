/**
 * Statistics of a running topology, stored durably (after MOVEX CDC's per-minute statistics):
 * per interval ("minute", `intervalMs`, default 60 s) and per actor and per capture table,
 *  - events in and out, errors, and consumer lag p50/p99 (ms) over the interval.
 * Per actor: counter deltas from the sampler's readings (a restarted actor counts from 0 again)
 * and the largest input lag at each sample. Per capture table: `eventsOut` = changes of that
 * table its source's pumps appended durably to the target topic, `errors` = changes newly
 * parked, `eventsIn` = eventsOut + growth of staging depth + growth of the error table (rows the
 * triggers staged; exact over any span of whole readings, while one interval can be off by a
 * change read in flight, made up in the next: see observeCapture), lag = age of the oldest
 * staged row, sampled every `captureSampleMs` (staging on the recorder's own uncached
 * connection).
 *
 * Where eventsOut comes from: the pumps themselves. Each pump adds, per table, the changes it
 * made durable in the target (PumpOptions.onDurable) to its source's shipped counters in shared
 * memory (actors/contracts.ts createShippedCounters), read here like the sampler reads every
 * actor's counters (ActorInfo.shared; nothing is asked of a pump). Counting at the target
 * instead (its record count, as before) is wrong wherever the target is not this table's alone
 * or not a journal queue of `<dataDir>/queues`: two tables (or another producer, on Kafka)
 * writing one topic (each table showed the topic's total), a Kafka bus, or processor topics of
 * the journal bus (both showed 0). The counters are one buffer per source for the topology's
 * run, created at the plan (0, before any pump starts, so a burst shipped before the first
 * capture reading is counted) and shared by every pump of the source, restarted ones and those
 * of a runtime change of the pump count included: a total only grows, never resets or counts a
 * change twice. Not counted: read events of initial loads (not staged changes), and a batch
 * reported failed although it did reach the target (a failed fsync, a Kafka commit whose answer
 * was lost) or whose pump was terminated between its commit and the count (a retired pump past
 * drainTimeoutMs): the next reconciliation deletes it from staging uncounted, so eventsOut and
 * eventsIn are short by it.
 *
 * Where they go:
 *  1. the engine's own journal: `<dataDir>/ops/stats/minute` and `.../hour`, one journal
 *     partition each (segment files, checksummed, recovered like every queue), one JSON event
 *     (type 2, key = step) per interval holding every point; this is what GET /stats reads;
 *  2. for each capture source, its database: table `<captureSchema>.stats` (PostgreSQL, MariaDB)
 *     or `sluice_stats` (SQLite, in the capture file), one row per (topology, source,
 *     table_name, step, start_ms). A database that is down loses that interval's rows there (the
 *     journal has them); it is retried on the next interval.
 *
 * Condensing: once an hour (`hourIntervals` intervals, 60 by default) is older than
 * `condenseAfterMs`, its minute points become one hourly point each: sums of the counts, the mean
 * of the minute p50s and the largest minute p99 (an upper bound of the hour's p99). The hour
 * journal gets the hourly record, the minute journal drops its segments before it (it rolls one
 * segment per hour), and the database rows are replaced the same way in one transaction.
 */
import fs from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import type pg from 'pg';
import type mysql from 'mysql2/promise';
import { mysqlDriver, pgDriver } from '../engine/cdc/drivers.js';
import type { Logger } from 'pino';
import { Appender, Tailer } from '../engine/journal/index.js';
import {
  EnvelopeView,
  EnvelopeWriter,
  decodeJson,
  encodeJson,
  EVENT_TYPE_JSON,
} from '../engine/codec/index.js';
import { CDC_DEFAULTS, parseMariaDbUrl, type CaptureSource } from '../engine/cdc/index.js';
import type { Topology } from '../engine/config/index.js';
import { kindOf, type ActorStatus } from './sampler.js';
import type { ActorInfo } from '../engine/supervisor/index.js';
import type { CounterSnapshot } from '../engine/actor/index.js';
import { PUMP_SHARED, readShipped, type PumpData } from '../actors/contracts.js';
import { CaptureStats, type CaptureSourceStats } from './capture-stats.js';

/** Bounds of the statistics, with defaults in {@link STATS_DEFAULTS}. */
export interface StatsOptions {
  /** Length of one statistics interval ("minute"), ms. Tests use a short one. */
  intervalMs: number;
  /** Intervals in one condensed "hour". */
  hourIntervals: number;
  /** Minute points older than this are condensed to hourly ones, ms. */
  condenseAfterMs: number;
  /** Time between two reads of the capture tables' lag and depth, ms. */
  captureSampleMs: number;
}

/** Defaults of {@link StatsOptions}: minutes, hours, condensed after a day, capture every 5 s. */
export const STATS_DEFAULTS: StatsOptions = {
  intervalMs: 60_000,
  hourIntervals: 60,
  condenseAfterMs: 86_400_000,
  captureSampleMs: 5_000,
};

/**
 * Intervals kept in memory while the statistics journal cannot be written (a full disk): a day
 * of default intervals; beyond it the oldest are dropped, and the recovery line says how many.
 */
export const PENDING_INTERVALS_MAX = 1440;

/** Error codes of a write that may work later (the recorder waits them out, see open()). */
const TRANSIENT_IO = new Set(['ENOSPC', 'EDQUOT', 'EIO']);

/** Steps of statistics. */
export type StatsStep = 'minute' | 'hour';

/** Figures of one actor or capture table over one interval. */
export interface StatsPoint {
  /** `actor` (name: the actor's) or `capture` (name: `<source>/<table>`). */
  kind: 'actor' | 'capture';
  name: string;
  /** Interval start, ms since the epoch (a multiple of the interval). */
  startMs: number;
  intervalMs: number;
  eventsIn: number;
  eventsOut: number;
  errors: number;
  /** Lag percentiles over the samples, ms (nearest rank); null without inputs or samples. */
  lagP50Ms: number | null;
  lagP99Ms: number | null;
}

/** One journal record: every point of one interval. */
interface StatsRecord {
  step: StatsStep;
  startMs: number;
  intervalMs: number;
  points: StatsPoint[];
}

/** Nearest-rank percentile of `sorted` (ascending), `p` in (0, 1]; null when empty. */
export function percentile(sorted: number[], p: number): number | null {
  if (sorted.length === 0) return null;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))]!;
}

/**
 * Condenses points into one per (kind, name) per hour of `hourMs`: sums, mean of p50s, max of
 * p99s (see the module comment).
 */
export function condense(points: StatsPoint[], hourMs: number): StatsPoint[] {
  const out = new Map<string, StatsPoint & { p50s: number[] }>();
  for (const p of points) {
    const startMs = Math.floor(p.startMs / hourMs) * hourMs;
    const k = `${p.kind}\u0000${p.name}\u0000${startMs}`;
    let h = out.get(k);
    if (!h) {
      h = {
        ...p,
        startMs,
        intervalMs: hourMs,
        eventsIn: 0,
        eventsOut: 0,
        errors: 0,
        lagP50Ms: null,
        lagP99Ms: null,
        p50s: [],
      };
      out.set(k, h);
    }
    h.eventsIn += p.eventsIn;
    h.eventsOut += p.eventsOut;
    h.errors += p.errors;
    if (p.lagP50Ms !== null) h.p50s.push(p.lagP50Ms);
    if (p.lagP99Ms !== null) h.lagP99Ms = Math.max(h.lagP99Ms ?? 0, p.lagP99Ms);
  }
  return [...out.values()].map(({ p50s, ...h }) => ({
    ...h,
    lagP50Ms: p50s.length ? Math.round(p50s.reduce((a, b) => a + b, 0) / p50s.length) : null,
  }));
}

/** Same (kind, name, startMs) twice (a restart within an interval): counts add, lags max. */
function mergeSame(points: StatsPoint[]): StatsPoint[] {
  const out = new Map<string, StatsPoint>();
  for (const p of points) {
    const k = `${p.kind}\u0000${p.name}\u0000${p.startMs}`;
    const o = out.get(k);
    if (!o) {
      out.set(k, { ...p });
      continue;
    }
    o.eventsIn += p.eventsIn;
    o.eventsOut += p.eventsOut;
    o.errors += p.errors;
    const max = (a: number | null, b: number | null) =>
      a === null ? b : b === null ? a : Math.max(a, b);
    o.lagP50Ms = max(o.lagP50Ms, p.lagP50Ms);
    o.lagP99Ms = max(o.lagP99Ms, p.lagP99Ms);
  }
  return [...out.values()];
}

/** Directory of a statistics journal of `dataDir`. */
export function statsDir(dataDir: string, step: StatsStep): string {
  return path.join(dataDir, 'ops', 'stats', step);
}

/** Reads every record of a statistics journal (none when it does not exist yet). */
function readRecords(dir: string): Array<{ index: number; record: StatsRecord }> {
  if (!fs.existsSync(dir)) return [];
  const t = Tailer.open({ dir });
  const view = new EnvelopeView();
  const out: Array<{ index: number; record: StatsRecord }> = [];
  try {
    for (let rec = t.next(); rec; rec = t.next()) {
      view.wrap(rec.bytes, 0, rec.bytes.length);
      if (view.type !== EVENT_TYPE_JSON) continue;
      out.push({ index: rec.index, record: decodeJson(view.payload) as StatsRecord });
    }
  } finally {
    t.close();
  }
  return out;
}

/** A query of {@link readStats}. */
export interface StatsQuery {
  fromMs: number;
  toMs: number;
  step: StatsStep;
  /** Only points of this actor or capture table name. */
  name?: string;
}

/** One series of {@link readStats}'s answer. */
export interface StatsSeries {
  kind: StatsPoint['kind'];
  name: string;
  points: Array<Omit<StatsPoint, 'kind' | 'name'>>;
}

/**
 * Statistics of the topology with data directory `dataDir`, from its journal: points whose
 * interval starts in [fromMs, toMs), oldest first, one series per actor and capture table.
 * `minute`: the minute points still kept (not condensed yet); `hour`: the hourly points plus the
 * minute points not condensed yet, condensed on the fly. `hourMs` is the condensed hour's length.
 */
export function readStats(dataDir: string, query: StatsQuery, hourMs: number): StatsSeries[] {
  const hours = readRecords(statsDir(dataDir, 'hour'));
  const condensedUntil = hours.reduce(
    (m, h) => Math.max(m, h.record.startMs + h.record.intervalMs),
    0,
  );
  const minutes = readRecords(statsDir(dataDir, 'minute'))
    .map((r) => r.record)
    .filter((r) => r.startMs >= condensedUntil);
  const minutePoints = mergeSame(minutes.flatMap((r) => r.points));
  const points =
    query.step === 'minute'
      ? minutePoints
      : mergeSame([...hours.flatMap((h) => h.record.points), ...condense(minutePoints, hourMs)]);
  const series = new Map<string, StatsSeries>();
  for (const p of points) {
    if (p.startMs < query.fromMs || p.startMs >= query.toMs) continue;
    if (query.name !== undefined && p.name !== query.name) continue;
    const k = `${p.kind}\u0000${p.name}`;
    let s = series.get(k);
    if (!s) series.set(k, (s = { kind: p.kind, name: p.name, points: [] }));
    const { kind: _k, name: _n, ...rest } = p;
    s.points.push(rest);
  }
  for (const s of series.values()) s.points.sort((a, b) => a.startMs - b.startMs);
  return [...series.values()];
}

// ---- the capture databases' copy -------------------------------------------------------------

/** The statistics table of one capture source's database. */
interface StatsTable {
  /** Upserts points of this source's tables (counts add up, lags take the larger). */
  write(topology: string, step: StatsStep, points: StatsPoint[]): Promise<void>;
  /** Replaces minute rows before `cutoffMs` by hourly rows of `hourMs`, in one transaction. */
  condense(topology: string, cutoffMs: number, hourMs: number): Promise<void>;
  /** Deletes `topology`'s rows; drops the table when no other topology's are left. */
  remove(topology: string): Promise<void>;
  close(): Promise<void>;
}

const COLUMNS =
  'topology, source, table_name, step, start_ms, interval_ms, events_in, events_out, errors, lag_p50_ms, lag_p99_ms';

interface Row {
  source: string;
  table: string;
  p: StatsPoint;
}

function rowsOf(source: string, points: StatsPoint[]): Row[] {
  return points
    .filter((p) => p.kind === 'capture' && p.name.startsWith(`${source}/`))
    .map((p) => ({ source, table: p.name.slice(source.length + 1), p }));
}

const rowValues = (topology: string, step: StatsStep, r: Row) => [
  topology,
  r.source,
  r.table,
  step,
  r.p.startMs,
  r.p.intervalMs,
  r.p.eventsIn,
  r.p.eventsOut,
  r.p.errors,
  r.p.lagP50Ms,
  r.p.lagP99Ms,
];

/**
 * The hourly rows' SELECT over minute rows before the cutoff (portable SQL; `hourMs` is a
 * validated integer, written as a literal so the GROUP BY expression equals the selected one).
 * Parameters: topology, cutoff.
 */
const condenseSelect = (table: string, hourMs: number, ph: [string, string]) => {
  const hour = `(start_ms - (start_ms % ${Math.trunc(hourMs)}))`;
  return (
    `SELECT topology, source, table_name, 'hour', ${hour}, ${Math.trunc(hourMs)}, ` +
    'sum(events_in), sum(events_out), sum(errors), avg(lag_p50_ms), max(lag_p99_ms) ' +
    `FROM ${table} WHERE topology = ${ph[0]} AND step = 'minute' AND start_ms < ${ph[1]} ` +
    `GROUP BY topology, source, table_name, ${hour}`
  );
};

function sqliteStatsTable(
  source: CaptureSource & { database: { dialect: 'sqlite' } },
  create: boolean,
): StatsTable {
  const db = new Database(source.database.file, {
    fileMustExist: true,
    timeout: CDC_DEFAULTS.busyTimeoutMs,
  });
  const table = 'sluice_stats';
  if (!create) {
    const exists = db
      .prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?")
      .get(table);
    return {
      write: async () => undefined,
      condense: async () => undefined,
      async remove(topology) {
        if (!exists) return;
        db.prepare(`DELETE FROM ${table} WHERE topology = ?`).run(topology);
        const left = db.prepare(`SELECT count(*) AS n FROM ${table}`).get() as { n: number };
        if (left.n === 0) db.exec(`DROP TABLE ${table}`);
      },
      async close() {
        db.close();
      },
    };
  }
  db.exec(
    `CREATE TABLE IF NOT EXISTS ${table} (topology TEXT NOT NULL, source TEXT NOT NULL, table_name TEXT NOT NULL, ` +
      'step TEXT NOT NULL, start_ms INTEGER NOT NULL, interval_ms INTEGER NOT NULL, events_in INTEGER NOT NULL, ' +
      'events_out INTEGER NOT NULL, errors INTEGER NOT NULL, lag_p50_ms REAL, lag_p99_ms REAL, ' +
      'PRIMARY KEY (topology, source, table_name, step, start_ms))',
  );
  const upsert = db.prepare(
    `INSERT INTO ${table} (${COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ` +
      'ON CONFLICT (topology, source, table_name, step, start_ms) DO UPDATE SET ' +
      'events_in = events_in + excluded.events_in, events_out = events_out + excluded.events_out, ' +
      'errors = errors + excluded.errors, lag_p50_ms = max(coalesce(lag_p50_ms, excluded.lag_p50_ms), coalesce(excluded.lag_p50_ms, lag_p50_ms)), ' +
      'lag_p99_ms = max(coalesce(lag_p99_ms, excluded.lag_p99_ms), coalesce(excluded.lag_p99_ms, lag_p99_ms))',
  );
  const writeAll = db.transaction((rows: unknown[][]) => {
    for (const r of rows) upsert.run(...r);
  });
  return {
    async write(topology, step, points) {
      writeAll(rowsOf(source.name, points).map((r) => rowValues(topology, step, r)));
    },
    async condense(topology, cutoffMs, hourMs) {
      db.transaction(() => {
        db.prepare(
          `INSERT INTO ${table} (${COLUMNS}) ${condenseSelect(table, hourMs, ['?', '?'])} ` +
            'ON CONFLICT (topology, source, table_name, step, start_ms) DO UPDATE SET ' +
            'events_in = events_in + excluded.events_in, events_out = events_out + excluded.events_out, errors = errors + excluded.errors',
        ).run(topology, cutoffMs);
        db.prepare(
          `DELETE FROM ${table} WHERE topology = ? AND step = 'minute' AND start_ms < ?`,
        ).run(topology, cutoffMs);
      })();
    },
    remove: async () => undefined,
    async close() {
      db.close();
    },
  };
}

async function pgStatsTable(
  source: CaptureSource & { database: { dialect: 'postgres' } },
  create: boolean,
): Promise<StatsTable> {
  const client = new (pgDriver().Client)({
    connectionString: source.database.url,
    application_name: 'sluice-stats',
  });
  client.on('error', () => undefined);
  await client.connect();
  const schema = `"${(source.database.captureSchema ?? CDC_DEFAULTS.captureSchema).replace(/"/g, '""')}"`;
  const table = `${schema}.stats`;
  try {
    if (!create) {
      const r = await client.query<{ t: string | null }>('SELECT to_regclass($1)::text AS t', [
        table,
      ]);
      const exists = r.rows[0]?.t != null;
      return {
        write: async () => undefined,
        condense: async () => undefined,
        async remove(topology) {
          if (!exists) return;
          await client.query(`DELETE FROM ${table} WHERE topology = $1`, [topology]);
          const left = await client.query<{ n: string }>(`SELECT count(*) AS n FROM ${table}`);
          if (Number(left.rows[0]!.n) === 0) await client.query(`DROP TABLE ${table}`);
        },
        async close() {
          await client.end().catch(() => undefined);
        },
      };
    }
    await client.query(`CREATE SCHEMA IF NOT EXISTS ${schema}`);
    await client.query(
      `CREATE TABLE IF NOT EXISTS ${table} (topology text NOT NULL, source text NOT NULL, table_name text NOT NULL, ` +
        'step text NOT NULL, start_ms bigint NOT NULL, interval_ms bigint NOT NULL, events_in bigint NOT NULL, ' +
        'events_out bigint NOT NULL, errors bigint NOT NULL, lag_p50_ms double precision, lag_p99_ms double precision, ' +
        'PRIMARY KEY (topology, source, table_name, step, start_ms))',
    );
  } catch (err) {
    await client.end().catch(() => undefined);
    throw err;
  }
  const conflict =
    'ON CONFLICT (topology, source, table_name, step, start_ms) DO UPDATE SET ' +
    `events_in = ${table}.events_in + EXCLUDED.events_in, events_out = ${table}.events_out + EXCLUDED.events_out, ` +
    `errors = ${table}.errors + EXCLUDED.errors`;
  return {
    async write(topology, step, points) {
      const rows = rowsOf(source.name, points);
      if (rows.length === 0) return;
      const values = rows.map(
        (_, i) => `(${Array.from({ length: 11 }, (_, c) => `$${i * 11 + c + 1}`).join(', ')})`,
      );
      await client.query(
        `INSERT INTO ${table} (${COLUMNS}) VALUES ${values.join(', ')} ${conflict}, ` +
          `lag_p50_ms = GREATEST(${table}.lag_p50_ms, EXCLUDED.lag_p50_ms), lag_p99_ms = GREATEST(${table}.lag_p99_ms, EXCLUDED.lag_p99_ms)`,
        rows.flatMap((r) => rowValues(topology, step, r)),
      );
    },
    async condense(topology, cutoffMs, hourMs) {
      await client.query('BEGIN');
      try {
        await client.query(
          `INSERT INTO ${table} (${COLUMNS}) ${condenseSelect(table, hourMs, ['$1', '$2'])} ${conflict}`,
          [topology, cutoffMs],
        );
        await client.query(
          `DELETE FROM ${table} WHERE topology = $1 AND step = 'minute' AND start_ms < $2`,
          [topology, cutoffMs],
        );
        await client.query('COMMIT');
      } catch (err) {
        await client.query('ROLLBACK').catch(() => undefined);
        throw err;
      }
    },
    remove: async () => undefined,
    async close() {
      await client.end().catch(() => undefined);
    },
  };
}

async function mariadbStatsTable(source: CaptureSource, create: boolean): Promise<StatsTable> {
  const db = source.database as { url: string; captureSchema?: string };
  const url = parseMariaDbUrl(db.url);
  if (typeof url === 'string') throw new Error(`database.url: ${url}`);
  const conn = await mysqlDriver().createConnection({
    host: url.host,
    port: url.port,
    user: url.user,
    password: url.password,
    database: url.database,
  });
  conn.on('error', () => undefined);
  const home = db.captureSchema ?? CDC_DEFAULTS.captureSchema;
  const table = `\`${home.replace(/`/g, '``')}\`.stats`;
  try {
    if (!create) {
      const [found] = await conn.query<mysql.RowDataPacket[]>(
        "SELECT 1 FROM information_schema.tables WHERE table_schema = ? AND table_name = 'stats'",
        [home],
      );
      const exists = found.length > 0;
      return {
        write: async () => undefined,
        condense: async () => undefined,
        async remove(topology) {
          if (!exists) return;
          await conn.query(`DELETE FROM ${table} WHERE topology = ?`, [topology]);
          const [rows] = await conn.query<mysql.RowDataPacket[]>(
            `SELECT count(*) AS n FROM ${table}`,
          );
          if (Number(rows[0]!.n) === 0) await conn.query(`DROP TABLE ${table}`);
        },
        async close() {
          await conn.end().catch(() => undefined);
        },
      };
    }
    await conn.query(
      `CREATE TABLE IF NOT EXISTS ${table} (topology varchar(191) NOT NULL, source varchar(191) NOT NULL, ` +
        'table_name varchar(191) NOT NULL, step varchar(8) NOT NULL, start_ms bigint NOT NULL, interval_ms bigint NOT NULL, ' +
        'events_in bigint NOT NULL, events_out bigint NOT NULL, errors bigint NOT NULL, lag_p50_ms double, lag_p99_ms double, ' +
        'PRIMARY KEY (topology, source, table_name, step, start_ms))',
    );
  } catch (err) {
    await conn.end().catch(() => undefined);
    throw err;
  }
  const dup =
    'ON DUPLICATE KEY UPDATE events_in = events_in + VALUES(events_in), events_out = events_out + VALUES(events_out), ' +
    'errors = errors + VALUES(errors)';
  return {
    async write(topology, step, points) {
      const rows = rowsOf(source.name, points);
      if (rows.length === 0) return;
      await conn.query(
        `INSERT INTO ${table} (${COLUMNS}) VALUES ${rows.map(() => '(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)').join(', ')} ${dup}, ` +
          'lag_p50_ms = GREATEST(COALESCE(lag_p50_ms, VALUES(lag_p50_ms)), COALESCE(VALUES(lag_p50_ms), lag_p50_ms)), ' +
          'lag_p99_ms = GREATEST(COALESCE(lag_p99_ms, VALUES(lag_p99_ms)), COALESCE(VALUES(lag_p99_ms), lag_p99_ms))',
        rows.flatMap((r) => rowValues(topology, step, r)),
      );
    },
    async condense(topology, cutoffMs, hourMs) {
      await conn.beginTransaction();
      try {
        await conn.query(
          `INSERT INTO ${table} (${COLUMNS}) ${condenseSelect(table, hourMs, ['?', '?'])} ${dup}`,
          [topology, cutoffMs],
        );
        await conn.query(
          `DELETE FROM ${table} WHERE topology = ? AND step = 'minute' AND start_ms < ?`,
          [topology, cutoffMs],
        );
        await conn.commit();
      } catch (err) {
        await conn.rollback().catch(() => undefined);
        throw err;
      }
    },
    remove: async () => undefined,
    async close() {
      await conn.end().catch(() => undefined);
    },
  };
}

/**
 * Removes `topology`'s statistics rows from the capture database of `source`, and the stats
 * table when it is left empty (uninstall calls it, so the capture schema it created can go).
 * Nothing is created: a database without the table is left as it is.
 */
export async function removeStatsTable(source: CaptureSource, topology: string): Promise<void> {
  // Oracle sources keep no statistics table (openStatsTable), so there is nothing to remove.
  if (source.database.dialect === 'oracle') return;
  const table = await openStatsTable(source, false);
  try {
    await table.remove(topology);
  } finally {
    await table.close();
  }
}

/** `create`: the table (and PostgreSQL schema) is created; without, only remove() acts. */
function openStatsTable(source: CaptureSource, create = true): Promise<StatsTable> | StatsTable {
  const d = source.database.dialect;
  if (d === 'sqlite')
    return sqliteStatsTable(source as CaptureSource & { database: { dialect: 'sqlite' } }, create);
  if (d === 'postgres')
    return pgStatsTable(source as CaptureSource & { database: { dialect: 'postgres' } }, create);
  if (d === 'oracle')
    throw new Error(
      'statistics are not stored in an Oracle database (not implemented); they stay in the data directory',
    );
  return mariadbStatsTable(source, create);
}

// ---- the recorder ----------------------------------------------------------------------------

interface ActorAcc {
  startedAt: string;
  eventsIn: number;
  eventsOut: number;
  errors: number;
  dIn: number;
  dOut: number;
  dErrors: number;
  lags: number[];
  hasInputs: boolean;
}

interface TableAcc {
  source: string;
  table: string;
  /** Figures at the previous reading (null before the first). */
  depth: number | null;
  parked: number | null;
  /** The table's shipped total at the previous reading (0 before the first: the plan's). */
  shipped: number;
  dIn: number;
  dOut: number;
  dErrors: number;
  lags: number[];
}

/**
 * Records the statistics of one running topology (see the module comment). Feed it every
 * sampler sample with {@link StatsRecorder.observe}; close it to write the interval in progress.
 */
export class StatsRecorder {
  readonly options: StatsOptions;
  private readonly actors = new Map<string, ActorAcc>();
  private readonly tables = new Map<string, TableAcc>();
  private readonly dbTables = new Map<string, StatsTable>();
  /** Source name -> its pumps' shipped counters, once a pump of it was seen (one per run). */
  private readonly shippedCounters = new Map<string, SharedArrayBuffer>();
  private readonly writer = new EnvelopeWriter();
  /** Its own uncached reads of the capture tables (the server's are cached for a second). */
  private readonly captureNow: CaptureStats;
  private minute: Appender | null = null;
  private hour: Appender | null = null;
  private windowStartMs = 0;
  private lastCaptureMs = 0;
  private capturing: Promise<void> | null = null;
  private writing: Promise<void> = Promise.resolve();
  private condensedUntilMs = 0;
  private closed = false;
  /** Intervals not written to the minute journal yet (a full disk), oldest first. */
  private readonly pending: StatsRecord[] = [];
  /** The minute journal's next index when the first pending interval was appended, or null. */
  private pendingFirstIndex: number | null = null;
  /** Since when the journal cannot be written (null: it can). */
  private journalDown: { sinceMs: number } | null = null;
  private droppedIntervals = 0;

  /**
   * @param supervisor the topology's: its pump actors' shared buffers hold the shipped counters.
   * @throws Error when an option is not a positive integer.
   */
  constructor(
    private readonly topology: Topology,
    private readonly supervisor: { actors(): ActorInfo[] },
    private readonly capture: CaptureStats,
    private readonly logger: Logger,
    options: Partial<StatsOptions> = {},
  ) {
    this.options = { ...STATS_DEFAULTS, ...options };
    for (const [k, v] of Object.entries(this.options)) {
      if (!Number.isInteger(v) || v < 1)
        throw new Error(`stats option ${k} must be an integer >= 1, ${k}=${v}`);
    }
    this.captureNow = new CaptureStats(topology.capture, 0);
    for (const c of topology.capture) {
      for (const t of c.tables) {
        this.tables.set(`${c.name}/${t.table}`, {
          source: c.name,
          table: t.table,
          depth: null,
          parked: null,
          shipped: 0,
          dIn: 0,
          dOut: 0,
          dErrors: 0,
          lags: [],
        });
      }
    }
  }

  /** Start times (ms) of the intervals not written to the journal yet (a full disk), oldest first. */
  get pendingStartsMs(): number[] {
    return this.pending.map((r) => r.startMs);
  }

  /** Length of a condensed hour, ms. */
  get hourMs(): number {
    return this.options.intervalMs * this.options.hourIntervals;
  }

  /**
   * Opens the journals (creating them). @throws Error when the data directory is not writable,
   * except for a full disk or an I/O error (ENOSPC, EDQUOT, EIO): the journals are then opened,
   * and the intervals written, once it can be written again (see {@link writePending}).
   */
  open(): void {
    this.windowStartMs = this.windowOf(Date.now());
    try {
      this.openJournals();
    } catch (err) {
      if (!TRANSIENT_IO.has((err as NodeJS.ErrnoException).code ?? '')) throw err;
      this.journalFailed(err as Error);
    }
  }

  private openJournals(): void {
    const minuteDir = statsDir(this.topology.dataDir, 'minute');
    const hourDir = statsDir(this.topology.dataDir, 'hour');
    fs.mkdirSync(minuteDir, { recursive: true });
    fs.mkdirSync(hourDir, { recursive: true });
    // One minute segment per condensed hour, so condensing drops whole segments.
    this.minute ??= Appender.open({
      dir: minuteDir,
      segmentBytes: 1 << 20,
      rollIntervalMs: this.hourMs,
      fsync: 'batch',
    });
    this.hour ??= Appender.open({ dir: hourDir, segmentBytes: 1 << 20, fsync: 'batch' });
    // Read again at every (re)open: a condensing cut short by a failed write left the hour
    // records it did write, and only those count as condensed.
    const hours = readRecords(hourDir);
    this.condensedUntilMs = hours.reduce(
      (m, h) => Math.max(m, h.record.startMs + h.record.intervalMs),
      0,
    );
  }

  /** Closes both journals after a failed write (a failed appender refuses every later call). */
  private closeJournals(): void {
    for (const a of [this.minute, this.hour]) {
      try {
        a?.close();
      } catch {
        // closing a failed appender writes nothing; nothing more to release
      }
    }
    this.minute = null;
    this.hour = null;
  }

  private journalFailed(err: Error): void {
    this.closeJournals();
    if (this.journalDown) return;
    this.journalDown = { sinceMs: Date.now() };
    this.logger.warn(
      `stats: cannot write the statistics journal in ${path.dirname(statsDir(this.topology.dataDir, 'minute'))}: ${err.message}; ` +
        `the intervals are kept in memory (at most ${PENDING_INTERVALS_MAX}) and written once it can be written again`,
    );
  }

  /**
   * Writes the intervals not written yet to the minute journal, opening the journals first when
   * a failure closed them. Exactly once: the appender's next index before the first pending
   * interval tells, after a failed write and a reopen (whose recovery keeps every complete
   * record), how many of them did land. Returns false while the journal cannot be written.
   */
  private writePending(): boolean {
    try {
      if (!this.minute || !this.hour) {
        this.openJournals();
        if (this.pendingFirstIndex !== null)
          this.pending.splice(0, Math.max(0, this.minute!.nextIndex - this.pendingFirstIndex));
      }
      while (this.pending.length > 0) {
        this.pendingFirstIndex = this.minute!.nextIndex;
        this.append(this.minute!, this.pending[0]!);
        this.pending.shift();
      }
      this.pendingFirstIndex = null;
    } catch (err) {
      this.journalFailed(err as Error);
      return false;
    }
    if (this.journalDown) {
      const s = ((Date.now() - this.journalDown.sinceMs) / 1000).toFixed(1);
      const lost = this.droppedIntervals
        ? `; ${this.droppedIntervals} oldest intervals dropped`
        : '';
      this.logger.info(`stats: the statistics journal is written again after ${s} s${lost}`);
      this.journalDown = null;
      this.droppedIntervals = 0;
    }
    return true;
  }

  private windowOf(ms: number): number {
    return Math.floor(ms / this.options.intervalMs) * this.options.intervalMs;
  }

  /**
   * The last counters of an actor that a change of the pump count retired (the supervisor's
   * `retired` event; `startedMs` its launch, Date.now() ms): what it counted after the last
   * sample goes into the current interval, and an actor of the same name launched later counts
   * from 0 (its own start), so nothing is lost or counted twice across the change.
   */
  retired(name: string, startedMs: number, counters: CounterSnapshot): void {
    if (this.closed || this.windowStartMs === 0) return;
    this.addCounts(name, new Date(startedMs).toISOString(), counters);
    // A later sample of this name is another launch: counted from 0.
    this.actors.get(name)!.startedAt = '';
  }

  /**
   * Adds what actor `name` (launched at `startedAt`, ISO) counted since its last reading to the
   * current interval and keeps `counters` as that reading; a new launch counts from 0.
   */
  private addCounts(
    name: string,
    startedAt: string,
    counters: Pick<CounterSnapshot, 'eventsIn' | 'eventsOut' | 'errors'>,
  ): ActorAcc {
    let a = this.actors.get(name);
    if (!a) {
      a = {
        startedAt,
        eventsIn: 0,
        eventsOut: 0,
        errors: 0,
        dIn: 0,
        dOut: 0,
        dErrors: 0,
        lags: [],
        hasInputs: false,
      };
      this.actors.set(name, a);
    }
    const base = a.startedAt === startedAt ? a : { eventsIn: 0, eventsOut: 0, errors: 0 };
    a.dIn += Math.max(0, counters.eventsIn - base.eventsIn);
    a.dOut += Math.max(0, counters.eventsOut - base.eventsOut);
    a.dErrors += Math.max(0, counters.errors - base.errors);
    a.startedAt = startedAt;
    a.eventsIn = counters.eventsIn;
    a.eventsOut = counters.eventsOut;
    a.errors = counters.errors;
    return a;
  }

  /** Takes one sampler sample: counter deltas and lag samples; ends an interval when it is over. */
  observe(statuses: ActorStatus[], nowMs = Date.now()): void {
    if (this.closed || this.windowStartMs === 0) return;
    if (this.windowOf(nowMs) > this.windowStartMs) this.endWindow(this.windowOf(nowMs));
    for (const s of statuses) {
      const a = this.addCounts(s.name, s.startedAt, s.counters);
      if (s.inputs.length > 0) {
        a.hasInputs = true;
        a.lags.push(s.inputs.reduce((m, l) => Math.max(m, l.lagMs), 0));
      }
    }
    if (
      this.tables.size > 0 &&
      nowMs - this.lastCaptureMs >= this.options.captureSampleMs &&
      !this.capturing
    ) {
      this.lastCaptureMs = nowMs;
      this.sampleCapture();
    }
  }

  /** Starts one reading of the capture figures (this.capturing until it is taken in). */
  private sampleCapture(): Promise<void> {
    // Shipped totals first, then the staging depths (uncached); see observeCapture for why
    // the totals stay exact whatever lands between the two reads.
    const shipped = this.shippedNow();
    this.capturing = this.captureNow
      .read()
      .then((sources) => this.observeCapture(sources, shipped))
      .catch((err: Error) => this.logger.warn(`stats: capture figures: ${err.message}`))
      .finally(() => (this.capturing = null));
    return this.capturing;
  }

  private observeCapture(sources: CaptureSourceStats[], shipped: Map<string, number>): void {
    for (const s of sources) {
      for (const t of s.tables ?? []) {
        const name = `${s.source}/${t.table}`;
        const acc = this.tables.get(name);
        if (!acc) continue;
        // A total only grows (createShippedCounters), readings are one at a time.
        const total = shipped.get(name) ?? acc.shipped;
        const out = total - acc.shipped;
        const parked = t.parkedErrors ?? 0;
        if (acc.depth !== null && acc.parked !== null) {
          const newlyParked = Math.max(0, parked - acc.parked);
          acc.dOut += out;
          acc.dErrors += newlyParked;
          // Staged in the sample = shipped + staging growth + parked. The reads are not one
          // snapshot (a pump counts a change once durable, then deletes it from staging): a
          // change counted and deleted between them is in neither (this sample undercounts,
          // the next counts it), and one counted before the shipped read but deleted
          // from staging after the depth read is in both (this sample counts it twice, the next
          // one less: negative). Added as they come, the samples telescope to exactly
          // shipped + staged + parked; clamping a negative one at 0 (as before) left the total
          // one too high for good once the writes stopped. So a window's eventsIn is negative
          // in the rare case that the double count and its correction fall in two windows.
          acc.dIn += out + (t.stagingDepth - acc.depth) + (parked - acc.parked);
        } else {
          // The first reading: what was shipped since the start (the counters are 0 at the
          // plan) and what is staged now both came in; the staging depth at the start is not
          // known, so rows staged before it and still staged are counted in here, once.
          acc.dOut += out;
          acc.dIn += out + t.stagingDepth;
        }
        acc.depth = t.stagingDepth;
        acc.parked = parked;
        acc.shipped = total;
        acc.lags.push(t.oldestStagedAgeMs);
      }
    }
  }

  /**
   * Per `<source>/<table>`, the changes its pumps shipped since the topology started (see the
   * module comment); 0 for a source none of whose pumps was seen yet. The buffer of a source is
   * taken from the first of its pump actors seen and kept: it is the same for all of them, and
   * stays readable while a change of the pump count has none running.
   */
  private shippedNow(): Map<string, number> {
    if (this.shippedCounters.size < this.topology.capture.length) {
      for (const a of this.supervisor.actors()) {
        if (kindOf(a.name) !== 'pump') continue;
        const source = (a.data as PumpData | undefined)?.source?.name;
        const sab = a.shared[PUMP_SHARED.shipped];
        if (source !== undefined && sab && !this.shippedCounters.has(source))
          this.shippedCounters.set(source, sab);
      }
    }
    const out = new Map<string, number>();
    for (const c of this.topology.capture) {
      const sab = this.shippedCounters.get(c.name);
      const counts = sab ? readShipped(sab) : [];
      c.tables.forEach((t, i) => out.set(`${c.name}/${t.table}`, counts[i] ?? 0));
    }
    return out;
  }

  /** Writes the interval that started at windowStartMs and starts the one at `nextStartMs`. */
  private endWindow(nextStartMs: number): void {
    const startMs = this.windowStartMs;
    const intervalMs = this.options.intervalMs;
    this.windowStartMs = nextStartMs;
    const points: StatsPoint[] = [];
    const lagOf = (lags: number[], has: boolean) => {
      const sorted = [...lags].sort((x, y) => x - y);
      return has
        ? { lagP50Ms: percentile(sorted, 0.5), lagP99Ms: percentile(sorted, 0.99) }
        : { lagP50Ms: null, lagP99Ms: null };
    };
    for (const [name, a] of this.actors) {
      points.push({
        kind: 'actor',
        name,
        startMs,
        intervalMs,
        eventsIn: a.dIn,
        eventsOut: a.dOut,
        errors: a.dErrors,
        ...lagOf(a.lags, a.hasInputs),
      });
      a.dIn = a.dOut = a.dErrors = 0;
      a.lags = [];
    }
    for (const [name, t] of this.tables) {
      if (t.depth === null) continue;
      points.push({
        kind: 'capture',
        name,
        startMs,
        intervalMs,
        eventsIn: t.dIn,
        eventsOut: t.dOut,
        errors: t.dErrors,
        ...lagOf(t.lags, true),
      });
      t.dIn = t.dOut = t.dErrors = 0;
      t.lags = [];
    }
    if (points.length > 0) this.pending.push({ step: 'minute', startMs, intervalMs, points });
    if (this.pending.length > PENDING_INTERVALS_MAX) {
      this.pending.splice(0, this.pending.length - PENDING_INTERVALS_MAX);
      this.droppedIntervals++;
      if (this.pendingFirstIndex !== null) this.pendingFirstIndex++;
    }
    // A full disk (or any failed write) must not stop the topology: the sampler calls this from
    // a timer, where a throw would end the process.
    const written = this.pending.length > 0 ? this.writePending() : this.minute !== null;
    if (points.length === 0) return;
    const cutoffMs =
      Math.floor((Date.now() - this.options.condenseAfterMs) / this.hourMs) * this.hourMs;
    let condensing = false;
    if (written && cutoffMs > this.condensedUntilMs) {
      try {
        condensing = this.condenseJournal(cutoffMs);
      } catch (err) {
        this.journalFailed(err as Error);
      }
    }
    this.writing = this.writing.then(() =>
      this.writeDatabases(points, condensing ? cutoffMs : null),
    );
  }

  private append(appender: Appender, record: StatsRecord): void {
    appender.append(
      this.writer.encode({
        type: EVENT_TYPE_JSON,
        key: record.step,
        eventTimeMs: record.startMs,
        payload: encodeJson(record),
      }),
    );
    appender.flush();
  }

  /** Condenses minute records before `cutoffMs` into hour records; drops minute segments. */
  private condenseJournal(cutoffMs: number): boolean {
    const minutes = readRecords(statsDir(this.topology.dataDir, 'minute'));
    const due = minutes.filter(
      (m) => m.record.startMs >= this.condensedUntilMs && m.record.startMs < cutoffMs,
    );
    const hours = condense(mergeSame(due.flatMap((m) => m.record.points)), this.hourMs);
    const byHour = new Map<number, StatsPoint[]>();
    for (const h of hours) byHour.set(h.startMs, [...(byHour.get(h.startMs) ?? []), h]);
    for (const startMs of [...byHour.keys()].sort((a, b) => a - b)) {
      this.append(this.hour!, {
        step: 'hour',
        startMs,
        intervalMs: this.hourMs,
        points: byHour.get(startMs)!,
      });
    }
    // Marks the condensed span even when it held no minute record (no gap is read twice).
    if (byHour.size === 0 || Math.max(...byHour.keys()) + this.hourMs < cutoffMs) {
      this.append(this.hour!, {
        step: 'hour',
        startMs: cutoffMs - this.hourMs,
        intervalMs: this.hourMs,
        points: [],
      });
    }
    this.condensedUntilMs = cutoffMs;
    const firstKept = minutes.find((m) => m.record.startMs >= cutoffMs);
    this.minute!.dropSegmentsBefore(firstKept ? firstKept.index : this.minute!.nextIndex);
    return true;
  }

  private async writeDatabases(
    points: StatsPoint[],
    condenseCutoffMs: number | null,
  ): Promise<void> {
    for (const source of this.topology.capture) {
      try {
        let table = this.dbTables.get(source.name);
        if (!table) {
          table = await openStatsTable(source);
          this.dbTables.set(source.name, table);
        }
        await table.write(this.topology.name, 'minute', points);
        if (condenseCutoffMs !== null)
          await table.condense(this.topology.name, condenseCutoffMs, this.hourMs);
      } catch (err) {
        const table = this.dbTables.get(source.name);
        this.dbTables.delete(source.name);
        await table?.close().catch(() => undefined);
        this.logger.warn(
          `stats: capture source "${source.name}": cannot write its stats table: ${(err as Error).message}`,
        );
      }
    }
  }

  /**
   * Writes the interval in progress (counts so far; the capture tables read once more, so what
   * the pumps shipped since the last sample is in it too), waits for the databases, closes.
   * Idempotent.
   */
  async close(): Promise<void> {
    if (this.closed) return;
    if (this.windowStartMs !== 0) {
      await this.capturing;
      // Without it a run shorter than the sampler's period kept only its first capture reading.
      if (this.tables.size > 0) await this.sampleCapture();
      this.endWindow(this.windowOf(Date.now()) + this.options.intervalMs);
    }
    this.closed = true;
    if (this.pending.length > 0)
      this.logger.warn(
        `stats: ${this.pending.length} intervals not written (the statistics journal could not be written)`,
      );
    await this.writing;
    this.minute?.close();
    this.hour?.close();
    for (const t of this.dbTables.values()) await t.close();
    this.dbTables.clear();
    await this.captureNow.close();
  }
}
