/**
 * Encode-once writer of a capture record: an `Envelope` (type EVENT_TYPE_CHANGE) whose payload is
 * a `Change` (schemas/sluice.fbs), laid out front to back by hand in one reused buffer, each
 * string written once as UTF-8 straight to its final place (Buffer#write, no intermediate
 * Uint8Array per string), and the envelope's key pointing at the Change's key string instead of
 * a second copy of it.
 *
 * Why not EnvelopeWriter + encodeChange: those build back to front in two flatbuffers Builders,
 * so each change was encoded per string into a new array (TextEncoder.encode), copied into the
 * Change builder, copied out, copied into the Envelope builder as the payload vector, copied out,
 * and copied into the journal's write buffer; the key was encoded twice. CPU profiles of a pump
 * (bench/RESULTS.md "Capture drain rate, PostgreSQL into the journal") had TextEncoder.encode
 * and garbage collection as the largest items after fdatasync. Here: string -> UTF-8 in this
 * writer's buffer, then one copy to the destination (journal write buffer or an owned array).
 *
 * The bytes are a valid FlatBuffer readable by the generated code (EnvelopeView, decodeChange):
 * offsets point forward, the envelope table's 64-bit field and the nested Change buffer start
 * 8-byte aligned, strings are length-prefixed and NUL-terminated. Sharing the key string between
 * the two tables is allowed by the format (an offset may point at any string after it in the
 * buffer); the nested Change buffer stays self-contained (the payload alone decodes).
 *
 * Layout (byte offsets; C = 56, the start of the nested Change buffer):
 *
 * | at      | what                                                                     |
 * |---------|--------------------------------------------------------------------------|
 * | 0       | root offset -> envelope table at 24                                      |
 * | 4..17   | envelope vtable (5 fields: type, key, event_time_ms, cause absent, payload) |
 * | 24..47  | envelope table: vtable soffset, type u32, event_time_ms f64, key, payload |
 * | 52      | payload vector length (bytes of the Change buffer); its data from 56      |
 * | C+0     | Change root offset -> Change table at C+32                                |
 * | C+4..25 | Change vtable (9 fields)                                                 |
 * | C+32..79| Change table: soffset, commit_time_ms f64, 7 string offsets, op u8       |
 * | C+80..  | strings: staging_id, table, key, before, after, txid, installation       |
 */
import type { Change } from './change.js';
import { EVENT_TYPE_CHANGE } from './envelope.js';

const OP_CODES: Readonly<Record<string, number>> = {
  insert: 1,
  update: 2,
  delete: 3,
  truncate: 4,
  read: 5,
};

const ENV_VTABLE = 4;
const ENV_TABLE = 24;
const PAYLOAD_LEN = 52;
const C = 56;
const CH_VTABLE = C + 4;
const CH_TABLE = C + 32;
const CH_STRINGS = C + 80;
/** Change table field positions, relative to the Change table. */
const F_TIME = 8;
const F_STAGING_ID = 16;
const F_TABLE = 20;
const F_KEY = 24;
const F_BEFORE = 28;
const F_AFTER = 32;
const F_TXID = 36;
const F_INSTALLATION = 40;
const F_OP = 44;
const CH_TABLE_BYTES = 48;

/**
 * Writes capture records (see the module comment) into one growing buffer, reused for every
 * record. Not thread-safe: one writer per actor.
 */
export class ChangeRecordWriter {
  private buf: Buffer;
  private length = 0;

  /** `initialBytes`: starting buffer size (>= 256); it doubles as needed and keeps its size. */
  constructor(initialBytes = 4096) {
    if (!(Number.isInteger(initialBytes) && initialBytes >= 256)) {
      throw new Error(`initialBytes must be an integer >= 256, initialBytes=${initialBytes}`);
    }
    this.buf = Buffer.alloc(initialBytes);
  }

  /**
   * Builds the record of `change` (replacing the previous one) and returns its size in bytes.
   * The envelope's key is `change.key` and its event time `eventTimeMs` (default
   * `change.commitTimeMs`); it has no cause. `installation` '' or absent is written absent.
   * @throws Error when `op` is not insert|update|delete|truncate|read, a required string field
   *   (stagingId, table, key, txid) is not a string, or before/after is neither string nor null.
   */
  build(change: Change, eventTimeMs: number = change.commitTimeMs): number {
    const op = OP_CODES[change.op];
    if (op === undefined) {
      throw new Error(
        `change op must be insert|update|delete|truncate|read, op=${String(change.op)}`,
      );
    }
    const { stagingId, table, key, txid, before, after } = change;
    if (typeof stagingId !== 'string') throw notString('stagingId', stagingId);
    if (typeof table !== 'string') throw notString('table', table);
    if (typeof key !== 'string') throw notString('key', key);
    if (typeof txid !== 'string') throw notString('txid', txid);
    if (before !== null && typeof before !== 'string') throw notString('before', before);
    if (after !== null && typeof after !== 'string') throw notString('after', after);
    const installation =
      change.installation === undefined || change.installation === '' ? null : change.installation;
    // Worst case: 3 UTF-8 bytes per UTF-16 unit, plus length prefix, NUL and padding per string.
    const worst =
      CH_STRINGS +
      3 *
        (stagingId.length +
          table.length +
          key.length +
          txid.length +
          (before?.length ?? 0) +
          (after?.length ?? 0) +
          (installation?.length ?? 0)) +
      7 * 8;
    if (worst > this.buf.length) {
      let size = this.buf.length;
      while (size < worst) size *= 2;
      this.buf = Buffer.alloc(size);
    }
    const b = this.buf;
    // Header, envelope vtable and table, payload length; zero where fields are absent.
    b.fill(0, 0, CH_STRINGS);
    b.writeUInt32LE(ENV_TABLE, 0);
    b.writeUInt16LE(14, ENV_VTABLE); // vtable bytes: 4 + 2 x 5 fields
    b.writeUInt16LE(24, ENV_VTABLE + 2); // table bytes
    b.writeUInt16LE(4, ENV_VTABLE + 4); // type
    b.writeUInt16LE(16, ENV_VTABLE + 6); // key
    b.writeUInt16LE(8, ENV_VTABLE + 8); // event_time_ms
    // cause (slot 3) absent: 0
    b.writeUInt16LE(20, ENV_VTABLE + 12); // payload
    b.writeInt32LE(ENV_TABLE - ENV_VTABLE, ENV_TABLE);
    b.writeUInt32LE(EVENT_TYPE_CHANGE, ENV_TABLE + 4);
    b.writeDoubleLE(eventTimeMs, ENV_TABLE + 8);
    b.writeUInt32LE(PAYLOAD_LEN - (ENV_TABLE + 20), ENV_TABLE + 20);
    // The nested Change buffer.
    b.writeUInt32LE(CH_TABLE - C, C);
    b.writeUInt16LE(22, CH_VTABLE); // vtable bytes: 4 + 2 x 9 fields
    b.writeUInt16LE(CH_TABLE_BYTES, CH_VTABLE + 2);
    b.writeUInt16LE(F_STAGING_ID, CH_VTABLE + 4);
    b.writeUInt16LE(F_TABLE, CH_VTABLE + 6);
    b.writeUInt16LE(F_OP, CH_VTABLE + 8);
    b.writeUInt16LE(F_KEY, CH_VTABLE + 10);
    if (before !== null) b.writeUInt16LE(F_BEFORE, CH_VTABLE + 12);
    if (after !== null) b.writeUInt16LE(F_AFTER, CH_VTABLE + 14);
    b.writeUInt16LE(F_TXID, CH_VTABLE + 16);
    b.writeUInt16LE(F_TIME, CH_VTABLE + 18);
    if (installation !== null) b.writeUInt16LE(F_INSTALLATION, CH_VTABLE + 20);
    b.writeInt32LE(CH_TABLE - CH_VTABLE, CH_TABLE);
    b.writeDoubleLE(change.commitTimeMs, CH_TABLE + F_TIME);
    b[CH_TABLE + F_OP] = op;
    let at = CH_STRINGS;
    at = this.string(b, at, CH_TABLE + F_STAGING_ID, stagingId);
    at = this.string(b, at, CH_TABLE + F_TABLE, table);
    const keyAt = at;
    at = this.string(b, at, CH_TABLE + F_KEY, key);
    // The envelope's key is the Change's key string.
    b.writeUInt32LE(keyAt - (ENV_TABLE + 16), ENV_TABLE + 16);
    if (before !== null) at = this.string(b, at, CH_TABLE + F_BEFORE, before);
    if (after !== null) at = this.string(b, at, CH_TABLE + F_AFTER, after);
    at = this.string(b, at, CH_TABLE + F_TXID, txid);
    if (installation !== null) at = this.string(b, at, CH_TABLE + F_INSTALLATION, installation);
    b.writeUInt32LE(at - C, PAYLOAD_LEN);
    this.length = at;
    return at;
  }

  /** Writes `s` at `at` (4-aligned) and its offset at `field`; returns the next 4-aligned position. */
  private string(b: Buffer, at: number, field: number, s: string): number {
    const n = s.length === 0 ? 0 : b.write(s, at + 4, 'utf8');
    b.writeUInt32LE(n, at);
    b.writeUInt32LE(at - field, field);
    const end = at + 4 + n;
    b[end] = 0;
    // NUL, then zero padding to a multiple of 4.
    const next = (end + 4) & ~3;
    for (let i = end + 1; i < next; i++) b[i] = 0;
    return next;
  }

  /** Size in bytes of the last built record (0 before the first build). */
  get byteLength(): number {
    return this.length;
  }

  /** The last built record as a view of the writer's buffer: valid only until the next build. */
  bytes(): Buffer {
    return this.buf.subarray(0, this.length);
  }

  /**
   * Copies the last built record into `target` at `offset`; returns the bytes written.
   * @throws RangeError if it does not fit.
   */
  copyTo(target: Uint8Array, offset: number): number {
    if (!(Number.isInteger(offset) && offset >= 0 && offset + this.length <= target.length)) {
      throw new RangeError(
        `record of ${this.length} bytes does not fit at offset ${offset} of ${target.length}`,
      );
    }
    this.buf.copy(target, offset, 0, this.length);
    return this.length;
  }
}

function notString(field: string, value: unknown): Error {
  return new Error(`change ${field} must be a string, ${field}=${String(value)}`);
}
