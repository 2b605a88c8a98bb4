/**
 * Producer side of bench/ring.ts, run in a worker thread: sends `count` records of
 * `payloadBytes` (first 4 bytes = sequence number, little-endian) over one transport, starting
 * when the main thread raises the start flag, and ending the stream the transport's way.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { RingBuffer } from 'ringbuf.js';
import { RingProducer } from '../engine/ring/index.js';
import {
  BARE_PADDING_TYPE_ID,
  BARE_PUBLISH_EVERY_RECORDS,
  BARE_TRAILER_BYTES,
  bareHeadIndex,
  bareTailIndex,
} from './lib/bare-two-thread.js';

/** How records travel to the consumer. */
export type Transport = 'ring' | 'ring-batch' | 'postMessage' | 'ringbuf.js' | 'bare-2t';

/** workerData of this worker. */
export interface ProducerWorkerData {
  transport: Transport;
  /**
   * createRing() buffer for 'ring*', RingBuffer storage for 'ringbuf.js', data area +
   * BARE_TRAILER_BYTES for 'bare-2t', unused for 'postMessage'.
   */
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

/**
 * The bare two-thread reference (lib/bare-two-thread.ts): the ring's record format written with
 * plain stores, one Atomics.store of the tail per BARE_PUBLISH_EVERY_RECORDS records, busy-spin
 * while full (after publishing, so the consumer can free space).
 */
function runBareTwoThread(): void {
  const capacityBytes = data.sab.byteLength - BARE_TRAILER_BYTES;
  const mask = capacityBytes - 1;
  const i32 = new Int32Array(data.sab);
  const bytes = new Uint8Array(data.sab, 0, capacityBytes);
  const tailIndex = bareTailIndex(capacityBytes);
  const headIndex = bareHeadIndex(capacityBytes);
  const recordLength = 8 + src.length;
  const recordBytes = (recordLength + 7) & ~7;
  let tail = 0;
  let headCache = 0;
  let unpublished = 0;
  for (let seq = 0; seq < data.count; seq++) {
    stamp(seq);
    let offset = tail & mask;
    const toEndBytes = capacityBytes - offset;
    const paddingBytes = recordBytes > toEndBytes ? toEndBytes : 0;
    while (((tail - headCache) | 0) > capacityBytes - paddingBytes - recordBytes) {
      if (unpublished !== 0) {
        Atomics.store(i32, tailIndex, tail);
        unpublished = 0;
      }
      headCache = Atomics.load(i32, headIndex);
    }
    if (paddingBytes !== 0) {
      i32[offset >> 2] = paddingBytes;
      i32[(offset >> 2) + 1] = BARE_PADDING_TYPE_ID;
      offset = 0;
    }
    i32[offset >> 2] = recordLength;
    i32[(offset >> 2) + 1] = BENCH_TYPE_ID;
    bytes.set(src, offset + 8);
    tail = (tail + paddingBytes + recordBytes) | 0;
    if (++unpublished === BARE_PUBLISH_EVERY_RECORDS) {
      Atomics.store(i32, tailIndex, tail);
      unpublished = 0;
    }
  }
  Atomics.store(i32, tailIndex, tail);
}

port.postMessage('ready' satisfies ProducerWorkerMessage);
Atomics.wait(control, 0, 0);
if (data.transport === 'ring') runRing(false);
else if (data.transport === 'ring-batch') runRing(true);
else if (data.transport === 'postMessage') runPostMessage();
else if (data.transport === 'bare-2t') runBareTwoThread();
else runRingbuf();
