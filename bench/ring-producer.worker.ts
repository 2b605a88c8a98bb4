/**
 * Producer side of bench/ring.ts, run in a worker thread: sends `count` records of
 * `payloadBytes` (first 4 bytes = sequence number, little-endian) over one transport, starting
 * when the main thread raises the start flag, and ending the stream the transport's way.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { RingBuffer } from 'ringbuf.js';
import { RingProducer } from '../engine/ring/index.js';

/** How records travel to the consumer. */
export type Transport = 'ring' | 'ring-batch' | 'postMessage' | 'ringbuf.js';

/** workerData of this worker. */
export interface ProducerWorkerData {
  transport: Transport;
  /** createRing() buffer for 'ring*', RingBuffer storage for 'ringbuf.js', unused otherwise. */
  sab: SharedArrayBuffer;
  /** Int32Array slot 0: 0 until the main thread starts the clock, then 1. */
  control: SharedArrayBuffer;
  count: number;
  payloadBytes: number;
}

/** Messages this worker posts: 'ready' before waiting for the start flag. */
export type ProducerWorkerMessage = 'ready' | Uint8Array;

/** Type id of benchmark records. */
export const BENCH_TYPE_ID = 1;

const data = workerData as ProducerWorkerData;
const port = parentPort!;
const control = new Int32Array(data.control);
const src = new Uint8Array(data.payloadBytes);
for (let i = 4; i < src.length; i++) src[i] = i & 255;

/** Stamps `seq` into the first four payload bytes. */
function stamp(seq: number): void {
  src[0] = seq & 255;
  src[1] = (seq >>> 8) & 255;
  src[2] = (seq >>> 16) & 255;
  src[3] = (seq >>> 24) & 255;
}

/** One write() per record; with `batch`, inside one beginBatch()/endBatch(). */
function runRing(batch: boolean): void {
  const producer = new RingProducer(data.sab);
  if (batch) producer.beginBatch();
  for (let seq = 0; seq < data.count; seq++) {
    stamp(seq);
    producer.write(BENCH_TYPE_ID, src);
  }
  if (batch) producer.endBatch();
  producer.close();
}

function runPostMessage(): void {
  // Structured clone copies each record, as an actor posting events would.
  for (let seq = 0; seq < data.count; seq++) {
    stamp(seq);
    port.postMessage(src);
  }
}

function runRingbuf(): void {
  const ring = new RingBuffer(data.sab, Uint8Array);
  const size = src.length;
  for (let seq = 0; seq < data.count; seq++) {
    stamp(seq);
    // ringbuf.js is a byte stream: wait for room for the whole record (busy spin, as its
    // examples do), so records are never split between pushes.
    while (ring.availableWrite() < size);
    ring.push(src);
  }
}

port.postMessage('ready' satisfies ProducerWorkerMessage);
Atomics.wait(control, 0, 0);
if (data.transport === 'ring') runRing(false);
else if (data.transport === 'ring-batch') runRing(true);
else if (data.transport === 'postMessage') runPostMessage();
else runRingbuf();
