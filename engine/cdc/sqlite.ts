/**
 * SQLite capture: trigger DDL generation and the staging client over better-sqlite3.
 *
 * Column values are rendered as text inside the trigger: integers by CAST (exact 64-bit),
 * reals by CAST (SQLite >= 3.43 renders the shortest text that round-trips), text as stored,
 * blobs as `\x` + lower-case hex (like PostgreSQL's bytea). Exact decimals (case C5) must be
 * declared TEXT and written as text: NUMERIC/REAL affinity turns `999999999999.999998` into a
 * double before any trigger runs, and those digits are gone.
 *
 * SQLite has one writer at a time, so staging ids (assigned inside the writing transaction)
 * follow commit order exactly; case C1 cannot happen here (a second writer waits, busy_timeout).
 */
import fs from 'node:fs';
import Database from 'better-sqlite3';
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
import type { ColumnInfo, KeyDialect, KeyRow, ResolvedTable, UserSqlProbe } from './sql.js';

/**
 * The probes of captured table `t`'s user-written SQL on SQLite (engine/cdc/sql.ts
 * userSqlProbes; row aliases NEW / OLD, the key text of the SQLite triggers): what install
 * prepares before any trigger exists, and `sluice check --live` without installing.
 */
export function sqliteUserSqlProbes(t: ResolvedTable): UserSqlProbe[] {
  return userSqlProbes(t, {
    table: quoteIdent(t.config.table),
    alias: (row) => row,
    keyRow: keyTextExpr(t, 'ROW', SQLITE_KEY_DIALECT),
  });
}
import type {
  HeldKeys,
  ParkedChange,
  ParkedSelection,
  StagingClient,
  UninstallOptions,
} from './staging.js';
import { installationTableName, newInstallationId } from './staging.js';
import { chunkKeyOf } from './initial-load.js';
import type { LoadHooks, LoadTable } from './initial-load.js';

type RowOp = Exclude<CaptureOperation, 'truncate'>;
const ROW_OPS: readonly RowOp[] = ['insert', 'update', 'delete'];

/** A cell nobody notifies: Atomics.wait on it is a precise sub-millisecond sleep. */
const SLEEP_CELL = new Int32Array(new SharedArrayBuffer(4));
/** Text of one value inside a trigger: `ref` is `NEW."col"` or `OLD."col"`; NULL stays NULL. */
function sqliteText(ref: string): string {
  return `(CASE typeof(${ref}) WHEN 'blob' THEN '\\x' || lower(hex(${ref})) ELSE CAST(${ref} AS TEXT) END)`;
}

/** JSON string literal text of one value, or the text `null`. json_quote escapes control chars. */
function sqliteJson(row: KeyRow, c: ColumnInfo): string {
  return `json_quote(${sqliteText(`${row}.${quoteIdent(c.name)}`)})`;
}

const SQLITE_KEY_DIALECT: KeyDialect = {
  json: sqliteJson,
  jsonOfText: (sql) => `json_quote(CAST(${sql} AS TEXT))`,
  txid: null,
};

/** Name of the trigger capturing `op` of `table` into `staging`. */
export function sqliteTriggerName(stagingTable: string, table: string, op: RowOp): string {
  return `sluice_cdc_${stagingTable}_${table}_${op}`;
}

/** Capture time in ms since the epoch; julianday('now') has ms resolution. */
const SQLITE_NOW_MS = `CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)`;

/** Staging columns of the error handling, added to staging tables created before it. */
const SQLITE_RETRY_COLUMNS = ['next_attempt_ms INTEGER', 'last_error TEXT'];

/** CREATE TABLE statements for the staging and error tables (IF NOT EXISTS). */
export function sqliteStagingDdl(stagingTable: string): string[] {
  const s = quoteIdent(stagingTable);
  const e = quoteIdent(`${stagingTable}_errors`);
  const common = `table_name TEXT NOT NULL, op TEXT NOT NULL, key TEXT NOT NULL, key_hash INTEGER,
  before TEXT, after TEXT, txid TEXT, time_ms INTEGER NOT NULL, attempts INTEGER NOT NULL DEFAULT 0`;
  return [
    `CREATE TABLE IF NOT EXISTS ${s} (\n  id INTEGER PRIMARY KEY AUTOINCREMENT,\n  ${common},\n  ${SQLITE_RETRY_COLUMNS.join(',\n  ')}\n)`,
    `CREATE TABLE IF NOT EXISTS ${e} (\n  id INTEGER PRIMARY KEY,\n  ${common},\n  error TEXT NOT NULL,\n  parked_time_ms INTEGER NOT NULL\n)`,
  ];
}

/**
 * DROP + CREATE TRIGGER statements for one resolved table: one AFTER ... FOR EACH ROW trigger per
 * captured row operation, and a DROP for each operation not captured (so removing an operation
 * from the config removes its trigger on the next install).
 */
export function sqliteTriggerDdl(stagingTable: string, t: ResolvedTable): string[] {
  const cfg = t.config;
  const out: string[] = [];
  const tableLit = quoteLiteral(cfg.table);
  const staging = quoteIdent(stagingTable);
  const suppress = cfg.suppressNoopUpdates ?? CDC_DEFAULTS.suppressNoopUpdates;
  for (const op of ROW_OPS) {
    const name = quoteIdent(sqliteTriggerName(stagingTable, cfg.table, op));
    out.push(`DROP TRIGGER IF EXISTS ${name}`);
    if (!cfg.operations.includes(op)) continue;
    const keyOf = (row: 'NEW' | 'OLD') => keyTextExpr(t, row, SQLITE_KEY_DIALECT);
    const imgOld = jsonObjectExpr(t.columns, (c) => sqliteJson('OLD', c));
    const imgNew = jsonObjectExpr(t.columns, (c) => sqliteJson('NEW', c));
    const stage = (o: RowOp, key: string, before: string, after: string, where = '') =>
      `  INSERT INTO ${staging} (table_name, op, key, key_hash, before, after, txid, time_ms)
  SELECT ${tableLit}, '${o}', ${key}, NULL,
    ${before},
    ${after},
    NULL, ${SQLITE_NOW_MS}${where};`;
    let body: string;
    if (op === 'insert') body = stage('insert', keyOf('NEW'), 'NULL', imgNew);
    else if (op === 'delete') body = stage('delete', keyOf('OLD'), imgOld, 'NULL');
    else if ((cfg.keyUpdate ?? CDC_DEFAULTS.keyUpdate) === 'update')
      body = stage('update', keyOf('NEW'), imgOld, imgNew);
    else {
      // Case C8: a key change retires the old key (delete on its pump) and creates the new one.
      const changed = `\n  WHERE ${keyOf('OLD')} IS NOT ${keyOf('NEW')}`;
      const same = `\n  WHERE ${keyOf('OLD')} IS ${keyOf('NEW')}`;
      body = [
        stage('delete', keyOf('OLD'), imgOld, 'NULL', changed),
        stage('insert', keyOf('NEW'), 'NULL', imgNew, changed),
        stage('update', keyOf('NEW'), imgOld, imgNew, same),
      ].join('\n');
    }
    const when: string[] = [];
    if (op === 'update' && suppress) {
      const compared = [...t.columns, ...t.key.filter((k) => !t.columns.includes(k))];
      when.push(
        compared
          .map((c) => {
            const col = quoteIdent(c.name);
            return `${sqliteText(`OLD.${col}`)} IS NOT ${sqliteText(`NEW.${col}`)}`;
          })
          .join('\n     OR '),
      );
    }
    const condition = conditionFor(cfg, op);
    if (condition !== undefined) when.push(condition);
    const whenSql = when.length > 0 ? `\nWHEN ${when.map(userSqlParens).join(' AND ')}` : '';
    out.push(
      `CREATE TRIGGER ${name} AFTER ${op.toUpperCase()} ON ${quoteIdent(cfg.table)} FOR EACH ROW${whenSql}
BEGIN
${body}
END`,
    );
  }
  return out;
}

/** Columns of `table` from pragma table_info; empty when the table does not exist. */
export function introspectSqliteTable(db: Database.Database, table: string): ColumnInfo[] {
  const rows = db.prepare(`SELECT name, type, pk FROM pragma_table_info(?)`).all(table) as {
    name: string;
    type: string;
    pk: number;
  }[];
  return rows.map((r) => ({ name: r.name, type: r.type.toUpperCase(), pkPosition: r.pk }));
}

/** Every statement install() runs for `source` against `db` (introspects the tables). */
export function sqliteInstallDdl(db: Database.Database, source: CaptureSource): string[] {
  const stmts = sqliteStagingDdl(source.stagingTable);
  for (const cfg of source.tables) {
    stmts.push(
      ...sqliteTriggerDdl(
        source.stagingTable,
        resolveTable(cfg, introspectSqliteTable(db, cfg.table)),
      ),
    );
  }
  return stmts;
}

interface SqliteStagedRow {
  staging_id: string;
  table_name: string;
  op: CaptureOperation;
  key: string;
  before: string | null;
  after: string | null;
  txid: string | null;
  time_ms: number;
  attempts: number;
}

/**
 * StagingClient over better-sqlite3 (synchronous underneath; the promises resolve immediately).
 * The connection uses WAL and `busy_timeout` = database.busyTimeoutMs (default 5000 ms); a write
 * that cannot get the lock in that time throws SQLITE_BUSY.
 *
 * claim() scans staging in id order and keeps the rows whose keyHash(key) % pumps == pump: SQLite
 * triggers cannot call a JS hash, so the split happens here. Cost per claim: the rows ahead of
 * this pump's last wanted row, i.e. other pumps' unshipped backlog plus `limit`.
 */
export class SqliteStaging implements StagingClient {
  readonly source: CaptureSource;
  private readonly db: Database.Database;
  private closed = false;
  private prepared: {
    scan: Database.Statement;
    rows: Database.Statement;
    del: Database.Statement;
    count: Database.Statement;
  } | null = null;
  /** Initial loads (initial-load.ts): chunks read in one read transaction with the claim. */
  readonly load: LoadHooks = sqliteLoadHooks(this, () => this.db);

  constructor(source: CaptureSource) {
    validateCaptureSource(source);
    if (source.database.dialect !== 'sqlite')
      throw new Error(`SqliteStaging needs dialect "sqlite", dialect=${source.database.dialect}`);
    this.source = source;
    // The captured tables must already exist, so a missing file is a wrong path, never a new database.
    if (!fs.existsSync(source.database.file)) {
      throw new Error(
        `capture source "${source.name}": SQLite database file ${source.database.file} does not exist`,
      );
    }
    this.db = new Database(source.database.file, {
      timeout: source.database.busyTimeoutMs ?? CDC_DEFAULTS.busyTimeoutMs,
      fileMustExist: true,
    });
    this.db.pragma('journal_mode = WAL');
  }

  /** Statements over the staging table, prepared on first use (the table exists after install()). */
  private stmts(): {
    scan: Database.Statement;
    rows: Database.Statement;
    del: Database.Statement;
    count: Database.Statement;
  } {
    if (this.prepared === null) {
      const s = quoteIdent(this.source.stagingTable);
      this.prepared = {
        // Ownership needs only (id, key): scan those, then read whole rows of this pump's ids, so
        // other pumps' backlog costs a narrow index-order read instead of their images.
        scan: this.db.prepare(`SELECT id, key FROM ${s} ORDER BY id`).raw(),
        rows: this.db.prepare(
          `SELECT CAST(id AS TEXT) AS staging_id, table_name, op, key, before, after, txid, time_ms, attempts FROM ${s} ` +
            `WHERE id IN (SELECT value FROM json_each(?)) ORDER BY id`,
        ),
        del: this.db.prepare(`DELETE FROM ${s} WHERE id = CAST(? AS INTEGER)`),
        count: this.db.prepare(`SELECT count(*) AS n FROM ${s}`).pluck(),
      };
    }
    return this.prepared;
  }

  async install(): Promise<void> {
    this.checkOpen();
    const stmts = sqliteInstallDdl(this.db, this.source);
    // SQLite resolves a trigger's names only when a write fires it: each condition and key
    // expression is compiled here first (prepared, not run), so a wrong one is refused at its
    // field before anything is created (every refusal of every table together).
    const refusals: CaptureTableError[] = [];
    for (const cfg of this.source.tables) {
      const t = resolveTable(cfg, introspectSqliteTable(this.db, cfg.table));
      const run = (p: UserSqlProbe) => this.db.prepare(p.sql);
      refusals.push(...(await userSqlRefusals(t, sqliteUserSqlProbes(t), run)));
    }
    throwAll(refusals);
    const inst = quoteIdent(installationTableName(this.source.stagingTable));
    this.db
      .transaction(() => {
        const existed =
          this.db
            .prepare(`SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?`)
            .get(this.source.stagingTable) !== undefined;
        for (const stmt of stmts) this.db.exec(stmt);
        // A staging table created now counts its ids from 1 again: a new installation id.
        this.db.exec(`CREATE TABLE IF NOT EXISTS ${inst} (id TEXT NOT NULL)`);
        if (!existed) this.db.exec(`DELETE FROM ${inst}`);
        if (this.db.prepare(`SELECT 1 FROM ${inst}`).get() === undefined)
          this.db.prepare(`INSERT INTO ${inst} (id) VALUES (?)`).run(newInstallationId());
        const have = new Set(
          introspectSqliteTable(this.db, this.source.stagingTable).map((c) => c.name),
        );
        for (const col of SQLITE_RETRY_COLUMNS) {
          const name = col.split(' ')[0]!;
          if (!have.has(name))
            this.db.exec(`ALTER TABLE ${quoteIdent(this.source.stagingTable)} ADD COLUMN ${col}`);
        }
        this.prepared = null;
        for (const cfg of this.source.tables) this.checkTriggersCompile(cfg);
      })
      .immediate();
  }

  /**
   * SQLite compiles a trigger only when a statement that fires it is prepared, so a bad
   * `condition` (e.g. NEW on a delete) would otherwise first fail in the application's write.
   * Preparing (not running) one statement per operation surfaces it here, inside install's
   * transaction, which then rolls back; the refusal points at the trigger's condition or
   * expression key when it has one of them (triggerUserSqlField), else at the table.
   */
  private checkTriggersCompile(cfg: CaptureTable): void {
    const table = cfg.table;
    const t = quoteIdent(table);
    const columns = introspectSqliteTable(this.db, table);
    const resolved = resolveTable(cfg, columns);
    const first = columns[0];
    const probes: [RowOp, string][] = [
      ['insert', `INSERT INTO ${t} DEFAULT VALUES`],
      [
        'update',
        `UPDATE ${t} SET ${quoteIdent(first?.name ?? 'rowid')} = ${quoteIdent(first?.name ?? 'rowid')} WHERE 0`,
      ],
      ['delete', `DELETE FROM ${t} WHERE 0`],
    ];
    for (const [op, sql] of probes) {
      if (!cfg.operations.includes(op)) continue;
      try {
        this.db.prepare(sql);
      } catch (err) {
        throw new CaptureTableError(
          `capture table "${table}": ${op} trigger does not compile: ${(err as Error).message}`,
          table,
          triggerUserSqlField(resolved, op, true),
        );
      }
    }
  }

  async uninstall(options: UninstallOptions = {}): Promise<void> {
    this.checkOpen();
    this.db
      .transaction(() => {
        for (const cfg of this.source.tables) {
          for (const op of ROW_OPS)
            this.db.exec(
              `DROP TRIGGER IF EXISTS ${quoteIdent(sqliteTriggerName(this.source.stagingTable, cfg.table, op))}`,
            );
        }
        if (options.dropStaging) {
          this.prepared = null;
          this.db.exec(`DROP TABLE IF EXISTS ${quoteIdent(this.source.stagingTable)}`);
          this.db.exec(`DROP TABLE IF EXISTS ${quoteIdent(`${this.source.stagingTable}_errors`)}`);
          this.db.exec(
            `DROP TABLE IF EXISTS ${quoteIdent(installationTableName(this.source.stagingTable))}`,
          );
          this.db.exec(`DROP TABLE IF EXISTS ${this.load.loadTable}`);
          // AUTOINCREMENT's counter row; sqlite_sequence itself cannot be dropped (SQLite owns it).
          const seq = this.db
            .prepare(`SELECT 1 FROM sqlite_master WHERE name = 'sqlite_sequence'`)
            .get();
          if (seq !== undefined)
            this.db
              .prepare('DELETE FROM sqlite_sequence WHERE name = ?')
              .run(this.source.stagingTable);
        }
      })
      .immediate();
  }

  async claim(
    pump: number,
    pumps: number,
    limit: number,
    excludeKeys?: ReadonlySet<string>,
  ): Promise<StagedChange[]> {
    this.checkOpen();
    const exclude = excludeKeys !== undefined && excludeKeys.size > 0 ? excludeKeys : null;
    checkClaimArgs(pump, pumps, limit);
    const { scan, rows } = this.stmts();
    const ids: number[] = [];
    const hashes = new Map<number, number>();
    // One read transaction for both statements, so the rows read are the ones scanned.
    return this.db
      .transaction(() => {
        for (const [id, key] of scan.iterate() as IterableIterator<[number, string]>) {
          // Key strategy none ("[]"): no order to keep, so the pump is picked by the staging id.
          const h = key === '[]' ? keyHash(String(id)) : keyHash(key);
          if (h % pumps !== pump || exclude?.has(key)) continue;
          ids.push(id);
          hashes.set(id, h);
          if (ids.length >= limit) break;
        }
        if (ids.length === 0) return [];
        return (rows.all(JSON.stringify(ids)) as SqliteStagedRow[]).map((r) => ({
          stagingId: r.staging_id,
          table: r.table_name,
          op: r.op,
          key: r.key,
          keyHash: hashes.get(Number(r.staging_id))!,
          before: r.before,
          after: r.after,
          txid: r.txid ?? '',
          timeMs: r.time_ms,
          attempts: r.attempts,
        }));
      })
      .deferred();
  }

  async ack(stagingIds: string[]): Promise<number> {
    this.checkOpen();
    if (stagingIds.length === 0) return 0;
    const { del } = this.stmts();
    const tx = this.db.transaction(() => {
      let n = 0;
      for (const id of stagingIds) n += del.run(id).changes;
      return n;
    });
    return this.withWriteLock(() => tx.immediate());
  }

  /**
   * Runs a write transaction, polling for SQLite's write lock with short sleeps (50 us doubling
   * to 2 ms) for at most busyTimeoutMs. Why not SQLite's own busy handler: it sleeps in steps
   * growing to 100 ms, and against application writers whose transactions last ~0.1 ms it loses
   * the lock again and again (measured in the bank job: ~170 ms per staging delete with 4
   * writers, which made the pumps the bottleneck).
   * @throws the SQLITE_BUSY error once busyTimeoutMs has passed; any other error at once.
   */
  private withWriteLock<T>(fn: () => T): T {
    const timeoutMs =
      this.source.database.dialect === 'sqlite'
        ? (this.source.database.busyTimeoutMs ?? CDC_DEFAULTS.busyTimeoutMs)
        : CDC_DEFAULTS.busyTimeoutMs;
    const deadline = Date.now() + timeoutMs;
    this.db.pragma('busy_timeout = 0');
    try {
      for (let attempt = 0; ; attempt++) {
        try {
          return fn();
        } catch (err) {
          if ((err as { code?: string }).code !== 'SQLITE_BUSY' || Date.now() >= deadline)
            throw err;
          Atomics.wait(SLEEP_CELL, 0, 0, Math.min(2, 0.05 * 2 ** attempt));
        }
      }
    } finally {
      this.db.pragma(`busy_timeout = ${timeoutMs}`);
    }
  }

  async installationId(): Promise<string> {
    this.checkOpen();
    const inst = installationTableName(this.source.stagingTable);
    const exists = this.db
      .prepare(`SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?`)
      .get(inst);
    if (exists === undefined) return '';
    const id = this.db
      .prepare(`SELECT id FROM ${quoteIdent(inst)} LIMIT 1`)
      .pluck()
      .get();
    return typeof id === 'string' ? id : '';
  }

  async stagedCount(): Promise<number> {
    this.checkOpen();
    return this.stmts().count.get() as number;
  }

  async describeTable(table: string): Promise<{ live: string[]; installed: string[] | null }> {
    this.checkOpen();
    const live = introspectSqliteTable(this.db, table).map((c) => c.name);
    const sql = this.db
      .prepare(
        `SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name IN (?, ?, ?) ORDER BY name`,
      )
      .pluck()
      .all(
        ...ROW_OPS.map((op) => sqliteTriggerName(this.source.stagingTable, table, op)),
      ) as string[];
    return { live, installed: sql.length > 0 ? imageColumnsOf(sql[0]!) : null };
  }

  async recordFailure(
    stagingId: string,
    attempts: number,
    nextAttemptMs: number,
    error: string,
  ): Promise<void> {
    this.checkOpen();
    const sql = `UPDATE ${quoteIdent(this.source.stagingTable)} SET attempts = ?, next_attempt_ms = ?, last_error = ? WHERE id = CAST(? AS INTEGER)`;
    const stmt = this.db.prepare(sql);
    this.withWriteLock(() => stmt.run(attempts, nextAttemptMs, error, stagingId));
  }

  async park(stagingId: string, attempts: number, error: string, nowMs: number): Promise<boolean> {
    this.checkOpen();
    const s = quoteIdent(this.source.stagingTable);
    const e = quoteIdent(`${this.source.stagingTable}_errors`);
    const row = this.db
      .prepare(`SELECT key FROM ${s} WHERE id = CAST(? AS INTEGER)`)
      .get(stagingId) as { key: string } | undefined;
    if (row === undefined) return false;
    const move = this.db.transaction(() => {
      const n = this.db
        .prepare(
          `INSERT OR REPLACE INTO ${e} (id, table_name, op, key, key_hash, before, after, txid, time_ms, attempts, error, parked_time_ms)
         SELECT id, table_name, op, key, ?, before, after, txid, time_ms, ?, ?, ? FROM ${s} WHERE id = CAST(? AS INTEGER)`,
        )
        .run(keyHash(row.key), attempts, error, nowMs, stagingId).changes;
      this.db.prepare(`DELETE FROM ${s} WHERE id = CAST(? AS INTEGER)`).run(stagingId);
      return n > 0;
    });
    return this.withWriteLock(() => move.immediate());
  }

  async heldKeys(pump: number, pumps: number): Promise<HeldKeys> {
    this.checkOpen();
    checkClaimArgs(pump, pumps, 1);
    const s = quoteIdent(this.source.stagingTable);
    const e = quoteIdent(`${this.source.stagingTable}_errors`);
    const retrying = new Map<string, number>();
    const parked = new Set<string>();
    const mine = (key: string) => keyHash(key) % pumps === pump;
    const failed = this.db
      .prepare(`SELECT key, min(next_attempt_ms) AS t FROM ${s} WHERE attempts > 0 GROUP BY key`)
      .all() as { key: string; t: number | null }[];
    for (const r of failed) if (mine(r.key)) retrying.set(r.key, r.t ?? 0);
    for (const key of this.db.prepare(`SELECT DISTINCT key FROM ${e}`).pluck().all() as string[])
      if (mine(key)) parked.add(key);
    return { retrying, parked };
  }

  /** WHERE clause and parameters of a ParkedSelection. */
  private selectionWhere(sel: ParkedSelection): [string, unknown[]] {
    const conds: string[] = [];
    const params: unknown[] = [];
    if (sel.ids !== undefined) {
      conds.push('id IN (SELECT CAST(value AS INTEGER) FROM json_each(?))');
      params.push(JSON.stringify(sel.ids));
    }
    if (sel.parkedBeforeMs !== undefined) {
      conds.push('parked_time_ms < ?');
      params.push(sel.parkedBeforeMs);
    }
    return [conds.length > 0 ? `WHERE ${conds.join(' AND ')}` : '', params];
  }

  async listParked(selection: ParkedSelection = {}, limit = 1000): Promise<ParkedChange[]> {
    this.checkOpen();
    const [where, params] = this.selectionWhere(selection);
    const rows = this.db
      .prepare(
        `SELECT CAST(id AS TEXT) AS staging_id, table_name, op, key, before, after, txid, time_ms, attempts, error, parked_time_ms
       FROM ${quoteIdent(`${this.source.stagingTable}_errors`)} ${where} ORDER BY id LIMIT ?`,
      )
      .all(...params, limit) as (SqliteStagedRow & { error: string; parked_time_ms: number })[];
    return rows.map((r) => ({
      stagingId: r.staging_id,
      table: r.table_name,
      op: r.op,
      key: r.key,
      keyHash: keyHash(r.key),
      before: r.before,
      after: r.after,
      txid: r.txid ?? '',
      timeMs: r.time_ms,
      attempts: r.attempts,
      error: r.error,
      parkedTimeMs: r.parked_time_ms,
    }));
  }

  async parkedCount(): Promise<number> {
    this.checkOpen();
    return this.db
      .prepare(`SELECT count(*) FROM ${quoteIdent(`${this.source.stagingTable}_errors`)}`)
      .pluck()
      .get() as number;
  }

  async requeue(selection: ParkedSelection = {}): Promise<number> {
    this.checkOpen();
    const s = quoteIdent(this.source.stagingTable);
    const e = quoteIdent(`${this.source.stagingTable}_errors`);
    const [where, params] = this.selectionWhere(selection);
    // The original id keeps the change ahead of every later change of its key (ids only grow).
    const tx = this.db.transaction(() => {
      this.db
        .prepare(
          `INSERT INTO ${s} (id, table_name, op, key, key_hash, before, after, txid, time_ms, attempts)
         SELECT id, table_name, op, key, NULL, before, after, txid, time_ms, 0 FROM ${e} ${where}`,
        )
        .run(...params);
      return this.db.prepare(`DELETE FROM ${e} ${where}`).run(...params).changes;
    });
    return this.withWriteLock(() => tx.immediate());
  }

  async purge(selection: ParkedSelection = {}): Promise<number> {
    this.checkOpen();
    const [where, params] = this.selectionWhere(selection);
    const e = quoteIdent(`${this.source.stagingTable}_errors`);
    // The pumps' periodic retention purge must not wait for the write lock when there is nothing to delete.
    if (
      this.db
        .prepare(`SELECT NOT EXISTS (SELECT 1 FROM ${e} ${where})`)
        .pluck()
        .get(...params) === 1
    )
      return 0;
    const stmt = this.db.prepare(`DELETE FROM ${e} ${where}`);
    return this.withWriteLock(() => stmt.run(...params).changes);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.db.close();
  }

  private checkOpen(): void {
    if (this.closed) throw new Error(`staging client for source "${this.source.name}" is closed`);
  }
}

/**
 * SQLite's initial-load hooks: a deferred read transaction is the snapshot (WAL: writers go on);
 * the cursor is kept as SQL literals from quote(), inlined into the next chunk's WHERE.
 */
/** What quote() returns: a number, a string literal, a blob literal or NULL (checked before inlining). */
const SQLITE_QUOTED = /^(?:-?[0-9][0-9.eE+-]*|'(?:[^']|'')*'|X'[0-9A-Fa-f]*'|NULL)$/;

function sqliteLoadHooks(staging: SqliteStaging, db: () => Database.Database): LoadHooks {
  const query = async (sql: string, params: unknown[] = []) => {
    const stmt = db().prepare(sql);
    if (!stmt.reader) {
      stmt.run(...params);
      return [];
    }
    return stmt.all(...params) as Record<string, unknown>[];
  };
  return {
    dialect: 'sqlite',
    get loadTable() {
      return quoteIdent(`${staging.source.stagingTable}_loads`);
    },
    param: () => '?',
    query,
    async snapshot(work) {
      db().exec('BEGIN DEFERRED');
      try {
        const out = await work(query);
        db().exec('COMMIT');
        return out;
      } catch (err) {
        if (db().inTransaction) db().exec('ROLLBACK');
        throw err;
      }
    },
    async resolveLoad(cfg) {
      const cols = introspectSqliteTable(db(), cfg.table);
      const resolved = resolveTable(cfg, cols);
      const unique = (names: string[]) => {
        const notNull = new Set(
          db()
            .prepare('SELECT name FROM pragma_table_info(?) WHERE "notnull" = 1')
            .pluck()
            .all(cfg.table) as string[],
        );
        if (!names.every((n) => notNull.has(n))) return false;
        const indexes = db()
          .prepare('SELECT name FROM pragma_index_list(?) WHERE "unique" = 1')
          .pluck()
          .all(cfg.table) as string[];
        return indexes.some((ix) => {
          const ixCols = db()
            .prepare('SELECT name FROM pragma_index_info(?)')
            .pluck()
            .all(ix) as string[];
          return ixCols.length === names.length && ixCols.every((c) => names.includes(c));
        });
      };
      return { resolved, chunkKey: chunkKeyOf(resolved, cols, unique) };
    },
    tableSql: (t: LoadTable) => quoteIdent(t.resolved.config.table),
    chunk(t: LoadTable, cursor: string[] | null, limit: number) {
      const r = t.resolved;
      const keyCols = t.chunkKey.map((c) => `NEW.${quoteIdent(c.name)}`);
      for (const v of cursor ?? []) {
        if (!SQLITE_QUOTED.test(v))
          throw new Error(
            `capture table "${r.config.table}": initial-load cursor value ${JSON.stringify(v)} is not an SQL literal of quote()`,
          );
      }
      const where =
        cursor === null ? '' : `WHERE (${keyCols.join(', ')}) > (${cursor.join(', ')}) `;
      const sql =
        `SELECT ${keyTextExpr(r, 'NEW', SQLITE_KEY_DIALECT)} AS k, ${jsonObjectExpr(r.columns, (c) => sqliteJson('NEW', c))} AS a, ` +
        `${keyCols.map((k, i) => `quote(${k}) AS c${i}`).join(', ')} FROM ${quoteIdent(r.config.table)} AS NEW ${where}` +
        `ORDER BY ${keyCols.join(', ')} LIMIT ${Math.trunc(limit)}`;
      return { sql, params: [] };
    },
  };
}
