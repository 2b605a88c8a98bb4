/**
 * MariaDB side of the cdc test setup (not a test file itself): a private database per test
 * (random suffix) and its capture database `<name>_sluice`, both dropped by destroy(), and
 * writer connections of the application under capture.
 * Server: SLUICE_MARIADB_URL without a database (default mariadb://root@127.0.0.1:3306).
 */
import { randomBytes } from 'node:crypto';
import mysql from 'mysql2/promise';
import type { AppDb } from './cdc-helpers.js';

export const MARIADB_URL = (
  process.env.SLUICE_MARIADB_URL ?? 'mariadb://root@127.0.0.1:3306'
).replace(/\/$/, '');

/** mysql2 options of the server in MARIADB_URL, optionally with a database. */
export function mariaDbOptions(database?: string): mysql.ConnectionOptions {
  const u = new URL(MARIADB_URL);
  return {
    host: u.hostname,
    port: u.port === '' ? 3306 : Number(u.port),
    user: decodeURIComponent(u.username),
    password: decodeURIComponent(u.password),
    charset: 'utf8mb4',
    multipleStatements: true,
    supportBigNumbers: true,
    bigNumberStrings: true,
    dateStrings: true,
    ...(database !== undefined ? { database } : {}),
  };
}

async function mariaAppDb(database: string, cleanup: (() => Promise<void>) | null): Promise<AppDb> {
  const conn = await mysql.createConnection(mariaDbOptions(database));
  conn.on('error', () => undefined);
  let closed = false;
  const self: AppDb = {
    dialect: 'mariadb',
    // Capture's own database beside the test's, so tests never share one.
    ref: {
      dialect: 'mariadb',
      url: `${MARIADB_URL}/${database}`,
      captureSchema: `${database}_sluice`,
    },
    async exec(sql) {
      await conn.query(sql);
    },
    async query<T>(sql: string) {
      return (await conn.query(sql))[0] as T[];
    },
    async connect() {
      return mariaAppDb(database, null);
    },
    async close() {
      if (!closed) {
        closed = true;
        await conn.end();
      }
    },
    async destroy() {
      await self.close();
      if (cleanup) await cleanup();
    },
  };
  return self;
}

/** A fresh database `sluice_cdc_<hex>` and a writer connection to it. */
export async function createMariaAppDb(prefix = 'sluice_cdc_'): Promise<AppDb> {
  const database = `${prefix}${randomBytes(6).toString('hex')}`;
  const admin = await mysql.createConnection(mariaDbOptions());
  await admin.query(`CREATE DATABASE \`${database}\` CHARACTER SET utf8mb4`);
  await admin.end();
  return mariaAppDb(database, async () => {
    const c = await mysql.createConnection(mariaDbOptions());
    // The guards' foreign keys would refuse dropping a captured table first.
    await c.query(
      `SET foreign_key_checks = 0; DROP DATABASE IF EXISTS \`${database}\`; DROP DATABASE IF EXISTS \`${database}_sluice\``,
    );
    await c.end();
  });
}
