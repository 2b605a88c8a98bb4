/**
 * Copies of small record values carved out of shared slabs. The memory model copies every sent
 * value (the caller may reuse its buffer); a `slice()` per record allocates one ArrayBuffer per
 * record, which measured ~1 us per 100-byte record (allocation plus the GC's external-memory
 * bookkeeping), the largest single cost of a send. A copy into a slab costs a memcpy and one
 * view object. After Node's own `Buffer.allocUnsafe` pool (lib/buffer.js, 8 KiB pool for
 * allocations under 4 KiB).
 *
 * Retention: a slab stays alive while any view of it does. The memory model keeps every record
 * until the bus is closed, so a slab wastes at most its unused tail.
 *
 * Values already in a slab are not copied again ({@link ValueSlab.store}): consumed values are
 * read-only by the bus contract, so a processor forwarding a consumed value (filter, route,
 * re-key) hands the bus bytes that can never change, and its stored output shares the input's
 * copy. That saves the memcpy, the view object and, as every record is retained, its GC.
 */

/** Bytes of one slab. */
export const SLAB_BYTES = 64 * 1024;
/** Largest value allocValue hands out, bytes (1 GiB; Kafka's own limit is far lower). */
export const VALUE_BYTES_MAX = 1 << 30;
/** Values longer than this get their own copy (a slab would waste too much of its tail). */
export const SLAB_VALUE_BYTES_MAX = 4 * 1024;

/**
 * Throws RangeError unless `bytes` is an integer from 0 to {@link VALUE_BYTES_MAX}, naming the
 * value (and its type when it is not a number). The size check of every bus's allocValue.
 */
export function checkValueSize(bytes: number): void {
  if (!Number.isInteger(bytes) || bytes < 0)
    throw new RangeError(
      `value size must be an integer >= 0, bytes=${typeof bytes === 'number' ? bytes : `${JSON.stringify(bytes)} (a ${typeof bytes})`}`,
    );
  if (bytes > VALUE_BYTES_MAX)
    throw new RangeError(
      `value size must be at most ${VALUE_BYTES_MAX} bytes (1 GiB), bytes=${bytes}`,
    );
}

export class ValueSlab {
  private slab = new Uint8Array(SLAB_BYTES);
  private used = 0;
  /** Every slab this has handed views of (weak: a slab goes once no stored record views it). */
  private readonly slabs = new WeakSet<ArrayBufferLike>([this.slab.buffer]);
  /** The slab {@link ValueSlab.store} last found in `slabs` (a strong reference to one slab at most). */
  private lastOwned: ArrayBufferLike | null = null;

  /**
   * `value` itself when it is a view of one of this bus's slabs (a stored value, read-only by
   * contract, so it cannot change under the stored record), else {@link ValueSlab.copy}.
   */
  store(value: Uint8Array): Uint8Array {
    const buffer = value.buffer;
    // Forwarded values of one batch mostly share a slab: one WeakSet lookup per run of them.
    if (buffer === this.lastOwned) return value;
    if (!this.slabs.has(buffer)) return this.copy(value);
    this.lastOwned = buffer;
    return value;
  }

  /**
   * A zero-filled view of `n` bytes of a slab (its own buffer, still known to {@link store}, when
   * longer than {@link SLAB_VALUE_BYTES_MAX}): a value built in place, which {@link store} then
   * keeps without a copy. Throws RangeError for a bad size ({@link checkValueSize}).
   */
  alloc(n: number): Uint8Array {
    checkValueSize(n);
    if (n > SLAB_VALUE_BYTES_MAX) {
      const own = new Uint8Array(n);
      this.slabs.add(own.buffer);
      return own;
    }
    const at = this.reserve(n);
    return new Uint8Array(this.slab.buffer, at, n);
  }

  /** Offset of `n` free bytes in the current slab (a new slab when it lacks them); marks them used. */
  private reserve(n: number): number {
    if (this.used + n > SLAB_BYTES) {
      this.slab = new Uint8Array(SLAB_BYTES);
      this.slabs.add(this.slab.buffer);
      this.used = 0;
    }
    const at = this.used;
    // 8-byte alignment keeps later views of the slab usable by aligned typed arrays.
    this.used = (at + n + 7) & ~7;
    return at;
  }

  /** A copy of `value`, sharing its backing buffer with other small copies. */
  copy(value: Uint8Array): Uint8Array {
    const n = value.length;
    if (n > SLAB_VALUE_BYTES_MAX) return Uint8Array.prototype.slice.call(value); // a copy even for a Buffer
    const at = this.reserve(n);
    this.slab.set(value, at);
    // The constructor, not subarray(): subarray looks up the species constructor on every call.
    return new Uint8Array(this.slab.buffer, at, n);
  }
}
