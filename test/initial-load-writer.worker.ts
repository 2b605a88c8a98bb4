/**
 * Worker-thread writer of the SQLite initial-load test: its own connection in its own thread, so
 * it writes while the test thread's pumps run. Updates (90%), deletes (5%) and inserts of new ids
 * (5%) on `items` until the Int32 at index 0 of `stop` is 1; posts { type: 'done', writes }.
 * workerData: { file, rows, seed, stop: SharedArrayBuffer }.
 */
import { parentPort, workerData } from 'node:worker_threads';
import Database from 'better-sqlite3';

const { file, rows, seed, stop } = workerData as {
  file: string;
  rows: number;
  seed: number;
  stop: SharedArrayBuffer;
};
const flag = new Int32Array(stop);
const db = new Database(file, { timeout: 20_000 });
const update = db.prepare('UPDATE items SET n = n + ?, note = ? WHERE id = ?');
const del = db.prepare('DELETE FROM items WHERE id = ?');
const insert = db.prepare('INSERT INTO items (id, n, note) VALUES (?, 1, ?)');
let s = seed >>> 0 || 1;
const rnd = (n: number) => {
  s ^= s << 13;
  s >>>= 0;
  s ^= s >>> 17;
  s ^= s << 5;
  s >>>= 0;
  return s % n;
};
let writes = 0;
while (Atomics.load(flag, 0) === 0) {
  const k = rnd(100);
  const id = 1 + rnd(rows);
  if (k < 90) update.run(1 + rnd(9), `w${seed}-${writes}`, id);
  else if (k < 95) del.run(id);
  else insert.run(rows + seed * 1_000_000 + writes, 'new');
  writes++;
  // A short pause: the writer must not starve the pumps of the write lock.
  if (writes % 20 === 0) Atomics.wait(flag, 0, 0, 1);
}
db.close();
parentPort!.postMessage({ type: 'done', writes });
