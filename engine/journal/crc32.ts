/**
 * CRC-32 (IEEE 802.3 polynomial 0xEDB88320, the zlib/PNG/gzip checksum) used for record frames
 * and segment headers.
 *
 * Node >= 20.15 ships a native `zlib.crc32` (several GB/s); on older Node 20 releases a
 * table-driven JavaScript version with the same polynomial is used, so files are identical
 * whichever ran. CRC-32C (Castagnoli) would detect slightly more, but Node has no native one and
 * a JS CRC-32C is ~10x slower than the native CRC-32 on the append path.
 */
import zlib from 'node:zlib';

type Crc32Fn = (bytes: Uint8Array) => number;

function makeTable(): Uint32Array {
  const table = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    table[n] = c >>> 0;
  }
  return table;
}

function jsCrc32(): Crc32Fn {
  const table = makeTable();
  return (bytes) => {
    let c = 0xffffffff;
    for (let i = 0; i < bytes.length; i++) c = table[(c ^ bytes[i]) & 0xff] ^ (c >>> 8);
    return (c ^ 0xffffffff) >>> 0;
  };
}

const native = (zlib as { crc32?: (data: Uint8Array, value?: number) => number }).crc32;

/** CRC-32 of `bytes` as an unsigned 32-bit number. */
export const crc32: Crc32Fn = typeof native === 'function' ? (bytes) => native(bytes) : jsCrc32();

/** The JavaScript fallback, exported so a test can check it agrees with the native one. */
export const crc32Js: Crc32Fn = jsCrc32();
