/**
 * Ring occupancy read from outside both sides of a ring: the producer's tail and the consumer's
 * head words of the trailer (engine/ring/layout.ts owns the offsets), read with Atomics.load.
 * The two loads are not one atomic snapshot; the figure is a gauge, exact to a batch.
 */
import { capacityBytesOf, trailerIndexes, WAITING_BIT } from '../engine/ring/layout.js';

/** How full one ring is. */
export interface RingOccupancy {
  capacityBytes: number;
  /** Bytes published by the producer and not yet released by the consumer. */
  usedBytes: number;
  /** usedBytes / capacityBytes, 0..1. */
  ratio: number;
  /** The producer closed the stream (drain). */
  closed: boolean;
}

/** Reads the occupancy of a ring made by createRing. @throws Error when `sab` is not one. */
export function ringOccupancy(sab: SharedArrayBuffer): RingOccupancy {
  const capacityBytes = capacityBytesOf(sab);
  const words = new Int32Array(sab);
  const ix = trailerIndexes(capacityBytes);
  const tail = Atomics.load(words, ix.tailPosition) & ~WAITING_BIT;
  const head = Atomics.load(words, ix.headPosition) & ~WAITING_BIT;
  const usedBytes = Math.min(capacityBytes, Math.max(0, (tail - head) | 0));
  return {
    capacityBytes,
    usedBytes,
    ratio: usedBytes / capacityBytes,
    closed: Atomics.load(words, ix.closed) === 1,
  };
}
