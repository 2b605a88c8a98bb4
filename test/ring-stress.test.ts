import { Worker } from 'node:worker_threads';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import {
  RingConsumer,
  createIdleStrategy,
  createRing,
  type IdleStrategyConfig,
} from '../engine/ring/index.js';
import {
  CountingIdleStrategy,
  checkPayload,
  payloadSize,
  seqOf,
  typeIdOf,
} from './ring-stress.pattern.js';
import type { StressWorkerData, StressWorkerResult } from './ring-stress.worker.js';

interface StressRun {
  capacityBytes: number;
  count: number;
  producerIdle: IdleStrategyConfig;
  consumerIdle: IdleStrategyConfig;
  pauseEvery?: number;
  pauseMs?: number;
  closeDelayMs?: number;
  /** read() limits, used in turn. */
  readLimits?: number[];
}

interface StressOutcome {
  received: number;
  /** Ring bytes the records took: aligned header + payload. */
  ringBytes: number;
  /** Parks the consumer asked for (ring empty). */
  consumerParks: number;
  elapsedMs: number;
  producer: StressWorkerResult;
  /** performance.now() when the consumer saw isClosed(). */
  closedSeenMs: number;
}

/**
 * Producer in a worker, consumer in this thread. Every record is checked in place: sequence
 * (order, none lost or duplicated), type id, length and every payload byte.
 */
async function runStress(run: StressRun): Promise<StressOutcome> {
  const sab = createRing(run.capacityBytes);
  const idle = new CountingIdleStrategy(createIdleStrategy(run.consumerIdle));
  const consumer = new RingConsumer(sab, idle);
  const workerData: StressWorkerData = {
    sab,
    count: run.count,
    idle: run.producerIdle,
    pauseEvery: run.pauseEvery ?? 0,
    pauseMs: run.pauseMs ?? 0,
    closeDelayMs: run.closeDelayMs ?? 0,
  };
  const worker = new Worker(new URL('./ring-stress.worker.js', import.meta.url), { workerData });
  const done = new Promise<StressWorkerResult>((resolve, reject) => {
    worker.once('message', resolve);
    worker.once('error', reject);
  });
  const sizeMax = consumer.capacityBytes >>> 3;
  const limits = run.readLimits ?? [1 << 16];
  let expected = 0;
  let ringBytes = 0;
  let failure = '';
  const handler = (typeId: number, bytes: Uint8Array, offset: number, length: number): void => {
    if (failure !== '') return;
    const seq = expected;
    const size = payloadSize(seq, sizeMax);
    if (seqOf(bytes, offset) !== seq) failure = `seq ${seqOf(bytes, offset)} where ${seq} expected`;
    else if (typeId !== typeIdOf(seq)) failure = `record ${seq}: typeId ${typeId}`;
    else if (length !== size) failure = `record ${seq}: length ${length} where ${size} expected`;
    else if (offset + length > bytes.length) failure = `record ${seq} not contiguous`;
    else {
      const bad = checkPayload(bytes, offset, seq, size);
      if (bad >= 0) failure = `record ${seq}: payload byte ${bad} wrong`;
    }
    expected++;
    ringBytes += (8 + length + 7) & ~7;
  };
  const startMs = performance.now();
  let turn = 0;
  // The worker runs on its own thread, so this loop may block the event loop until close.
  while (!consumer.isClosed()) {
    const n = consumer.read(handler, limits[turn++ % limits.length]);
    if (failure !== '') break;
    if (n === 0) consumer.waitForData(1000);
  }
  const closedSeenMs = performance.now();
  const producer = await done;
  await worker.terminate();
  assert.is(failure, '', failure);
  return {
    received: expected,
    ringBytes,
    consumerParks: idle.parks,
    elapsedMs: closedSeenMs - startMs,
    producer,
    closedSeenMs,
  };
}

test('10 million records of varying size cross threads in order with exact content', async () => {
  const count = 10_000_000;
  const out = await runStress({
    capacityBytes: 1 << 16,
    count,
    producerIdle: { kind: 'backoff' },
    consumerIdle: { kind: 'backoff' },
    readLimits: [1 << 16, 1, 7, 100],
  });
  assert.is(out.received, count);
  // Positions are int32: more than 2 GiB of records makes them wrap past 2^31.
  assert.ok(out.ringBytes > 2 ** 31, `ringBytes=${out.ringBytes}`);
  console.log(
    `  stress: ${count} records, ${(out.ringBytes / 2 ** 20).toFixed(0)} MiB of ring ` +
      `in ${out.elapsedMs.toFixed(0)} ms; parks: producer ${out.producer.parks}, ` +
      `consumer ${out.consumerParks}`,
  );
});

test('no lost wake-up: parked sides with 10 s park timeouts never sleep to the timeout', async () => {
  // Any lost wake-up would stall one side for a full 10 s park; the run takes well under that.
  const count = 200_000;
  const out = await runStress({
    capacityBytes: 1 << 12,
    count,
    producerIdle: { kind: 'park', parkMs: 10_000 },
    consumerIdle: { kind: 'park', parkMs: 10_000 },
    pauseEvery: 2_000,
    pauseMs: 1,
    readLimits: [3, 1 << 16],
  });
  assert.is(out.received, count);
  assert.ok(out.elapsedMs < 9_000, `took ${out.elapsedMs.toFixed(0)} ms`);
  // The scenario must really park both sides many times, or it proves nothing.
  assert.ok(out.producer.parks > 100, `producer parks=${out.producer.parks}`);
  assert.ok(out.consumerParks > 50, `consumer parks=${out.consumerParks}`);
  console.log(
    `  parking: ${count} records in ${out.elapsedMs.toFixed(0)} ms; parks: producer ` +
      `${out.producer.parks}, consumer ${out.consumerParks}`,
  );
});

test('waitForData returns promptly when the producer closes from another thread', async () => {
  const out = await runStress({
    capacityBytes: 1 << 12,
    count: 10,
    producerIdle: { kind: 'backoff' },
    consumerIdle: { kind: 'park', parkMs: 10_000 },
    closeDelayMs: 200,
  });
  assert.is(out.received, 10);
  // Consumer waits with waitForData(1000) and 10 s parks; close must cut that short.
  assert.ok(out.elapsedMs < 900, `closed seen after ${out.elapsedMs.toFixed(0)} ms`);
});

test.run();
