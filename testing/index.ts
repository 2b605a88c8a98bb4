/**
 * `sluice/testing`: helpers for tests and benchmarks of applications built on Sluice: pgbench's
 * schema and its TPC-B (sort of) transaction as a load generator on SQLite (on PostgreSQL use
 * pgbench itself).
 */
export {
  createPgbenchSchema,
  runTpcb,
  runTpcbClient,
  PGBENCH_ACCOUNTS_PER_BRANCH,
  PGBENCH_SCALE_MAX,
  PGBENCH_TELLERS_PER_BRANCH,
  TPCB_DEFAULTS,
  type TpcbClientOptions,
  type TpcbClientResult,
  type TpcbOptions,
  type TpcbResult,
} from '../engine/workload/index.js';
