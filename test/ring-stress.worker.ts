/**
 * Producer side of the ring stress tests, run in a worker thread. Writes `count` records (see
 * ring-stress.pattern.ts), alternating zero-copy claim/commit and write(), and runs of 1000
 * records published one by one and in a batch; then closes the ring.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { RingProducer, createIdleStrategy, type IdleStrategyConfig } from '../engine/ring/index.js';
import { CountingIdleStrategy, fillPayload, payloadSize, typeIdOf } from './ring-stress.pattern.js';

/** What the test thread passes in workerData. */
export interface StressWorkerData {
  sab: SharedArrayBuffer;
  count: number;
  idle: IdleStrategyConfig;
  /** Sleep `pauseMs` after every `pauseEvery` records (0 = never), to make the consumer park. */
  pauseEvery: number;
  pauseMs: number;
  /** Sleep this long before close(), ms. */
  closeDelayMs: number;
}

/** What the worker posts back when done. */
export interface StressWorkerResult {
  written: number;
  elapsedMs: number;
  /** Parks the producer asked for (ring full). */
  parks: number;
}

const data = workerData as StressWorkerData;
const idle = new CountingIdleStrategy(createIdleStrategy(data.idle));
const producer = new RingProducer(data.sab, idle);
const sleepWord = new Int32Array(new SharedArrayBuffer(4));
const scratch = new Uint8Array(producer.maxRecordBytes);
const startMs = performance.now();
for (let seq = 0; seq < data.count; seq++) {
  // Every other run of 1000 records goes out in a batch (deferred publication).
  if (seq % 1000 === 0) {
    if ((seq / 1000) % 2 === 1) producer.beginBatch();
    else if (seq > 0) producer.endBatch();
  }
  const size = payloadSize(seq, producer.maxRecordBytes);
  if ((seq & 1) === 0) {
    const offset = producer.claim(typeIdOf(seq), size);
    fillPayload(producer.bytes, offset, seq, size);
    producer.commit(offset);
  } else {
    fillPayload(scratch, 0, seq, size);
    producer.write(typeIdOf(seq), scratch, 0, size);
  }
  if (data.pauseEvery > 0 && seq % data.pauseEvery === data.pauseEvery - 1) {
    Atomics.wait(sleepWord, 0, 0, data.pauseMs);
  }
}
if (data.closeDelayMs > 0) Atomics.wait(sleepWord, 0, 0, data.closeDelayMs);
producer.close();
const result: StressWorkerResult = {
  written: data.count,
  elapsedMs: performance.now() - startMs,
  parks: idle.parks,
};
parentPort!.postMessage(result);
