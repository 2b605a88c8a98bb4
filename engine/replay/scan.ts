/**
 * The backwards scan a restart starts with: from the end of the service's output queue, newest
 * first, find the newest processed record (exact positions) and, if the service declares
 * snapshots, the newest complete snapshot. Reads only as far back as the newest snapshot (or
 * the newest processed record when there are no snapshots), so its cost is bounded by the
 * snapshot interval, not by history.
 */
import { EnvelopeView } from '../codec/index.js';
import { EVENT_TYPE_PROCESSED, decodeProcessed, type ReplayInput } from './processed.js';
import { EVENT_TYPE_SNAPSHOT_END, decodeSnapshotMarker } from './snapshot.js';

/** A backwards reader over the output queue (a journal Tailer after moveToEnd). */
export interface OutputBackwardReader {
  previous(): { index: number; bytes: Uint8Array } | null;
}

/** What the scan found. */
export interface OutputScan {
  /** Positions (per input ordinal) of the newest processed record; null if there is none. */
  positions: number[] | null;
  /** Output index of the newest processed record; -1 if there is none. */
  processedIndex: number;
  /** The newest complete snapshot of the wanted type; null if none. */
  snapshot: {
    bytes: Uint8Array;
    /** Per input ordinal: last input index the snapshot includes (-1: none). */
    positions: number[];
    /** Output index of the end marker; replay of processed records starts after it. */
    markerIndex: number;
    /** Output index of the snapshot's first record (its first chunk; the marker if none). */
    firstIndex: number;
  } | null;
  /** Output records read. */
  scanned: number;
}

/**
 * Scans the output backwards (see the module comment).
 * @param inputs the service's input partitions in host order.
 * @param snapshotType the declared snapshot type, or undefined to not look for snapshots.
 * @param where names the output queue in errors.
 * @throws Error if a marker's chunks are missing or of another type (damaged output).
 */
export function scanOutput(
  back: OutputBackwardReader,
  inputs: readonly ReplayInput[],
  snapshotType: number | undefined,
  where: string,
): OutputScan {
  const result: OutputScan = { positions: null, processedIndex: -1, snapshot: null, scanned: 0 };
  const view = new EnvelopeView();
  const keys = inputs.map((i) => `${i.queue}/${i.partition}`);
  for (;;) {
    if (result.positions && (snapshotType === undefined || result.snapshot)) break;
    const rec = back.previous();
    if (!rec) break;
    result.scanned++;
    view.wrap(rec.bytes, 0, rec.bytes.length);
    if (view.type === EVENT_TYPE_PROCESSED) {
      if (!result.positions) {
        result.positions = decodeProcessed(view.payload, inputs, `${where}#${rec.index}`).positions;
        result.processedIndex = rec.index;
      }
      continue;
    }
    if (view.type !== EVENT_TYPE_SNAPSHOT_END || snapshotType === undefined || result.snapshot)
      continue;
    const at = `${where}#${rec.index}`;
    const marker = decodeSnapshotMarker(view.payload, at);
    // A snapshot of another type (the declaration changed) is not ours: keep looking.
    if (marker.type !== snapshotType) continue;
    const chunks: Uint8Array[] = [];
    let firstIndex = rec.index;
    for (let c = 0; c < marker.chunks; c++) {
      const chunk = back.previous();
      if (!chunk)
        throw new Error(
          `${at}: snapshot end marker names ${marker.chunks} chunks, the queue starts after ${c}`,
        );
      result.scanned++;
      firstIndex = chunk.index;
      view.wrap(chunk.bytes, 0, chunk.bytes.length);
      if (view.type !== marker.type)
        throw new Error(
          `${where}#${chunk.index}: snapshot chunk of type ${view.type}, expected ${marker.type} (marker ${at})`,
        );
      chunks.push(view.payload.slice());
    }
    const bytes = new Uint8Array(marker.bytes);
    let o = 0;
    for (let c = chunks.length - 1; c >= 0; c--) {
      bytes.set(chunks[c], o);
      o += chunks[c].length;
    }
    if (o !== marker.bytes)
      throw new Error(`${at}: snapshot chunks hold ${o} bytes, the marker says ${marker.bytes}`);
    result.snapshot = {
      bytes,
      positions: keys.map((k) => marker.positions[k] ?? -1),
      markerIndex: rec.index,
      firstIndex,
    };
  }
  return result;
}
