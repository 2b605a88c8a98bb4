/**
 * engine/cdc: trigger-based change data capture.
 *
 * Design after MOVEX CDC: per-dialect triggers write every captured row change into a staging
 * table in the same transaction as the change; pumps claim staged rows, append them to their
 * target, then delete them. Pieces: config model (config.ts), trigger DDL per dialect from the
 * config plus column introspection (sqlite.ts, postgres.ts), the staging client (claim/ack,
 * staging.ts), and the pump core (pump.ts), which knows nothing of the journal.
 *
 * Ordering guarantee:
 *  - Per key, events are delivered in commit order, each exactly once into the sink (with the
 *    pump core's start() reconciliation). Why: the key's pump is fixed (keyHash(key) % pumps), it
 *    claims in staging-id order and acks before claiming again; and for one key, staging-id order
 *    is commit order, because writers of one key are serialized (PostgreSQL row locks and unique
 *    index waits; the SQLite database lock) and the id is drawn inside the writing transaction
 *    while that lock is held. This needs the key to be unique-constrained (default: primary key).
 *  - Across keys: no guarantee. On SQLite ids follow commit order for all keys (one writer at a
 *    time), so each pump's output happens to be in commit order; on PostgreSQL it is not.
 *    (Not implemented: a PostgreSQL cross-key barrier that holds back rows of transactions newer
 *    than the claim snapshot's xmin, so a consumer could know no lower id can still appear.)
 *  - A truncate event (PostgreSQL) has key "*" and travels on that key's pump; it is not ordered
 *    against row events of other keys.
 *  - A change the target refuses holds its key (case C4, pump.ts steps 3-5): none of the key's
 *    later changes is claimed before it is delivered, or parked (then, by default, requeued or
 *    purged: CaptureErrorPolicy.holdKeyWhenParked).
 *
 * Case C1 on PostgreSQL (a lower staging id becomes visible after higher ones were shipped):
 * there is no "id > last shipped" cursor anywhere. A row stays in staging until its pump acks
 * (deletes) it, and every claim reads whatever is staged and visible, lowest id first; a row of a
 * transaction still in flight is invisible to the claim and is returned by the first claim after
 * that transaction commits. Its id is lower than rows already shipped, which is harmless: those
 * rows are other keys (same-key writers would have waited for it), and nothing compares ids.
 *
 * Column values: every before/after/key value is a JSON string of the column's exact text, or
 * JSON null; no value passes through a JS Number (cases C5, C7). Updates that change no captured
 * or key column are suppressed unless `suppressNoopUpdates: false` (case C6).
 */
export {
  CAPTURE_OPERATIONS,
  CDC_DEFAULTS,
  ERROR_POLICY_LIMITS,
  KEY_UPDATE_MODES,
  KEY_STRATEGY_WORDS,
  TRIGGER_LEVELS,
  keyStrategyProblems,
  conditionFor,
  conditionProblems,
  imagesNamed,
  STAGING_NAME_PATTERN,
  resolveErrorPolicy,
  validateCaptureSource,
} from './config.js';
export type {
  CaptureErrorPolicy,
  ConditionsByOp,
  KeyStrategy,
  KeyStrategyProblem,
  KeyUpdateMode,
  CaptureOperation,
  CaptureSource,
  CaptureTable,
  DatabaseRef,
  OracleDatabaseRef,
  StagedChange,
  TriggerLevel,
} from './config.js';
export { keyHash, pumpOfKey } from './key-hash.js';
export type {
  HeldKeys,
  ParkedChange,
  ParkedSelection,
  StagingClient,
  TableDescription,
  UninstallOptions,
} from './staging.js';
export { installationTableName, newInstallationId } from './staging.js';
export type { ColumnInfo, ResolvedTable, UserSqlProbe } from './sql.js';
export {
  resolveTable,
  checkUserSql,
  userSqlRefusals,
  captureTableErrors,
  CaptureTableError,
  CaptureTableErrors,
} from './sql.js';
export {
  SqliteStaging,
  introspectSqliteTable,
  sqliteInstallDdl,
  sqliteStagingDdl,
  sqliteTriggerDdl,
  sqliteTriggerName,
  sqliteUserSqlProbes,
} from './sqlite.js';
export {
  PgStaging,
  introspectPgTable,
  pgFunctionName,
  pgCaptureSchema,
  pgHashFunctionRef,
  pgHashFunctionDdl,
  pgStagingDdl,
  pgTriggerDdl,
  pgTriggerName,
  pgUserSqlProbes,
  pgProbeRunner,
  pgTableSchema,
  PG_FUNCTION_SEARCH_PATH,
} from './postgres.js';
export {
  MariaDbStaging,
  introspectMariaDbTable,
  mariaDbGuardDdl,
  mariaDbHashFunctionDdl,
  mariaDbHashFunctionRef,
  mariaDbStagingDdl,
  mariaDbTriggerDdl,
  mariaDbTriggerName,
  mariaDbUserSqlProbes,
} from './mariadb.js';
export { parseMariaDbUrl, MARIADB_TRUNCATE_REFUSAL } from './mariadb-url.js';
export { OracleStaging, introspectOracleTable, oraclePassword } from './oracle.js';
export {
  oracleCheckTypes,
  oracleGuardDdl,
  oracleInstallDdl,
  oraclePackageDdl,
  oracleStagingDdl,
  oracleTriggerDdl,
  oracleTriggerName,
  oracleUninstallDdl,
  oracleNames,
} from './oracle-ddl.js';
export type { OracleColumn, OracleNames } from './oracle-ddl.js';
export {
  parseOracleUrl,
  ORACLE_TRUNCATE_REFUSAL,
  ORACLE_INITIAL_LOAD_REFUSAL,
} from './oracle-url.js';
export { PumpCore, PUMP_FAULT_ENV, RecordRefusedError, SinkFailures } from './pump.js';
export {
  PumpLoader,
  checkLoads,
  installLoads,
  requestLoad,
  readLoadProgress,
  isMissingTable,
  upgradeLoadTable,
  loadTableDdl,
  chunkKeyOf,
} from './initial-load.js';
export type {
  LoadHooks,
  LoadProgress,
  LoadQuery,
  LoadRead,
  LoadSkipped,
  LoadTable,
  LoadTask,
} from './initial-load.js';
export type { PumpFault, PumpOptions, PumpSink, PumpStats } from './pump.js';

import type { CaptureSource } from './config.js';
import { validateCaptureSource } from './config.js';
import { MariaDbStaging } from './mariadb.js';
import { OracleStaging } from './oracle.js';
import { PgStaging } from './postgres.js';
import { SqliteStaging } from './sqlite.js';
import type { StagingClient } from './staging.js';

/**
 * Opens a staging client for `source` (validated first; throws `Error` listing every config
 * problem). SQLite: opens the file (WAL, busy_timeout). PostgreSQL: connects and sets the
 * search_path to database.schema when given; rejects when the connection fails. MariaDB:
 * connects to the url's database; rejects when the connection fails or the server is not MariaDB.
 * Oracle: connects through node-oracledb thin mode; rejects (naming the source and the Easy
 * Connect string, never the password) when the connection fails.
 * Does not install anything: call install() once per deployment (idempotent).
 */
export async function openStaging(source: CaptureSource): Promise<StagingClient> {
  validateCaptureSource(source);
  if (source.database.dialect === 'sqlite') return new SqliteStaging(source);
  if (source.database.dialect === 'mariadb' || source.database.dialect === 'mysql') {
    const maria = new MariaDbStaging(source);
    try {
      await maria.connected();
    } catch (err) {
      await maria.close();
      throw err;
    }
    return maria;
  }
  if (source.database.dialect === 'oracle') {
    const oracle = new OracleStaging(source);
    try {
      await oracle.connected();
    } catch (err) {
      await oracle.close();
      throw err;
    }
    return oracle;
  }
  const client = new PgStaging(source);
  try {
    await client.stagingSchema();
  } catch (err) {
    await client.close();
    throw err;
  }
  return client;
}
export {
  KafkaPumpSink,
  KAFKA_CAPTURE_HEADERS,
  KAFKA_SINK_DEFAULTS,
  kafkaKeyOf,
} from './kafka-sink.js';
export type { KafkaCaptureRecord, KafkaPumpSinkOptions } from './kafka-sink.js';
export { JournalPumpSink, buildChangeRecord, recentStagingIdsInJournal } from './journal-sink.js';
export type { JournalPumpSinkOptions, JournalPumpTarget } from './journal-sink.js';
export {
  CAPTURE_FORMATS,
  captureJsonValue,
  encodeCaptureJson,
  jsonSourceInfo,
} from './json-format.js';
export type {
  CaptureFormat,
  CaptureJsonSource,
  CaptureJsonValue,
  JsonSourceInfo,
} from './json-format.js';
