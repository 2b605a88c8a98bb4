import { TRAILER_BYTES, checkCapacityBytes } from './layout.js';

/**
 * Allocates a ring: a SharedArrayBuffer of `capacityBytes` of data area followed by the
 * TRAILER_BYTES trailer (tail, head, closed flag), all zero. Pass it to one RingProducer and
 * one RingConsumer (e.g. through workerData). Throws Error if `capacityBytes` is not a power of
 * two in [CAPACITY_BYTES_MIN, CAPACITY_BYTES_MAX] (64 B .. 1 GiB). After Agrona
 * RingBufferDescriptor (capacity power of two plus trailer).
 */
export function createRing(capacityBytes: number): SharedArrayBuffer {
  checkCapacityBytes(capacityBytes);
  return new SharedArrayBuffer(capacityBytes + TRAILER_BYTES);
}
