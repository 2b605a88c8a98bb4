/**
 * Byte layouts of the journal bus backend: the one module that owns them (engine/bus/journal
 * asks it for every encode and decode). Every journal record of the backend is one *entry*; all
 * integers are little-endian; `u64` is an unsigned integer below 2^53 (a JS number) stored as
 * low u32 then high u32; `str` is `[bytes:u32][UTF-8]`.
 *
 * Partition batch: one journal record in `t/<topic>/<partition>` per transaction that wrote the
 * partition (after Kafka's RecordBatch: one header for the records of one write).
 * ```
 *   0       4               12              20              28              36      40
 *   +-------+---------------+---------------+---------------+---------------+-------+--------
 *   | magic |      seq      |  baseOffset   |   endOffset   | stableOffset  | count | records
 *   | SLB2  |      u64      |      u64      |      u64      |      u64      |  u32  |  ...
 *   +-------+---------------+---------------+---------------+---------------+-------+--------
 * ```
 * `seq`: sequence number of the transaction-log entry that wrote the batch; `endOffset`: the
 * partition's end offset after the write (markers included); `stableOffset`: a lower bound of
 * the offsets of every record in any LATER batch of the partition (the last stable offset at the
 * write, not counting the batch's own transaction). Batches are in commit order, which is not
 * offset order when transactions overlap, so a reader by offset may hand out the records below
 * a batch's stableOffset once it has read that batch (./cold.ts). Batches of the first layout
 * (magic SLB1, no stableOffset) read as stableOffset = baseOffset. `count` records, each:
 * ```
 *   +-------+-------------+-------------+---------+-----------+-------------------+---------+
 *   | flags | offsetDelta | timestampMs |  key    | headerCnt | headers           | value   |
 *   |  u8   |    u32      |    f64      |  str?   |    u32    | (name str, value  | bytes?  |
 *   |       |             |             |         |           |  str) x headerCnt |         |
 *   +-------+-------------+-------------+---------+-----------+-------------------+---------+
 * ```
 * flags: bit 0 = key is null (no key field), bit 1 = value is null (tombstone, no value field);
 * offset = baseOffset + offsetDelta; value = `[bytes:u32][bytes]`.
 *
 * Transaction-log entry: one journal record in `txn` per commit, the commit point.
 * ```
 *   0       4               12          16           20
 *   +-------+---------------+-----------+------------+--------------------+-----------------+
 *   | magic |      seq      | partCount | groupCount | parts ...          | groups ...      |
 *   | SLT1  |      u64      |    u32    |    u32     |                    |                 |
 *   +-------+---------------+-----------+------------+--------------------+-----------------+
 *   part:  topic str | partition u32 | batchBytes u32 | partition batch (as above, same seq)
 *   group: groupId str | positionCount u32 | (topic str, partition u32, offset u64) x count
 * ```
 * A part's batch bytes are exactly the journal record the commit then appends to the partition's
 * queue (encoded once, copied twice).
 *
 * Group-log entry (queue `groups`): `[magic SLG1][seq u64][groupCount u32][group x groupCount]`,
 * the groups of one transaction-log entry. Topic entry (queue `topics`):
 * `[magic SLS1][name str][partitions u32][flags u8: bit 0 = compacted]`.
 *
 * The magic numbers make a directory written by another layout (the earlier JSON layout began
 * with a small length) fail with a clear error instead of being misread.
 */
import type { BusRecord, ConsumedRecord, TopicSpec } from '../types.js';
import type { GroupWrite, PartitionWrite, StoredRecord } from '../store.js';

/** 'SLB2', 'SLT1', 'SLG1', 'SLS1' read as u32 little-endian ('SLB1': the first batch layout). */
export const MAGIC_BATCH = 0x32424c53;
export const MAGIC_BATCH_V1 = 0x31424c53;
export const MAGIC_TXN = 0x31544c53;
export const MAGIC_GROUP = 0x3147_4c53;
export const MAGIC_TOPIC = 0x31534c53;

/** Bytes of a partition batch header (magic, seq, baseOffset, endOffset, stableOffset, count). */
export const BATCH_HEADER_BYTES = 40;

const FLAG_KEY_NULL = 1;
const FLAG_VALUE_NULL = 2;
const U32_MAX = 0xffffffff;
const TWO_32 = 0x1_0000_0000;

const utf8 = new TextEncoder();
const utf8Decoder = new TextDecoder();
/** Strings up to this many bytes are decoded by hand when they are ASCII. */
const SHORT_ASCII_MAX = 32;
/** Headers of every decoded record that has none: one frozen object, as the memory backend's. */
const NO_HEADERS: Record<string, string> = Object.freeze({});

/**
 * A growable scratch buffer entries are encoded into; reused across commits (the appenders copy
 * what they are given), so encoding allocates only when an entry outgrows every earlier one.
 */
export class EntryWriter {
  private buf: Uint8Array;
  private dv: DataView;
  /** Bytes written so far. */
  at = 0;

  constructor(initialBytes = 64 * 1024) {
    this.buf = new Uint8Array(initialBytes);
    this.dv = new DataView(this.buf.buffer);
  }

  reset(): void {
    this.at = 0;
  }

  /** Bytes `[from, to)` written so far; valid until the next write or reset. */
  view(from = 0, to = this.at): Uint8Array {
    return this.buf.subarray(from, to);
  }

  ensure(bytes: number): void {
    const needed = this.at + bytes;
    if (needed <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < needed) size *= 2;
    const bigger = new Uint8Array(size);
    bigger.set(this.buf.subarray(0, this.at));
    this.buf = bigger;
    this.dv = new DataView(bigger.buffer);
  }

  u8(v: number): void {
    this.ensure(1);
    this.buf[this.at++] = v;
  }

  u32(v: number): void {
    this.ensure(4);
    putU32(this.buf, this.at, v);
    this.at += 4;
  }

  /** Overwrites the u32 at `at` (a length written before its bytes were known). */
  patchU32(at: number, v: number): void {
    putU32(this.buf, at, v);
  }

  u64(v: number): void {
    this.ensure(8);
    putU32(this.buf, this.at, v >>> 0);
    putU32(this.buf, this.at + 4, Math.floor(v / TWO_32));
    this.at += 8;
  }

  f64(v: number): void {
    this.ensure(8);
    this.dv.setFloat64(this.at, v, true);
    this.at += 8;
  }

  str(s: string): void {
    const n = s.length;
    // At most 3 UTF-8 bytes per UTF-16 unit.
    this.ensure(4 + n * 3);
    const buf = this.buf;
    const start = this.at + 4;
    for (let i = 0; i < n; i++) {
      const c = s.charCodeAt(i);
      if (c >= 0x80) {
        const written = utf8.encodeInto(s, buf.subarray(start)).written;
        putU32(buf, this.at, written);
        this.at = start + written;
        return;
      }
      buf[start + i] = c;
    }
    putU32(buf, this.at, n);
    this.at = start + n;
  }

  bytes(b: Uint8Array): void {
    this.ensure(4 + b.length);
    putU32(this.buf, this.at, b.length);
    this.buf.set(b, this.at + 4);
    this.at += 4 + b.length;
  }
}

function putU32(buf: Uint8Array, at: number, v: number): void {
  buf[at] = v;
  buf[at + 1] = v >>> 8;
  buf[at + 2] = v >>> 16;
  buf[at + 3] = v >>> 24;
}

/**
 * Reads an entry, checking every length against the entry's end. `where` names the entry in
 * errors (queue and record index), e.g. `txn record 12`.
 */
export class EntryReader {
  private readonly dv: DataView;
  at = 0;

  constructor(
    readonly bytes: Uint8Array,
    readonly where: string,
  ) {
    this.dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }

  private need(n: number, what: string): void {
    if (this.at + n > this.bytes.length) {
      throw new Error(
        `journal bus entry ends inside its ${what}, ${this.where} at=${this.at} needed=${n} entryBytes=${this.bytes.length}`,
      );
    }
  }

  u8(what: string): number {
    this.need(1, what);
    return this.bytes[this.at++];
  }

  u32(what: string): number {
    this.need(4, what);
    const v = this.dv.getUint32(this.at, true);
    this.at += 4;
    return v;
  }

  u64(what: string): number {
    this.need(8, what);
    const lo = this.dv.getUint32(this.at, true);
    const hi = this.dv.getUint32(this.at + 4, true);
    if (hi >= 0x200000)
      throw new Error(`journal bus ${what} is not below 2^53, ${this.where} at=${this.at}`);
    this.at += 8;
    return hi * TWO_32 + lo;
  }

  f64(what: string): number {
    this.need(8, what);
    const v = this.dv.getFloat64(this.at, true);
    this.at += 8;
    return v;
  }

  /** A view of the next `n` bytes (not a copy). */
  take(n: number, what: string): Uint8Array {
    this.need(n, what);
    const v = this.bytes.subarray(this.at, this.at + n);
    this.at += n;
    return v;
  }

  str(what: string): string {
    const n = this.u32(`${what} length`);
    if (n <= SHORT_ASCII_MAX) {
      this.need(n, what);
      const b = this.bytes;
      const at = this.at;
      let ascii = true;
      for (let i = 0; i < n; i++) if (b[at + i] >= 0x80) ascii = false;
      if (ascii) {
        // Keys and header names are mostly short ASCII: cheaper than a TextDecoder call.
        let out = '';
        for (let i = 0; i < n; i++) out += String.fromCharCode(b[at + i]);
        this.at += n;
        return out;
      }
    }
    return utf8Decoder.decode(this.take(n, what));
  }

  magic(expected: number, what: string): void {
    const m = this.u32(`${what} magic`);
    if (m !== expected) {
      throw new Error(
        `not a journal bus ${what} (magic 0x${m.toString(16)}, expected 0x${expected.toString(16)}; written by another layout?), ${this.where}`,
      );
    }
  }

  /** Throws unless every byte was read. */
  end(what: string): void {
    if (this.at !== this.bytes.length)
      throw new Error(
        `journal bus ${what} has ${this.bytes.length - this.at} bytes after its end, ${this.where}`,
      );
  }
}

/** Where each part's batch sits in an encoded transaction-log entry. */
export interface EncodedTxn {
  /** The whole transaction-log entry; a view of the writer, valid until its next use. */
  entry: Uint8Array;
  /** Per write (same order): the partition batch, a view inside `entry`. */
  batches: Uint8Array[];
}

/**
 * Encodes a transaction-log entry for `writes` and `groups` into `w` (reset first). Throws Error
 * naming the partition if a record's offset is below the batch's first or more than 2^32 above.
 */
export function encodeTxn(
  w: EntryWriter,
  seq: number,
  writes: readonly PartitionWrite[],
  groups: readonly GroupWrite[],
): EncodedTxn {
  w.reset();
  w.u32(MAGIC_TXN);
  w.u64(seq);
  w.u32(writes.length);
  w.u32(groups.length);
  const ranges: number[] = [];
  for (const pw of writes) {
    w.str(pw.topic);
    w.u32(pw.partition);
    const lengthAt = w.at;
    w.u32(0);
    const start = w.at;
    encodeBatch(w, seq, pw);
    w.patchU32(lengthAt, w.at - start);
    ranges.push(start, w.at);
  }
  for (const g of groups) encodeGroup(w, g);
  const batches = new Array<Uint8Array>(writes.length);
  for (let i = 0; i < writes.length; i++) batches[i] = w.view(ranges[2 * i], ranges[2 * i + 1]);
  return { entry: w.view(), batches };
}

function encodeBatch(w: EntryWriter, seq: number, pw: PartitionWrite): void {
  const records = pw.records;
  const offsets = pw.offsets;
  if (offsets.length !== records.length)
    throw new Error(
      `a partition write needs one offset per record, topic=${pw.topic} partition=${pw.partition} records=${records.length} offsets=${offsets.length}`,
    );
  const base = records.length > 0 ? offsets[0] : pw.endOffset;
  w.u32(MAGIC_BATCH);
  w.u64(seq);
  w.u64(base);
  w.u64(pw.endOffset);
  w.u64(Math.min(pw.stableOffset, pw.endOffset));
  w.u32(records.length);
  for (let i = 0; i < records.length; i++) {
    const offset = offsets[i];
    const r = records[i];
    const delta = offset - base;
    if (!(delta >= 0 && delta <= U32_MAX)) {
      throw new Error(
        `record offsets of one write must lie in [first, first + 2^32), topic=${pw.topic} partition=${pw.partition} first=${base} offset=${offset}`,
      );
    }
    w.u8((r.key === null ? FLAG_KEY_NULL : 0) | (r.value === null ? FLAG_VALUE_NULL : 0));
    w.u32(delta);
    w.f64(r.timestampMs);
    if (r.key !== null) w.str(r.key);
    const headers = r.headers;
    let n = 0;
    for (const name in headers) n++;
    w.u32(n);
    if (n > 0) {
      for (const name in headers) {
        w.str(name);
        w.str(headers[name]);
      }
    }
    if (r.value !== null) w.bytes(r.value);
  }
}

function encodeGroup(w: EntryWriter, g: GroupWrite): void {
  w.str(g.groupId);
  w.u32(g.positions.length);
  for (const p of g.positions) {
    w.str(p.topic);
    w.u32(p.partition);
    w.u64(p.offset);
  }
}

/** Encodes a group-log entry into `w` (reset first); returns a view of it. */
export function encodeGroupEntry(
  w: EntryWriter,
  seq: number,
  groups: readonly GroupWrite[],
): Uint8Array {
  w.reset();
  w.u32(MAGIC_GROUP);
  w.u64(seq);
  w.u32(groups.length);
  for (const g of groups) encodeGroup(w, g);
  return w.view();
}

/** Encodes a topic entry (a fresh array). */
export function encodeTopic(spec: TopicSpec): Uint8Array {
  const w = new EntryWriter(64);
  w.u32(MAGIC_TOPIC);
  w.str(spec.name);
  w.u32(spec.partitions);
  const options = spec.retention || spec.compaction;
  w.u8((spec.compacted ? 1 : 0) | (options ? 2 : 0));
  if (options) w.str(JSON.stringify({ retention: spec.retention, compaction: spec.compaction }));
  return w.view().slice();
}

export function decodeTopic(bytes: Uint8Array, where: string): TopicSpec {
  const r = new EntryReader(bytes, where);
  r.magic(MAGIC_TOPIC, 'topic entry');
  const name = r.str('topic name');
  const partitions = r.u32('partition count');
  const flags = r.u8('topic flags');
  const spec: TopicSpec = flags & 1 ? { name, partitions, compacted: true } : { name, partitions };
  if (flags & 2) {
    const text = r.str('topic options');
    let o: Pick<TopicSpec, 'retention' | 'compaction'>;
    try {
      o = JSON.parse(text) as Pick<TopicSpec, 'retention' | 'compaction'>;
    } catch (e) {
      throw new Error(`journal bus topic options are not JSON, ${where}: ${(e as Error).message}`);
    }
    if (o.retention) spec.retention = o.retention;
    if (o.compaction) spec.compaction = o.compaction;
  }
  r.end('topic entry');
  return spec;
}

/**
 * Encodes one partition batch (as a transaction writes it) into `w` (reset first); returns a
 * copy. For compaction, which rewrites a batch with fewer records, same seq and offsets.
 */
export function encodePartitionBatch(w: EntryWriter, seq: number, pw: PartitionWrite): Uint8Array {
  w.reset();
  encodeBatch(w, seq, pw);
  return w.view().slice();
}

/** The header of a partition batch (its records left undecoded). */
export interface BatchHeader {
  seq: number;
  /** Offset of the first record (the end offset when the batch holds none). */
  baseOffset: number;
  endOffset: number;
  /** Records of later batches have offsets >= this (see the layout). */
  stableOffset: number;
  count: number;
}

/** Decodes the header of a partition batch; throws Error naming `where` on bad input. */
export function decodeBatchHeader(bytes: Uint8Array, where: string): BatchHeader {
  return readBatchHeader(new EntryReader(bytes, where));
}

function readBatchHeader(r: EntryReader): BatchHeader {
  const m = r.u32('partition batch magic');
  if (m !== MAGIC_BATCH && m !== MAGIC_BATCH_V1) {
    throw new Error(
      `not a journal bus partition batch (magic 0x${m.toString(16)}, expected 0x${MAGIC_BATCH.toString(16)}; written by another layout?), ${r.where}`,
    );
  }
  const seq = r.u64('batch seq');
  const baseOffset = r.u64('batch base offset');
  const endOffset = r.u64('batch end offset');
  const stableOffset = m === MAGIC_BATCH ? r.u64('batch stable offset') : baseOffset;
  const count = r.u32('batch record count');
  return { seq, baseOffset, endOffset, stableOffset, count };
}

/** A decoded partition batch. */
export interface DecodedBatch {
  seq: number;
  endOffset: number;
  stableOffset: number;
  records: StoredRecord[];
}

/**
 * Decodes a partition batch. Record values are views into `bytes`: pass bytes the caller owns
 * (not a tailer's reused buffer). Throws Error naming `where` and the byte offset on bad input.
 */
export function decodeBatch(bytes: Uint8Array, where: string): DecodedBatch {
  const r = new EntryReader(bytes, where);
  const out = readBatch(r);
  r.end('partition batch');
  return out;
}

function readBatch(r: EntryReader): DecodedBatch {
  const { seq, baseOffset: base, endOffset, stableOffset, count } = readBatchHeader(r);
  const records = new Array<StoredRecord>(count);
  for (let i = 0; i < count; i++) {
    const flags = r.u8('record flags');
    const offset = base + r.u32('record offset delta');
    const timestampMs = r.f64('record timestamp');
    const key = flags & FLAG_KEY_NULL ? null : r.str('record key');
    const headers = readHeaders(r);
    const value =
      flags & FLAG_VALUE_NULL ? null : r.take(r.u32('record value length'), 'record value');
    const record: BusRecord = { key, value, headers, timestampMs };
    records[i] = { offset, record };
  }
  return { seq, endOffset, stableOffset, records };
}

function readHeaders(r: EntryReader): Record<string, string> {
  const headerCount = r.u32('record header count');
  if (headerCount === 0) return NO_HEADERS;
  const headers: Record<string, string> = {};
  for (let h = 0; h < headerCount; h++) {
    const name = r.str('header name');
    headers[name] = r.str('header value');
  }
  return headers;
}

/**
 * Decodes the records of a partition batch at offsets >= `from` straight into consumed records
 * of `topic`/`partition`, appended to `out` (the cold read path: one object per record). Values
 * are views into `bytes` and records without headers share one frozen headers object. Throws
 * Error naming `where` on bad input.
 */
export function decodeConsumed(
  bytes: Uint8Array,
  where: string,
  topic: string,
  partition: number,
  from: number,
  out: ConsumedRecord[],
): void {
  const r = new EntryReader(bytes, where);
  const { baseOffset: base, count } = readBatchHeader(r);
  for (let i = 0; i < count; i++) {
    const flags = r.u8('record flags');
    const offset = base + r.u32('record offset delta');
    const timestampMs = r.f64('record timestamp');
    const key = flags & FLAG_KEY_NULL ? null : r.str('record key');
    const headers = readHeaders(r);
    const value =
      flags & FLAG_VALUE_NULL ? null : r.take(r.u32('record value length'), 'record value');
    if (offset >= from) out.push({ topic, partition, offset, key, value, headers, timestampMs });
  }
  r.end('partition batch');
}

/** A decoded transaction-log entry. */
export interface DecodedTxn {
  seq: number;
  /** Each part's partition and its batch bytes (views into the entry). */
  parts: { topic: string; partition: number; batch: Uint8Array }[];
  groups: GroupWrite[];
}

/** The seq of a transaction-log entry (checks the magic only). */
export function decodeTxnSeq(bytes: Uint8Array, where: string): number {
  const r = new EntryReader(bytes, where);
  r.magic(MAGIC_TXN, 'transaction-log entry');
  return r.u64('transaction seq');
}

/** Decodes a transaction-log entry; batch bytes stay undecoded (see {@link decodeBatch}). */
export function decodeTxn(bytes: Uint8Array, where: string): DecodedTxn {
  const r = new EntryReader(bytes, where);
  r.magic(MAGIC_TXN, 'transaction-log entry');
  const seq = r.u64('transaction seq');
  const partCount = r.u32('part count');
  const groupCount = r.u32('group count');
  const parts: DecodedTxn['parts'] = [];
  for (let i = 0; i < partCount; i++) {
    const topic = r.str('part topic');
    const partition = r.u32('part partition');
    const batch = r.take(r.u32('part batch length'), 'part batch');
    parts.push({ topic, partition, batch });
  }
  const groups = readGroups(r, groupCount);
  r.end('transaction-log entry');
  return { seq, parts, groups };
}

function readGroups(r: EntryReader, count: number): GroupWrite[] {
  const groups: GroupWrite[] = [];
  for (let i = 0; i < count; i++) {
    const groupId = r.str('group id');
    const n = r.u32('position count');
    const positions: GroupWrite['positions'] = [];
    for (let j = 0; j < n; j++) {
      const topic = r.str('position topic');
      const partition = r.u32('position partition');
      positions.push({ topic, partition, offset: r.u64('position offset') });
    }
    groups.push({ groupId, positions });
  }
  return groups;
}

/** Decodes a group-log entry. */
export function decodeGroupEntry(
  bytes: Uint8Array,
  where: string,
): { seq: number; groups: GroupWrite[] } {
  const r = new EntryReader(bytes, where);
  r.magic(MAGIC_GROUP, 'group-log entry');
  const seq = r.u64('group entry seq');
  const groups = readGroups(r, r.u32('group count'));
  r.end('group-log entry');
  return { seq, groups };
}
