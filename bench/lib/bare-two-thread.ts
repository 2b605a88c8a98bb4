/**
 * The "bare two-thread" reference of bench/ring.ts: the least work that moves records between two
 * threads through a SharedArrayBuffer, to measure what the hardware allows on this machine before
 * judging the ring against the single-thread bare loop.
 *
 * It writes the same records as the ring ([length:int32][typeId:int32][payload], 8-aligned, a
 * padding record (typeId -1) at the wrap) but with none of the ring's API: no claim/commit, no
 * argument checks, no idle strategy (both sides busy-spin), and one Atomics.store of the tail per
 * BARE_PUBLISH_EVERY_RECORDS records. The consumer checks every record as the ring consumer in
 * the benchmark does (sequence number and length) and stores its head once per drained run.
 *
 * Buffer: `capacityBytes` of data, then two int32 words on separate 128-byte groups (as the
 * ring's trailer, so the two sides' words never share a cache line):
 *
 * ```
 *   0              capacityBytes     +128           +256
 *   +--------------+-----------------+--------------+
 *   | data area    | tail (producer) | head (cons.) |
 *   +--------------+-----------------+--------------+
 * ```
 *
 * Positions are byte counts as int32 that wrap; `capacityBytes` is a power of two.
 * The producer side lives in ring-producer.worker.ts, the consumer side in ring.ts.
 */

/** Records between two tail stores; the ring's batched publish uses the same number. */
export const BARE_PUBLISH_EVERY_RECORDS = 64;
/** Bytes after the data area: the tail and head words, 128 bytes apart. */
export const BARE_TRAILER_BYTES = 256;
/** typeId of the padding record at the wrap. */
export const BARE_PADDING_TYPE_ID = -1;

/** Int32Array index of the tail word for a data area of `capacityBytes`. */
export function bareTailIndex(capacityBytes: number): number {
  return capacityBytes >> 2;
}

/** Int32Array index of the head word for a data area of `capacityBytes`. */
export function bareHeadIndex(capacityBytes: number): number {
  return (capacityBytes + 128) >> 2;
}
