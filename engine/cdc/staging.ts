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
 * | attempts   | delayed retry rounds that failed, 0 on insert                             |
 * | next_attempt_ms | earliest time of the next delayed retry (ms since the epoch) or NULL |
 * | last_error | the target's last refusal text, or NULL                                   |
 *
 * The error table `<staging>_errors` has the columns id (a plain primary key holding the
 * original staging id) through attempts, plus `error` (text, the refusal that parked it) and
 * `parked_time_ms`. Rows are moved there by StagingClient.park after the error policy's last
 * attempt (cases C4, C10) and back into staging, under their original id, by requeue.
 *
 * Installation id: staging ids are unique only while the staging table lives; a staging table
 * created again (a fresh database, `sluice uninstall --drop-staging` then `install`) counts from 1
 * again while the target (a queue's data directory, a Kafka topic) may still hold records of the
 * earlier one. So install keeps a one-row table `<staging>_installation` (column `id`: 16 random
 * hex characters, {@link newInstallationId}) next to the staging table, and writes a new id
 * whenever it creates the staging table (or finds the row missing). Every record a pump ships
 * carries the id (the Change's `installation`, the JSON `source.installation`, the Kafka header
 * `sluice.installation`) and a pump's start reconciles only against records carrying the current
 * id: a record of another installation, or of a version without the id, never matches, so it can
 * never cause an unshipped row to be deleted (the price: a crash between append and delete just
 * before an upgrade ships that one batch twice).
 */
import { randomBytes } from 'node:crypto';
import type { CaptureSource, StagedChange } from './config.js';
import type { LoadHooks } from './initial-load.js';

/** Name of the installation-id table of staging table `stagingTable` (see the module comment). */
export function installationTableName(stagingTable: string): string {
  return `${stagingTable}_installation`;
}

/** A new installation id: 16 lowercase hex characters (64 random bits, node:crypto). */
export function newInstallationId(): string {
  return randomBytes(8).toString('hex');
}

/** A change parked in the error table. */
export interface ParkedChange extends StagedChange {
  /** The target's refusal that parked it. */
  error: string;
  /** When it was parked, ms since the Unix epoch. */
  parkedTimeMs: number;
}

/** Which parked changes an errors operation applies to. `ids` absent: all of them. */
export interface ParkedSelection {
  /** Staging ids (decimal text). */
  ids?: string[];
  /** Only changes parked before this time, ms since the epoch. */
  parkedBeforeMs?: number;
}

/** Keys of one pump that must not be claimed now (see StagingClient.heldKeys). */
export interface HeldKeys {
  /** Key -> next_attempt_ms of its head change, which failed and waits for a delayed retry. */
  retrying: Map<string, number>;
  /** Keys with a change in the error table. */
  parked: Set<string>;
}

/** Options of {@link StagingClient.uninstall}. */
export interface UninstallOptions {
  /**
   * Also drop the staging and error tables (losing unshipped and parked rows) and every other
   * object install created (the installation-id table; PostgreSQL: the key hash function, and
   * the capture schema when
   * install created it and nothing else is left in it). Default false.
   */
  dropStaging?: boolean;
}

/** What StagingClient.describeTable reports about one captured table. */
export interface TableDescription {
  /** The columns the table has now, in order; empty when it does not exist. */
  live: string[];
  /** The columns the installed capture puts in the images; null when none is installed. */
  installed: string[] | null;
  /** The capture schema (database on MariaDB) whose triggers were looked at; absent on SQLite and Oracle. */
  captureSchema?: string;
  /**
   * Captured operations of the table with no (enabled) trigger of this source's capture schema,
   * so their changes are staged nowhere for this source: dropped by hand, or replaced by another
   * capture schema's install under the names of versions before the schema was in them. Absent
   * when the dialect does not check it (SQLite, Oracle).
   */
  triggersMissing?: string[];
  /**
   * PostgreSQL: the key columns the installed triggers key on, in key order, each with its name
   * at install and its name now (found by attribute number, so a rename is followed; null when
   * the column was dropped). Absent when the triggers key on no column or the dialect does not
   * record it.
   */
  key?: { installed: string; live: string | null }[];
  /**
   * True when the installed triggers render the images from the table's current columns once
   * its columns changed (PostgreSQL, a table that captures all columns, installed with the
   * column-count check): a column added since install is captured already, without install.
   * Absent or false: the triggers name their columns (SQLite, MariaDB, listed columns), so an
   * added column is captured only after `sluice install` regenerates them.
   */
  capturesAddedColumns?: boolean;
}

/**
 * A connection to one capture source's database. Methods must not be called concurrently on
 * one client except claim/ack from a single pump loop; give each pump its own client.
 */
export interface StagingClient {
  readonly source: CaptureSource;
  /** The dialect's initial-load hooks (engine/cdc/initial-load.ts); absent: no initial loads. */
  readonly load?: LoadHooks;
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
   * Rows whose key is in `excludeKeys` are skipped (held keys: see the pump's error handling).
   * Throws `Error` on bad arguments; PostgreSQL also throws when another session holds the pump.
   * `excludeIds` (staging ids, decimal text) are skipped too, but only by a client whose
   * {@link StagingClient.claimSkipsIds} is true; others ignore it.
   */
  claim(
    pump: number,
    pumps: number,
    limit: number,
    excludeKeys?: ReadonlySet<string>,
    excludeIds?: readonly string[],
  ): Promise<StagedChange[]>;
  /**
   * True when claim() honours `excludeIds`: the pump may then claim its next batch while the
   * previous one, still staged, is being made durable (engine/cdc/pump.ts "Pipelined claim").
   */
  readonly claimSkipsIds?: boolean;
  /**
   * Records a failed delayed-retry round of a staged change: sets attempts, next_attempt_ms and
   * last_error. The change stays staged. Unknown ids are ignored.
   */
  recordFailure(
    stagingId: string,
    attempts: number,
    nextAttemptMs: number,
    error: string,
  ): Promise<void>;
  /**
   * Moves a staged change into the error table with its final round count `attempts`, `error`
   * and parked_time_ms = `nowMs`, in one transaction. Returns false when the id was no longer
   * staged.
   */
  park(stagingId: string, attempts: number, error: string, nowMs: number): Promise<boolean>;
  /** Keys of `pump` of `pumps` with a change waiting for a delayed retry or parked. */
  heldKeys(pump: number, pumps: number): Promise<HeldKeys>;
  /** Parked changes, lowest staging id first, at most `limit` (default 1000). */
  listParked(selection?: ParkedSelection, limit?: number): Promise<ParkedChange[]>;
  /** Number of parked changes. */
  parkedCount(): Promise<number>;
  /**
   * Moves parked changes back into staging under their original staging id with attempts 0, so
   * they are shipped again before any later change of their key. Returns how many.
   */
  requeue(selection?: ParkedSelection): Promise<number>;
  /** Deletes parked changes for good. Returns how many. */
  purge(selection?: ParkedSelection): Promise<number>;
  /**
   * Deletes the given staging rows; call only once the target durably holds them. Ids that are
   * no longer staged are ignored (ack is idempotent). Returns the number of rows deleted.
   */
  ack(stagingIds: string[]): Promise<number>;
  /**
   * The columns `table` has now in the database (empty when it does not exist), and the columns
   * its installed capture triggers put in the images (null when none are installed), and which
   * captured operations have no trigger of this source's capture schema: what `sluice check
   * --live` compares to report dropped, renamed and new columns and missing triggers. Optional.
   */
  describeTable?(table: string): Promise<TableDescription>;
  /**
   * The installation id install stored (see the module comment), or '' when there is none
   * (capture installed by a version without it and not installed again): then a pump reconciles
   * against nothing.
   */
  installationId(): Promise<string>;
  /** Number of rows currently staged (all pumps). For tests and statistics. */
  stagedCount(): Promise<number>;
  /** Closes the connection. Idempotent. */
  close(): Promise<void>;
}
