/**
 * Worker side of the journal tail benchmark (bench/journal.ts): tails a queue from its start
 * until an empty record (the end sentinel), touching every record, then posts how long it took.
 * workerData: { dir, notifier? }. Posts 'ready' once the tailer is open, then a TailResult.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { performance } from 'node:perf_hooks';
import { Tailer } from '../engine/journal/index.js';

/** Message the worker posts when done. Times are performance.timeOrigin-based ms. */
export interface TailResult {
  records: number;
  bytes: number;
  firstAtMs: number;
  lastAtMs: number;
  parks: number;
}

const WAIT_TIMEOUT_MS = 30_000;

const { dir, notifier } = workerData as { dir: string; notifier?: SharedArrayBuffer };
const t = Tailer.open({ dir, notifier });
parentPort!.postMessage('ready');
let records = 0;
let bytes = 0;
let firstAtMs = 0;
let done = false;
while (!done && t.waitForAppend(WAIT_TIMEOUT_MS)) {
  for (let r = t.next(); r; r = t.next()) {
    if (records === 0) firstAtMs = performance.timeOrigin + performance.now();
    if (r.bytes.length === 0) {
      done = true;
      break;
    }
    records++;
    bytes += r.bytes.length + r.bytes[0];
  }
}
const result: TailResult = {
  records,
  bytes,
  firstAtMs,
  lastAtMs: performance.timeOrigin + performance.now(),
  parks: t.stats.parks,
};
t.close();
parentPort!.postMessage(result);
