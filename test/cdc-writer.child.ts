/**
 * Worker-thread writer for the cdc tests: a second SQLite connection in its own thread, so a
 * blocking better-sqlite3 write can wait on the database lock while the test thread goes on.
 *
 * workerData:
 *  - { mode: 'exec', file, sql }: runs `sql`, posts { type: 'done', waitedMs }.
 *  - { mode: 'updates', file, keys, transactions, seed }: `transactions` transactions, each
 *    BEGIN IMMEDIATE + 1..3 `UPDATE kv SET v = v + 1 WHERE k = ?` on random keys; posts
 *    { type: 'done', updates }.
 * Posts { type: 'started' } first.
 */
import { parentPort, workerData } from 'node:worker_threads';
import Database from 'better-sqlite3';

type Job =
  | { mode: 'exec'; file: string; sql: string }
  | { mode: 'updates'; file: string; keys: number; transactions: number; seed: number };

const job = workerData as Job;
const db = new Database(job.file, { timeout: 20_000 });
parentPort!.postMessage({ type: 'started' });
if (job.mode === 'exec') {
  const t0 = Date.now();
  db.exec(job.sql);
  parentPort!.postMessage({ type: 'done', waitedMs: Date.now() - t0 });
} else {
  let s = job.seed >>> 0 || 1;
  // xorshift32: reproducible key choice per writer.
  const rnd = (n: number) => {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    return s % n;
  };
  const upd = db.prepare('UPDATE kv SET v = v + 1 WHERE k = ?');
  let updates = 0;
  const tx = db.transaction((keys: number[]) => {
    for (const k of keys) updates += upd.run(k).changes;
  });
  for (let i = 0; i < job.transactions; i++) {
    const n = 1 + rnd(3);
    const keys: number[] = [];
    for (let j = 0; j < n; j++) keys.push(1 + rnd(job.keys));
    tx.immediate(keys);
  }
  parentPort!.postMessage({ type: 'done', updates });
}
db.close();
