import { Encoding } from 'flatbuffers';
import { Cause, Envelope } from '../../schemas/index.js';
import { ByteBufferCache, copyBytes } from './byte-buffers.js';
import { checkRange } from './json.js';
import { decodeUtf8, Utf8Cache } from './utf8.js';

/** Event type id of an envelope whose payload is a FlatBuffers `Change` (CDC). */
export const EVENT_TYPE_CHANGE = 1;
/** Event type id of an envelope whose payload is UTF-8 JSON text. */
export const EVENT_TYPE_JSON = 2;
/** Smallest event type id free for user-defined payloads; 3..99 are reserved for Sluice. */
export const USER_EVENT_TYPE_MIN = 100;

/** Largest exact integer in a float64; queue indexes stay below it. */
const INDEX_MAX = Number.MAX_SAFE_INTEGER;
/** A finished FlatBuffer holds at least the root offset (4) and a table's vtable offset (4). */
const ENVELOPE_BYTES_MIN = 8;

const EMPTY_BYTES = new Uint8Array(0);

/**
 * Fields of one envelope, as given to `EnvelopeWriter`. Omitted optional fields are not written
 * and read back as their defaults.
 *
 * - `type`: event type id, integer 1 .. 2^32-1 (EVENT_TYPE_CHANGE, EVENT_TYPE_JSON, or
 *   >= USER_EVENT_TYPE_MIN).
 * - `key`: partitioning / per-key ordering key; default null (absent).
 * - `eventTimeMs`: when it happened, ms since the Unix epoch; default 0.
 * - `causeQueue`, `causePartition`, `causeIndex`: the input that caused this event:
 *   queueId(input queue name) (uint32), partition (uint32) and record index (integer
 *   0 .. 2^53-1). The cause is written only when `causeIndex` is given and >= 0; queue and
 *   partition then default to 0.
 * - `payload`: event bytes (Change, JSON or user bytes); default empty.
 */
export interface EnvelopeInit {
  type: number;
  key?: string | null;
  eventTimeMs?: number;
  causeQueue?: number;
  causePartition?: number;
  causeIndex?: number;
  payload?: Uint8Array | null;
}

/** A decoded envelope as plain data (see `decodeEnvelope`); `causeIndex` is -1 when absent. */
export interface EnvelopeFields {
  type: number;
  key: string | null;
  eventTimeMs: number;
  causeQueue: number;
  causePartition: number;
  causeIndex: number;
  payload: Uint8Array;
}

/** Options of `EnvelopeWriter`; every bound has a default (see `ENVELOPE_WRITER_DEFAULTS`). */
export interface EnvelopeWriterOptions {
  /** Initial builder buffer size in bytes; it doubles as needed and keeps its largest size. */
  initialBytes?: number;
  /** Number of distinct keys whose UTF-8 encoding is cached. 0 disables the cache. */
  keyCacheEntriesMax?: number;
  /** Keys longer than this (UTF-16 units) are encoded every time instead of cached. */
  keyCacheLengthMax?: number;
}

/**
 * Defaults of `EnvelopeWriterOptions`:
 *
 * | option              | default | unit          |
 * |---------------------|---------|---------------|
 * | initialBytes        | 1024    | bytes         |
 * | keyCacheEntriesMax  | 4096    | keys          |
 * | keyCacheLengthMax   | 64      | UTF-16 units  |
 */
export const ENVELOPE_WRITER_DEFAULTS: Readonly<Required<EnvelopeWriterOptions>> = Object.freeze({
  initialBytes: 1024,
  keyCacheEntriesMax: 4096,
  keyCacheLengthMax: 64,
});

/** Envelope layout of EnvelopeWriter (byte offsets; see the class comment). */
const VTABLE = 4;
const VTABLE_BYTES = 14; // 4 + 2 x 5 fields
const TABLE = 20;
/** Table field positions, relative to the table, without and with a cause. */
const F_TIME = 4;
const F_TYPE = 12;
const F_KEY = 16;
const F_PAYLOAD = 20;
const TABLE_BYTES = 24;
const FC_CAUSE = 12;
const FC_TYPE = 28;
const FC_KEY = 32;
const FC_PAYLOAD = 36;
const TABLE_BYTES_CAUSE = 40;
/**
 * Payloads and records up to this size are copied byte by byte (no subarray to allocate); larger
 * ones with Uint8Array#set. Measured (bench/copy-loop.ts, bench/RESULTS.md "Byte loop or set"):
 * the loop costs about 2 ns per byte and wins only up to about 16 bytes; at 256 (the value
 * before) encode + copy into a ring slot of a 64-byte payload took 397-423 ns, at 16 275-291 ns.
 */
const COPY_LOOP_BYTES_MAX = 16;

/**
 * Encodes envelopes (schemas/sluice.fbs `Envelope`) into one reused buffer, laid out front to
 * back by hand (as engine/codec/change-record.ts does for capture records), with a cache of
 * pre-encoded keys, so steady-state encoding allocates nothing but the output you ask for.
 *
 * The bytes are a valid FlatBuffer that the generated code reads (EnvelopeView, and flatc's
 * classes; test/codec.test.ts checks both ways): offsets point forward, the 64-bit fields start
 * 8-byte aligned, strings are length-prefixed and NUL-terminated, and the payload's bytes start
 * 8-byte aligned (a nested FlatBuffer such as a Change decodes in place). A flatbuffers Builder
 * builds back to front, so each field went through its bookkeeping and then the whole envelope
 * was copied out: the producer's CPU profile (bench/RESULTS.md, "Main path, quiet machine")
 * had the builder's calls at about a fifth of an append.
 *
 * Layout (byte offsets; T = 20, the table; E its end: 44, or 60 with a cause):
 *
 * | at        | what                                                                       |
 * |-----------|----------------------------------------------------------------------------|
 * | 0         | root offset -> table at T                                                  |
 * | 4..17     | vtable: its size 14, the table's size, then type, key, event_time_ms,      |
 * |           | cause, payload (0 = absent)                                                |
 * | T+0       | the table's soffset to the vtable (16)                                     |
 * | T+4       | event_time_ms f64                                                          |
 * | T+12      | type u32, key and payload offsets; with a cause: cause {queue u32,         |
 * |           | partition u32, index f64} at T+12..35, then type, key, payload             |
 * | E..       | key string (u32 length, UTF-8, NUL, padding to 4)                          |
 * | ..        | payload vector (u32 length, bytes from an 8-aligned position)              |
 *
 * Three ways to get the bytes:
 *
 * - `encode(e)`: a fresh Uint8Array (a copy you own);
 * - `encodeInto(e, target, offset)`: copy into `target` at `offset`, returns bytes written;
 * - size-then-write, for a ring slot: `const n = writer.build(e)`, claim `n` bytes, then
 *   `writer.copyTo(ring.bytes, slotOffset)`.
 *
 * Not thread-safe: one writer per actor. The target may be backed by a SharedArrayBuffer.
 */
export class EnvelopeWriter {
  private buf: Buffer;
  private view: Uint8Array;
  private readonly keys: Utf8Cache;
  private readonly keyCacheLengthMax: number;
  private size = 0;
  private built = false;

  constructor(options: EnvelopeWriterOptions = {}) {
    const initialBytes = options.initialBytes ?? ENVELOPE_WRITER_DEFAULTS.initialBytes;
    if (!(Number.isInteger(initialBytes) && initialBytes >= 64)) {
      throw new Error(`initialBytes must be an integer >= 64, initialBytes=${initialBytes}`);
    }
    this.buf = Buffer.alloc(initialBytes);
    this.view = new Uint8Array(this.buf.buffer, this.buf.byteOffset, this.buf.length);
    this.keyCacheLengthMax =
      options.keyCacheLengthMax ?? ENVELOPE_WRITER_DEFAULTS.keyCacheLengthMax;
    this.keys = new Utf8Cache(
      options.keyCacheEntriesMax ?? ENVELOPE_WRITER_DEFAULTS.keyCacheEntriesMax,
      this.keyCacheLengthMax,
    );
  }

  /**
   * Builds `e` in the writer's buffer (replacing the previous one) and returns its size in bytes.
   *
   * @throws Error when `type` is not an integer in 1 .. 2^32-1, or a given cause field is out of
   *   range (queue/partition: uint32, index: integer 0 .. 2^53-1).
   */
  build(e: EnvelopeInit): number {
    const type = e.type;
    if (!(type >= 1 && type <= 0xffffffff && Number.isInteger(type))) {
      throw new Error(`envelope type must be an integer in 1 .. 2^32-1, type=${type}`);
    }
    this.built = false;
    const causeIndex = e.causeIndex;
    const hasCause = causeIndex !== undefined && causeIndex >= 0;
    let causeQueue = 0;
    let causePartition = 0;
    if (hasCause) {
      causeQueue = e.causeQueue ?? 0;
      causePartition = e.causePartition ?? 0;
      if (!(causeIndex <= INDEX_MAX && Number.isInteger(causeIndex))) {
        throw new Error(`causeIndex must be an integer in 0 .. 2^53-1, causeIndex=${causeIndex}`);
      }
      if (causeQueue >>> 0 !== causeQueue) {
        throw new Error(`causeQueue must be a uint32, causeQueue=${causeQueue}`);
      }
      if (causePartition >>> 0 !== causePartition) {
        throw new Error(`causePartition must be a uint32, causePartition=${causePartition}`);
      }
    }
    const key = e.key;
    const payload = e.payload;
    const payloadLength = payload != null ? payload.length : 0;
    const cachedKey =
      key != null && key.length <= this.keyCacheLengthMax ? this.keys.encode(key) : null;
    const tableBytes = hasCause ? TABLE_BYTES_CAUSE : TABLE_BYTES;
    const end = TABLE + tableBytes;
    // Worst case: 3 UTF-8 bytes per UTF-16 unit, length prefix, NUL, padding.
    const worst =
      end +
      (key != null ? 8 + (cachedKey !== null ? cachedKey.length : 3 * key.length) : 0) +
      8 +
      payloadLength;
    if (worst > this.buf.length) this.grow(worst);
    const b = this.buf;
    const u = this.view;
    const fKey = hasCause ? FC_KEY : F_KEY;
    const fPayload = hasCause ? FC_PAYLOAD : F_PAYLOAD;
    const fType = hasCause ? FC_TYPE : F_TYPE;
    const eventTimeMs = e.eventTimeMs;
    // Root offset and vtable.
    b.writeUInt32LE(TABLE, 0);
    b.writeUInt16LE(VTABLE_BYTES, VTABLE);
    b.writeUInt16LE(tableBytes, VTABLE + 2);
    b.writeUInt16LE(fType, VTABLE + 4);
    b.writeUInt16LE(key != null ? fKey : 0, VTABLE + 6);
    b.writeUInt16LE(eventTimeMs !== undefined ? F_TIME : 0, VTABLE + 8);
    b.writeUInt16LE(hasCause ? FC_CAUSE : 0, VTABLE + 10);
    b.writeUInt16LE(payloadLength > 0 ? fPayload : 0, VTABLE + 12);
    u[VTABLE + 14] = 0;
    u[VTABLE + 15] = 0;
    // The table.
    b.writeInt32LE(TABLE - VTABLE, TABLE);
    b.writeDoubleLE(eventTimeMs !== undefined ? eventTimeMs : 0, TABLE + F_TIME);
    if (hasCause) {
      b.writeUInt32LE(causeQueue, TABLE + FC_CAUSE);
      b.writeUInt32LE(causePartition, TABLE + FC_CAUSE + 4);
      b.writeDoubleLE(causeIndex, TABLE + FC_CAUSE + 8);
    }
    b.writeUInt32LE(type, TABLE + fType);
    let at = end;
    if (key != null) {
      let n: number;
      if (cachedKey !== null) {
        n = cachedKey.length;
        for (let i = 0; i < n; i++) u[at + 4 + i] = cachedKey[i];
      } else {
        n = b.write(key, at + 4, 'utf8');
      }
      b.writeUInt32LE(n, at);
      b.writeUInt32LE(at - (TABLE + fKey), TABLE + fKey);
      const stop = at + 4 + n;
      // NUL, then zero padding to a multiple of 4.
      at = (stop + 4) & ~3;
      for (let i = stop; i < at; i++) u[i] = 0;
    } else {
      b.writeUInt32LE(0, TABLE + fKey);
    }
    if (payloadLength > 0) {
      if ((at & 7) === 0) {
        b.writeUInt32LE(0, at);
        at += 4;
      }
      b.writeUInt32LE(payloadLength, at);
      b.writeUInt32LE(at - (TABLE + fPayload), TABLE + fPayload);
      at += 4;
      if (payloadLength <= COPY_LOOP_BYTES_MAX) {
        for (let i = 0; i < payloadLength; i++) u[at + i] = payload![i];
      } else {
        u.set(payload!, at);
      }
      at += payloadLength;
    } else {
      b.writeUInt32LE(0, TABLE + fPayload);
    }
    this.size = at;
    this.built = true;
    return at;
  }

  /** Size in bytes of the last built envelope. @throws Error if nothing was built. */
  get length(): number {
    this.assertBuilt();
    return this.size;
  }

  /**
   * The last built envelope, as a view of the writer's buffer: valid only until the next build.
   * @throws Error if nothing was built.
   */
  bytes(): Uint8Array {
    this.assertBuilt();
    return this.view.subarray(0, this.size);
  }

  /**
   * Copies the last built envelope into `target` at `offset`; returns the bytes written.
   * @throws RangeError if it does not fit; Error if nothing was built.
   */
  copyTo(target: Uint8Array, offset: number): number {
    this.assertBuilt();
    const n = this.size;
    checkRange(target, offset, n);
    const u = this.view;
    if (n <= COPY_LOOP_BYTES_MAX) {
      for (let i = 0; i < n; i++) target[offset + i] = u[i];
    } else {
      target.set(u.subarray(0, n), offset);
    }
    return n;
  }

  /**
   * Builds `e` and returns a copy the caller owns. Small copies share a slab ArrayBuffer with
   * other results (like Node's Buffer pool): never transfer or detach `.buffer`.
   * @throws as `build`.
   */
  encode(e: EnvelopeInit): Uint8Array {
    this.build(e);
    return copyBytes(this.view.subarray(0, this.size));
  }

  /**
   * Builds `e` and copies it into `target` at `offset`; returns the bytes written.
   * @throws as `build`; RangeError if it does not fit (target unchanged).
   */
  encodeInto(e: EnvelopeInit, target: Uint8Array, offset: number): number {
    this.build(e);
    return this.copyTo(target, offset);
  }

  /** Replaces the buffer by one of at least `bytes` (doubling); it keeps its largest size. */
  private grow(bytes: number): void {
    let size = this.buf.length;
    while (size < bytes) size *= 2;
    this.buf = Buffer.alloc(size);
    this.view = new Uint8Array(this.buf.buffer, this.buf.byteOffset, this.buf.length);
  }

  private assertBuilt(): void {
    if (!this.built) throw new Error('no envelope built: call build() first');
  }
}

/**
 * A reusable zero-copy reader of one envelope at a time: `wrap()` it over the bytes (any
 * Uint8Array, e.g. a ring's data area or a journal record, SharedArrayBuffer-backed or not), then
 * read the getters. Nothing is copied: `payload` is a view into the wrapped bytes and is valid as
 * long as they are (for a ring: until the record is released).
 *
 * The bytes are trusted (written by EnvelopeWriter, checksummed by the journal): `wrap` checks
 * only that the root offset lies inside the range, not every field offset.
 */
export class EnvelopeView {
  private readonly table = new Envelope();
  private readonly cause = new Cause();
  private readonly buffers = new ByteBufferCache();
  private bytesByteOffset = 0;
  private wrapped = false;

  /**
   * Points the view at the envelope in `bytes[offset, offset + length)`; returns `this`.
   * @throws RangeError when the range is outside `bytes`, shorter than 8 bytes, or the root
   *   offset points outside it.
   */
  wrap(bytes: Uint8Array, offset: number, length: number): this {
    checkRange(bytes, offset, length);
    if (length < ENVELOPE_BYTES_MIN) {
      throw new RangeError(
        `envelope must be at least ${ENVELOPE_BYTES_MIN} bytes, length=${length}`,
      );
    }
    const bb = this.buffers.over(bytes);
    const start = bytes.byteOffset + offset;
    const root = start + bb.readInt32(start);
    if (root < start + 4 || root > start + length - 4) {
      this.wrapped = false;
      throw new RangeError(
        `envelope root offset out of range: offset=${offset} length=${length} ` +
          `root=${root - bytes.byteOffset}`,
      );
    }
    this.table.__init(root, bb);
    this.bytesByteOffset = bytes.byteOffset;
    this.wrapped = true;
    return this;
  }

  /** Event type id (uint32; 0 only if absent, which EnvelopeWriter never writes). */
  get type(): number {
    return this.table.type();
  }

  /** The key, decoded from UTF-8 on each call; null when absent. */
  get key(): string | null {
    const bytes = this.table.key(Encoding.UTF8_BYTES) as Uint8Array | null;
    return bytes === null ? null : decodeUtf8(bytes, 0, bytes.length);
  }

  /** The key's UTF-8 bytes as a view (no decoding, no copy); null when absent. */
  get keyBytes(): Uint8Array | null {
    return this.table.key(Encoding.UTF8_BYTES) as Uint8Array | null;
  }

  /** Event time, ms since the Unix epoch; 0 when absent. */
  get eventTimeMs(): number {
    return this.table.eventTimeMs();
  }

  /** Whether the envelope records the input that caused it. */
  get hasCause(): boolean {
    return this.table.cause(this.cause) !== null;
  }

  /** queueId() of the cause's input queue; 0 when there is no cause. */
  get causeQueue(): number {
    return this.table.cause(this.cause)?.queue() ?? 0;
  }

  /** Partition of the cause's input queue; 0 when there is no cause. */
  get causePartition(): number {
    return this.table.cause(this.cause)?.partition() ?? 0;
  }

  /** Index of the cause's input record; -1 when there is no cause. */
  get causeIndex(): number {
    return this.table.cause(this.cause)?.index() ?? -1;
  }

  /** The payload as a view into the wrapped bytes (no copy); empty when absent. */
  get payload(): Uint8Array {
    return this.table.payloadArray() ?? EMPTY_BYTES;
  }

  /** Offset of the payload within the wrapped `bytes` (as passed to wrap); with payloadLength. */
  get payloadOffset(): number {
    const payload = this.table.payloadArray();
    return payload === null ? 0 : payload.byteOffset - this.bytesByteOffset;
  }

  /** Payload length in bytes. */
  get payloadLength(): number {
    return this.table.payloadLength();
  }

  /** Copies every field out into plain data (payload copied). @throws Error if not wrapped. */
  toFields(): EnvelopeFields {
    if (!this.wrapped) throw new Error('EnvelopeView is not wrapped: call wrap() first');
    return {
      type: this.type,
      key: this.key,
      eventTimeMs: this.eventTimeMs,
      causeQueue: this.causeQueue,
      causePartition: this.causePartition,
      causeIndex: this.causeIndex,
      payload: this.payload.slice(),
    };
  }
}

/**
 * Decodes one envelope from `bytes[offset, offset + length)` (default: all of it) into plain data,
 * copying the payload. For hot paths use a reused `EnvelopeView` instead.
 * @throws RangeError as `EnvelopeView.wrap`.
 */
export function decodeEnvelope(
  bytes: Uint8Array,
  offset = 0,
  length = bytes.length - offset,
): EnvelopeFields {
  return new EnvelopeView().wrap(bytes, offset, length).toFields();
}
