/**
 * Snapshot records in a service's output queue. A snapshot is the bytes of the service's
 * `snapshot.write(state)`, cut into chunks of at most {@link SNAPSHOT_DEFAULTS}.chunkBytes, each
 * an envelope of the service's declared snapshot type (a user type >= 100), followed by one end
 * marker (type {@link EVENT_TYPE_SNAPSHOT_END}, reserved range 3..99) whose JSON payload names
 * the type, the chunk count, the total bytes and the input positions the state includes:
 * ```
 *  ... outputs | processed record | chunk 1 .. chunk n (type T) | end marker (type 4) | ...
 *  \__________________________ one atomic appendBatch ______________________________/
 * ```
 * The marker is the proof of completeness: a restart reads the output backwards to the newest
 * marker, then the n records before it. After Chronicle Services' snapshot restart strategy.
 */
import { EnvelopeWriter, decodeJson, encodeJson } from '../codec/index.js';

/** Envelope type of a snapshot end marker (reserved Sluice range 3..99). */
export const EVENT_TYPE_SNAPSHOT_END = 4;

/** Every bound of snapshot writing, with its default. */
export const SNAPSHOT_DEFAULTS = {
  /** Largest snapshot chunk payload, bytes. */
  chunkBytes: 1 << 20,
  /** Inputs processed between two snapshots when neither the definition nor settings say. */
  everyInputs: 10_000,
} as const;

/** JSON payload of an end marker. */
export interface SnapshotMarker {
  /** The snapshot chunks' envelope type. */
  type: number;
  chunks: number;
  bytes: number;
  /** `${queue}/${partition}` -> last input index the state includes (-1: none). */
  positions: Record<string, number>;
}

/**
 * Encodes a snapshot as envelopes to append (chunks, then the end marker), in order.
 * @param positions inputKey -> last input index included in `bytes`.
 * @throws Error if `type` is not a user type (>= 100).
 */
export function encodeSnapshot(
  writer: EnvelopeWriter,
  type: number,
  bytes: Uint8Array,
  positions: Record<string, number>,
  eventTimeMs: number,
  chunkBytes: number = SNAPSHOT_DEFAULTS.chunkBytes,
): Uint8Array[] {
  if (!(Number.isInteger(type) && type >= 100))
    throw new Error(`snapshot type must be a user type id >= 100, type=${type}`);
  if (!(chunkBytes > 0)) throw new Error(`chunkBytes must be > 0, chunkBytes=${chunkBytes}`);
  const out: Uint8Array[] = [];
  let chunks = 0;
  for (let o = 0; o < bytes.length || chunks === 0; o += chunkBytes) {
    out.push(
      writer.encode({
        type,
        eventTimeMs,
        payload: bytes.subarray(o, Math.min(bytes.length, o + chunkBytes)),
      }),
    );
    chunks++;
  }
  const marker: SnapshotMarker = { type, chunks, bytes: bytes.length, positions };
  out.push(
    writer.encode({ type: EVENT_TYPE_SNAPSHOT_END, eventTimeMs, payload: encodeJson(marker) }),
  );
  return out;
}

/**
 * Decodes an end marker's payload.
 * @throws Error naming `where` if it is not a marker.
 */
export function decodeSnapshotMarker(payload: Uint8Array, where: string): SnapshotMarker {
  const m = decodeJson(payload) as Partial<SnapshotMarker> | null;
  if (
    !m ||
    typeof m.type !== 'number' ||
    typeof m.chunks !== 'number' ||
    typeof m.bytes !== 'number' ||
    typeof m.positions !== 'object' ||
    !m.positions
  ) {
    throw new Error(`${where}: malformed snapshot end marker`);
  }
  return m as SnapshotMarker;
}
