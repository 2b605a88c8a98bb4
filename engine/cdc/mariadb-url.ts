/**
 * The MariaDB connection url, checked without connecting. Kept apart from mariadb.ts (which
 * imports the driver and config.ts) so config validation can use it without an import cycle.
 *
 * Shape: `mariadb://user[:password]@host[:port]/database[?option=value...]` (also `mysql://`).
 * The database is required: it holds the staging table, the hash function and the TRUNCATE
 * guards, and unqualified captured table names resolve there.
 */

/** URL schemes accepted for `database.url` of the mariadb dialect. */
export const MARIADB_URL_SCHEMES: readonly string[] = ['mariadb:', 'mysql:'];

/** Parts of a MariaDB url that the staging client uses. */
export interface MariaDbUrl {
  host: string;
  port: number;
  user: string;
  password: string;
  database: string;
}

/**
 * Parses `url`; returns the parts, or a problem text naming what is wrong (never throws).
 * Percent-escapes in user, password and database are decoded.
 */
export function parseMariaDbUrl(url: string): MariaDbUrl | string {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return `must be a url like mariadb://user@host:3306/database, url=${JSON.stringify(url)}`;
  }
  if (!MARIADB_URL_SCHEMES.includes(u.protocol)) {
    return `scheme must be mariadb: or mysql:, got ${JSON.stringify(u.protocol)}`;
  }
  if (u.hostname.length === 0) return 'names no host';
  const database = decodeURIComponent(u.pathname.replace(/^\//, ''));
  if (database.length === 0 || database.includes('/')) {
    return `must name one database as its path (mariadb://user@host/database), url path=${JSON.stringify(u.pathname)}`;
  }
  const port = u.port === '' ? 3306 : Number(u.port);
  return {
    host: u.hostname.replace(/^\[|\]$/g, ''),
    port,
    user: decodeURIComponent(u.username),
    password: decodeURIComponent(u.password),
    database,
  };
}

/** Why `truncate` is refused in a mariadb capture table's operations (config and topology). */
export const MARIADB_TRUNCATE_REFUSAL =
  'truncate is not supported on mariadb (MariaDB has no TRUNCATE trigger; install refuses TRUNCATE of captured tables instead)';
