/**
 * The consumer side of the SPSC record ring. After Agrona OneToOneRingBuffer.read; layout and
 * offsets come from layout.ts.
 */
import { RING_DEFAULTS } from './defaults.js';
import { BackoffIdleStrategy, type IdleStrategy, type Parker } from './idle.js';
import {
  PADDING_TYPE_ID,
  RECORD_ALIGNMENT_BYTES,
  RECORD_HEADER_BYTES,
  WAITING_BIT,
  capacityBytesOf,
  lengthIndex,
  trailerIndexes,
  typeIndex,
} from './layout.js';

// Hot-path copies of layout.ts values: Node 20's JIT folds a module's own constants but reads an
// imported binding through its module cell at every use (see producer.ts). Record starts are
// 8-aligned, so a header field's Int32Array index is (recordOffset >> 2) + its word.
const HEADER_BYTES = RECORD_HEADER_BYTES;
const ALIGNMENT_MASK = RECORD_ALIGNMENT_BYTES - 1;
const LENGTH_WORD = lengthIndex(0);
const TYPE_WORD = typeIndex(0);
const PADDING_TYPE = PADDING_TYPE_ID;

/**
 * Receives one record, zero-copy: the payload is `bytes[offset, offset + length)` (contiguous,
 * 8-byte aligned offset), valid only during the call. `bytes` is the consumer's data-area view.
 */
export type RecordHandler = (
  typeId: number,
  bytes: Uint8Array,
  offset: number,
  length: number,
) => void;

/** Mask that clears WAITING_BIT from a position word. */
const POSITION_MASK = ~WAITING_BIT;

/**
 * Reads records from a ring made by createRing. Exactly one RingConsumer per ring, used from one
 * thread.
 *
 * The consumer caches the producer's tail: it loads it (Atomics.load) only after consuming every
 * record below the cached value, then reads headers and payloads with plain loads. Per read()
 * call it publishes its head once (Atomics.exchange; the old value tells whether the producer is
 * parked, so Atomics.notify is called only then).
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
  private readonly closedIndex: number;
  /** Consumer position (int32, wraps); this side is its only writer. */
  private head: number;
  /** Last tail loaded from the trailer: records below it are published. */
  private tailCache: number;
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
    this.closedIndex = trailer.closed;
    this.head = Atomics.load(this.i32, trailer.headPosition) & POSITION_MASK;
    this.tailCache = this.head;
    this.parker = { park: (timeoutMs: number) => this.parkForData(timeoutMs) };
  }

  /**
   * Delivers up to `limit` published records (default RING_DEFAULTS.readLimit) to `handler` in
   * order, skipping padding, and returns how many it delivered (0 only if none is ready). A call
   * also stops after the record that brings it past capacityBytes /
   * RING_DEFAULTS.readBytesMaxDivisor bytes, so loop until it returns 0 to drain. The tail is
   * loaded only if the cached one is used up; the head is published once per call, after the
   * batch, waking a parked producer. If `handler` throws, the records before it and the one that
   * threw count as consumed and the error propagates. Throws Error if `limit` is not >= 1.
   */
  read(handler: RecordHandler, limit: number = RING_DEFAULTS.readLimit): number {
    if (!(limit >= 1)) throw new Error(`read limit must be >= 1, limit=${limit}`);
    const head = this.head;
    let tail = this.tailCache;
    if (tail === head) {
      tail = Atomics.load(this.i32, this.tailPositionIndex) & POSITION_MASK;
      if (tail === head) return 0;
      this.tailCache = tail;
    }
    const i32 = this.i32;
    const bytes = this.bytes;
    const mask = this.mask;
    const availableBytes = (tail - head) | 0;
    const readBytesMax = this.readBytesMax;
    let bytesRead = 0;
    let count = 0;
    try {
      while (count < limit && bytesRead < availableBytes) {
        const recordOffset = (head + bytesRead) & mask;
        const recordLength = i32[(recordOffset >> 2) + LENGTH_WORD];
        bytesRead += (recordLength + ALIGNMENT_MASK) & ~ALIGNMENT_MASK;
        const typeId = i32[(recordOffset >> 2) + TYPE_WORD];
        if (typeId === PADDING_TYPE) continue;
        count++;
        handler(typeId, bytes, recordOffset + HEADER_BYTES, recordLength - HEADER_BYTES);
        // Checked after a record, so a call that found records always delivers at least one.
        if (bytesRead >= readBytesMax) break;
      }
    } finally {
      this.publishHead((head + bytesRead) | 0);
    }
    return count;
  }

  /**
   * True when a record (or padding) is published beyond the head, without consuming it. Loads the
   * tail only when the cached one is used up.
   */
  hasData(): boolean {
    if (this.tailCache !== this.head) return true;
    this.tailCache = Atomics.load(this.i32, this.tailPositionIndex) & POSITION_MASK;
    return this.tailCache !== this.head;
  }

  /**
   * Waits up to `timeoutMs` (ms, >= 0) for a record, idling with the idle strategy (parks are
   * woken by the producer's commit or close). Returns true when a record is ready, false on
   * timeout or when the ring is closed and drained (returns promptly on close). Throws Error if
   * `timeoutMs` is negative or NaN.
   */
  waitForData(timeoutMs: number): boolean {
    if (this.hasData()) return true;
    if (!(timeoutMs >= 0)) {
      throw new Error(`waitForData timeoutMs must be >= 0, timeoutMs=${timeoutMs}`);
    }
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
    // The producer sets closed before its final tail exchange; read in the opposite order, a
    // true closed flag guarantees the tail loaded after it is final.
    return (
      Atomics.load(i32, this.closedIndex) !== 0 &&
      this.head === (Atomics.load(i32, this.tailPositionIndex) & POSITION_MASK)
    );
  }

  private publishHead(head: number): void {
    if (head === this.head) return;
    this.head = head;
    const i32 = this.i32;
    const index = this.headPositionIndex;
    if ((Atomics.exchange(i32, index, head) & WAITING_BIT) !== 0) Atomics.notify(i32, index);
  }

  /**
   * Parks until the producer publishes or closes, at most `timeoutMs` and never past the current
   * waitForData deadline. Sets the waiting bit on the tail word only if the tail is still the
   * head (everything consumed), with compareExchange, so a tail published in between is never
   * missed; then re-checks closed (close sets it before its tail exchange).
   */
  private parkForData(timeoutMs: number): void {
    const i32 = this.i32;
    const index = this.tailPositionIndex;
    const seen = this.head;
    if (Atomics.compareExchange(i32, index, seen, seen | WAITING_BIT) !== seen) return;
    if (Atomics.load(i32, this.closedIndex) === 0) {
      const remainingMs = this.waitDeadlineMs - performance.now();
      const parkMs = remainingMs < timeoutMs ? remainingMs : timeoutMs;
      if (parkMs > 0) Atomics.wait(i32, index, seen | WAITING_BIT, parkMs);
    }
    Atomics.compareExchange(i32, index, seen | WAITING_BIT, seen);
  }
}
