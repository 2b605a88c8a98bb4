/**
 * The staging client interface: one connection to a captured database that installs the capture
 * triggers and claims/acks staged rows. Implementations: sqlite.ts, postgres.ts.
 *
 * Staging table layout (both dialects; after MOVEX CDC's trigger -> staging table -> pump design):
 *
 * | column     | meaning                                                                   |
 * |------------|---------------------------------------------------------------------------|
 * | id         | staging id; SQLite INTEGER PRIMARY KEY AUTOINCREMENT, PostgreSQL bigint   |
 * |            | identity; assigned when the trigger fires, never reused                   |
 * | table_name | CaptureTable.table as configured                                          |
 * | op         | insert / update / delete / truncate                                       |
 * | key        | JSON array text of the key values as JSON strings or null; "*" truncate   |
 * | key_hash   | PostgreSQL: sluice_fnv1a32(key), written by the trigger; SQLite: NULL      |
 * |            | (no hash function reachable from a trigger; the claim hashes in JS)       |
 * | before     | JSON object text (old row image) or NULL                                  |
 * | after      | JSON object text (new row image) or NULL                                  |
 * | txid       | PostgreSQL txid_current()::text; SQLite NULL (read back as "")             |
 * | time_ms    | capture time, ms since the Unix epoch                                     |
 * | attempts   | failed shipping attempts, 0 on insert                                     |
 *
 * The error table `<staging>_errors` has the same columns (id is a plain primary key holding the
 * original staging id) plus `error` (text) and `parked_time_ms`; rows are parked there by the
 * error handling of case C10.
 */
import type { CaptureSource, StagedChange } from './config.js';

/** Options of {@link StagingClient.uninstall}. */
export interface UninstallOptions {
  /** Also drop the staging and error tables (losing unshipped rows). Default false. */
  dropStaging?: boolean;
}

/**
 * A connection to one capture source's database. Methods must not be called concurrently on
 * one client except claim/ack from a single pump loop; give each pump its own client.
 */
export interface StagingClient {
  readonly source: CaptureSource;
  /**
   * Creates the staging and error tables and (re)creates every capture trigger from the current
   * config and table columns, in one transaction. Idempotent. Throws on unknown tables/columns,
   * a missing primary key without `key`, or SQL errors (e.g. a bad `condition`).
   */
  install(): Promise<void>;
  /** Drops the capture triggers of the configured tables (and the tables if asked). Idempotent. */
  uninstall(options?: UninstallOptions): Promise<void>;
  /**
   * Up to `limit` staged rows owned by `pump` of `pumps` (keyHash(key) % pumps == pump), in
   * staging-id order. Rows stay in staging until acked; claiming again returns them again. There
   * is no cursor: a lower id that becomes visible late is returned by the next claim (case C1).
   * Throws `Error` on bad arguments; PostgreSQL also throws when another session holds the pump.
   */
  claim(pump: number, pumps: number, limit: number): Promise<StagedChange[]>;
  /**
   * Deletes the given staging rows; call only once the target durably holds them. Ids that are
   * no longer staged are ignored (ack is idempotent). Returns the number of rows deleted.
   */
  ack(stagingIds: string[]): Promise<number>;
  /** Number of rows currently staged (all pumps). For tests and statistics. */
  stagedCount(): Promise<number>;
  /** Closes the connection. Idempotent. */
  close(): Promise<void>;
}
