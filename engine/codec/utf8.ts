/**
 * UTF-8 helpers shared by the codec. Strings round-trip exactly, including a leading U+FEFF
 * (TextDecoder would strip it as a byte order mark). Lone UTF-16 surrogates cannot be represented
 * in UTF-8 and are written as U+FFFD, as TextEncoder does; invalid UTF-8 decodes to U+FFFD.
 */
export const utf8Encoder = new TextEncoder();

/**
 * Node's Buffer#toString decodes 1.5-2x faster than TextDecoder for short strings and keeps a
 * leading U+FEFF. Making a Buffer view costs as much as the decoding, so one view per backing
 * ArrayBuffer is kept (the last one seen).
 */
let textBuffer: Buffer = Buffer.alloc(0);
let textBacking: ArrayBufferLike | null = null;

/** Decodes `length` UTF-8 bytes of `bytes` from `offset` (works on SharedArrayBuffer views). */
export function decodeUtf8(bytes: Uint8Array, offset: number, length: number): string {
  if (bytes.buffer !== textBacking) {
    textBacking = bytes.buffer;
    textBuffer = Buffer.from(bytes.buffer);
  }
  const start = bytes.byteOffset + offset;
  return textBuffer.toString('utf8', start, start + length);
}

/**
 * A bounded cache of UTF-8 encodings of repeated strings (keys, table names). Strings longer
 * than `stringLengthMax` UTF-16 units are encoded every time; when `entriesMax` is reached the
 * cache is emptied (a bound without bookkeeping; hot strings come back on their next use).
 */
export class Utf8Cache {
  private readonly map = new Map<string, Uint8Array>();

  constructor(
    readonly entriesMax: number,
    readonly stringLengthMax: number,
  ) {
    if (!(Number.isInteger(entriesMax) && entriesMax >= 0)) {
      throw new Error(`entriesMax must be an integer >= 0, entriesMax=${entriesMax}`);
    }
    if (!(Number.isInteger(stringLengthMax) && stringLengthMax >= 0)) {
      throw new Error(
        `stringLengthMax must be an integer >= 0, stringLengthMax=${stringLengthMax}`,
      );
    }
  }

  /** UTF-8 bytes of `s`; the returned array is shared and must not be modified. */
  encode(s: string): Uint8Array {
    if (s.length > this.stringLengthMax) return utf8Encoder.encode(s);
    let bytes = this.map.get(s);
    if (bytes === undefined) {
      bytes = utf8Encoder.encode(s);
      if (this.map.size >= this.entriesMax) this.map.clear();
      if (this.entriesMax > 0) this.map.set(s, bytes);
    }
    return bytes;
  }
}

/**
 * Offset of the first byte of `bytes[offset, end)` that does not start a well-formed UTF-8
 * sequence (RFC 3629 table 3: no overlong forms, no surrogates, nothing above U+10FFFF, no
 * sequence cut off by `end`), or -1 if the range is all well-formed. What TextDecoder's `fatal`
 * mode rejects, with the place.
 */
export function firstInvalidUtf8(bytes: Uint8Array, offset = 0, end = bytes.length): number {
  const cont = (i: number, lo = 0x80, hi = 0xbf) => i < end && bytes[i] >= lo && bytes[i] <= hi;
  let i = offset;
  while (i < end) {
    const b = bytes[i];
    if (b < 0x80) {
      i++;
    } else if (b >= 0xc2 && b <= 0xdf) {
      if (!cont(i + 1)) return i;
      i += 2;
    } else if (b >= 0xe0 && b <= 0xef) {
      const lo = b === 0xe0 ? 0xa0 : 0x80;
      const hi = b === 0xed ? 0x9f : 0xbf;
      if (!cont(i + 1, lo, hi) || !cont(i + 2)) return i;
      i += 3;
    } else if (b >= 0xf0 && b <= 0xf4) {
      const lo = b === 0xf0 ? 0x90 : 0x80;
      const hi = b === 0xf4 ? 0x8f : 0xbf;
      if (!cont(i + 1, lo, hi) || !cont(i + 2) || !cont(i + 3)) return i;
      i += 4;
    } else {
      return i;
    }
  }
  return -1;
}
