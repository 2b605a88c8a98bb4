/**
 * The database drivers, each loaded on its first use rather than when a module that can talk to
 * that database is imported: pg, mysql2 and oracledb take about 50 ms of CPU each to load, which
 * every `sluice` command (and every thread importing the capture modules) paid for all three
 * whatever its topology used. All three are CommonJS packages, so they are required
 * synchronously (node:module createRequire) and cached by Node's module cache.
 */
import { createRequire } from 'node:module';
import type pgModule from 'pg';
import type mysqlModule from 'mysql2/promise';
import type oracledbModule from 'oracledb';

const require = createRequire(import.meta.url);

/** node-postgres (`pg`), loaded on the first call. */
export function pgDriver(): typeof pgModule {
  return require('pg') as typeof pgModule;
}

/** mysql2's promise API (`mysql2/promise`, used for MariaDB), loaded on the first call. */
export function mysqlDriver(): typeof mysqlModule {
  return require('mysql2/promise') as typeof mysqlModule;
}

/** node-oracledb (thin mode), loaded on the first call. */
export function oracleDriver(): typeof oracledbModule {
  return require('oracledb') as typeof oracledbModule;
}
