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
import { BusError, type BusErrorCode, type GroupMetadata, type TopicPartition } from '../types.js'

/** An error as it crosses the port. */
export interface WireError {
  code?: BusErrorCode
  message: string
}

/** A consumer's synchronous state, sent with every answer and callback about it. */
export interface ConsumerState {
  assignment: TopicPartition[]
  /** Position of each partition of `assignment`, same order. */
  positions: number[]
  group: GroupMetadata | null
}

/** Values of a record list, packed: `at[i]` = [start, length] in `buffer`, or null for null. */
export interface PackedValues {
  buffer: ArrayBuffer
  at: ([number, number] | null)[]
}

/** The error thrown on the other side, as data. */
export function toWire(e: unknown): WireError {
  if (e instanceof BusError) return { code: e.code, message: e.message }
  return { message: e instanceof Error ? e.message : String(e) }
}

/** A WireError as the Error the caller would have seen in-process (BusError keeps its code). */
export function fromWire(w: WireError): Error {
  return w.code !== undefined ? new BusError(w.code, w.message) : new Error(w.message)
}

/** Copies every value into one buffer (transferable); the records keep everything else. */
export function packValues(values: readonly (Uint8Array | null)[]): PackedValues {
  let bytes = 0
  for (const v of values) if (v !== null) bytes += v.byteLength
  const out = new Uint8Array(bytes)
  const at: PackedValues['at'] = new Array(values.length)
  let o = 0
  for (let i = 0; i < values.length; i++) {
    const v = values[i]
    if (v === null) {
      at[i] = null
      continue
    }
    out.set(v, o)
    at[i] = [o, v.byteLength]
    o += v.byteLength
  }
  return { buffer: out.buffer, at }
}

/** Views of the packed values (no copy). */
export function unpackValues(p: PackedValues): (Uint8Array | null)[] {
  return p.at.map((x) => (x === null ? null : new Uint8Array(p.buffer, x[0], x[1])))
}
