/**
 * pgbench's schema and built-in "TPC-B (sort of)" transaction on MariaDB (mysql2), for the bank
 * job's MariaDB topology. Same tables, initial data and transaction as pgbench.ts (source:
 * PostgreSQL's pgbench), with one difference: pgbench_history gets a primary key column `hid`
 * (AUTO_INCREMENT), because MariaDB capture needs a primary key on every captured table (its
 * TRUNCATE guard references it). Tables are InnoDB.
 */
import type mysql from 'mysql2/promise';
import { mysqlDriver } from '../cdc/drivers.js';
import {
  PGBENCH_ACCOUNTS_PER_BRANCH,
  PGBENCH_SCALE_MAX,
  PGBENCH_TELLERS_PER_BRANCH,
} from './pgbench.js';

/** MariaDB errors after which a TPC-B transaction is rolled back and retried. */
const RETRIED_ERRNOS = new Set([1213 /* deadlock */, 1205 /* lock wait timeout */]);

/** mysql2 options for a `mariadb://user[:password]@host[:port]/database` url. */
export function mariaDbConnectionOptions(url: string): mysql.ConnectionOptions {
  const u = new URL(url);
  return {
    host: u.hostname,
    port: u.port === '' ? 3306 : Number(u.port),
    user: decodeURIComponent(u.username),
    password: decodeURIComponent(u.password),
    database: decodeURIComponent(u.pathname.slice(1)) || undefined,
    charset: 'utf8mb4',
    multipleStatements: true,
  };
}

/** Creates the url's database when it does not exist. */
export async function ensureMariaDbDatabase(url: string): Promise<void> {
  const options = mariaDbConnectionOptions(url);
  const name = options.database;
  if (!name) throw new Error(`MariaDB url names no database: ${url}`);
  const conn = await mysqlDriver().createConnection({ ...options, database: undefined });
  try {
    await conn.query(
      `CREATE DATABASE IF NOT EXISTS \`${name.replaceAll('`', '``')}\` CHARACTER SET utf8mb4`,
    );
  } finally {
    await conn.end();
  }
}

/**
 * Drops and recreates pgbench's four tables in the url's database and loads the initial data for
 * `scale` (INSERT ... SELECT from MariaDB's sequence engine). Drops with foreign_key_checks off:
 * a capture guard of an earlier run would refuse the drop. Throws on a bad scale.
 */
export async function createPgbenchSchemaMariaDb(url: string, scale: number): Promise<void> {
  if (!Number.isInteger(scale) || scale < 1 || scale > PGBENCH_SCALE_MAX) {
    throw new Error(`scale must be an integer in [1, ${PGBENCH_SCALE_MAX}], scale=${scale}`);
  }
  const conn = await mysqlDriver().createConnection(mariaDbConnectionOptions(url));
  try {
    await conn.query(`
      SET foreign_key_checks = 0;
      DROP TABLE IF EXISTS pgbench_accounts, pgbench_branches, pgbench_history, pgbench_tellers;
      SET foreign_key_checks = 1;
      CREATE TABLE pgbench_history (hid bigint NOT NULL AUTO_INCREMENT PRIMARY KEY, tid int, bid int, aid int,
        delta int, mtime timestamp NULL, filler char(22)) ENGINE=InnoDB;
      CREATE TABLE pgbench_tellers (tid int NOT NULL PRIMARY KEY, bid int, tbalance int, filler char(84)) ENGINE=InnoDB;
      CREATE TABLE pgbench_accounts (aid int NOT NULL PRIMARY KEY, bid int, abalance int, filler char(84)) ENGINE=InnoDB;
      CREATE TABLE pgbench_branches (bid int NOT NULL PRIMARY KEY, bbalance int, filler char(88)) ENGINE=InnoDB;
      INSERT INTO pgbench_branches (bid, bbalance) SELECT seq, 0 FROM seq_1_to_${scale};
      INSERT INTO pgbench_tellers (tid, bid, tbalance)
        SELECT seq, (seq - 1) DIV ${PGBENCH_TELLERS_PER_BRANCH} + 1, 0 FROM seq_1_to_${PGBENCH_TELLERS_PER_BRANCH * scale};
      INSERT INTO pgbench_accounts (aid, bid, abalance, filler)
        SELECT seq, (seq - 1) DIV ${PGBENCH_ACCOUNTS_PER_BRANCH} + 1, 0, '' FROM seq_1_to_${PGBENCH_ACCOUNTS_PER_BRANCH * scale};
    `);
  } finally {
    await conn.end();
  }
}

/** Options of {@link runTpcbMariaDb}: `clients` connections, each looping for `durationMs`. */
export interface TpcbMariaDbOptions {
  url: string;
  clients: number;
  durationMs: number;
  scale: number;
  /** Aborting stops the loops after their current transaction. */
  signal?: AbortSignal;
}

/**
 * Runs pgbench's TPC-B transaction (see pgbench.ts) from `clients` connections until
 * `durationMs` has passed or `signal` aborts; a deadlock or lock wait timeout rolls the
 * transaction back and retries it. Resolves with the committed transaction count.
 */
export async function runTpcbMariaDb(o: TpcbMariaDbOptions): Promise<{ transactions: number }> {
  const deadline = Date.now() + o.durationMs;
  const rnd = (lo: number, hi: number) => lo + Math.floor(Math.random() * (hi - lo + 1));
  const client = async (): Promise<number> => {
    const conn = await mysqlDriver().createConnection(mariaDbConnectionOptions(o.url));
    let done = 0;
    try {
      while (Date.now() < deadline && !o.signal?.aborted) {
        const aid = rnd(1, PGBENCH_ACCOUNTS_PER_BRANCH * o.scale);
        const bid = rnd(1, o.scale);
        const tid = rnd(1, PGBENCH_TELLERS_PER_BRANCH * o.scale);
        const delta = rnd(-5000, 5000);
        try {
          await conn.query('BEGIN');
          await conn.query('UPDATE pgbench_accounts SET abalance = abalance + ? WHERE aid = ?', [
            delta,
            aid,
          ]);
          await conn.query('SELECT abalance FROM pgbench_accounts WHERE aid = ?', [aid]);
          await conn.query('UPDATE pgbench_tellers SET tbalance = tbalance + ? WHERE tid = ?', [
            delta,
            tid,
          ]);
          await conn.query('UPDATE pgbench_branches SET bbalance = bbalance + ? WHERE bid = ?', [
            delta,
            bid,
          ]);
          await conn.query(
            'INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (?, ?, ?, ?, CURRENT_TIMESTAMP)',
            [tid, bid, aid, delta],
          );
          await conn.query('COMMIT');
          done++;
        } catch (err) {
          await conn.query('ROLLBACK').catch(() => undefined);
          if (!RETRIED_ERRNOS.has((err as { errno?: number }).errno ?? 0)) throw err;
        }
      }
    } finally {
      await conn.end().catch(() => undefined);
    }
    return done;
  };
  const counts = await Promise.all(Array.from({ length: o.clients }, client));
  return { transactions: counts.reduce((a, b) => a + b, 0) };
}

/** Branch balances and the changed account balances, for the bank job's verification. */
export async function readBalancesMariaDb(url: string): Promise<{
  branches: { bid: number; bbalance: number }[];
  accounts: { aid: number; abalance: number }[];
}> {
  const conn = await mysqlDriver().createConnection(mariaDbConnectionOptions(url));
  try {
    const [branches] = await conn.query<mysql.RowDataPacket[]>(
      'SELECT bid, bbalance FROM pgbench_branches ORDER BY bid',
    );
    const [accounts] = await conn.query<mysql.RowDataPacket[]>(
      'SELECT aid, abalance FROM pgbench_accounts WHERE abalance <> 0',
    );
    return {
      branches: branches.map((r) => ({ bid: Number(r.bid), bbalance: Number(r.bbalance) })),
      accounts: accounts.map((r) => ({ aid: Number(r.aid), abalance: Number(r.abalance) })),
    };
  } finally {
    await conn.end();
  }
}

/** Row count of pgbench_branches (the scale, pgbench's rule), or null when the table is absent. */
export async function keptScaleMariaDb(url: string): Promise<number | null> {
  const conn = await mysqlDriver().createConnection(mariaDbConnectionOptions(url));
  try {
    const [t] = await conn.query<mysql.RowDataPacket[]>(
      `SELECT COUNT(*) AS n FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'pgbench_branches'`,
    );
    if (Number(t[0]?.n) === 0) return null;
    const [r] = await conn.query<mysql.RowDataPacket[]>(
      'SELECT COUNT(*) AS n FROM pgbench_branches',
    );
    return Number(r[0]?.n);
  } finally {
    await conn.end();
  }
}
