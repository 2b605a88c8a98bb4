/**
 * Messages between a bus owner ({@link serveBus}, the thread that opened the bus) and a
 * {@link connectBus} client in another worker thread, over one MessagePort.
 *
 * Why: a journal bus is in-process state (its consumer groups, fencing epochs, hot windows) over
 * files that only one bus instance may have open (each partition's appender lock), so worker
 * threads cannot each open it; they share the one instance through this protocol instead.
 *
 * ```
 *  client -> owner   { id, op, args }                request; answered once by
 *  owner  -> client  { id, ok: true, value }         or { id, ok: false, error: WireError }
 *  owner  -> client  { cb, consumer, kind, tps, state }   rebalance callback, inside the owner's poll
 *  client -> owner   { cbDone, error? }              the callback returned (the poll goes on)
 *  client -> owner   { op: seek|pause|resume, ... }  no answer (synchronous in the bus API)
 * ```
 * MessagePort delivery is in order, so a seek sent before a poll request takes effect before it.
 * Record values cross as one packed ArrayBuffer per message ({@link packValues}), transferred,
 * not cloned: a value that is a view into a bus slab would otherwise clone the whole slab.
 */
import { BusError, type BusErrorCode, type GroupMetadata, type TopicPartition } from '../types.js';

/** An error as it crosses the port. */
export interface WireError {
  code?: BusErrorCode;
  message: string;
}

/** A consumer's synchronous state, sent with every answer and callback about it. */
export interface ConsumerState {
  assignment: TopicPartition[];
  /** Position of each partition of `assignment`, same order. */
  positions: number[];
  group: GroupMetadata | null;
}

/** Values of a record list, packed: `at[i]` = [start, length] in `buffer`, or null for null. */
export interface PackedValues {
  buffer: ArrayBuffer;
  at: ([number, number] | null)[];
}

/** The error thrown on the other side, as data. */
export function toWire(e: unknown): WireError {
  if (e instanceof BusError) return { code: e.code, message: e.message };
  return { message: e instanceof Error ? e.message : String(e) };
}

/** A WireError as the Error the caller would have seen in-process (BusError keeps its code). */
export function fromWire(w: WireError): Error {
  return w.code !== undefined ? new BusError(w.code, w.message) : new Error(w.message);
}

/** Copies every value into one buffer (transferable); the records keep everything else. */
export function packValues(values: readonly (Uint8Array | null)[]): PackedValues {
  let bytes = 0;
  for (const v of values) if (v !== null) bytes += v.byteLength;
  const out = new Uint8Array(bytes);
  const at: PackedValues['at'] = new Array(values.length);
  let o = 0;
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (v === null) {
      at[i] = null;
      continue;
    }
    out.set(v, o);
    at[i] = [o, v.byteLength];
    o += v.byteLength;
  }
  return { buffer: out.buffer, at };
}

/** Views of the packed values (no copy). */
export function unpackValues(p: PackedValues): (Uint8Array | null)[] {
  return p.at.map((x) => (x === null ? null : new Uint8Array(p.buffer, x[0], x[1])));
}

/**
 * A list of records in columns, so that a poll or a send crosses the port as a few typed arrays
 * (transferred) and two plain arrays instead of one cloned object per record:
 * `topics` run-length ([topic, count] in record order), numbers in typed arrays, `headers` null
 * when no record has one. Producer records: partition -1 = the key's, timestamp NaN = send time.
 */
export interface WireRecords {
  topics: [string, number][];
  partitions: Int32Array;
  offsets: Float64Array;
  timestamps: Float64Array;
  keys: (string | null)[];
  headers: (Record<string, string> | null)[] | null;
  values: PackedValues;
}

interface AnyRecord {
  topic: string;
  key: string | null;
  value: Uint8Array | null;
  partition?: number;
  offset?: number;
  timestampMs?: number;
  headers?: Record<string, string>;
}

/** Encodes `records` in columns; returns the buffers to transfer with it. */
export function toWireRecords(records: readonly AnyRecord[]): {
  wire: WireRecords;
  transfer: ArrayBuffer[];
} {
  const n = records.length;
  const topics: [string, number][] = [];
  const partitions = new Int32Array(n);
  const offsets = new Float64Array(n);
  const timestamps = new Float64Array(n);
  const keys: (string | null)[] = new Array(n);
  let headers: (Record<string, string> | null)[] | null = null;
  for (let i = 0; i < n; i++) {
    const r = records[i];
    const last = topics[topics.length - 1];
    if (last !== undefined && last[0] === r.topic) last[1]++;
    else topics.push([r.topic, 1]);
    partitions[i] = r.partition ?? -1;
    offsets[i] = r.offset ?? -1;
    timestamps[i] = r.timestampMs ?? NaN;
    keys[i] = r.key;
    const h = r.headers;
    if (h !== undefined) {
      let empty = true;
      for (const _k in h) {
        empty = false;
        break;
      }
      if (!empty) {
        headers ??= new Array<Record<string, string> | null>(n).fill(null);
        headers[i] = h;
      }
    }
  }
  const values = packValues(records.map((r) => r.value));
  return {
    wire: { topics, partitions, offsets, timestamps, keys, headers, values },
    transfer: [values.buffer, partitions.buffer, offsets.buffer, timestamps.buffer],
  };
}

/** Records consumed on the owner's side, as the client's poll returns them. */
export function fromWireConsumed(w: WireRecords): {
  topic: string;
  partition: number;
  offset: number;
  key: string | null;
  value: Uint8Array | null;
  headers: Record<string, string>;
  timestampMs: number;
}[] {
  const values = unpackValues(w.values);
  const out = new Array(w.keys.length);
  let i = 0;
  for (const [topic, count] of w.topics) {
    for (let k = 0; k < count; k++, i++) {
      out[i] = {
        topic,
        partition: w.partitions[i],
        offset: w.offsets[i],
        key: w.keys[i],
        value: values[i],
        headers: w.headers?.[i] ?? {},
        timestampMs: w.timestamps[i],
      };
    }
  }
  return out;
}

/** Records the client sends, as the owner's producer takes them. */
export function fromWireProduced(w: WireRecords): AnyRecord[] {
  const values = unpackValues(w.values);
  const out: AnyRecord[] = new Array(w.keys.length);
  let i = 0;
  for (const [topic, count] of w.topics) {
    for (let k = 0; k < count; k++, i++) {
      const r: AnyRecord = { topic, key: w.keys[i], value: values[i] };
      if (w.partitions[i] >= 0) r.partition = w.partitions[i];
      if (!Number.isNaN(w.timestamps[i])) r.timestampMs = w.timestamps[i];
      const h = w.headers?.[i];
      if (h) r.headers = h;
      out[i] = r;
    }
  }
  return out;
}
