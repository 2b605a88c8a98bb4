/**
 * Byte layouts of the journal bus backend. Every journal record of the backend is one unit:
 *
 * ```
 *   0                   4                   4+h
 *   +-------------------+-------------------+---------------------------+
 *   | headerBytes:u32LE | header: JSON UTF-8 | body: bytes               |
 *   +-------------------+-------------------+---------------------------+
 * ```
 *
 * Partition record (queue `t/<topic>/<partition>`): header {@link RecordHeader}, body = value.
 * Transaction log entry (queue `txn`): header {@link TxnHeader}, body = the entry's partition
 * records, each `[length:u32LE][partition record]`, in `parts` order.
 * Group log entry (queue `groups`): header {@link GroupHeader}, empty body.
 * Topic log entry (queue `topics`): header = TopicSpec, empty body.
 */
import type { BusRecord } from '../types.js'
import type { GroupWrite, StoredRecord } from '../store.js'

const enc = new TextEncoder()
const dec = new TextDecoder()

/** Header of a partition record. */
export interface RecordHeader {
  /** Offset of the record in its partition. */
  o: number
  /** Partition end offset after the write this record belongs to (markers included). */
  e: number
  /** Sequence number of the transaction-log entry that wrote it (sends are logged too). */
  s: number
  k: string | null
  h: Record<string, string>
  ts: number
  /** true when the value is null (tombstone). */
  n?: true
}

/** Header of a transaction log entry. */
export interface TxnHeader {
  /** Transaction sequence number, from 1, increasing in log order. */
  s: number
  parts: { t: string; p: number; n: number; e: number }[]
  groups: GroupWrite[]
}

export interface GroupHeader {
  /** Sequence number of the transaction-log entry that wrote these positions. */
  s: number
  g: string
  p: [topic: string, partition: number, offset: number][]
}

/** Encodes a `[headerBytes][header][body]` unit. */
export function encodeUnit(header: unknown, body: Uint8Array | null): Uint8Array {
  const h = enc.encode(JSON.stringify(header))
  const out = new Uint8Array(4 + h.length + (body?.length ?? 0))
  new DataView(out.buffer).setUint32(0, h.length, true)
  out.set(h, 4)
  if (body) out.set(body, 4 + h.length)
  return out
}

/**
 * Decodes a unit; `body` is a copy (the tailer's bytes are valid only until its next call, and
 * may be a Buffer, whose slice() does not copy). Throws Error naming the bad length.
 */
export function decodeUnit<H>(bytes: Uint8Array): { header: H; body: Uint8Array } {
  const hLen = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength).getUint32(0, true)
  if (4 + hLen > bytes.length) throw new Error(`journal bus unit header overruns the record, headerBytes=${hLen} recordBytes=${bytes.length}`)
  return { header: JSON.parse(dec.decode(bytes.subarray(4, 4 + hLen))) as H, body: Uint8Array.prototype.slice.call(bytes, 4 + hLen) }
}

export function encodeRecord(r: StoredRecord, endOffset: number, seq: number): Uint8Array {
  const h: RecordHeader = { o: r.offset, e: endOffset, s: seq, k: r.record.key, h: r.record.headers, ts: r.record.timestampMs }
  if (r.record.value === null) h.n = true
  return encodeUnit(h, r.record.value)
}

export function decodeRecord(bytes: Uint8Array): { header: RecordHeader; record: BusRecord } {
  const { header, body } = decodeUnit<RecordHeader>(bytes)
  return { header, record: { key: header.k, value: header.n ? null : body, headers: header.h, timestampMs: header.ts } }
}

/** Concatenates `[length:u32LE][bytes]` items. */
export function encodeList(items: readonly Uint8Array[]): Uint8Array {
  let n = 0
  for (const i of items) n += 4 + i.length
  const out = new Uint8Array(n)
  const dv = new DataView(out.buffer)
  let at = 0
  for (const i of items) {
    dv.setUint32(at, i.length, true)
    out.set(i, at + 4)
    at += 4 + i.length
  }
  return out
}

export function decodeList(bytes: Uint8Array): Uint8Array[] {
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength)
  const out: Uint8Array[] = []
  for (let at = 0; at < bytes.length; ) {
    const n = dv.getUint32(at, true)
    if (at + 4 + n > bytes.length) throw new Error(`journal bus list item overruns the entry, at=${at} length=${n} entryBytes=${bytes.length}`)
    out.push(bytes.subarray(at + 4, at + 4 + n))
    at += 4 + n
  }
  return out
}
