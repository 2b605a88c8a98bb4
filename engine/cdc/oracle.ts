/**
 * Oracle capture: the staging client over node-oracledb in thin mode (pure JavaScript, no
 * Oracle Client libraries). The DDL it runs is generated in oracle-ddl.ts.
 *
 * Pumps (after MOVEX CDC's claim, ship, delete):
 * - A pump owns its key partition alone: its first claim takes the exclusive user lock
 *   `sluice.cdc.<schema>.<staging>.<pump>` (DBMS_LOCK, released when its session ends; the login
 *   needs EXECUTE on SYS.DBMS_LOCK); a second session claiming the same pump gets an Error
 *   after CDC_DEFAULTS.pumpLockWaitMs.
 * - claim: `SELECT ... WHERE MOD(KEY_HASH, N) = pump ORDER BY ID FOR UPDATE SKIP LOCKED`, fetching
 *   at most `limit` rows (Oracle refuses FETCH FIRST and a ROWNUM over ORDER BY with FOR UPDATE,
 *   so the limit is the driver's maxRows: SKIP LOCKED locks rows as they are fetched). The rows
 *   stay locked until ack (DELETE by id, COMMIT), so an errors requeue or an uninstall elsewhere
 *   cannot move them under the pump.
 * - Values arrive as text (NUMBER and CLOB fetched as strings), never through a JS Number.
 *
 * A connection that cannot be made (listener down, login refused) rejects with an Error naming
 * the source and the Easy Connect string (never the password); the pump actor (actors/cdc-pump.ts)
 * treats it as an outage and retries with capped backoff, forever. NEVER RUN AGAINST A LIVE
 * ORACLE here: see the README's "Capture on Oracle".
 */
import fs from 'node:fs';
import type oracledb from 'oracledb';
import { oracleDriver } from './drivers.js';
import { CDC_DEFAULTS, checkClaimArgs, validateCaptureSource } from './config.js';
import type { CaptureOperation, CaptureSource, OracleDatabaseRef, StagedChange } from './config.js';
import { parseOracleUrl } from './oracle-url.js';
import type { OracleUrl } from './oracle-url.js';
import { resolveTable } from './sql.js';
import type { ResolvedTable } from './sql.js';
import type {
  HeldKeys,
  ParkedChange,
  ParkedSelection,
  StagingClient,
  UninstallOptions,
} from './staging.js';
import {
  oracleCheckTypes,
  oracleColumnName,
  oracleGuardDdl,
  oracleGuardName,
  oracleIdent,
  oracleImageColumnsOf,
  oracleLiteral,
  oracleNamePart,
  oracleNames,
  oraclePackageDdl,
  oracleRef,
  oracleSplitTable,
  oracleStagingDdl,
  oracleTriggerDdl,
  oracleTriggerName,
  oracleUninstallDdl,
} from './oracle-ddl.js';
import type { OracleColumn, OracleNames } from './oracle-ddl.js';
import { newInstallationId } from './staging.js';

/** Seconds a connection attempt may take (TCP connect and login) before it fails. */
const CONNECT_TIMEOUT_S = 10;

/** Comment on the staging table when install created the capture schema (uninstall reads it). */
export const ORACLE_SCHEMA_MARK =
  'sluice capture staging; capture schema created by sluice install';
/** Comment on the staging table when the capture schema existed before install. */
export const ORACLE_STAGING_MARK = 'sluice capture staging';

/** Errors whose object does not exist (uninstall of something already gone is not an error). */
const ORA_NOT_FOUND = [942, 4043, 4080];

/** A fetched row: column name (upper case) -> value. */
type Row = Record<string, unknown>;

/** Fetch NUMBER and CLOB columns as strings: exact digits, whole texts. */
const fetchTypeHandler = (
  meta: oracledb.Metadata<unknown>,
): oracledb.FetchTypeResponse | undefined =>
  meta.dbType === oracleDriver().DB_TYPE_NUMBER || meta.dbType === oracleDriver().DB_TYPE_CLOB
    ? { type: oracleDriver().STRING }
    : undefined;

/** The password of an oracle source: from the url, or read from passwordFile (trailing newline dropped). */
export function oraclePassword(db: OracleDatabaseRef, url: OracleUrl): string {
  if (db.passwordFile === undefined) return url.password;
  return fs.readFileSync(db.passwordFile, 'utf8').replace(/\r?\n$/, '');
}

/**
 * Introspects `table` (OWNER.TABLE or a bare name of `owner`) from ALL_TAB_COLUMNS and the primary
 * key from ALL_CONSTRAINTS. Empty columns when the table does not exist or cannot be seen.
 */
export async function introspectOracleTable(
  conn: oracledb.Connection,
  table: string,
  owner: string,
): Promise<OracleColumn[]> {
  const t = oracleSplitTable(table, owner);
  const res = await conn.execute<Row>(
    `SELECT c.COLUMN_NAME, c.DATA_TYPE, c.DATA_LENGTH, c.CHAR_LENGTH, c.DATA_SCALE,
       NVL((SELECT cc.POSITION FROM ALL_CONS_COLUMNS cc JOIN ALL_CONSTRAINTS k
              ON k.OWNER = cc.OWNER AND k.CONSTRAINT_NAME = cc.CONSTRAINT_NAME
            WHERE k.CONSTRAINT_TYPE = 'P' AND k.OWNER = c.OWNER AND k.TABLE_NAME = c.TABLE_NAME
              AND cc.COLUMN_NAME = c.COLUMN_NAME), 0) AS PK_POSITION
     FROM ALL_TAB_COLUMNS c
     WHERE c.OWNER = :owner AND c.TABLE_NAME = :tab
     ORDER BY c.COLUMN_ID`,
    { owner: t.owner, tab: t.table },
    { outFormat: oracleDriver().OUT_FORMAT_OBJECT, fetchTypeHandler },
  );
  return (res.rows ?? []).map((r) => ({
    name: oracleColumnName(String(r.COLUMN_NAME)),
    sqlName: String(r.COLUMN_NAME),
    type: String(r.DATA_TYPE),
    dataLength: Number(r.DATA_LENGTH ?? 0),
    charLength: Number(r.CHAR_LENGTH ?? 0),
    dataScale: r.DATA_SCALE === null || r.DATA_SCALE === undefined ? null : Number(r.DATA_SCALE),
    pkPosition: Number(r.PK_POSITION ?? 0),
  }));
}

/** `:i0, :i1, ...` binds of staging ids; throws unless each is decimal digits. */
function idBinds(stagingIds: string[], prefix = 'i'): [string, Record<string, string>] {
  const binds: Record<string, string> = {};
  const names = stagingIds.map((id, k) => {
    if (!/^\d{1,20}$/.test(id))
      throw new Error(`staging id must be decimal digits, id=${JSON.stringify(id)}`);
    binds[`${prefix}${k}`] = id;
    return `:${prefix}${k}`;
  });
  return [names.join(', '), binds];
}

/** WHERE clause and binds of a ParkedSelection. */
function selectionWhere(sel: ParkedSelection): [string, Record<string, unknown>] {
  const conds: string[] = [];
  let binds: Record<string, unknown> = {};
  if (sel.ids !== undefined) {
    if (sel.ids.length === 0) conds.push('1 = 0');
    else {
      const [list, b] = idBinds(sel.ids);
      conds.push(`"ID" IN (${list})`);
      binds = { ...b };
    }
  }
  if (sel.parkedBeforeMs !== undefined) {
    conds.push('"PARKED_TIME_MS" < :before_ms');
    binds.before_ms = sel.parkedBeforeMs;
  }
  return [conds.length > 0 ? `WHERE ${conds.join(' AND ')}` : '', binds];
}

/** The staging columns claim and listParked select. */
const STAGED_COLUMNS =
  '"ID", "TABLE_NAME", "OP", "KEY", "KEY_HASH", "BEFORE", "AFTER", "TXID", "TIME_MS", "ATTEMPTS"';

function stagedChange(r: Row): StagedChange {
  return {
    stagingId: String(r.ID),
    table: String(r.TABLE_NAME),
    op: r.OP as CaptureOperation,
    key: String(r.KEY),
    keyHash: Number(r.KEY_HASH),
    before: r.BEFORE === null || r.BEFORE === undefined ? null : String(r.BEFORE),
    after: r.AFTER === null || r.AFTER === undefined ? null : String(r.AFTER),
    txid: String(r.TXID ?? '').trim(),
    timeMs: Number(r.TIME_MS),
    attempts: Number(r.ATTEMPTS),
  };
}

/** Oracle's error number of a driver error (`ORA-00942` -> 942), or 0. */
function oraNumber(err: unknown): number {
  const m = /^ORA-(\d+)/.exec(String((err as { message?: string })?.message ?? ''));
  return m ? Number(m[1]) : 0;
}

/**
 * StagingClient over one node-oracledb thin connection (autoCommit off; every method commits or
 * rolls back what it did, except claim, whose row locks are released by the ack's commit).
 */
export class OracleStaging implements StagingClient {
  readonly source: CaptureSource;
  /** Owner of unqualified captured tables: database.schema, default the url's user. */
  readonly owner: string;
  /** Names of the capture objects. */
  readonly names: OracleNames;
  private readonly url: OracleUrl;
  private readonly ready: Promise<oracledb.Connection>;
  private readonly pumpsHeld = new Set<number>();
  private closed = false;

  constructor(source: CaptureSource) {
    validateCaptureSource(source);
    const db = source.database;
    if (db.dialect !== 'oracle')
      throw new Error(`OracleStaging needs dialect "oracle", dialect=${db.dialect}`);
    const url = parseOracleUrl(db.url);
    if (typeof url === 'string')
      throw new Error(`capture source "${source.name}": database.url: ${url}`);
    this.source = source;
    this.url = url;
    this.owner = oracleNamePart(db.schema ?? url.user);
    this.names = oracleNames(db.captureSchema ?? CDC_DEFAULTS.captureSchema, source.stagingTable);
    this.ready = this.connect(db);
    // Callers see the failure on their first call; do not let it surface as unhandled.
    this.ready.catch(() => undefined);
  }

  private async connect(db: OracleDatabaseRef): Promise<oracledb.Connection> {
    let password: string;
    try {
      password = oraclePassword(db, this.url);
    } catch (err) {
      throw new Error(
        `capture source "${this.source.name}": cannot read database.passwordFile: ${(err as Error).message}`,
      );
    }
    try {
      return await oracleDriver().getConnection({
        user: this.url.user,
        password,
        connectString: this.url.connectString,
        connectTimeout: CONNECT_TIMEOUT_S,
        transportConnectTimeout: CONNECT_TIMEOUT_S,
        // No retries inside the driver: the pump's outage loop retries with its own backoff.
        retryCount: 0,
      });
    } catch (err) {
      // The driver's text is "NJS-503: connection to host h port p could not be established.
      // (CONNECTION_ID=...)\n<socket error>": one line, without the connection id.
      const text = String((err as Error).message)
        .replace(/\s*\(CONNECTION_ID=[^)]*\)/g, '')
        .split('\n')
        .map((l) => l.trim())
        .filter((l) => l.length > 0);
      const reason = text.length > 1 ? `${text[0]} (${text.slice(1).join('; ')})` : (text[0] ?? '');
      // `code` (NJS-503, ORA-01017, ...) kept so callers can tell an outage from a bad config.
      throw Object.assign(
        new Error(`${this.url.user}@${this.url.connectString}: ${reason}`, { cause: err }),
        { code: (err as { code?: unknown }).code },
      );
    }
  }

  private async open(): Promise<oracledb.Connection> {
    if (this.closed) throw new Error(`staging client for source "${this.source.name}" is closed`);
    return this.ready;
  }

  /** Connects (or fails, naming the source). For openStaging. */
  async connected(): Promise<void> {
    await this.open();
  }

  private async query(
    sql: string,
    binds: oracledb.BindParameters = {},
    maxRows = 0,
  ): Promise<Row[]> {
    const conn = await this.open();
    const res = await conn.execute<Row>(sql, binds, {
      outFormat: oracleDriver().OUT_FORMAT_OBJECT,
      fetchTypeHandler,
      maxRows,
    });
    return res.rows ?? [];
  }

  private async run(
    sql: string,
    binds: oracledb.BindParameters = {},
    commit = false,
  ): Promise<number> {
    const conn = await this.open();
    const res = await conn.execute(sql, binds, { autoCommit: commit });
    return res.rowsAffected ?? 0;
  }

  private async inTransaction<T>(work: () => Promise<T>): Promise<T> {
    const conn = await this.open();
    try {
      const out = await work();
      await conn.commit();
      return out;
    } catch (err) {
      await conn.rollback().catch(() => undefined);
      throw err;
    }
  }

  private stagingRef(): string {
    return oracleRef(this.names, this.names.staging);
  }

  private errorsRef(): string {
    return oracleRef(this.names, this.names.errors);
  }

  /**
   * Creates the capture schema when missing (`CREATE USER ... NO AUTHENTICATION`, Oracle 18c+),
   * the staging and error tables when missing, the package, and per captured table its TRUNCATE
   * guard and compound trigger (CREATE OR REPLACE: a reinstall swaps the trigger in one DDL).
   * Oracle runs DDL outside transactions: every table is checked before anything is created.
   */
  async install(): Promise<void> {
    const resolved: ResolvedTable[] = [];
    const conn = await this.open();
    for (const cfg of this.source.tables) {
      const cols = await introspectOracleTable(conn, cfg.table, this.owner);
      const t = resolveTable(cfg, cols);
      oracleCheckTypes(t);
      resolved.push(t);
    }
    const created = await this.createCaptureSchema();
    let stagingCreated = false;
    for (const { table, ddl } of oracleStagingDdl(this.names)) {
      const exists = await this.query(
        'SELECT 1 AS X FROM ALL_TABLES WHERE OWNER = :o AND TABLE_NAME = :t',
        { o: this.names.schema, t: table },
      );
      if (exists.length > 0) continue;
      await this.run(ddl);
      if (table === this.names.staging) stagingCreated = true;
      if (table === this.names.staging) {
        await this.run(
          `COMMENT ON TABLE ${this.stagingRef()} IS ${oracleLiteral(created ? ORACLE_SCHEMA_MARK : ORACLE_STAGING_MARK)}`,
        );
      }
    }
    // A staging table created now counts its ids from 1 again: a new installation id.
    const inst = oracleRef(this.names, this.names.installation);
    if (stagingCreated) await this.run(`DELETE FROM ${inst}`);
    await this.run(
      `INSERT INTO ${inst} ("ID") SELECT :id FROM DUAL WHERE NOT EXISTS (SELECT 1 FROM ${inst})`,
      { id: newInstallationId() },
      true,
    );
    for (const stmt of oraclePackageDdl(this.names)) await this.ddlChecked(stmt, this.names.pkg);
    for (const t of resolved) {
      try {
        await this.ddlChecked(
          oracleGuardDdl(this.names, t.config, this.owner),
          oracleGuardName(this.names, t.config.table, this.owner),
        );
        await this.ddlChecked(
          oracleTriggerDdl(this.names, t, this.owner),
          oracleTriggerName(this.names, t.config.table, this.owner),
        );
      } catch (err) {
        throw new Error(
          `capture table "${t.config.table}": install failed: ${(err as Error).message}`,
        );
      }
    }
  }

  /**
   * Runs a CREATE of a PL/SQL unit. Oracle creates a unit that does not compile (success with
   * compilation errors, ORA-24344 / a warning): then the errors of `name` are read from
   * ALL_ERRORS and thrown, so a bad `condition` fails install, naming the line.
   */
  private async ddlChecked(stmt: string, name: string | null): Promise<void> {
    try {
      await this.run(stmt);
    } catch (err) {
      if (oraNumber(err) !== 24344 || name === null) throw err;
    }
    if (name === null) return;
    const errors = await this.query(
      `SELECT TYPE, LINE, POSITION, TEXT FROM ALL_ERRORS WHERE OWNER = :o AND NAME = :n ORDER BY SEQUENCE`,
      { o: this.names.schema, n: name },
    );
    if (errors.length > 0) {
      throw new Error(
        `${name} does not compile: ${errors.map((e) => `${String(e.TYPE)} line ${String(e.LINE)}:${String(e.POSITION)} ${String(e.TEXT).trim()}`).join('; ')}`,
      );
    }
  }

  /** Creates the capture schema (user) when missing; true when it did. */
  private async createCaptureSchema(): Promise<boolean> {
    const users = await this.query('SELECT 1 AS X FROM ALL_USERS WHERE USERNAME = :u', {
      u: this.names.schema,
    });
    if (users.length > 0) return false;
    const ts = await this.query(
      `SELECT PROPERTY_VALUE AS TS FROM DATABASE_PROPERTIES WHERE PROPERTY_NAME = 'DEFAULT_PERMANENT_TABLESPACE'`,
    );
    const tablespace = String(ts[0]?.TS ?? 'USERS');
    await this.run(
      `CREATE USER ${oracleIdent(this.names.schema)} NO AUTHENTICATION DEFAULT TABLESPACE ${oracleIdent(tablespace)} QUOTA UNLIMITED ON ${oracleIdent(tablespace)}`,
    );
    return true;
  }

  async uninstall(options: UninstallOptions = {}): Promise<void> {
    const dropStaging = options.dropStaging === true;
    let createdSchema = false;
    if (dropStaging) {
      const mark = await this.query(
        'SELECT COMMENTS FROM ALL_TAB_COMMENTS WHERE OWNER = :o AND TABLE_NAME = :t',
        { o: this.names.schema, t: this.names.staging },
      );
      createdSchema = mark[0]?.COMMENTS === ORACLE_SCHEMA_MARK;
    }
    for (const stmt of oracleUninstallDdl(
      this.names,
      this.source.tables,
      this.owner,
      dropStaging,
    )) {
      try {
        await this.run(stmt);
      } catch (err) {
        if (!ORA_NOT_FOUND.includes(oraNumber(err))) throw err;
      }
    }
    if (createdSchema) {
      const left = await this.query('SELECT COUNT(*) AS N FROM ALL_OBJECTS WHERE OWNER = :o', {
        o: this.names.schema,
      });
      if (Number(left[0]?.N) === 0) await this.run(`DROP USER ${oracleIdent(this.names.schema)}`);
    }
  }

  private async holdPump(pump: number): Promise<void> {
    const conn = await this.open();
    const lock = `sluice.cdc.${this.names.schema}.${this.names.staging}.${pump}`;
    const deadline = Date.now() + CDC_DEFAULTS.pumpLockWaitMs;
    for (;;) {
      // ALLOCATE_UNIQUE_AUTONOMOUS (12.2+) does not commit the caller's transaction.
      const res = await conn.execute<{ r: number }>(
        `DECLARE h VARCHAR2(128);
         BEGIN
           DBMS_LOCK.ALLOCATE_UNIQUE_AUTONOMOUS(:name, h);
           :r := DBMS_LOCK.REQUEST(h, DBMS_LOCK.X_MODE, 0, FALSE);
         END;`,
        { name: lock, r: { dir: oracleDriver().BIND_OUT, type: oracleDriver().NUMBER } },
      );
      const r = Number((res.outBinds as { r: number }).r);
      if (r === 0 || r === 4) break; // 0 granted, 4 already held by this session
      if (Date.now() >= deadline) {
        throw new Error(
          `capture source "${this.source.name}": pump ${pump} of staging ${this.names.schema}.${this.names.staging} ` +
            `is held by another session (waited ${CDC_DEFAULTS.pumpLockWaitMs} ms)`,
        );
      }
      await new Promise((resolve) => setTimeout(resolve, CDC_DEFAULTS.pumpLockRetryMs));
    }
    this.pumpsHeld.add(pump);
  }

  async claim(
    pump: number,
    pumps: number,
    limit: number,
    excludeKeys?: ReadonlySet<string>,
  ): Promise<StagedChange[]> {
    checkClaimArgs(pump, pumps, limit);
    if (!this.pumpsHeld.has(pump)) await this.holdPump(pump);
    const conds: string[] = [];
    const binds: Record<string, unknown> = {};
    if (pumps > 1) {
      conds.push(`MOD("KEY_HASH", ${pumps}) = :pump`);
      binds.pump = pump;
    }
    if (excludeKeys !== undefined && excludeKeys.size > 0) {
      const names = [...excludeKeys].map((k, i) => {
        binds[`x${i}`] = k;
        return `:x${i}`;
      });
      conds.push(`"KEY" NOT IN (${names.join(', ')})`);
    }
    const rows = await this.query(
      `SELECT ${STAGED_COLUMNS} FROM ${this.stagingRef()} ${conds.length > 0 ? `WHERE ${conds.join(' AND ')}` : ''}
       ORDER BY "ID" FOR UPDATE SKIP LOCKED`,
      binds as oracledb.BindParameters,
      limit,
    );
    return rows.map(stagedChange);
  }

  async ack(stagingIds: string[]): Promise<number> {
    if (stagingIds.length === 0) return 0;
    const [list, binds] = idBinds(stagingIds);
    return this.run(`DELETE FROM ${this.stagingRef()} WHERE "ID" IN (${list})`, binds, true);
  }

  async recordFailure(
    stagingId: string,
    attempts: number,
    nextAttemptMs: number,
    error: string,
  ): Promise<void> {
    const [id, binds] = idBinds([stagingId]);
    await this.run(
      `UPDATE ${this.stagingRef()} SET "ATTEMPTS" = :attempts, "NEXT_ATTEMPT_MS" = :next_ms, "LAST_ERROR" = :err WHERE "ID" = ${id}`,
      { ...binds, attempts, next_ms: nextAttemptMs, err: error.slice(0, 4000) },
      true,
    );
  }

  async park(stagingId: string, attempts: number, error: string, nowMs: number): Promise<boolean> {
    const [id, binds] = idBinds([stagingId]);
    return this.inTransaction(async () => {
      await this.run(
        `MERGE INTO ${this.errorsRef()} e
         USING (SELECT ${STAGED_COLUMNS} FROM ${this.stagingRef()} WHERE "ID" = ${id}) s ON (e."ID" = s."ID")
         WHEN MATCHED THEN UPDATE SET e."ATTEMPTS" = :attempts, e."ERROR" = :err, e."PARKED_TIME_MS" = :now_ms
         WHEN NOT MATCHED THEN INSERT ("ID", "TABLE_NAME", "OP", "KEY", "KEY_HASH", "BEFORE", "AFTER", "TXID", "TIME_MS", "ATTEMPTS", "ERROR", "PARKED_TIME_MS")
           VALUES (s."ID", s."TABLE_NAME", s."OP", s."KEY", s."KEY_HASH", s."BEFORE", s."AFTER", s."TXID", s."TIME_MS", :attempts, :err, :now_ms)`,
        { ...binds, attempts, err: error.slice(0, 4000), now_ms: nowMs },
      );
      const deleted = await this.run(`DELETE FROM ${this.stagingRef()} WHERE "ID" = ${id}`, binds);
      return deleted > 0;
    });
  }

  async heldKeys(pump: number, pumps: number): Promise<HeldKeys> {
    checkClaimArgs(pump, pumps, 1);
    const retrying = new Map<string, number>();
    const parked = new Set<string>();
    const binds = { n: pumps, p: pump };
    for (const r of await this.query(
      `SELECT "KEY", MIN("NEXT_ATTEMPT_MS") AS T FROM ${this.stagingRef()} WHERE "ATTEMPTS" > 0 AND MOD("KEY_HASH", :n) = :p GROUP BY "KEY"`,
      binds,
    ))
      retrying.set(String(r.KEY), Number(r.T ?? 0));
    for (const r of await this.query(
      `SELECT DISTINCT "KEY" FROM ${this.errorsRef()} WHERE MOD("KEY_HASH", :n) = :p`,
      binds,
    ))
      parked.add(String(r.KEY));
    return { retrying, parked };
  }

  async listParked(selection: ParkedSelection = {}, limit = 1000): Promise<ParkedChange[]> {
    const [where, binds] = selectionWhere(selection);
    const rows = await this.query(
      `SELECT ${STAGED_COLUMNS}, "ERROR", "PARKED_TIME_MS" FROM ${this.errorsRef()} ${where} ORDER BY "ID"`,
      binds as oracledb.BindParameters,
      Math.max(1, Math.trunc(limit)),
    );
    return rows.map((r) => ({
      ...stagedChange(r),
      error: String(r.ERROR),
      parkedTimeMs: Number(r.PARKED_TIME_MS),
    }));
  }

  async parkedCount(): Promise<number> {
    const rows = await this.query(`SELECT COUNT(*) AS N FROM ${this.errorsRef()}`);
    return Number(rows[0]?.N ?? 0);
  }

  async requeue(selection: ParkedSelection = {}): Promise<number> {
    const [where, binds] = selectionWhere(selection);
    return this.inTransaction(async () => {
      const rows = await this.query(
        `SELECT "ID" FROM ${this.errorsRef()} ${where} FOR UPDATE`,
        binds as oracledb.BindParameters,
      );
      if (rows.length === 0) return 0;
      const [list, idb] = idBinds(rows.map((r) => String(r.ID)));
      // The original id keeps the change ahead of every later change of its key (ids only grow).
      await this.run(
        `INSERT INTO ${this.stagingRef()} (${STAGED_COLUMNS})
         SELECT "ID", "TABLE_NAME", "OP", "KEY", "KEY_HASH", "BEFORE", "AFTER", "TXID", "TIME_MS", 0 FROM ${this.errorsRef()} WHERE "ID" IN (${list})`,
        idb,
      );
      return this.run(`DELETE FROM ${this.errorsRef()} WHERE "ID" IN (${list})`, idb);
    });
  }

  async purge(selection: ParkedSelection = {}): Promise<number> {
    const [where, binds] = selectionWhere(selection);
    return this.run(
      `DELETE FROM ${this.errorsRef()} ${where}`,
      binds as oracledb.BindParameters,
      true,
    );
  }

  /** The columns of `table` (OWNER.TABLE or a bare name of the owner); [] when not found. */
  async introspect(table: string): Promise<OracleColumn[]> {
    return introspectOracleTable(await this.open(), table, this.owner);
  }

  async describeTable(table: string): Promise<{ live: string[]; installed: string[] | null }> {
    const conn = await this.open();
    const live = (await introspectOracleTable(conn, table, this.owner)).map((c) => c.name);
    const text = await this.query(
      `SELECT TEXT FROM ALL_SOURCE WHERE OWNER = :o AND NAME = :n AND TYPE = 'TRIGGER' ORDER BY LINE`,
      { o: this.names.schema, n: oracleTriggerName(this.names, table, this.owner) },
    );
    const source = text.map((r) => String(r.TEXT)).join('');
    return { live, installed: text.length === 0 ? null : oracleImageColumnsOf(source) };
  }

  /** Staged and parked counts per table, oldest capture time (for the operations layer's probe). */
  async countsByTable(): Promise<{
    staged: { table_name: string; n: number; oldest: number | null }[];
    parked: { table_name: string; n: number; oldest: null }[];
  }> {
    const staged = await this.query(
      `SELECT "TABLE_NAME", COUNT(*) AS N, MIN("TIME_MS") AS OLDEST FROM ${this.stagingRef()} GROUP BY "TABLE_NAME"`,
    );
    const parked = await this.query(
      `SELECT "TABLE_NAME", COUNT(*) AS N FROM ${this.errorsRef()} GROUP BY "TABLE_NAME"`,
    );
    return {
      staged: staged.map((r) => ({
        table_name: String(r.TABLE_NAME),
        n: Number(r.N),
        oldest: r.OLDEST === null ? null : Number(r.OLDEST),
      })),
      parked: parked.map((r) => ({
        table_name: String(r.TABLE_NAME),
        n: Number(r.N),
        oldest: null,
      })),
    };
  }

  async installationId(): Promise<string> {
    const exists = await this.query(
      'SELECT 1 AS X FROM ALL_TABLES WHERE OWNER = :o AND TABLE_NAME = :t',
      { o: this.names.schema, t: this.names.installation },
    );
    if (exists.length === 0) return '';
    const rows = await this.query(
      `SELECT "ID" FROM ${oracleRef(this.names, this.names.installation)} FETCH FIRST 1 ROWS ONLY`,
    );
    const id = rows[0]?.ID;
    return typeof id === 'string' ? id : '';
  }

  async stagedCount(): Promise<number> {
    const rows = await this.query(`SELECT COUNT(*) AS N FROM ${this.stagingRef()}`);
    return Number(rows[0]?.N ?? 0);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    let conn: oracledb.Connection;
    try {
      conn = await this.ready;
    } catch {
      return; // connect failed: nothing to close
    }
    await conn.close().catch(() => undefined);
  }
}
