/**
 * The producer side of the SPSC record ring. After Agrona OneToOneRingBuffer (claimCapacity,
 * tryClaim/commit, write); layout and offsets come from layout.ts.
 */
import { BackoffIdleStrategy, type IdleStrategy, type Parker } from './idle.js';
import {
  PADDING_TYPE_ID, RECORD_HEADER_BYTES, alignedLength, capacityBytesOf, lengthIndex,
  maxRecordBytesFor, payloadOffset, recordOffsetOfPayload, trailerIndexes, typeIndex,
} from './layout.js';

/** No claim outstanding. Payload offsets are >= RECORD_HEADER_BYTES, so -1 is free. */
const NO_CLAIM = -1;

/**
 * Writes records into a ring made by createRing. Exactly one RingProducer per ring, used from one
 * thread; the consumer may be in another thread (worker) or the same one.
 *
 * Per record the producer does one Atomics.store (publishing the length) and one Atomics.load
 * (the consumer-waiting flag). It reads the consumer's head with Atomics.load only when its cached
 * head says the ring looks full, and calls Atomics.notify only when the consumer is parked.
 *
 * Usage, zero-copy: `const at = p.claim(type, n); build n bytes in p.bytes at [at, at + n);
 * p.commit(at)`. With a copy: `p.write(type, src)`. At end of stream: `p.close()`.
 */
export class RingProducer {
  /** View over the data area (capacityBytes long); claimed payloads are written into it. */
  readonly bytes: Uint8Array;
  /** Largest payload, bytes, a record may carry: capacityBytes / 8 (Agrona maxMsgLength). */
  readonly maxRecordBytes: number;
  /** Data area size, bytes (a power of two). */
  readonly capacityBytes: number;

  private readonly i32: Int32Array;
  private readonly mask: number;
  private readonly idleStrategy: IdleStrategy;
  private readonly parker: Parker;
  private readonly headPositionIndex: number;
  private readonly tailPositionIndex: number;
  private readonly consumerWaitingIndex: number;
  private readonly dataSignalIndex: number;
  private readonly closedIndex: number;
  private readonly spaceSignalIndex: number;
  private readonly producerWaitingIndex: number;
  /** Producer position (int32, wraps); the trailer copy is only published on wake and close. */
  private tail: number;
  /** Last head read from the trailer; refreshed only when the ring looks full. */
  private headCache: number;
  private claimedOffset = NO_CLAIM;
  private claimedLength = 0;
  private closed: boolean;

  /**
   * Attaches to `sab` (from createRing) as its producer, continuing at the tail the trailer
   * holds. `idle` is used by claim() while the ring is full (default: BackoffIdleStrategy with
   * RING_DEFAULTS). Throws Error if `sab` was not made by createRing.
   */
  constructor(sab: SharedArrayBuffer, idle: IdleStrategy = new BackoffIdleStrategy()) {
    const capacityBytes = capacityBytesOf(sab);
    const trailer = trailerIndexes(capacityBytes);
    this.capacityBytes = capacityBytes;
    this.maxRecordBytes = maxRecordBytesFor(capacityBytes);
    this.bytes = new Uint8Array(sab, 0, capacityBytes);
    this.i32 = new Int32Array(sab);
    this.mask = capacityBytes - 1;
    this.idleStrategy = idle;
    this.headPositionIndex = trailer.headPosition;
    this.tailPositionIndex = trailer.tailPosition;
    this.consumerWaitingIndex = trailer.consumerWaiting;
    this.dataSignalIndex = trailer.dataSignal;
    this.closedIndex = trailer.closed;
    this.tail = Atomics.load(this.i32, trailer.tailPosition);
    this.headCache = Atomics.load(this.i32, trailer.headPosition);
    this.closed = Atomics.load(this.i32, trailer.closed) !== 0;
    this.spaceSignalIndex = trailer.spaceSignal;
    this.producerWaitingIndex = trailer.producerWaiting;
    this.parker = { park: (timeoutMs: number) => this.parkForSpace(timeoutMs) };
  }

  /**
   * Claims space for a record of `length` payload bytes and type `typeId`, without waiting.
   * Returns the payload's byte offset into `bytes` (the payload is contiguous), or -1 if the
   * ring has no space now. The claim must be published with commit(offset) before the next
   * claim. Throws Error if typeId is not an integer > 0, length is not an integer in
   * [0, maxRecordBytes], a claim is outstanding, or the ring is closed.
   */
  tryClaim(typeId: number, length: number): number {
    this.checkClaim(typeId, length);
    const recordLength = length + RECORD_HEADER_BYTES;
    const recordBytes = alignedLength(recordLength);
    const capacityBytes = this.capacityBytes;
    const tail = this.tail;
    let recordOffset = tail & this.mask;
    const toEndBytes = capacityBytes - recordOffset;
    const paddingBytes = recordBytes > toEndBytes ? toEndBytes : 0;
    // The next record's header is zeroed now, so it must be free too: + RECORD_HEADER_BYTES.
    const freeBytesMin = paddingBytes + recordBytes + RECORD_HEADER_BYTES;
    if (((tail - this.headCache) | 0) > capacityBytes - freeBytesMin) {
      this.headCache = Atomics.load(this.i32, this.headPositionIndex);
      if (((tail - this.headCache) | 0) > capacityBytes - freeBytesMin) return -1;
    }
    const i32 = this.i32;
    if (paddingBytes !== 0) {
      // The record's header at 0 is written before the padding is published, so a consumer
      // that crosses the padding finds a claimed (negative) length, never a stale one.
      i32[typeIndex(0)] = typeId;
      i32[lengthIndex(0)] = -recordLength;
      i32[typeIndex(recordOffset)] = PADDING_TYPE_ID;
      Atomics.store(i32, lengthIndex(recordOffset), paddingBytes);
      recordOffset = 0;
    } else {
      i32[typeIndex(recordOffset)] = typeId;
      i32[lengthIndex(recordOffset)] = -recordLength;
    }
    // Zero the following header before this record is published: the consumer stops there
    // instead of reading a record left from the previous lap.
    i32[lengthIndex((recordOffset + recordBytes) & this.mask)] = 0;
    this.tail = (tail + paddingBytes + recordBytes) | 0;
    const offset = payloadOffset(recordOffset);
    this.claimedOffset = offset;
    this.claimedLength = recordLength;
    return offset;
  }

  /**
   * Claims like tryClaim, waiting with the idle strategy while the ring is full (backpressure:
   * never drops). The wait has no overall bound by design: a consumer that stops reading stalls
   * its producer, and the actor heartbeat reports it. Each park is bounded by the strategy.
   * Throws as tryClaim.
   */
  claim(typeId: number, length: number): number {
    let offset = this.tryClaim(typeId, length);
    if (offset >= 0) return offset;
    const idle = this.idleStrategy;
    idle.reset();
    do {
      idle.idle(0, this.parker);
      offset = this.tryClaim(typeId, length);
    } while (offset < 0);
    idle.reset();
    return offset;
  }

  /**
   * Publishes the claimed record whose payload starts at `offset` (the value claim/tryClaim
   * returned): stores its length with Atomics.store (release), then wakes the consumer if it is
   * parked. Throws Error if `offset` is not the outstanding claim.
   */
  commit(offset: number): void {
    if (offset !== this.claimedOffset) {
      throw new Error(this.claimedOffset === NO_CLAIM
        ? `commit(offset=${offset}) without an outstanding claim`
        : `commit(offset=${offset}) does not match the claimed offset ${this.claimedOffset}`);
    }
    this.claimedOffset = NO_CLAIM;
    const i32 = this.i32;
    Atomics.store(i32, lengthIndex(recordOffsetOfPayload(offset)), this.claimedLength);
    if (Atomics.load(i32, this.consumerWaitingIndex) !== 0) this.wakeConsumer();
  }

  /**
   * Writes one record: claim (waiting while full), copy `len` bytes of `src` from `srcOff`, commit.
   * Defaults: srcOff = 0, len = src.length - srcOff. Throws Error if the range is outside `src`,
   * or as tryClaim (e.g. "record of N bytes exceeds ring maxRecordBytes=M (capacity C)").
   */
  write(typeId: number, src: Uint8Array, srcOff = 0, len: number = src.length - srcOff): void {
    if (!(srcOff >= 0 && len >= 0 && srcOff + len <= src.length) ||
        (srcOff | 0) !== srcOff || (len | 0) !== len) {
      throw new Error(`write range [${srcOff}, ${srcOff + len}) is outside src of ` +
        `${src.length} bytes`);
    }
    const offset = this.claim(typeId, len);
    copyBytes(this.bytes, offset, src, srcOff, len);
    this.commit(offset);
  }

  /**
   * Ends the stream: publishes the final tail, sets the closed flag and wakes the consumer, whose
   * isClosed() turns true once it has read every record. Idempotent. Throws Error if a claim is
   * outstanding (commit it first).
   */
  close(): void {
    if (this.claimedOffset !== NO_CLAIM) {
      throw new Error(`close() while the record claimed at offset ${this.claimedOffset} is not ` +
        'committed; commit it first');
    }
    if (this.closed) return;
    this.closed = true;
    const i32 = this.i32;
    Atomics.store(i32, this.tailPositionIndex, this.tail);
    Atomics.store(i32, this.closedIndex, 1);
    Atomics.add(i32, this.dataSignalIndex, 1);
    Atomics.notify(i32, this.dataSignalIndex);
  }

  /** True once close() was called (by this producer or a previous one on the same ring). */
  isClosed(): boolean {
    return this.closed;
  }

  /**
   * Parks until the consumer moves its head. No lost wake-up: read the signal, raise the waiting
   * flag, re-check the head, then Atomics.wait on the signal; the consumer stores its head, then,
   * if the flag is up, clears it, bumps the signal and notifies.
   */
  private parkForSpace(timeoutMs: number): void {
    const i32 = this.i32;
    const signal = Atomics.load(i32, this.spaceSignalIndex);
    Atomics.store(i32, this.producerWaitingIndex, 1);
    if (Atomics.load(i32, this.headPositionIndex) === this.headCache) {
      Atomics.wait(i32, this.spaceSignalIndex, signal, timeoutMs);
    }
    Atomics.store(i32, this.producerWaitingIndex, 0);
  }

  private wakeConsumer(): void {
    const i32 = this.i32;
    // Clear before signalling: a stale clear racing a new park is harmless because the signal
    // bump that follows changes the counter the new park waits on.
    Atomics.store(i32, this.consumerWaitingIndex, 0);
    Atomics.store(i32, this.tailPositionIndex, this.tail);
    Atomics.add(i32, this.dataSignalIndex, 1);
    Atomics.notify(i32, this.dataSignalIndex);
  }

  private checkClaim(typeId: number, length: number): void {
    if (!(typeId > 0) || (typeId | 0) !== typeId) {
      throw new Error(`typeId must be an integer > 0, typeId=${typeId}`);
    }
    if (!(length >= 0 && length <= this.maxRecordBytes) || (length | 0) !== length) {
      throw new Error(length > this.maxRecordBytes
        ? `record of ${length} bytes exceeds ring maxRecordBytes=${this.maxRecordBytes} ` +
          `(capacity ${this.capacityBytes})`
        : `record length must be an integer >= 0, length=${length}`);
    }
    if (this.claimedOffset !== NO_CLAIM) {
      throw new Error(`claim while the record claimed at offset ${this.claimedOffset} is not ` +
        'committed; one claim at a time');
    }
    if (this.closed) throw new Error('claim on a closed ring');
  }
}

/** Byte copies below this length use a loop; TypedArray.set has a fixed call cost. */
const COPY_LOOP_BYTES_MAX = 64;

function copyBytes(dst: Uint8Array, dstOff: number, src: Uint8Array, srcOff: number,
    len: number): void {
  if (len <= COPY_LOOP_BYTES_MAX) {
    for (let i = 0; i < len; i++) dst[dstOff + i] = src[srcOff + i];
  } else if (srcOff === 0 && len === src.length) {
    dst.set(src, dstOff);
  } else {
    dst.set(src.subarray(srcOff, srcOff + len), dstOff);
  }
}

