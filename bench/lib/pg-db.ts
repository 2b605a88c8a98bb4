/**
 * PostgreSQL helpers shared by the capture benches: one short-lived client per piece of work,
 * and a bench database dropped and created afresh.
 */
import pg from 'pg';

/** Runs `work` on a new client connected to `url` (a postgres:// URL); the client is always ended. */
export async function withPgClient<T>(url: string, work: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return await work(c);
  } finally {
    await c.end();
  }
}

/**
 * Drops (WITH FORCE: open sessions are ended) and creates the database named by `url`'s path,
 * through the server's `postgres` database.
 * @throws Error when the name is not [A-Za-z0-9_]+ (it is put into SQL unquoted-safe).
 */
export async function recreatePgDatabase(url: string): Promise<void> {
  const u = new URL(url);
  const db = decodeURIComponent(u.pathname.slice(1));
  if (!/^[A-Za-z0-9_]+$/.test(db))
    throw new Error(`bench database name must be [A-Za-z0-9_]+, url=${url}`);
  u.pathname = '/postgres';
  await withPgClient(u.toString(), async (c) => {
    await c.query(`DROP DATABASE IF EXISTS "${db}" WITH (FORCE)`);
    await c.query(`CREATE DATABASE "${db}"`);
  });
}
