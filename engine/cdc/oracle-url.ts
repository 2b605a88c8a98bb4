/**
 * The Oracle connection url, checked without connecting. Kept apart from oracle.ts (which imports
 * the driver) so config validation can use it without an import cycle.
 *
 * Shape: `oracle://user[:password]@host[:port]/service_name` (port default 1521). The path is the
 * service name (an Easy Connect string `host:port/service_name` is built from it). The password
 * may come from the url (percent-escaped; `${VAR}` in a topology file takes it from the
 * environment) or from `database.passwordFile`, not both.
 */

/** URL schemes accepted for `database.url` of the oracle dialect. */
export const ORACLE_URL_SCHEMES: readonly string[] = ['oracle:'];

/** Default Oracle listener port. */
export const ORACLE_DEFAULT_PORT = 1521;

/** Parts of an Oracle url that the staging client uses. */
export interface OracleUrl {
  host: string;
  port: number;
  user: string;
  /** Empty when the url has none (then `passwordFile` gives it). */
  password: string;
  /** The service name (the url's path). */
  service: string;
  /** Easy Connect string `host:port/service`, as node-oracledb's connectString. */
  connectString: string;
}

/**
 * Parses `url`; returns the parts, or a problem text naming what is wrong (never throws).
 * Percent-escapes in user, password and service are decoded.
 */
export function parseOracleUrl(url: string): OracleUrl | string {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return `must be a url like oracle://user@host:1521/service_name, url=${JSON.stringify(redact(url))}`;
  }
  if (!ORACLE_URL_SCHEMES.includes(u.protocol)) {
    return `scheme must be oracle:, got ${JSON.stringify(u.protocol)}`;
  }
  if (u.hostname.length === 0) return 'names no host';
  if (u.username.length === 0)
    return 'names no user (oracle://user@host:1521/service_name); the user is the session the pumps log in as';
  const service = decodeURIComponent(u.pathname.replace(/^\//, ''));
  if (service.length === 0 || service.includes('/')) {
    return `must name one service as its path (oracle://user@host:1521/service_name), url path=${JSON.stringify(u.pathname)}`;
  }
  if (u.search !== '' || u.hash !== '') return 'takes no query or fragment';
  const port = u.port === '' ? ORACLE_DEFAULT_PORT : Number(u.port);
  const host = u.hostname.replace(/^\[|\]$/g, '');
  return {
    host,
    port,
    user: decodeURIComponent(u.username),
    password: decodeURIComponent(u.password),
    service,
    connectString: `${host.includes(':') ? `[${host}]` : host}:${port}/${service}`,
  };
}

/** `url` with its password replaced by `***` (for messages; never log a password). */
export function redact(url: string): string {
  return url.replace(/^(\w+:\/\/[^:/@]*):[^@/]*@/, '$1:***@');
}

/** Why `truncate` is refused in an oracle capture table's operations (config and topology). */
export const ORACLE_TRUNCATE_REFUSAL =
  'truncate is not supported on oracle (Oracle has no TRUNCATE trigger on a table; install adds a BEFORE TRUNCATE schema trigger that refuses TRUNCATE of captured tables instead)';

/** Why `initialLoad` is refused on oracle. */
export const ORACLE_INITIAL_LOAD_REFUSAL =
  'initial load is not implemented on oracle yet (no snapshot hooks); leave it out and load existing rows another way';
