/**
 * Binary layout of the record ring: the one module that owns offsets. Every other file asks
 * this one for header fields, alignment and trailer slots instead of adding numbers itself.
 *
 * Protocol after Agrona's OneToOneRingBuffer, RecordDescriptor and RingBufferDescriptor
 * (real-logic/agrona, org.agrona.concurrent.ringbuffer), adapted to JavaScript: int32 positions
 * that wrap, an Int32Array over a SharedArrayBuffer, and Atomics for the ordered accesses.
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
 *   |         zero fill up to the next multiple of 8 bytes          |
 *   +---------------------------------------------------------------+
 * ```
 *
 * - `length` counts header + payload, not the alignment fill. Its sign is the record state:
 *   `0` = free (pre-zeroed by the producer before the previous record was published),
 *   `< 0` = claimed, being written (`-length`), `> 0` = committed. The producer publishes a record
 *   by storing the positive length with `Atomics.store` (release); the consumer reads it with
 *   `Atomics.load` (acquire) and may then read type and payload with plain loads.
 * - `typeId > 0` is a user type; `PADDING_TYPE_ID` (-1) marks a padding record that fills the
 *   space up to the end of the data area so that every record is contiguous (a FlatBuffers table
 *   can be read in place). A padding record's length is the span it covers, header included.
 *
 * ## Trailer (byte offsets from `capacityBytes`; each group on its own pair of 64-byte lines)
 *
 * ```
 *    +0    +4    +8    +12                                     +128  +132  +136  +140           +256
 *   +-----+-----+-----+-----+------------------ ... ----------+-----+-----+-----+----- ... ----+
 *   |tail |data |cons |close|   padding to 128 bytes          |head |space|prod |   padding     |
 *   |     |sig  |wait |d    |                                  |     |sig  |wait |               |
 *   +-----+-----+-----+-----+------------------ ... ----------+-----+-----+-----+----- ... ----+
 *    producer-written group                                     consumer-written group
 * ```
 *
 * - `tail` (TAIL_POSITION): producer position (int32, wraps). Published when the producer wakes
 *   the consumer and at close; the consumer learns of records from their length field, so the
 *   tail is not stored per record.
 * - `dataSig` (DATA_SIGNAL): counter the consumer parks on; the producer bumps it to wake it.
 * - `consWait` (CONSUMER_WAITING): 1 while the consumer is parked or about to park.
 * - `closed` (CLOSED): 1 once the producer has closed the stream.
 * - `head` (HEAD_POSITION): consumer position (int32, wraps); stored once per `read()` call.
 * - `spaceSig` (SPACE_SIGNAL): counter the producer parks on; the consumer bumps it to wake it.
 * - `prodWait` (PRODUCER_WAITING): 1 while the producer is parked or about to park.
 *
 * Groups are 128 bytes apart (two 64-byte lines, as Agrona pads) so the adjacent-line prefetcher
 * does not make the two sides' counters share a line.
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

/** Smallest data area accepted by createRing, bytes. */
export const CAPACITY_BYTES_MIN = 64;
/**
 * Largest data area, bytes. Positions are int32 and wrap; `(tail - head) | 0` is exact only while
 * the capacity is at most 2^30.
 */
export const CAPACITY_BYTES_MAX = 2 ** 30;

/** Trailer slot byte offsets, relative to the end of the data area. */
const TAIL_POSITION_OFFSET = 0;
const DATA_SIGNAL_OFFSET = 4;
const CONSUMER_WAITING_OFFSET = 8;
const CLOSED_OFFSET = 12;
const HEAD_POSITION_OFFSET = TRAILER_GROUP_BYTES;
const SPACE_SIGNAL_OFFSET = TRAILER_GROUP_BYTES + 4;
const PRODUCER_WAITING_OFFSET = TRAILER_GROUP_BYTES + 8;

/** Int32Array indexes of the trailer slots for one ring. */
export interface TrailerIndexes {
  readonly tailPosition: number;
  readonly dataSignal: number;
  readonly consumerWaiting: number;
  readonly closed: number;
  readonly headPosition: number;
  readonly spaceSignal: number;
  readonly producerWaiting: number;
}

/** Int32Array indexes of the trailer slots for a data area of `capacityBytes`. */
export function trailerIndexes(capacityBytes: number): TrailerIndexes {
  const base = capacityBytes;
  return {
    tailPosition: (base + TAIL_POSITION_OFFSET) >> 2,
    dataSignal: (base + DATA_SIGNAL_OFFSET) >> 2,
    consumerWaiting: (base + CONSUMER_WAITING_OFFSET) >> 2,
    closed: (base + CLOSED_OFFSET) >> 2,
    headPosition: (base + HEAD_POSITION_OFFSET) >> 2,
    spaceSignal: (base + SPACE_SIGNAL_OFFSET) >> 2,
    producerWaiting: (base + PRODUCER_WAITING_OFFSET) >> 2,
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

/** Byte offset of the record whose payload starts at byte `payloadOffset`. */
export function recordOffsetOfPayload(payloadOffset: number): number {
  return payloadOffset - RECORD_HEADER_BYTES;
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
  if (!Number.isInteger(capacityBytes) || capacityBytes < CAPACITY_BYTES_MIN ||
      capacityBytes > CAPACITY_BYTES_MAX) {
    throw new Error(`ring capacityBytes must be an integer in [${CAPACITY_BYTES_MIN}, ` +
      `${CAPACITY_BYTES_MAX}], capacityBytes=${capacityBytes}`);
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
    throw new Error(`ring buffer byteLength=${sab.byteLength} is not a power-of-two data area ` +
      `plus the ${TRAILER_BYTES}-byte trailer; make it with createRing()`, { cause });
  }
  return capacityBytes;
}
