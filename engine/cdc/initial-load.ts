/**
 * Initial load (snapshot) of a captured table: its existing rows delivered as `read` events, in
 * key chunks, interleaved with the live changes without losing or reordering any change.
 *
 * Reference: DBLog (Andreas Andreakis, Ioannis Papapanagiotou, "DBLog: A Watermark Based
 * Change-Data-Capture Framework", Netflix, 2020) and Debezium's incremental snapshots. There, a
 * log reader writes a low watermark into the change stream, selects a chunk by primary key,
 * writes a high watermark, drops the chunk rows whose key had a change between the two
 * watermarks, and emits the rest at the high watermark. The window exists because the chunk
 * SELECT and the change log (the binlog / WAL) cannot be read at one instant.
 *
 * Here the change stream is the staging table, in the same database as the captured table, so
 * a pump reads both in ONE read snapshot S (PostgreSQL REPEATABLE READ, MariaDB START
 * TRANSACTION WITH CONSISTENT SNAPSHOT, a SQLite read transaction): the low and the high
 * watermark are the same instant and the window is empty. A load cycle of pump i of N:
 *  1. in snapshot S: claim this pump's staged changes (excluding held keys); if the claim is
 *     full (batchSizeMax rows), S may hide more of them: no chunk this cycle, ship as usual.
 *  2. in the same S: select the next chunk, `WHERE key > cursor ORDER BY key LIMIT chunkRows`,
 *     rendering the key and the row image with the same SQL as the triggers; keep the rows whose
 *     keyHash(key) % N = i (the rows this pump would ship changes of).
 *  3. ship the claimed changes (divide and conquer as usual); then append the chunk's rows as
 *     read events, except those whose key is held (a refused change waits; it carries the row's
 *     image when it is delivered): the read events sit at S's position in this pump's stream.
 *  4. ack the changes; store the cursor (last key of the chunk) and counts in the load table.
 * Why it is exact, per key k of pump i: every change of k committed before S is staged and
 * visible in S or was shipped before (a trigger stages in the change's own transaction), so it
 * was shipped in step 3 or earlier; every change after S is invisible in S, so it is claimed by a
 * later cycle, after the read event. The read event carries k's state at S: the state after
 * exactly the changes before it. Per key, staging-id order is commit order (engine/cdc/index.ts).
 * A change staged in a transaction in flight at S is invisible to both reads, on every dialect.
 *
 * Durability: progress rows live in `<stagingTable>_loads` beside the staging table (capture
 * schema / database; SQLite: the captured file). A crash after step 3 and before step 4 reads the
 * chunk again at a later snapshot S': the read events are delivered again, after the changes up
 * to S' (harmless for a consumer keyed on the key: each read event is the row's state at its
 * position). A crash before step 3 loses nothing (the cursor did not move). kill -9 at any moment
 * is therefore safe. The pump count changing during a load restarts that table's load.
 */
import { CDC_DEFAULTS } from './config.js';
import type { CaptureSource, CaptureTable, StagedChange } from './config.js';
import { keyHash } from './key-hash.js';
import type { ColumnInfo, ResolvedTable } from './sql.js';
import { CaptureTableError } from './sql.js';

/** Rows of a query, as the driver returns them (columns selected as text). */
export type LoadQuery = (sql: string, params?: unknown[]) => Promise<Record<string, unknown>[]>;

/**
 * A table resolved for loading: `chunkKey` are the columns the chunks are ordered by (the
 * primary key, or the unique NOT NULL columns of `key: [...]` when the table has none).
 */
export interface LoadTable {
  resolved: ResolvedTable;
  chunkKey: ColumnInfo[];
}

/**
 * What a dialect's staging client supplies for the initial load (sqlite.ts, postgres.ts,
 * mariadb.ts). `snapshot` runs `work` inside one read snapshot of the client's own connection:
 * claim() and `query` calls made in it see the same committed state. `chunk` returns the
 * SELECT of one chunk (the rows after `cursor`, or from the start when null, in chunk-key order,
 * at most `limit`) with the columns `k` (key text, as the triggers render it), `a` (row image,
 * JSON object text, as the triggers render it) and `c0..` (the chunk key's values in the form
 * `chunk` takes back as a cursor), and its parameters.
 */
export interface LoadHooks {
  dialect: 'sqlite' | 'postgres' | 'mariadb';
  /** Quoted name of the load table. */
  loadTable: string;
  /** `?` or `$n` for parameter n (1-based). */
  param(n: number): string;
  snapshot<T>(work: (query: LoadQuery) => Promise<T>): Promise<T>;
  /** One statement in autocommit (outside any snapshot). */
  query: LoadQuery;
  /** Resolves `table` for loading. @throws CaptureTableError at field `initialLoad` when it has no chunk key. */
  resolveLoad(table: CaptureTable): Promise<LoadTable>;
  chunk(t: LoadTable, cursor: string[] | null, limit: number): { sql: string; params: unknown[] };
  /** The quoted reference of the table `t` reads. */
  tableSql(t: LoadTable): string;
}

/** A staging client that can run initial loads. */
export interface LoadCapable {
  readonly source: CaptureSource;
  readonly load?: LoadHooks;
}

/**
 * One pump's progress on one table's load (a row of the load table).
 * - `generation`: ms since the epoch of the request it belongs to (a new request starts over).
 * - `cursor`: the chunk key values of the last row read, null before the first chunk.
 * - `scanned`: table rows this pump's chunks covered; `emitted`: read events it delivered.
 * - `skippedHeld`: rows of this pump's keys not read because a refused change of the key was
 *   ahead of them (waiting for a retry or parked): that change, when delivered, carries the row.
 * - `skippedRefused`: rows the target refused as read events (over recordBytesMax): not
 *   delivered, not parked (a read has no staging id); the pump's `readsRefused` counts them too.
 * - `total`: the table's row count at the request (the progress bar's 100%).
 */
export interface LoadProgress {
  table: string;
  pump: number;
  pumps: number;
  generation: number;
  cursor: string[] | null;
  done: boolean;
  scanned: number;
  emitted: number;
  skippedHeld: number;
  skippedRefused: number;
  total: number;
  updatedMs: number;
}

/** Rows of a chunk not delivered as read events, by reason (see LoadProgress). */
export interface LoadSkipped {
  held: number;
  refused: number;
}

/** Columns added to the load table after its first version (counters, BIGINT / INTEGER). */
const LOAD_COLUMNS_ADDED = ['skipped_held', 'skipped_refused'] as const;

/** CREATE TABLE of the load table in `dialect` (IF NOT EXISTS). */
export function loadTableDdl(dialect: LoadHooks['dialect'], ref: string): string {
  const text = dialect === 'mariadb' ? 'VARCHAR(255)' : 'TEXT';
  const long = dialect === 'mariadb' ? 'LONGTEXT' : 'TEXT';
  const big = dialect === 'sqlite' ? 'INTEGER' : 'BIGINT';
  return `CREATE TABLE IF NOT EXISTS ${ref} (
  table_name ${text} NOT NULL, pump ${big} NOT NULL, pumps ${big} NOT NULL, generation ${big} NOT NULL,
  cursor_key ${long}, done ${big} NOT NULL DEFAULT 0, scanned ${big} NOT NULL DEFAULT 0,
  emitted ${big} NOT NULL DEFAULT 0, skipped_held ${big} NOT NULL DEFAULT 0,
  skipped_refused ${big} NOT NULL DEFAULT 0, total ${big} NOT NULL DEFAULT 0, updated_ms ${big} NOT NULL,
  PRIMARY KEY (table_name, pump)
)${dialect === 'mariadb' ? ' ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin' : ''}`;
}

function hooksOf(staging: LoadCapable): LoadHooks {
  if (staging.load === undefined)
    throw new Error(
      `capture source "${staging.source.name}": this staging client cannot run initial loads`,
    );
  return staging.load;
}

/**
 * Adds the columns a load table created by an earlier version lacks (LOAD_COLUMNS_ADDED, 0 in
 * existing rows); nothing when it has them or does not exist. Two processes may race: the
 * loser's ALTER fails and the columns are there.
 */
export async function upgradeLoadTable(staging: LoadCapable): Promise<void> {
  const h = hooksOf(staging);
  const big = h.dialect === 'sqlite' ? 'INTEGER' : 'BIGINT';
  for (const col of LOAD_COLUMNS_ADDED) {
    const has = () => h.query(`SELECT ${col} FROM ${h.loadTable} WHERE 1 = 0`);
    try {
      await has();
      continue;
    } catch (err) {
      if (isMissingTable(err)) return;
    }
    try {
      await h.query(`ALTER TABLE ${h.loadTable} ADD COLUMN ${col} ${big} NOT NULL DEFAULT 0`);
    } catch (err) {
      await has().catch(() => {
        throw err;
      });
    }
  }
}

/** Every progress row of the source's load table. @throws when the load table does not exist. */
export async function readLoadProgress(staging: LoadCapable): Promise<LoadProgress[]> {
  const h = hooksOf(staging);
  const rows = await h.query(
    `SELECT table_name, pump, pumps, generation, cursor_key, done, scanned, emitted, skipped_held, skipped_refused, total, updated_ms FROM ${h.loadTable} ORDER BY table_name, pump`,
  );
  return rows.map((r) => ({
    table: String(r.table_name),
    pump: Number(r.pump),
    pumps: Number(r.pumps),
    generation: Number(r.generation),
    cursor:
      r.cursor_key === null || r.cursor_key === undefined
        ? null
        : (JSON.parse(String(r.cursor_key)) as string[]),
    done: Number(r.done) === 1,
    scanned: Number(r.scanned),
    emitted: Number(r.emitted),
    skippedHeld: Number(r.skipped_held),
    skippedRefused: Number(r.skipped_refused),
    total: Number(r.total),
    updatedMs: Number(r.updated_ms),
  }));
}

/**
 * Requests the initial load of `table` (starting over if one ran or runs): one progress row per
 * pump, cursor null, total = the table's row count now. The pumps of a running topology pick it
 * up within CDC_DEFAULTS.loadRefreshMs. Returns the row count.
 * @throws CaptureTableError (field `table` or `initialLoad`) when the table is not captured by
 *   the source, does not exist, or has no key to chunk by.
 */
export async function requestLoad(
  staging: LoadCapable,
  table: string,
  nowMs = Date.now(),
): Promise<number> {
  const h = hooksOf(staging);
  const cfg = staging.source.tables.find((t) => t.table === table);
  if (cfg === undefined) {
    throw new CaptureTableError(
      `table "${table}" is not captured by this source (captured: ${staging.source.tables.map((t) => t.table).join(', ')})`,
      table,
      'table',
    );
  }
  const lt = await h.resolveLoad(cfg);
  await upgradeLoadTable(staging);
  const count = await h.query(`SELECT COUNT(*) AS n FROM ${h.tableSql(lt)}`);
  const total = Number(count[0]?.n ?? 0);
  const pumps = staging.source.pumps;
  const p = h.param.bind(h);
  await h.query(`DELETE FROM ${h.loadTable} WHERE table_name = ${p(1)}`, [table]);
  for (let pump = 0; pump < pumps; pump++) {
    await h.query(
      `INSERT INTO ${h.loadTable} (table_name, pump, pumps, generation, cursor_key, done, scanned, emitted, total, updated_ms)
       VALUES (${p(1)}, ${p(2)}, ${p(3)}, ${p(4)}, NULL, 0, 0, 0, ${p(5)}, ${p(6)})`,
      [table, pump, pumps, nowMs, total, nowMs],
    );
  }
  return total;
}

/** The outcome of one load read (steps 1-2 of the cycle). */
export interface LoadRead {
  /** The changes claimed in the snapshot, in staging-id order. */
  claimed: StagedChange[];
  /** The chunk's rows of this pump as read events, in key order; null when the claim was full. */
  reads: StagedChange[] | null;
  /** Rows the chunk held (all pumps' rows); fewer than chunkRows: the table is done. */
  scanned: number;
  /** The chunk key values of the chunk's last row. */
  cursor: string[] | null;
  done: boolean;
  task: LoadTask;
}

/** The table one pump is loading now. */
export interface LoadTask {
  progress: LoadProgress;
  table: LoadTable;
}

/**
 * One pump's side of the initial loads of its source: which table it loads now, the snapshot
 * read of a chunk with its claim, and the progress it stores. Used by PumpCore (pump.ts); not
 * reentrant.
 */
export class PumpLoader {
  private readonly hooks: LoadHooks;
  private tasks: LoadProgress[] = [];
  private readMs = -Infinity;
  private readonly tables = new Map<string, LoadTable>();
  private upgraded = false;

  /**
   * @param chunkRows rows per chunk (default CDC_DEFAULTS.loadChunkRows); @param clock ms since the epoch.
   */
  constructor(
    private readonly staging: LoadCapable,
    private readonly pump: number,
    private readonly pumps: number,
    private readonly chunkRows: number = CDC_DEFAULTS.loadChunkRows,
    private readonly clock: () => number = Date.now,
  ) {
    this.hooks = hooksOf(staging);
    if (!Number.isInteger(chunkRows) || chunkRows < 1)
      throw new Error(`chunkRows must be an integer >= 1, chunkRows=${chunkRows}`);
  }

  /**
   * The load this pump works on now, re-reading the load table at most every
   * CDC_DEFAULTS.loadRefreshMs (so a `sluice snapshot` of a running topology is picked up).
   * A table whose rows were written for another pump count is requested again (starts over).
   */
  async current(): Promise<LoadTask | null> {
    const now = this.clock();
    if (now - this.readMs >= CDC_DEFAULTS.loadRefreshMs) {
      this.readMs = now;
      let all: LoadProgress[];
      try {
        // A load requested by an earlier version may still run: save() needs today's columns.
        if (!this.upgraded) await upgradeLoadTable(this.staging);
        this.upgraded = true;
        all = await readLoadProgress(this.staging);
      } catch (err) {
        // Installed before initial loads existed: no load table, nothing requested.
        if (isMissingTable(err)) return ((this.tasks = []), null);
        throw err;
      }
      const captured = new Set(this.staging.source.tables.map((t) => t.table));
      for (const table of new Set(
        all
          .filter((r) => r.pumps !== this.pumps && !r.done && captured.has(r.table))
          .map((r) => r.table),
      )) {
        await requestLoad(this.staging, table, now);
        all = await readLoadProgress(this.staging);
      }
      this.tasks = all.filter(
        (r) => r.pump === this.pump && r.pumps === this.pumps && !r.done && captured.has(r.table),
      );
    }
    const progress = this.tasks[0];
    if (progress === undefined) return null;
    let table = this.tables.get(progress.table);
    if (table === undefined) {
      table = await this.hooks.resolveLoad(
        this.staging.source.tables.find((t) => t.table === progress.table)!,
      );
      this.tables.set(progress.table, table);
    }
    return { progress, table };
  }

  /**
   * Steps 1-2: in one snapshot, `claim()` (this pump's staged changes) and, unless it returned
   * `claimLimit` rows, the next chunk of `task`'s table, filtered to this pump's keys.
   */
  async read(
    task: LoadTask,
    claim: () => Promise<StagedChange[]>,
    claimLimit: number,
  ): Promise<LoadRead> {
    const h = this.hooks;
    const { progress, table } = task;
    return h.snapshot(async (query) => {
      const claimed = await claim();
      if (claimed.length >= claimLimit)
        return { claimed, reads: null, scanned: 0, cursor: progress.cursor, done: false, task };
      const { sql, params } = h.chunk(table, progress.cursor, this.chunkRows);
      const rows = await query(sql, params);
      const nowMs = this.clock();
      const reads: StagedChange[] = [];
      const name = table.resolved.config.table;
      for (const r of rows) {
        const key = String(r.k);
        const hash = keyHash(key);
        if (hash % this.pumps !== this.pump) continue;
        reads.push({
          stagingId: '',
          table: name,
          op: 'read',
          key,
          keyHash: hash,
          before: null,
          after: String(r.a),
          txid: '',
          timeMs: nowMs,
          attempts: 0,
        });
      }
      const last = rows[rows.length - 1];
      const cursor =
        last === undefined ? progress.cursor : table.chunkKey.map((_, i) => String(last[`c${i}`]));
      return {
        claimed,
        reads,
        scanned: rows.length,
        cursor,
        done: rows.length < this.chunkRows,
        task,
      };
    });
  }

  /**
   * Step 4: stores the cursor and counts of a shipped chunk (only into the request it was read
   * for: a newer request is left alone): `emitted` read events delivered, `skipped` rows of this
   * pump's keys not delivered, by reason.
   */
  async save(
    read: LoadRead,
    emitted: number,
    skipped: LoadSkipped = { held: 0, refused: 0 },
  ): Promise<void> {
    const h = this.hooks;
    const p = h.param.bind(h);
    const prog = read.task.progress;
    const nowMs = this.clock();
    await h.query(
      `UPDATE ${h.loadTable} SET cursor_key = ${p(1)}, done = ${p(2)}, scanned = scanned + ${p(3)}, emitted = emitted + ${p(4)},
         skipped_held = skipped_held + ${p(5)}, skipped_refused = skipped_refused + ${p(6)}, updated_ms = ${p(7)}
       WHERE table_name = ${p(8)} AND pump = ${p(9)} AND pumps = ${p(10)} AND generation = ${p(11)}`,
      [
        read.cursor === null ? null : JSON.stringify(read.cursor),
        read.done ? 1 : 0,
        read.scanned,
        emitted,
        skipped.held,
        skipped.refused,
        nowMs,
        prog.table,
        prog.pump,
        prog.pumps,
        prog.generation,
      ],
    );
    prog.cursor = read.cursor;
    prog.scanned += read.scanned;
    prog.emitted += emitted;
    prog.skippedHeld += skipped.held;
    prog.skippedRefused += skipped.refused;
    if (read.done) {
      prog.done = true;
      this.tasks = this.tasks.filter((t) => t !== prog);
    }
  }
}

/**
 * Creates the load table of `staging`'s source and requests the initial load of each table with
 * `initialLoad: true` that has no progress rows yet (a load requested once is not requested again
 * by a later install; `sluice snapshot` starts one over). Returns the tables requested.
 * @throws CaptureTableError (field `initialLoad`) for a table without a key to chunk by.
 */
export async function installLoads(staging: LoadCapable, nowMs = Date.now()): Promise<string[]> {
  if (staging.load === undefined) return [];
  const h = staging.load;
  await h.query(loadTableDdl(h.dialect, h.loadTable));
  await upgradeLoadTable(staging);
  const have = new Set((await readLoadProgress(staging)).map((r) => r.table));
  const requested: string[] = [];
  for (const t of staging.source.tables) {
    if (t.initialLoad !== true) continue;
    await h.resolveLoad(t);
    if (have.has(t.table)) continue;
    await requestLoad(staging, t.table, nowMs);
    requested.push(t.table);
  }
  return requested;
}

/**
 * Checks that every table with `initialLoad: true` can be read in chunks, before install
 * creates anything. @throws CaptureTableError (field `initialLoad` or `table`) otherwise.
 */
export async function checkLoads(staging: LoadCapable): Promise<void> {
  if (staging.load === undefined) return;
  for (const t of staging.source.tables)
    if (t.initialLoad === true) await staging.load.resolveLoad(t);
}

/** A query failed because the load table does not exist (all three dialects). */
export function isMissingTable(err: unknown): boolean {
  const e = err as { code?: unknown; errno?: unknown; message?: unknown };
  return e?.code === '42P01' || e?.errno === 1146 || /no such table/.test(String(e?.message ?? ''));
}

/**
 * The chunk key of a table: its primary key, else the columns of `key: [...]` when a unique index
 * covers exactly them and each is NOT NULL (`unique` says whether that holds).
 * @throws CaptureTableError at field `initialLoad` otherwise.
 */
export function chunkKeyOf(
  t: ResolvedTable,
  tableColumns: ColumnInfo[],
  unique: (cols: string[]) => boolean,
): ColumnInfo[] {
  const pk = tableColumns
    .filter((c) => c.pkPosition > 0)
    .sort((a, b) => a.pkPosition - b.pkPosition);
  if (pk.length > 0) return pk;
  const k = t.keyStrategy;
  if (k.kind === 'columns' && unique(k.columns.map((c) => c.name))) return k.columns;
  throw new CaptureTableError(
    `capture table "${t.config.table}": initialLoad: the table has no primary key to read it in chunks by` +
      (k.kind === 'columns'
        ? `, and key columns ${k.columns.map((c) => c.name).join(', ')} are not covered by a unique index of NOT NULL columns`
        : '') +
      '; add a primary key (or key: [columns] with a unique index), or remove initialLoad',
    t.config.table,
    'initialLoad',
  );
}
