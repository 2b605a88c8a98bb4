/**
 * The producer side of the SPSC record ring. After Agrona OneToOneRingBuffer (claimCapacity,
 * tryClaim/commit, write); layout and offsets come from layout.ts.
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
  maxRecordBytesFor,
  trailerIndexes,
  typeIndex,
} from './layout.js';

// Hot-path copies of layout.ts values. Node 20's JIT folds a module's own constants into the
// code, but reads an imported binding (or calls an imported helper) through its module cell at
// every use: measured ~0.3 ns per use, and the write path has several per record. Record starts
// are 8-aligned, so a header field's Int32Array index is (recordOffset >> 2) + its word.
const HEADER_BYTES = RECORD_HEADER_BYTES;
const ALIGNMENT_MASK = RECORD_ALIGNMENT_BYTES - 1;
const LENGTH_WORD = lengthIndex(0);
const TYPE_WORD = typeIndex(0);
const PADDING_TYPE = PADDING_TYPE_ID;

/** No claim outstanding. Payload offsets are >= RECORD_HEADER_BYTES, so -1 is free. */
const NO_CLAIM = -1;
/** Mask that clears WAITING_BIT from a position word. */
const POSITION_MASK = ~WAITING_BIT;
const PUBLISH_BATCH_RECORDS_MAX = RING_DEFAULTS.publishBatchRecordsMax;

/**
 * Writes records into a ring made by createRing. Exactly one RingProducer per ring, used from one
 * thread; the consumer may be in another thread (worker) or the same one.
 *
 * Per record the producer does one Atomics.exchange (publishing the tail; the old value tells
 * whether the consumer is parked, so Atomics.notify is called only then); inside
 * beginBatch()/endBatch() one per RING_DEFAULTS.publishBatchRecordsMax records. It loads the
 * consumer's head only when its cached head says the ring looks full.
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
  private readonly closedIndex: number;
  /** Position after the last claimed record (int32, wraps); published by commit. */
  private tail: number;
  /** Last head loaded from the trailer; reloaded only when the ring looks full. */
  private headCache: number;
  private claimedOffset = NO_CLAIM;
  private closed: boolean;
  /** Inside beginBatch()/endBatch(). */
  private batching = false;
  /** Records committed in the current batch and not yet published. */
  private stagedRecords = 0;

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
    this.closedIndex = trailer.closed;
    this.tail = Atomics.load(this.i32, trailer.tailPosition) & POSITION_MASK;
    this.headCache = Atomics.load(this.i32, trailer.headPosition) & POSITION_MASK;
    this.closed = Atomics.load(this.i32, trailer.closed) !== 0;
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
    const recordLength = length + HEADER_BYTES;
    const recordBytes = (recordLength + ALIGNMENT_MASK) & ~ALIGNMENT_MASK;
    const tail = this.tail;
    const recordOffset = tail & this.mask;
    const capacityBytes = this.capacityBytes;
    // Common case first: the record fits before the end of the data area and below the cached
    // head, so no padding and no head load.
    if (
      recordOffset + recordBytes <= capacityBytes &&
      ((tail - this.headCache) | 0) <= capacityBytes - recordBytes
    ) {
      const i32 = this.i32;
      i32[(recordOffset >> 2) + LENGTH_WORD] = recordLength;
      i32[(recordOffset >> 2) + TYPE_WORD] = typeId;
      this.tail = (tail + recordBytes) | 0;
      const offset = recordOffset + HEADER_BYTES;
      this.claimedOffset = offset;
      return offset;
    }
    return this.tryClaimSlow(typeId, recordLength, recordBytes);
  }

  /**
   * tryClaim when the record needs padding before it (it would cross the end of the data area)
   * or the cached head says there may be no space: pads, reloads the head, and publishes staged
   * records before reporting a full ring (-1). Arguments are checked by the caller.
   */
  private tryClaimSlow(typeId: number, recordLength: number, recordBytes: number): number {
    const capacityBytes = this.capacityBytes;
    const tail = this.tail;
    let recordOffset = tail & this.mask;
    const toEndBytes = capacityBytes - recordOffset;
    const paddingBytes = recordBytes > toEndBytes ? toEndBytes : 0;
    const freeBytesMin = paddingBytes + recordBytes;
    if (((tail - this.headCache) | 0) > capacityBytes - freeBytesMin) {
      this.headCache = Atomics.load(this.i32, this.headPositionIndex) & POSITION_MASK;
      if (((tail - this.headCache) | 0) > capacityBytes - freeBytesMin) {
        // Staged records must be visible, or the consumer could never free the space.
        if (this.stagedRecords !== 0) this.publishTail();
        return -1;
      }
    }
    const i32 = this.i32;
    if (paddingBytes !== 0) {
      i32[(recordOffset >> 2) + LENGTH_WORD] = paddingBytes;
      i32[(recordOffset >> 2) + TYPE_WORD] = PADDING_TYPE;
      recordOffset = 0;
    }
    i32[(recordOffset >> 2) + LENGTH_WORD] = recordLength;
    i32[(recordOffset >> 2) + TYPE_WORD] = typeId;
    this.tail = (tail + paddingBytes + recordBytes) | 0;
    const offset = recordOffset + HEADER_BYTES;
    this.claimedOffset = offset;
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
   * Commits the claimed record whose payload starts at `offset` (the value claim/tryClaim
   * returned) and publishes it, with any padding before it: one Atomics.exchange of the tail
   * (seq-cst, so the header and payload written before it are visible to a consumer that loads
   * the new tail). Wakes the consumer if the old tail word says it is parked. Inside a batch
   * (beginBatch) publication is deferred, see there. Throws Error if `offset` is not the
   * outstanding claim.
   */
  commit(offset: number): void {
    if (offset !== this.claimedOffset) {
      throw new Error(
        this.claimedOffset === NO_CLAIM
          ? `commit(offset=${offset}) without an outstanding claim`
          : `commit(offset=${offset}) does not match the claimed offset ${this.claimedOffset}`,
      );
    }
    this.claimedOffset = NO_CLAIM;
    if (this.batching && ++this.stagedRecords < PUBLISH_BATCH_RECORDS_MAX) return;
    this.publishTail();
  }

  /**
   * Starts a batch: until endBatch(), commit() and write() publish only every
   * RING_DEFAULTS.publishBatchRecordsMax records, and the rest at endBatch(). Staged records are
   * also published before a claim has to wait for space (tryClaim returning -1) and by close(),
   * so a batch can never stall the ring; but the consumer does not see them before one of those
   * happens, so end the batch before the producer goes idle. Use it where records come in bursts
   * (e.g. the outputs of one input batch). Throws Error if a batch is already open.
   */
  beginBatch(): void {
    if (this.batching) throw new Error('beginBatch() while a batch is open; call endBatch() first');
    this.batching = true;
  }

  /**
   * Ends the batch begun by beginBatch() and publishes its staged records. Throws Error if no
   * batch is open or a claim is outstanding (commit it first).
   */
  endBatch(): void {
    if (!this.batching) throw new Error('endBatch() without beginBatch()');
    if (this.claimedOffset !== NO_CLAIM) {
      throw new Error(
        `endBatch() while the record claimed at offset ${this.claimedOffset} is ` +
          'not committed; commit it first',
      );
    }
    this.batching = false;
    if (this.stagedRecords !== 0) this.publishTail();
  }

  /**
   * Writes one record: claim (waiting while full), copy `len` bytes of `src` from `srcOff`, commit.
   * Defaults: srcOff = 0, len = src.length - srcOff. Throws Error if the range is outside `src`,
   * or as tryClaim (e.g. "record of N bytes exceeds ring maxRecordBytes=M (capacity C)").
   */
  write(typeId: number, src: Uint8Array, srcOff = 0, len: number = src.length - srcOff): void {
    if (
      !(srcOff >= 0 && len >= 0 && srcOff + len <= src.length) ||
      (srcOff | 0) !== srcOff ||
      (len | 0) !== len
    ) {
      throw new Error(
        `write range [${srcOff}, ${srcOff + len}) is outside src of ` + `${src.length} bytes`,
      );
    }
    // Fast path, tryClaim + commit folded together: no claim outstanding, ring open, valid type,
    // and the record fits before both the end of the data area and the cached head. Anything
    // else goes through claim(), which checks and throws, pads at the wrap, reloads the head and
    // waits.
    const recordLength = len + HEADER_BYTES;
    const recordBytes = (recordLength + ALIGNMENT_MASK) & ~ALIGNMENT_MASK;
    const tail = this.tail;
    const recordOffset = tail & this.mask;
    const capacityBytes = this.capacityBytes;
    if (
      this.claimedOffset === NO_CLAIM &&
      !this.closed &&
      typeId > 0 &&
      (typeId | 0) === typeId &&
      len <= this.maxRecordBytes &&
      recordOffset + recordBytes <= capacityBytes &&
      ((tail - this.headCache) | 0) <= capacityBytes - recordBytes
    ) {
      const i32 = this.i32;
      i32[(recordOffset >> 2) + LENGTH_WORD] = recordLength;
      i32[(recordOffset >> 2) + TYPE_WORD] = typeId;
      copyBytes(this.bytes, recordOffset + HEADER_BYTES, src, srcOff, len);
      this.tail = (tail + recordBytes) | 0;
      if (this.batching && ++this.stagedRecords < PUBLISH_BATCH_RECORDS_MAX) return;
      this.publishTail();
      return;
    }
    this.writeSlow(typeId, src, srcOff, len);
  }

  /**
   * write() when its fast path does not apply: claim (checks and throws, pads at the wrap, reloads
   * the head, waits), copy, commit. A separate method so that write()'s own body is only the
   * fast path.
   */
  private writeSlow(typeId: number, src: Uint8Array, srcOff: number, len: number): void {
    const offset = this.claim(typeId, len);
    copyBytes(this.bytes, offset, src, srcOff, len);
    this.commit(offset);
  }

  /**
   * Ends the stream (and any open batch): sets the closed flag, then publishes the final tail
   * and wakes the consumer, whose isClosed() turns true once it has read every record.
   * Idempotent. Throws Error if a claim is outstanding (commit it first).
   */
  close(): void {
    if (this.claimedOffset !== NO_CLAIM) {
      throw new Error(
        `close() while the record claimed at offset ${this.claimedOffset} is not ` +
          'committed; commit it first',
      );
    }
    if (this.closed) return;
    this.closed = true;
    this.batching = false;
    this.stagedRecords = 0;
    const i32 = this.i32;
    // Closed first: a consumer that parks after the tail exchange below sees it when it
    // re-checks after setting its waiting bit.
    Atomics.store(i32, this.closedIndex, 1);
    Atomics.exchange(i32, this.tailPositionIndex, this.tail);
    Atomics.notify(i32, this.tailPositionIndex);
  }

  /** True once close() was called (by this producer or a previous one on the same ring). */
  isClosed(): boolean {
    return this.closed;
  }

  /**
   * Publishes every committed record: stores the tail with Atomics.exchange and, if the old word
   * carries the consumer's waiting bit, notifies it. Only called with no claim outstanding, so
   * `tail` is the end of the last committed record.
   */
  private publishTail(): void {
    this.stagedRecords = 0;
    const i32 = this.i32;
    const index = this.tailPositionIndex;
    if ((Atomics.exchange(i32, index, this.tail) & WAITING_BIT) !== 0) Atomics.notify(i32, index);
  }

  /**
   * Parks until the consumer moves its head, at most `timeoutMs`. Sets the waiting bit on the
   * head word only if the head is still the one this producer saw (compareExchange), so a head
   * published in between is never missed; the consumer's head exchange then returns the bit and
   * it notifies.
   */
  private parkForSpace(timeoutMs: number): void {
    const i32 = this.i32;
    const index = this.headPositionIndex;
    const seen = this.headCache;
    if (Atomics.compareExchange(i32, index, seen, seen | WAITING_BIT) !== seen) return;
    Atomics.wait(i32, index, seen | WAITING_BIT, timeoutMs);
    Atomics.compareExchange(i32, index, seen | WAITING_BIT, seen);
  }

  private checkClaim(typeId: number, length: number): void {
    if (!(typeId > 0) || (typeId | 0) !== typeId) {
      throw new Error(`typeId must be an integer > 0, typeId=${typeId}`);
    }
    if (!(length >= 0 && length <= this.maxRecordBytes) || (length | 0) !== length) {
      throw new Error(
        length > this.maxRecordBytes
          ? `record of ${length} bytes exceeds ring maxRecordBytes=${this.maxRecordBytes} ` +
              `(capacity ${this.capacityBytes})`
          : `record length must be an integer >= 0, length=${length}`,
      );
    }
    if (this.claimedOffset !== NO_CLAIM) {
      throw new Error(
        `claim while the record claimed at offset ${this.claimedOffset} is not ` +
          'committed; one claim at a time',
      );
    }
    if (this.closed) throw new Error('claim on a closed ring');
  }
}

/**
 * Copies `len` bytes of `src` from `srcOff` to `dst` at `dstOff`. TypedArray.set (a memmove) beats
 * a byte loop even at 64 bytes on shared memory (measured: 15 ns vs 72 ns); subarray() allocates,
 * so it is only used for a partial source.
 */
function copyBytes(
  dst: Uint8Array,
  dstOff: number,
  src: Uint8Array,
  srcOff: number,
  len: number,
): void {
  if (srcOff === 0 && len === src.length) dst.set(src, dstOff);
  else dst.set(src.subarray(srcOff, srcOff + len), dstOff);
}
