/**
 * The consumer side of the SPSC record ring. After Agrona OneToOneRingBuffer.read; layout and
 * offsets come from layout.ts.
 */
import { RING_DEFAULTS } from './defaults.js';
import { BackoffIdleStrategy, type IdleStrategy, type Parker } from './idle.js';
import {
  PADDING_TYPE_ID, alignedLength, capacityBytesOf, lengthIndex, payloadOffset, trailerIndexes,
  typeIndex, RECORD_HEADER_BYTES,
} from './layout.js';

/**
 * Receives one record, zero-copy: the payload is `bytes[offset, offset + length)` (contiguous,
 * 8-byte aligned offset), valid only during the call. `bytes` is the consumer's data-area view.
 */
export type RecordHandler =
  (typeId: number, bytes: Uint8Array, offset: number, length: number) => void;

/**
 * Reads records from a ring made by createRing. Exactly one RingConsumer per ring, used from one
 * thread.
 *
 * Per record the consumer does one Atomics.load (the length, acquire); per read() call one
 * Atomics.store of the head and one Atomics.load of the producer-waiting flag. It never reads the
 * producer's tail on the hot path: a positive length is the publication.
 *
 * Usage: `while (!c.isClosed()) { if (c.read(handler) === 0) c.waitForData(timeoutMs); }`
 */
export class RingConsumer {
  /** View over the data area (capacityBytes long); handlers read payloads in place from it. */
  readonly bytes: Uint8Array;
  /** Data area size, bytes (a power of two). */
  readonly capacityBytes: number;

  private readonly i32: Int32Array;
  private readonly mask: number;
  private readonly readBytesMax: number;
  private readonly idleStrategy: IdleStrategy;
  private readonly parker: Parker;
  private readonly headPositionIndex: number;
  private readonly tailPositionIndex: number;
  private readonly producerWaitingIndex: number;
  private readonly spaceSignalIndex: number;
  private readonly consumerWaitingIndex: number;
  private readonly dataSignalIndex: number;
  private readonly closedIndex: number;
  /** Consumer position (int32, wraps); this side is its only writer. */
  private head: number;
  /** performance.now() deadline of the current waitForData, ms. */
  private waitDeadlineMs = 0;

  /**
   * Attaches to `sab` (from createRing) as its consumer, continuing at the head the trailer holds.
   * `idle` is used by waitForData (default: BackoffIdleStrategy with RING_DEFAULTS). Throws Error
   * if `sab` was not made by createRing.
   */
  constructor(sab: SharedArrayBuffer, idle: IdleStrategy = new BackoffIdleStrategy()) {
    const capacityBytes = capacityBytesOf(sab);
    const trailer = trailerIndexes(capacityBytes);
    this.capacityBytes = capacityBytes;
    this.bytes = new Uint8Array(sab, 0, capacityBytes);
    this.i32 = new Int32Array(sab);
    this.mask = capacityBytes - 1;
    this.readBytesMax = capacityBytes / RING_DEFAULTS.readBytesMaxDivisor;
    this.idleStrategy = idle;
    this.headPositionIndex = trailer.headPosition;
    this.tailPositionIndex = trailer.tailPosition;
    this.producerWaitingIndex = trailer.producerWaiting;
    this.spaceSignalIndex = trailer.spaceSignal;
    this.consumerWaitingIndex = trailer.consumerWaiting;
    this.dataSignalIndex = trailer.dataSignal;
    this.closedIndex = trailer.closed;
    this.head = Atomics.load(this.i32, trailer.headPosition);
    this.parker = { park: (timeoutMs: number) => this.parkForData(timeoutMs) };
  }

  /**
   * Delivers up to `limit` committed records (default RING_DEFAULTS.readLimit) to `handler` in
   * order, skipping padding, and returns how many it delivered (0 only if none is ready). A call
   * also stops after the record that brings it past capacityBytes /
   * RING_DEFAULTS.readBytesMaxDivisor bytes, so loop until it returns 0 to drain. The head is stored once
   * per call (Atomics.store), after the batch; a waiting producer is then woken. If `handler`
   * throws, the records before it and the one that threw count as consumed and the error
   * propagates. Throws Error if `limit` is not >= 1.
   */
  read(handler: RecordHandler, limit: number = RING_DEFAULTS.readLimit): number {
    if (!(limit >= 1)) throw new Error(`read limit must be >= 1, limit=${limit}`);
    const i32 = this.i32;
    const bytes = this.bytes;
    const mask = this.mask;
    const readBytesMax = this.readBytesMax;
    const head = this.head;
    let bytesRead = 0;
    let count = 0;
    try {
      while (count < limit) {
        const recordOffset = (head + bytesRead) & mask;
        const recordLength = Atomics.load(i32, lengthIndex(recordOffset));
        if (recordLength <= 0) break;
        bytesRead += alignedLength(recordLength);
        const typeId = i32[typeIndex(recordOffset)];
        if (typeId === PADDING_TYPE_ID) continue;
        count++;
        handler(typeId, bytes, payloadOffset(recordOffset), recordLength - RECORD_HEADER_BYTES);
        // Checked after a record, so a call that found records always delivers at least one.
        if (bytesRead >= readBytesMax) break;
      }
    } finally {
      if (bytesRead !== 0) this.publishHead((head + bytesRead) | 0);
    }
    return count;
  }

  /**
   * True when a record (or padding) is ready at the head, without consuming it. One Atomics.load.
   */
  hasData(): boolean {
    return Atomics.load(this.i32, lengthIndex(this.head & this.mask)) > 0;
  }

  /**
   * Waits up to `timeoutMs` (ms, >= 0) for a record, idling with the idle strategy (parks are
   * woken by the producer's commit or close). Returns true when a record is ready, false on
   * timeout or when the ring is closed and drained (returns promptly on close). Throws Error if
   * `timeoutMs` is negative or NaN.
   */
  waitForData(timeoutMs: number): boolean {
    if (this.hasData()) return true;
    if (!(timeoutMs >= 0)) throw new Error(`waitForData timeoutMs must be >= 0, timeoutMs=${timeoutMs}`);
    if (this.isClosed() || timeoutMs === 0) return false;
    const deadlineMs = performance.now() + timeoutMs;
    this.waitDeadlineMs = deadlineMs;
    const idle = this.idleStrategy;
    idle.reset();
    for (;;) {
      idle.idle(0, this.parker);
      if (this.hasData()) {
        idle.reset();
        return true;
      }
      if (this.isClosed() || performance.now() >= deadlineMs) return false;
    }
  }

  /** True once the producer has closed the ring and every record has been read. */
  isClosed(): boolean {
    const i32 = this.i32;
    // The producer stores its final tail before the closed flag, so tail is exact here.
    return Atomics.load(i32, this.closedIndex) !== 0 &&
      this.head === Atomics.load(i32, this.tailPositionIndex);
  }

  private publishHead(head: number): void {
    const i32 = this.i32;
    this.head = head;
    Atomics.store(i32, this.headPositionIndex, head);
    if (Atomics.load(i32, this.producerWaitingIndex) !== 0) {
      // Clear before signalling: see RingProducer.wakeConsumer.
      Atomics.store(i32, this.producerWaitingIndex, 0);
      Atomics.add(i32, this.spaceSignalIndex, 1);
      Atomics.notify(i32, this.spaceSignalIndex);
    }
  }

  /**
   * Parks until the producer commits or closes, at most `timeoutMs` and never past the current
   * waitForData deadline. No lost wake-up: read the signal, raise the waiting flag, re-check the
   * head record and the closed flag, then Atomics.wait on the signal; the producer publishes,
   * then, if the flag is up, clears it, bumps the signal and notifies (close always does).
   */
  private parkForData(timeoutMs: number): void {
    const i32 = this.i32;
    const signal = Atomics.load(i32, this.dataSignalIndex);
    Atomics.store(i32, this.consumerWaitingIndex, 1);
    if (!this.hasData() && Atomics.load(i32, this.closedIndex) === 0) {
      const remainingMs = this.waitDeadlineMs - performance.now();
      const parkMs = remainingMs < timeoutMs ? remainingMs : timeoutMs;
      if (parkMs > 0) Atomics.wait(i32, this.dataSignalIndex, signal, parkMs);
    }
    Atomics.store(i32, this.consumerWaitingIndex, 0);
  }
}
