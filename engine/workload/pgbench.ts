/**
 * pgbench's schema and built-in "TPC-B (sort of)" transaction, on SQLite (better-sqlite3).
 *
 * Source: PostgreSQL's pgbench (src/bin/pgbench/pgbench.c, initCreateTables /
 * initGenerateDataClientSide and the built-in `tpcb-like` script), checked against
 * `pgbench -i -s 1` on PostgreSQL 15 with `\d`:
 *
 *   pgbench_history  (tid int, bid int, aid int, delta int, mtime timestamp, filler char(22))
 *   pgbench_tellers  (tid int not null, bid int, tbalance int, filler char(84))   pk tid
 *   pgbench_accounts (aid int not null, bid int, abalance int, filler char(84))   pk aid
 *   pgbench_branches (bid int not null, bbalance int, filler char(88))            pk bid
 *
 * Initial data per scale unit: 1 branch, 10 tellers (bid = (tid-1)/10 + 1), 100,000 accounts
 * (bid = (aid-1)/100000 + 1), all balances 0, history empty. Fillers: branches and tellers NULL;
 * accounts '' which PostgreSQL's char(84) pads to 84 spaces, so SQLite (no padding) stores 84
 * spaces. SQLite differences: the key columns are declared `INTEGER NOT NULL PRIMARY KEY` (a
 * rowid alias, the fast point lookup; same integer affinity as `int`), and mtime is stored as
 * CURRENT_TIMESTAMP's text 'YYYY-MM-DD HH:MM:SS' (UTC).
 */
import type Database from 'better-sqlite3';

/** Accounts per branch (pgbench `naccounts`). */
export const PGBENCH_ACCOUNTS_PER_BRANCH = 100_000;
/** Tellers per branch (pgbench `ntellers`). */
export const PGBENCH_TELLERS_PER_BRANCH = 10;
/** Largest accepted scale here (100 = 10 M accounts). */
export const PGBENCH_SCALE_MAX = 100;

const ACCOUNT_FILLER = ' '.repeat(84);

/**
 * Drops and recreates pgbench's four tables in `db` and loads the initial data for `scale`, in one
 * transaction with prepared statements (scale 1, 100,010 rows: well under a second).
 * Throws `Error` when scale is not an integer in [1, PGBENCH_SCALE_MAX].
 */
export function createPgbenchSchema(db: Database.Database, scale: number): void {
  if (!Number.isInteger(scale) || scale < 1 || scale > PGBENCH_SCALE_MAX) {
    throw new Error(`scale must be an integer in [1, ${PGBENCH_SCALE_MAX}], scale=${scale}`);
  }
  db.transaction(() => {
    db.exec(`
      DROP TABLE IF EXISTS pgbench_accounts;
      DROP TABLE IF EXISTS pgbench_branches;
      DROP TABLE IF EXISTS pgbench_history;
      DROP TABLE IF EXISTS pgbench_tellers;
      CREATE TABLE pgbench_history (tid int, bid int, aid int, delta int, mtime timestamp, filler char(22));
      CREATE TABLE pgbench_tellers (tid INTEGER NOT NULL PRIMARY KEY, bid int, tbalance int, filler char(84));
      CREATE TABLE pgbench_accounts (aid INTEGER NOT NULL PRIMARY KEY, bid int, abalance int, filler char(84));
      CREATE TABLE pgbench_branches (bid INTEGER NOT NULL PRIMARY KEY, bbalance int, filler char(88));
    `);
    const branch = db.prepare('INSERT INTO pgbench_branches (bid, bbalance) VALUES (?, 0)');
    const teller = db.prepare('INSERT INTO pgbench_tellers (tid, bid, tbalance) VALUES (?, ?, 0)');
    const account = db.prepare(
      'INSERT INTO pgbench_accounts (aid, bid, abalance, filler) VALUES (?, ?, 0, ?)',
    );
    for (let bid = 1; bid <= scale; bid++) branch.run(bid);
    for (let tid = 1; tid <= PGBENCH_TELLERS_PER_BRANCH * scale; tid++) {
      teller.run(tid, Math.floor((tid - 1) / PGBENCH_TELLERS_PER_BRANCH) + 1);
    }
    for (let aid = 1; aid <= PGBENCH_ACCOUNTS_PER_BRANCH * scale; aid++) {
      account.run(aid, Math.floor((aid - 1) / PGBENCH_ACCOUNTS_PER_BRANCH) + 1, ACCOUNT_FILLER);
    }
  })();
}

/**
 * Options of {@link runTpcbClient}.
 * - durationMs: stop starting transactions after this long (ms). At least one of durationMs and
 *   transactionsMax must be given; the first bound reached stops the loop.
 * - transactionsMax: stop after this many committed transactions.
 * - scale: pgbench scale; default: the row count of pgbench_branches (what pgbench does too).
 * - busyRetriesMax: retries of one transaction after SQLITE_BUSY (each after the connection's
 *   busy_timeout already waited) before it counts as an error; default 10.
 * - seed: seed of the xorshift32 generator for aid/bid/tid/delta; default random.
 * - stop: shared flag (element 0); once it is non-zero no further transaction starts (how
 *   runTpcb stops its client threads early).
 */
export interface TpcbClientOptions {
  durationMs?: number;
  transactionsMax?: number;
  scale?: number;
  busyRetriesMax?: number;
  seed?: number;
  stop?: Int32Array;
}

/** What one client loop did. */
export interface TpcbClientResult {
  /** Committed transactions. */
  transactions: number;
  /** Transactions abandoned after busyRetriesMax SQLITE_BUSY retries. */
  errors: number;
  /** SQLITE_BUSY retries taken in total. */
  busyRetries: number;
}

/** Defaults of the workload's bounds, in one place. */
export const TPCB_DEFAULTS = {
  busyRetriesMax: 10,
  /** busy_timeout of the connections runTpcb opens, ms. */
  busyTimeoutMs: 5000,
  /** Largest accepted runTpcb client count. */
  clientsMax: 64,
} as const;

/**
 * Runs pgbench's built-in TPC-B (sort of) transaction in a loop on `db`:
 *
 *   aid random 1..100000*scale, bid random 1..scale, tid random 1..10*scale, delta -5000..5000
 *   BEGIN (IMMEDIATE: take the write lock up front, so concurrent clients wait in busy_timeout
 *          instead of failing on a read-to-write upgrade)
 *   UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;
 *   SELECT abalance FROM pgbench_accounts WHERE aid = :aid;
 *   UPDATE pgbench_tellers SET tbalance = tbalance + :delta WHERE tid = :tid;
 *   UPDATE pgbench_branches SET bbalance = bbalance + :delta WHERE bid = :bid;
 *   INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (:tid, :bid, :aid, :delta, CURRENT_TIMESTAMP);
 *   END
 *
 * A transaction that hits SQLITE_BUSY is rolled back and retried (up to busyRetriesMax).
 * Synchronous: run several clients in worker threads ({@link runTpcb}). Throws `Error` on bad
 * options or on any SQLite error other than SQLITE_BUSY.
 */
export function runTpcbClient(db: Database.Database, options: TpcbClientOptions): TpcbClientResult {
  const { durationMs, transactionsMax } = options;
  if (durationMs === undefined && transactionsMax === undefined)
    throw new Error('runTpcbClient needs durationMs or transactionsMax');
  if (durationMs !== undefined && !(Number.isFinite(durationMs) && durationMs >= 0))
    throw new Error(`durationMs must be >= 0, durationMs=${durationMs}`);
  if (
    transactionsMax !== undefined &&
    !(Number.isInteger(transactionsMax) && transactionsMax >= 0)
  ) {
    throw new Error(`transactionsMax must be an integer >= 0, transactionsMax=${transactionsMax}`);
  }
  const busyRetriesMax = options.busyRetriesMax ?? TPCB_DEFAULTS.busyRetriesMax;
  if (!Number.isInteger(busyRetriesMax) || busyRetriesMax < 0)
    throw new Error(`busyRetriesMax must be an integer >= 0, busyRetriesMax=${busyRetriesMax}`);
  const scale =
    options.scale ?? (db.prepare('SELECT count(*) FROM pgbench_branches').pluck().get() as number);
  if (!Number.isInteger(scale) || scale < 1)
    throw new Error(`scale must be an integer >= 1 (is pgbench_branches empty?), scale=${scale}`);

  const updAccount = db.prepare(
    'UPDATE pgbench_accounts SET abalance = abalance + ? WHERE aid = ?',
  );
  const selAccount = db.prepare('SELECT abalance FROM pgbench_accounts WHERE aid = ?').pluck();
  const updTeller = db.prepare('UPDATE pgbench_tellers SET tbalance = tbalance + ? WHERE tid = ?');
  const updBranch = db.prepare('UPDATE pgbench_branches SET bbalance = bbalance + ? WHERE bid = ?');
  const insHistory = db.prepare(
    'INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (?, ?, ?, ?, CURRENT_TIMESTAMP)',
  );
  const tx = db.transaction((aid: number, bid: number, tid: number, delta: number) => {
    updAccount.run(delta, aid);
    selAccount.get(aid);
    updTeller.run(delta, tid);
    updBranch.run(delta, bid);
    insHistory.run(tid, bid, aid, delta);
  });

  let s = (options.seed ?? Math.floor(Math.random() * 0xffffffff)) >>> 0 || 0x9e3779b9;
  // xorshift32 (Marsaglia): cheap, reproducible with a seed; uniform enough for a workload.
  const random = (min: number, max: number): number => {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    return min + (s % (max - min + 1));
  };

  const deadline = durationMs === undefined ? Infinity : Date.now() + durationMs;
  const result: TpcbClientResult = { transactions: 0, errors: 0, busyRetries: 0 };
  const stop = options.stop;
  while (
    Date.now() < deadline &&
    (transactionsMax === undefined || result.transactions < transactionsMax) &&
    (!stop || Atomics.load(stop, 0) === 0)
  ) {
    const aid = random(1, PGBENCH_ACCOUNTS_PER_BRANCH * scale);
    const bid = random(1, scale);
    const tid = random(1, PGBENCH_TELLERS_PER_BRANCH * scale);
    const delta = random(-5000, 5000);
    for (let attempt = 0; ; attempt++) {
      try {
        tx.immediate(aid, bid, tid, delta);
        result.transactions++;
        break;
      } catch (err) {
        if ((err as { code?: string }).code !== 'SQLITE_BUSY') throw err;
        if (attempt >= busyRetriesMax) {
          result.errors++;
          break;
        }
        result.busyRetries++;
      }
    }
  }
  return result;
}
