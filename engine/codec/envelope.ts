import { Builder, Encoding } from 'flatbuffers';
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

/**
 * Encodes envelopes (schemas/sluice.fbs `Envelope`) with one reused FlatBuffers builder and a
 * cache of pre-encoded keys, so steady-state encoding allocates nothing but the output you ask
 * for.
 *
 * FlatBuffers builds back to front, so the envelope is first built in the writer's buffer and then
 * copied once to its destination. Three ways to get the bytes:
 *
 * - `encode(e)`: a fresh Uint8Array (a copy you own);
 * - `encodeInto(e, target, offset)`: copy into `target` at `offset`, returns bytes written;
 * - size-then-write, for a ring slot: `const n = writer.build(e)`, claim `n` bytes, then
 *   `writer.copyTo(ring.bytes, slotOffset)`.
 *
 * Not thread-safe: one writer per actor. The target may be backed by a SharedArrayBuffer.
 */
export class EnvelopeWriter {
  private readonly builder: Builder;
  private readonly keys: Utf8Cache;
  private built = false;

  constructor(options: EnvelopeWriterOptions = {}) {
    const initialBytes = options.initialBytes ?? ENVELOPE_WRITER_DEFAULTS.initialBytes;
    if (!(Number.isInteger(initialBytes) && initialBytes >= 64)) {
      throw new Error(`initialBytes must be an integer >= 64, initialBytes=${initialBytes}`);
    }
    this.builder = new Builder(initialBytes);
    this.keys = new Utf8Cache(
      options.keyCacheEntriesMax ?? ENVELOPE_WRITER_DEFAULTS.keyCacheEntriesMax,
      options.keyCacheLengthMax ?? ENVELOPE_WRITER_DEFAULTS.keyCacheLengthMax,
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
    const b = this.builder;
    this.built = false;
    b.clear();

    const payload = e.payload;
    const payloadOffset = payload != null && payload.length > 0 ? b.createByteVector(payload) : 0;
    const key = e.key;
    const keyOffset = key != null ? b.createString(this.keys.encode(key)) : 0;

    Envelope.startEnvelope(b);
    // Largest fields first keeps the table free of alignment padding.
    const causeIndex = e.causeIndex;
    if (causeIndex !== undefined && causeIndex >= 0) {
      const causeQueue = e.causeQueue ?? 0;
      const causePartition = e.causePartition ?? 0;
      if (!(causeIndex <= INDEX_MAX && Number.isInteger(causeIndex))) {
        throw new Error(`causeIndex must be an integer in 0 .. 2^53-1, causeIndex=${causeIndex}`);
      }
      if (causeQueue >>> 0 !== causeQueue) {
        throw new Error(`causeQueue must be a uint32, causeQueue=${causeQueue}`);
      }
      if (causePartition >>> 0 !== causePartition) {
        throw new Error(`causePartition must be a uint32, causePartition=${causePartition}`);
      }
      Envelope.addCause(b, Cause.createCause(b, causeQueue, causePartition, causeIndex));
    }
    const eventTimeMs = e.eventTimeMs;
    if (eventTimeMs !== undefined) Envelope.addEventTimeMs(b, eventTimeMs);
    if (payloadOffset !== 0) Envelope.addPayload(b, payloadOffset);
    if (keyOffset !== 0) Envelope.addKey(b, keyOffset);
    Envelope.addType(b, type);
    Envelope.finishEnvelopeBuffer(b, Envelope.endEnvelope(b));
    this.built = true;
    return b.offset();
  }

  /** Size in bytes of the last built envelope. @throws Error if nothing was built. */
  get length(): number {
    this.assertBuilt();
    return this.builder.offset();
  }

  /**
   * The last built envelope, as a view of the writer's buffer: valid only until the next build.
   * @throws Error if nothing was built.
   */
  bytes(): Uint8Array {
    this.assertBuilt();
    return this.builder.asUint8Array();
  }

  /**
   * Copies the last built envelope into `target` at `offset`; returns the bytes written.
   * @throws RangeError if it does not fit; Error if nothing was built.
   */
  copyTo(target: Uint8Array, offset: number): number {
    this.assertBuilt();
    const src = this.builder.asUint8Array();
    checkRange(target, offset, src.length);
    target.set(src, offset);
    return src.length;
  }

  /**
   * Builds `e` and returns a copy the caller owns. Small copies share a slab ArrayBuffer with
   * other results (like Node's Buffer pool): never transfer or detach `.buffer`.
   * @throws as `build`.
   */
  encode(e: EnvelopeInit): Uint8Array {
    this.build(e);
    return copyBytes(this.builder.asUint8Array());
  }

  /**
   * Builds `e` and copies it into `target` at `offset`; returns the bytes written.
   * @throws as `build`; RangeError if it does not fit (target unchanged).
   */
  encodeInto(e: EnvelopeInit, target: Uint8Array, offset: number): number {
    this.build(e);
    return this.copyTo(target, offset);
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
