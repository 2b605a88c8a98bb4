/**
 * One input generator of the benchmark harness (./index.ts), in a worker thread of its own so
 * that generating never delays the harness's sampling: appends synthetic JSON records to every
 * partition of one queue through openQueueAppender, at a given rate (a token bucket refilled
 * from the clock, checked every millisecond) or as fast as it can, until its duration is over
 * or the harness sets the stop word. Posts `{ type: 'done', records, bytes, threadId }`.
 */
import { workerData, parentPort } from 'node:worker_threads';
import { openQueueAppender } from '../producer/index.js';
import { osThreadId } from '../actor/index.js';
import type { GeneratorData } from './workload.js';
import { keyChooser, recordMaker } from './workload.js';

const data = workerData as GeneratorData;
const stopWord = new Int32Array(data.stop);
const sleepWord = new Int32Array(new SharedArrayBuffer(4));
const appender = openQueueAppender(data.topology, data.queue);
const nextKey = keyChooser(data.keys, data.skew, data.seed);
const make = recordMaker(data.recordBytes, data.template);
const batchMax = 1024;
let records = 0;
let bytes = 0;
const startMs = performance.now();
try {
  for (;;) {
    if (Atomics.load(stopWord, 0) !== 0) break;
    const elapsedMs = performance.now() - startMs;
    if (elapsedMs >= data.durationMs) break;
    const due =
      data.ratePerSecond > 0
        ? Math.floor((data.ratePerSecond * elapsedMs) / 1000) - records
        : batchMax;
    if (due <= 0) {
      Atomics.wait(sleepWord, 0, 0, 1);
      continue;
    }
    const n = Math.min(due, batchMax);
    for (let i = 0; i < n; i++) {
      const key = nextKey();
      const value = make(key, records, Date.now());
      bytes += value.bytes;
      appender.appendJson(key, value.value, { eventTimeMs: Date.now() });
      records++;
    }
    appender.flush();
  }
} finally {
  appender.close();
}
parentPort!.postMessage({ type: 'done', records, bytes, threadId: osThreadId() });
