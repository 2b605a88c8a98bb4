/**
 * Stable key hash used to split staged changes between pumps.
 *
 * FNV-1a 32-bit (Fowler/Noll/Vo, offset basis 2166136261, prime 16777619) over the UTF-8 bytes
 * of the key text. The same function runs inside PostgreSQL (`sluice_fnv1a32(text)`, created by
 * `install()`, stored in staging.key_hash by the trigger) and in JavaScript here, so pump i of N
 * owns the same keys on both dialects, and `keyHash(change.key) === change.keyHash` always.
 */

const FNV_OFFSET_BASIS = 2166136261;
const FNV_PRIME = 16777619;
const encoder = new TextEncoder();

/**
 * FNV-1a 32 of the key's UTF-8 bytes, as an unsigned integer in [0, 2^32).
 * `key` is the staging key text (JSON array text, or "*" for truncate). Never throws.
 */
export function keyHash(key: string): number {
  let h = FNV_OFFSET_BASIS;
  for (let i = 0; i < key.length; i++) {
    const c = key.charCodeAt(i);
    // ASCII fast path: keys are JSON arrays of mostly ASCII text.
    if (c < 0x80) {
      h = Math.imul(h ^ c, FNV_PRIME);
    } else {
      for (const b of encoder.encode(key.slice(i))) h = Math.imul(h ^ b, FNV_PRIME);
      break;
    }
  }
  return h >>> 0;
}

/** The pump (0..pumps-1) that owns `key`: keyHash(key) % pumps. */
export function pumpOfKey(key: string, pumps: number): number {
  return keyHash(key) % pumps;
}
