/**
 * Main-thread side of the TPC-B workload: N clients as N worker threads
 * (tpcb-client.worker.ts), each with its own SQLite connection.
 */
import { Worker } from 'node:worker_threads';
import { TPCB_DEFAULTS } from './pgbench.js';
import type { TpcbWorkerData, TpcbWorkerMessage } from './tpcb-messages.js';

/**
 * Options of {@link runTpcb}.
 * - file: SQLite database holding pgbench's tables (createPgbenchSchema).
 * - clients: worker threads, 1..TPCB_DEFAULTS.clientsMax.
 * - durationMs: how long each client keeps starting transactions.
 * - scale: pgbench scale; default the row count of pgbench_branches.
 * - busyTimeoutMs / busyRetriesMax: see TPCB_DEFAULTS.
 * - seed: base seed; client i uses seed + i. Default random.
 * - signal: when it aborts, the clients start no further transaction and runTpcb resolves with
 *   what ran so far (early stop, e.g. on Ctrl-C).
 */
export interface TpcbOptions {
  file: string;
  clients: number;
  durationMs: number;
  scale?: number;
  busyTimeoutMs?: number;
  busyRetriesMax?: number;
  seed?: number;
  signal?: AbortSignal;
}

/** Totals over all clients. */
export interface TpcbResult {
  /** Committed transactions. */
  transactions: number;
  /** Transactions abandoned after their SQLITE_BUSY retries. */
  errors: number;
  /** SQLITE_BUSY retries in total. */
  busyRetries: number;
}

/**
 * Runs pgbench's TPC-B (sort of) with `clients` concurrent worker threads for durationMs (or until
 * options.signal aborts) and resolves with the totals. Rejects with the first client's error if any client fails (the
 * others still run to the end). Throws `Error` on bad options.
 */
export async function runTpcb(options: TpcbOptions): Promise<TpcbResult> {
  const { file, clients, durationMs } = options;
  if (typeof file !== 'string' || file.length === 0)
    throw new Error('file must be a non-empty path');
  if (!Number.isInteger(clients) || clients < 1 || clients > TPCB_DEFAULTS.clientsMax) {
    throw new Error(
      `clients must be an integer in [1, ${TPCB_DEFAULTS.clientsMax}], clients=${clients}`,
    );
  }
  if (!Number.isFinite(durationMs) || durationMs < 0)
    throw new Error(`durationMs must be >= 0, durationMs=${durationMs}`);
  const stopBuffer = new SharedArrayBuffer(4);
  const stopFlag = new Int32Array(stopBuffer);
  const onAbort = () => Atomics.store(stopFlag, 0, 1);
  if (options.signal?.aborted) onAbort();
  options.signal?.addEventListener('abort', onAbort, { once: true });
  const results = await Promise.allSettled(
    Array.from({ length: clients }, (_, i) => {
      const data: TpcbWorkerData = {
        file,
        durationMs,
        scale: options.scale,
        seed: options.seed === undefined ? undefined : options.seed + i,
        busyTimeoutMs: options.busyTimeoutMs ?? TPCB_DEFAULTS.busyTimeoutMs,
        busyRetriesMax: options.busyRetriesMax ?? TPCB_DEFAULTS.busyRetriesMax,
        stop: stopBuffer,
      };
      return new Promise<TpcbResult>((resolve, reject) => {
        const worker = new Worker(new URL('./tpcb-client.worker.js', import.meta.url), {
          workerData: data,
        });
        let settled = false;
        worker.once('message', (m: TpcbWorkerMessage) => {
          settled = true;
          if (m.type === 'result') resolve(m.result);
          else {
            // The message alone (callers print one line); the worker's stack for SLUICE_DEBUG-style use.
            const e = new Error(`tpcb client ${i}: ${m.message}`);
            if (m.stack) e.stack = `Error: ${e.message}\n  worker stack: ${m.stack}`;
            reject(e);
          }
        });
        worker.once('error', (err) => {
          settled = true;
          reject(err);
        });
        worker.once('exit', (code) => {
          if (!settled)
            reject(new Error(`tpcb client ${i} exited with code ${code} before reporting`));
        });
      });
    }),
  );
  options.signal?.removeEventListener('abort', onAbort);
  const total: TpcbResult = { transactions: 0, errors: 0, busyRetries: 0 };
  for (const r of results) {
    if (r.status === 'rejected') throw r.reason;
    total.transactions += r.value.transactions;
    total.errors += r.value.errors;
    total.busyRetries += r.value.busyRetries;
  }
  return total;
}
