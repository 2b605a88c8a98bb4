/**
 * `sluice check --live`: the capture section against the live databases, read only. For every
 * capture source: the database opens (SQLite read only, PostgreSQL with its `schema` as the
 * search_path; Oracle through its staging client's connection), and every captured table exists with every configured column and key column
 * (or, without `key`, a primary key), as `install` would need them, and the user-written SQL
 * (each operation's `condition`, an expression `key`) resolves against the table, by the probes
 * install runs (engine/cdc/sql.ts userSqlProbes: a SELECT that reads no row, in the scope the
 * trigger gives the text; PostgreSQL's in a read-only transaction rolled back, with the capture
 * function's search_path where the trigger has it) on SQLite, PostgreSQL and MariaDB/MySQL;
 * Oracle's is not probed. Nothing is created.
 */
import Database from 'better-sqlite3';
import type pg from 'pg';
import type mysql from 'mysql2/promise';
import { mysqlDriver, pgDriver } from '../engine/cdc/drivers.js';
import { problemAt, type ConfigProblem, type Topology } from '../engine/config/index.js';
import {
  OracleStaging,
  captureTableErrors,
  checkUserSql,
  mariaDbUserSqlProbes,
  pgProbeRunner,
  pgTableSchema,
  pgUserSqlProbes,
  sqliteUserSqlProbes,
  oracleCheckTypes,
  introspectMariaDbTable,
  introspectPgTable,
  introspectSqliteTable,
  parseMariaDbUrl,
  resolveTable,
  type CaptureSource,
  type ColumnInfo,
} from '../engine/cdc/index.js';

/** Introspects one table's columns; [] when it does not exist. */
type Introspect = (table: string) => Promise<ColumnInfo[]>;

/** An open read-only connection to a capture source's database. */
interface LiveDatabase {
  introspect: Introspect;
  /**
   * Further checks of a resolved table (Oracle: column types it can render; the others: the
   * probes of its user-written SQL); throws CaptureTableError (CaptureTableErrors for several).
   */
  verify?: (t: ReturnType<typeof resolveTable>) => void | Promise<void>;
  close(): Promise<void>;
}

async function openLive(source: CaptureSource): Promise<LiveDatabase | null> {
  const db = source.database as CaptureSource['database'] | { dialect: string };
  if (db.dialect === 'sqlite' && 'file' in db) {
    const sqlite = new Database(db.file, { readonly: true, fileMustExist: true });
    return {
      introspect: async (table) => introspectSqliteTable(sqlite, table),
      verify: (t) => checkUserSql(t, sqliteUserSqlProbes(t), (p) => sqlite.prepare(p.sql)),
      close: async () => void sqlite.close(),
    };
  }
  if (db.dialect === 'postgres' && 'url' in db) {
    const client = new (pgDriver().Client)({ connectionString: db.url });
    // A connection error after connect() (server gone) must not be an unhandled 'error'.
    client.on('error', () => {});
    await client.connect();
    try {
      // As the staging client does (SET search_path TO "<schema>"), as a bound parameter.
      const quoted = db.schema === undefined ? null : `"${db.schema.replace(/"/g, '""')}"`;
      if (quoted !== null)
        await client.query("SELECT set_config('search_path', $1, false)", [quoted]);
    } catch (err) {
      await client.end();
      throw err;
    }
    return {
      introspect: (table) => introspectPgTable(client, table),
      verify: async (t) => {
        const schema = (await pgTableSchema(client, t.config.table))!;
        await checkUserSql(t, pgUserSqlProbes(t, schema), pgProbeRunner(client, false));
      },
      close: () => client.end(),
    };
  }
  if (db.dialect === 'oracle') {
    const staging = new OracleStaging(source);
    try {
      await staging.connected();
    } catch (err) {
      await staging.close();
      throw err;
    }
    return {
      introspect: (table) => staging.introspect(table),
      verify: oracleCheckTypes,
      close: () => staging.close(),
    };
  }
  if ((db.dialect === 'mariadb' || db.dialect === 'mysql') && 'url' in db) {
    const url = parseMariaDbUrl(db.url);
    if (typeof url === 'string') throw new Error(url);
    const conn = await mysqlDriver().createConnection({
      host: url.host,
      port: url.port,
      user: url.user,
      password: url.password,
      database: url.database,
      connectTimeout: 10_000,
    });
    // Bare table names are in the URL's database, as the staging client resolves them.
    return {
      introspect: async (table) =>
        (await introspectMariaDbTable(conn as mysql.Connection, url.database, table)).columns,
      verify: (t) =>
        checkUserSql(t, mariaDbUserSqlProbes(url.database, t), (p) => conn.query(p.sql)),
      close: () => conn.end(),
    };
  }
  return null;
}

/**
 * The problems of the capture section against the live databases, each at its field:
 * `capture[i].database.url` / `.file` (cannot connect or open), `capture[i].tables[k].table`
 * (table not found), `.columns[n]` / `.key[n]` (column not found), `.key` (no primary key),
 * `.condition` / `.condition.<op>` / `.key.expression` (the database refuses the SQL: every
 * refused one of a table, each on its own line),
 * on every dialect (MariaDB/MySQL from information_schema, bare names in the URL's database).
 */
export async function liveCaptureProblems(topology: Topology): Promise<ConfigProblem[]> {
  const problems: ConfigProblem[] = [];
  for (const [i, source] of topology.capture.entries()) {
    const field = source.database.dialect === 'sqlite' ? 'file' : 'url';
    let live: LiveDatabase | null;
    try {
      live = await openLive(source);
    } catch (err) {
      problems.push(
        problemAt(
          topology.file,
          ['capture', i, 'database', field],
          `capture source "${source.name}": cannot open the database: ${(err as Error).message}`,
        ),
      );
      continue;
    }
    if (live === null) continue;
    try {
      for (const [k, table] of source.tables.entries()) {
        try {
          const resolved = resolveTable(table, await live.introspect(table.table));
          await live.verify?.(resolved);
        } catch (err) {
          // Every refused probe of the table, each on its own line at its own field.
          const errors = captureTableErrors(err);
          if (errors.length === 0) throw err;
          for (const e of errors) {
            const at = [...e.field.split('.'), ...(e.index === undefined ? [] : [e.index])];
            problems.push(
              problemAt(
                topology.file,
                ['capture', i, 'tables', k, ...at],
                `capture source "${source.name}": ${e.message}`,
              ),
            );
          }
        }
      }
    } finally {
      await live.close();
    }
  }
  return problems;
}
