/**
 * Worker-thread entry of one TPC-B client: opens its own connection to the SQLite file (WAL,
 * busy_timeout), runs runTpcbClient for durationMs and posts one TpcbWorkerMessage.
 */
import { parentPort, workerData } from 'node:worker_threads';
import Database from 'better-sqlite3';
import { runTpcbClient } from './pgbench.js';
import type { TpcbWorkerData, TpcbWorkerMessage } from './tpcb-messages.js';

const data = workerData as TpcbWorkerData;
let message: TpcbWorkerMessage;
try {
  const db = new Database(data.file, { timeout: data.busyTimeoutMs });
  try {
    db.pragma('journal_mode = WAL');
    const result = runTpcbClient(db, {
      durationMs: data.durationMs,
      scale: data.scale,
      seed: data.seed,
      busyRetriesMax: data.busyRetriesMax,
      stop: data.stop ? new Int32Array(data.stop) : undefined,
    });
    message = { type: 'result', result };
  } finally {
    db.close();
  }
} catch (err) {
  message =
    err instanceof Error
      ? { type: 'error', message: err.message, stack: err.stack }
      : { type: 'error', message: String(err) };
}
parentPort!.postMessage(message);
