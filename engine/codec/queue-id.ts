const FNV_OFFSET_BASIS_32 = 0x811c9dc5;
const FNV_PRIME_32 = 0x01000193;

const utf8Encoder = new TextEncoder();

/**
 * Stable 32-bit id of a queue name, stored in `Envelope.cause.queue`.
 *
 * FNV-1a 32-bit over the UTF-8 bytes of `name` (Fowler/Noll/Vo, draft-eastlake-fnv), returned
 * unsigned (0 .. 2^32-1). Not collision-free: the supervisor must reject a topology in which two
 * queue names share an id.
 *
 * @example queueId('') === 0x811c9dc5; queueId('a') === 0xe40c292c
 */
export function queueId(name: string): number {
  let hash = FNV_OFFSET_BASIS_32;
  let ascii = true;
  for (let i = 0; i < name.length; i++) {
    const c = name.charCodeAt(i);
    if (c >= 0x80) {
      ascii = false;
      break;
    }
    hash = Math.imul(hash ^ c, FNV_PRIME_32);
  }
  if (ascii) return hash >>> 0;
  hash = FNV_OFFSET_BASIS_32;
  const bytes = utf8Encoder.encode(name);
  for (let i = 0; i < bytes.length; i++) hash = Math.imul(hash ^ bytes[i]!, FNV_PRIME_32);
  return hash >>> 0;
}
