/**
 * Record contents shared by the ring stress test and its producer worker: the size, type and
 * bytes of record `seq` are functions of `seq`, so the consumer can check order and content.
 *
 * Payload = [seq: uint32 LE][byte i = (seq * 13 + i) & 255 for i in 4 .. size).
 */
import type { IdleStrategy, Parker } from '../engine/ring/index.js';

/** Payload size, bytes, of record `seq`: mostly small, some medium, a few up to `sizeMax`. */
export function payloadSize(seq: number, sizeMax: number): number {
  const x = Math.imul(seq, 0x9e3779b1) >>> 0;
  const r = x & 1023;
  const y = x >>> 10;
  if (r < 600) return 4 + (y % 60);
  if (r < 1000) return 4 + (y % 500);
  return 4 + (y % (sizeMax - 3));
}

/** Type id of record `seq` (> 0). */
export function typeIdOf(seq: number): number {
  return 1 + (seq % 1000);
}

/** Writes the payload of record `seq` into `dst[off, off + size)`. */
export function fillPayload(dst: Uint8Array, off: number, seq: number, size: number): void {
  dst[off] = seq & 255;
  dst[off + 1] = (seq >>> 8) & 255;
  dst[off + 2] = (seq >>> 16) & 255;
  dst[off + 3] = (seq >>> 24) & 255;
  const base = Math.imul(seq, 13);
  for (let i = 4; i < size; i++) dst[off + i] = (base + i) & 255;
}

/** Index of the first wrong byte of record `seq`'s payload in `src[off, off + size)`, or -1. */
export function checkPayload(src: Uint8Array, off: number, seq: number, size: number): number {
  if (
    src[off] !== (seq & 255) ||
    src[off + 1] !== ((seq >>> 8) & 255) ||
    src[off + 2] !== ((seq >>> 16) & 255) ||
    src[off + 3] !== ((seq >>> 24) & 255)
  )
    return 0;
  const base = Math.imul(seq, 13);
  for (let i = 4; i < size; i++) if (src[off + i] !== ((base + i) & 255)) return i;
  return -1;
}

/** Sequence number stamped in the first 4 payload bytes. */
export function seqOf(src: Uint8Array, off: number): number {
  return (src[off] | (src[off + 1] << 8) | (src[off + 2] << 16) | (src[off + 3] << 24)) >>> 0;
}

/** Wraps an idle strategy and counts the parks it asks the ring side for. */
export class CountingIdleStrategy implements IdleStrategy {
  parks = 0;
  private readonly counter: Parker;
  private target: Parker | undefined;

  constructor(private readonly inner: IdleStrategy) {
    this.counter = {
      park: (timeoutMs: number) => {
        this.parks++;
        this.target!.park(timeoutMs);
      },
    };
  }

  idle(workCount: number, parker?: Parker): void {
    this.target = parker;
    this.inner.idle(workCount, parker === undefined ? undefined : this.counter);
  }

  reset(): void {
    this.inner.reset();
  }
}
