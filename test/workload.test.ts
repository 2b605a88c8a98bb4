/**
 * engine/workload: pgbench's tables and initial data on SQLite, and concurrent TPC-B clients in
 * worker threads keeping pgbench's invariant (history deltas add up to the balances).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { createPgbenchSchema, runTpcb, runTpcbClient } from '../engine/workload/index.js';

function tempDb(): { file: string; db: Database.Database; cleanup: () => void } {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-workload-'));
  const file = join(dir, 'bench.db');
  const db = new Database(file);
  db.pragma('journal_mode = WAL');
  return {
    file,
    db,
    cleanup: () => {
      if (db.open) db.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

test('createPgbenchSchema(scale 1) matches pgbench -i: 1 branch, 10 tellers, 100000 accounts, no history, zero balances', () => {
  const { db, cleanup } = tempDb();
  try {
    const t0 = Date.now();
    createPgbenchSchema(db, 1);
    const loadMs = Date.now() - t0;
    assert.ok(loadMs < 3000, `loaded in ${loadMs} ms`);
    const one = (sql: string) => db.prepare(sql).get();
    assert.equal(
      one(
        'SELECT count(*) AS n, min(bid) AS lo, max(bid) AS hi, sum(bbalance) AS s, count(filler) AS f FROM pgbench_branches',
      ),
      { n: 1, lo: 1, hi: 1, s: 0, f: 0 },
    );
    assert.equal(
      one(
        'SELECT count(*) AS n, min(tid) AS lo, max(tid) AS hi, sum(tbalance) AS s, count(DISTINCT bid) AS b FROM pgbench_tellers',
      ),
      { n: 10, lo: 1, hi: 10, s: 0, b: 1 },
    );
    assert.equal(
      one(
        'SELECT count(*) AS n, min(aid) AS lo, max(aid) AS hi, sum(abalance) AS s, min(length(filler)) AS f FROM pgbench_accounts',
      ),
      { n: 100000, lo: 1, hi: 100000, s: 0, f: 84 },
    );
    assert.equal(one('SELECT count(*) AS n FROM pgbench_history'), { n: 0 });
    const cols = (t: string) =>
      (db.prepare(`SELECT name FROM pragma_table_info('${t}')`).all() as { name: string }[]).map(
        (r) => r.name,
      );
    assert.equal(cols('pgbench_branches'), ['bid', 'bbalance', 'filler']);
    assert.equal(cols('pgbench_tellers'), ['tid', 'bid', 'tbalance', 'filler']);
    assert.equal(cols('pgbench_accounts'), ['aid', 'bid', 'abalance', 'filler']);
    assert.equal(cols('pgbench_history'), ['tid', 'bid', 'aid', 'delta', 'mtime', 'filler']);
  } finally {
    cleanup();
  }
});

test('createPgbenchSchema(scale 3) assigns tellers and accounts to branches like pgbench', () => {
  const { db, cleanup } = tempDb();
  try {
    createPgbenchSchema(db, 3);
    assert.equal(
      db.prepare('SELECT bid, count(*) AS n FROM pgbench_tellers GROUP BY bid ORDER BY bid').all(),
      [
        { bid: 1, n: 10 },
        { bid: 2, n: 10 },
        { bid: 3, n: 10 },
      ],
    );
    assert.equal(
      db
        .prepare(
          'SELECT bid, min(aid) AS lo, max(aid) AS hi FROM pgbench_accounts GROUP BY bid ORDER BY bid',
        )
        .all(),
      [
        { bid: 1, lo: 1, hi: 100000 },
        { bid: 2, lo: 100001, hi: 200000 },
        { bid: 3, lo: 200001, hi: 300000 },
      ],
    );
    assert.throws(
      () => createPgbenchSchema(db, 0),
      /scale must be an integer in \[1, 100\], scale=0/,
    );
  } finally {
    cleanup();
  }
});

test('runTpcbClient runs the TPC-B transaction: each one moves delta into an account, a teller, a branch and history', () => {
  const { db, cleanup } = tempDb();
  try {
    createPgbenchSchema(db, 1);
    const r = runTpcbClient(db, { transactionsMax: 500, seed: 42 });
    assert.equal(r, { transactions: 500, errors: 0, busyRetries: 0 });
    const h = db
      .prepare(
        'SELECT count(*) AS n, sum(delta) AS s, min(delta) AS lo, max(delta) AS hi, min(mtime) AS t FROM pgbench_history',
      )
      .get() as { n: number; s: number; lo: number; hi: number; t: string };
    assert.is(h.n, 500);
    assert.ok(h.lo >= -5000 && h.hi <= 5000, `delta in [-5000, 5000]: ${h.lo}..${h.hi}`);
    assert.match(h.t, /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$/);
    const sums = db
      .prepare(
        'SELECT (SELECT sum(abalance) FROM pgbench_accounts) AS a, (SELECT sum(tbalance) FROM pgbench_tellers) AS t, (SELECT sum(bbalance) FROM pgbench_branches) AS b',
      )
      .get();
    assert.equal(sums, { a: h.s, t: h.s, b: h.s });
  } finally {
    cleanup();
  }
});

test('a failing runTpcb client rejects with a one-line message (the stack apart)', async () => {
  const { file, db, cleanup } = tempDb();
  try {
    db.close(); // no pgbench tables
    const e = await runTpcb({ file, clients: 1, durationMs: 100 }).then(
      () => null,
      (err: Error) => err,
    );
    assert.ok(e, 'rejected');
    assert.match(e!.message, /^tpcb client 0: .*no such table: pgbench_branches$/);
    assert.not.match(e!.message, '\n');
    assert.match(e!.stack ?? '', 'worker stack:');
  } finally {
    cleanup();
  }
});

test('runTpcb stops early when its signal aborts, with the totals of what ran', async () => {
  const { file, db, cleanup } = tempDb();
  try {
    createPgbenchSchema(db, 1);
    db.close();
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 500);
    const t0 = Date.now();
    const r = await runTpcb({ file, clients: 2, durationMs: 60_000, signal: ac.signal });
    assert.ok(Date.now() - t0 < 10_000, `took ${Date.now() - t0} ms`);
    assert.ok(r.transactions > 0, `transactions=${r.transactions}`);
    const check = new Database(file, { readonly: true });
    try {
      assert.is(
        check.prepare('SELECT count(*) FROM pgbench_history').pluck().get() as number,
        r.transactions,
      );
    } finally {
      check.close();
    }
  } finally {
    cleanup();
  }
});

test('runTpcb with 2 client workers for 2 s commits transactions; per branch sum(history.delta) = bbalance', async () => {
  const { file, db, cleanup } = tempDb();
  try {
    createPgbenchSchema(db, 2);
    db.close();
    const r = await runTpcb({ file, clients: 2, durationMs: 2000 });
    assert.ok(r.transactions > 100, `transactions=${r.transactions}`);
    assert.is(r.errors, 0);
    const check = new Database(file, { readonly: true });
    try {
      assert.is(
        check.prepare('SELECT count(*) FROM pgbench_history').pluck().get() as number,
        r.transactions,
      );
      const branches = check
        .prepare(
          `SELECT b.bid, b.bbalance, coalesce((SELECT sum(delta) FROM pgbench_history h WHERE h.bid = b.bid), 0) AS deltas
                                      FROM pgbench_branches b ORDER BY b.bid`,
        )
        .all() as { bid: number; bbalance: number; deltas: number }[];
      assert.is(branches.length, 2);
      for (const b of branches) assert.is(b.bbalance, b.deltas, `branch ${b.bid}`);
      const tellers = check
        .prepare(
          `SELECT count(*) FROM pgbench_tellers t
                                     WHERE t.tbalance <> coalesce((SELECT sum(delta) FROM pgbench_history h WHERE h.tid = t.tid), 0)`,
        )
        .pluck()
        .get();
      assert.is(tellers, 0, 'teller balances match history too');
    } finally {
      check.close();
    }
  } finally {
    cleanup();
  }
});

test.run();
