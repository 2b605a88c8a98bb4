import { decodeUtf8, utf8Encoder } from './utf8.js';

/**
 * UTF-8 JSON text of `value`, the payload of an event of type EVENT_TYPE_JSON.
 *
 * @throws TypeError when `value` has no JSON form (undefined, a function, a symbol) or contains a
 *   BigInt or a cycle (from JSON.stringify).
 */
export function encodeJson(value: unknown): Uint8Array {
  const text = JSON.stringify(value);
  if (text === undefined) throw new TypeError(`value has no JSON representation: ${typeof value}`);
  return utf8Encoder.encode(text);
}

/**
 * Parses UTF-8 JSON text from `bytes[offset, offset + length)` (defaults: the whole array).
 * The caller checks the shape of the result.
 *
 * @throws SyntaxError on malformed JSON; RangeError when the range is outside `bytes`.
 */
export function decodeJson(bytes: Uint8Array, offset = 0, length = bytes.length - offset): unknown {
  checkRange(bytes, offset, length);
  return JSON.parse(decodeUtf8(bytes, offset, length));
}

/** @throws RangeError unless 0 <= offset and offset + length <= bytes.length (integers). */
export function checkRange(bytes: Uint8Array, offset: number, length: number): void {
  if (!(
    Number.isInteger(offset) &&
    Number.isInteger(length) &&
    offset >= 0 &&
    length >= 0 &&
    offset + length <= bytes.length
  )) {
    throw new RangeError(
      `range must lie inside bytes, offset=${offset} length=${length} bytes.length=${bytes.length}`,
    );
  }
}
