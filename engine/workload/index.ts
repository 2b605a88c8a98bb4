/**
 * engine/workload: pgbench's schema and TPC-B (sort of) transaction on SQLite, as a load
 * generator for capture (the bank example, benchmarks). On PostgreSQL use pgbench itself.
 */
export {
  createPgbenchSchema,
  runTpcbClient,
  PGBENCH_ACCOUNTS_PER_BRANCH,
  PGBENCH_TELLERS_PER_BRANCH,
  PGBENCH_SCALE_MAX,
  TPCB_DEFAULTS,
} from './pgbench.js';
export type { TpcbClientOptions, TpcbClientResult } from './pgbench.js';
export { runTpcb } from './tpcb.js';
export type { TpcbOptions, TpcbResult } from './tpcb.js';
export type { TpcbWorkerData, TpcbWorkerMessage } from './tpcb-messages.js';
export {
  createPgbenchSchemaMariaDb,
  ensureMariaDbDatabase,
  keptScaleMariaDb,
  readBalancesMariaDb,
  runTpcbMariaDb,
} from './mariadb.js';
export type { TpcbMariaDbOptions } from './mariadb.js';
