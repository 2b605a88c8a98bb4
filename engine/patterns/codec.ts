/**
 * Value codecs of the patterns: a processor is typed by the value type `V` of its input topic; the
 * pattern decodes record values with a {@link Codec} before the processor sees them.
 */

/** Encodes and decodes record values. `decode` throws on bytes it cannot read. */
export interface Codec<V> {
  encode(value: V): Uint8Array;
  decode(bytes: Uint8Array): V;
}

const enc = new TextEncoder();
const dec = new TextDecoder('utf-8', { fatal: true });

/** UTF-8 JSON. decode throws on invalid UTF-8 or JSON. */
export function jsonCodec<V>(): Codec<V> {
  return {
    encode: (v) => enc.encode(JSON.stringify(v)),
    decode: (b) => JSON.parse(dec.decode(b)) as V,
  };
}

/** UTF-8 text. decode throws on invalid UTF-8. */
export const stringCodec: Codec<string> = {
  encode: (v) => enc.encode(v),
  decode: (b) => dec.decode(b),
};

/** Raw bytes, unchanged. */
export const bytesCodec: Codec<Uint8Array> = { encode: (v) => v, decode: (b) => b };
