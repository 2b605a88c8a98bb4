/**
 * Binary layout of the record ring: the one module that owns offsets. Every other file asks
 * this one for header fields, alignment and trailer slots instead of adding numbers itself.
 *
 * Protocol after Agrona's OneToOneRingBuffer, RecordDescriptor and RingBufferDescriptor
 * (real-logic/agrona, org.agrona.concurrent.ringbuffer), adapted to JavaScript: int32 positions
 * that wrap, an Int32Array over a SharedArrayBuffer, and Atomics for the ordered accesses.
 *
 * One deliberate difference: Agrona publishes each record by an ordered store of its length and
 * the consumer reads every length with a volatile load. In Node 20 each Atomics call is a builtin
 * call (measured ~8 ns for Atomics.load, ~14 ns for Atomics.store/exchange, against ~1 ns for a
 * plain typed-array access), and JavaScript has no release-only store. So here the tail is the
 * publication point: one Atomics.exchange per committed record on the producer side, one
 * Atomics.load per batch on the consumer side, and plain accesses for headers and payloads.
 *
 * ## Buffer
 *
 * ```
 *   0                                  capacityBytes            capacityBytes + TRAILER_BYTES
 *   +-----------------------------------+--------------------------+
 *   |  data area: records, 8-aligned     |  trailer (counters)      |
 *   +-----------------------------------+--------------------------+
 * ```
 *
 * ## Record (one per claim; offsets relative to the record start, little-endian int32)
 *
 * ```
 *    0                   1                   2                   3
 *    0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
 *   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
 *   |                     length (int32, bytes)                     |  +0  RECORD_LENGTH_OFFSET
 *   +---------------------------------------------------------------+
 *   |                     typeId (int32)                            |  +4  RECORD_TYPE_OFFSET
 *   +---------------------------------------------------------------+
 *   |                     payload (length - 8 bytes)               ...  +8  RECORD_HEADER_BYTES
 *  ...                                                              |
 *   +---------------------------------------------------------------+
 *   |     unused fill up to the next multiple of 8 bytes            |
 *   +---------------------------------------------------------------+
 * ```
 *
 * - `length` counts header + payload, not the alignment fill; `typeId > 0` is a user type.
 * - `PADDING_TYPE_ID` (-1) marks a padding record that fills the space up to the end of the data
 *   area, so that every record is contiguous (a FlatBuffers table can be read in place). A padding
 *   record's length is the span it covers, header included.
 * - Header and payload are written with plain stores; a record becomes visible when the producer
 *   publishes the tail past it (see the trailer). The consumer reads only below the tail it last
 *   loaded, so it never sees a half-written or stale record and needs no per-record Atomics.
 *
 * ## Trailer (byte offsets from `capacityBytes`; the two groups are 128 bytes apart)
 *
 * ```
 *    0                   1                   2                   3
 *    0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
 *   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
 *   |                  tail position (int32)                      |W|  +0   written by producer
 *   +-------------------------------------------------------------+-+
 *   |                  padding to +128                              |
 *   +-------------------------------------------------------------+-+
 *   |                  head position (int32)                      |W|  +128 written by consumer
 *   +-------------------------------------------------------------+-+
 *   |                  closed (0 or 1)                              |  +132 written once by producer
 *   +---------------------------------------------------------------+
 *   |                  padding to +256                              |
 *   +---------------------------------------------------------------+
 * ```
 *
 * - Positions are byte counts since the ring was created, as int32 that wrap (capacity is a power
 *   of two, so `position & (capacity - 1)` is the offset and `(tail - head) | 0` the fill). They
 *   are multiples of 8, which frees the least significant bit (`W`, value 1) for the "waiting"
 *   flag of the side that parks on that word.
 * - The producer publishes records with one `Atomics.exchange(tail, newTail)` per commit (a
 *   seq-cst store that also returns the old word): if the old word had `W` set, the consumer is
 *   parked and gets an `Atomics.notify`. The consumer loads the tail once and consumes every
 *   record below it before loading it again (it caches the tail).
 * - The consumer publishes its head the same way, once per `read()` call, and wakes a parked
 *   producer when the old head word had `W` set. The producer loads the head only when its
 *   cached head says the ring looks full.
 * - To park, a side sets `W` with `Atomics.compareExchange(word, seen, seen | 1)`: it fails if
 *   the other side moved in between (no lost wake-up: there is no window between the check and
 *   the flag), then `Atomics.wait(word, seen | 1, timeoutMs)` and clears `W` again if unchanged.
 * - The two groups sit 128 bytes apart (two 64-byte lines, as Agrona pads) so the adjacent-line
 *   prefetcher does not make the sides' counters share a line. `closed` shares the consumer's
 *   line: the consumer polls it, the producer writes it once.
 */

/** Bytes of the record header: int32 length + int32 typeId. */
export const RECORD_HEADER_BYTES = 8;
/** Byte offset of the int32 length inside a record header. */
export const RECORD_LENGTH_OFFSET = 0;
/** Byte offset of the int32 typeId inside a record header. */
export const RECORD_TYPE_OFFSET = 4;
/** Records start on multiples of this many bytes. */
export const RECORD_ALIGNMENT_BYTES = 8;
/** typeId of a padding record inserted at the wrap; user type ids must be > 0. */
export const PADDING_TYPE_ID = -1;

/** Bytes of one cache line. */
export const CACHE_LINE_BYTES = 64;
/** Distance between the producer-written and consumer-written trailer groups (two lines). */
const TRAILER_GROUP_BYTES = 2 * CACHE_LINE_BYTES;
/** Bytes of the trailer that follows the data area. */
export const TRAILER_BYTES = 2 * TRAILER_GROUP_BYTES;
/** Bit 0 of a position word: the side that parks on that word is waiting. */
export const WAITING_BIT = 1;

/** Smallest data area accepted by createRing, bytes. */
export const CAPACITY_BYTES_MIN = 64;
/**
 * Largest data area, bytes. Positions are int32 and wrap; `(tail - head) | 0` is exact only while
 * the capacity is at most 2^30.
 */
export const CAPACITY_BYTES_MAX = 2 ** 30;

/** Trailer slot byte offsets, relative to the end of the data area. */
const TAIL_POSITION_OFFSET = 0;
const HEAD_POSITION_OFFSET = TRAILER_GROUP_BYTES;
const CLOSED_OFFSET = TRAILER_GROUP_BYTES + 4;

/** Int32Array indexes of the trailer slots for one ring. */
export interface TrailerIndexes {
  /** Tail position | consumer WAITING_BIT. */
  readonly tailPosition: number;
  /** Head position | producer WAITING_BIT. */
  readonly headPosition: number;
  /** 1 once the producer has closed the stream. */
  readonly closed: number;
}

/** Int32Array indexes of the trailer slots for a data area of `capacityBytes`. */
export function trailerIndexes(capacityBytes: number): TrailerIndexes {
  return {
    tailPosition: (capacityBytes + TAIL_POSITION_OFFSET) >> 2,
    headPosition: (capacityBytes + HEAD_POSITION_OFFSET) >> 2,
    closed: (capacityBytes + CLOSED_OFFSET) >> 2,
  };
}

/** Int32Array index of the length field of the record starting at byte `recordOffset`. */
export function lengthIndex(recordOffset: number): number {
  return (recordOffset + RECORD_LENGTH_OFFSET) >> 2;
}

/** Int32Array index of the typeId field of the record starting at byte `recordOffset`. */
export function typeIndex(recordOffset: number): number {
  return (recordOffset + RECORD_TYPE_OFFSET) >> 2;
}

/** Byte offset of the payload of the record starting at byte `recordOffset`. */
export function payloadOffset(recordOffset: number): number {
  return recordOffset + RECORD_HEADER_BYTES;
}

/** Bytes a record of `recordLength` (header + payload) occupies, rounded up to the alignment. */
export function alignedLength(recordLength: number): number {
  return (recordLength + (RECORD_ALIGNMENT_BYTES - 1)) & ~(RECORD_ALIGNMENT_BYTES - 1);
}

/**
 * Largest payload, bytes, for a data area of `capacityBytes`: one eighth of it, as Agrona's
 * maxMsgLength, so a record never needs more than a small part of the ring and a producer waiting
 * for space is not starved by padding at the wrap.
 */
export function maxRecordBytesFor(capacityBytes: number): number {
  return capacityBytes >>> 3;
}

/**
 * Checks `capacityBytes` for a data area. Throws Error naming the invariant when it is not an
 * integer power of two in [CAPACITY_BYTES_MIN, CAPACITY_BYTES_MAX].
 */
export function checkCapacityBytes(capacityBytes: number): void {
  if (
    !Number.isInteger(capacityBytes) ||
    capacityBytes < CAPACITY_BYTES_MIN ||
    capacityBytes > CAPACITY_BYTES_MAX
  ) {
    throw new Error(
      `ring capacityBytes must be an integer in [${CAPACITY_BYTES_MIN}, ` +
        `${CAPACITY_BYTES_MAX}], capacityBytes=${capacityBytes}`,
    );
  }
  if ((capacityBytes & (capacityBytes - 1)) !== 0) {
    throw new Error(`ring capacityBytes must be a power of two, capacityBytes=${capacityBytes}`);
  }
}

/**
 * Data-area capacity, bytes, of a ring buffer made by createRing. Throws Error when `sab` is not
 * a SharedArrayBuffer of a power-of-two data area plus TRAILER_BYTES.
 */
export function capacityBytesOf(sab: SharedArrayBuffer): number {
  if (!(sab instanceof SharedArrayBuffer)) {
    throw new Error('ring buffer must be a SharedArrayBuffer made by createRing()');
  }
  const capacityBytes = sab.byteLength - TRAILER_BYTES;
  try {
    checkCapacityBytes(capacityBytes);
  } catch (cause) {
    throw new Error(
      `ring buffer byteLength=${sab.byteLength} is not a power-of-two data area ` +
        `plus the ${TRAILER_BYTES}-byte trailer; make it with createRing()`,
      { cause },
    );
  }
  return capacityBytes;
}
