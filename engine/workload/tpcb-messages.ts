/**
 * Messages between runTpcb (main thread, tpcb.ts) and its client workers
 * (tpcb-client.worker.ts).
 */
import type { TpcbClientResult } from './pgbench.js';

/** workerData of one client worker. */
export interface TpcbWorkerData {
  file: string;
  durationMs: number;
  scale?: number;
  seed?: number;
  busyTimeoutMs: number;
  busyRetriesMax: number;
  /** Int32 stop flag shared with runTpcb (see TpcbClientOptions.stop). */
  stop?: SharedArrayBuffer;
}

/** The one message a client worker posts: its result, or the error that stopped it. */
export type TpcbWorkerMessage =
  { type: 'result'; result: TpcbClientResult } | { type: 'error'; message: string; stack?: string };
