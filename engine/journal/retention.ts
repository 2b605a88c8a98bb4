/**
 * Retention of one queue partition by size and age (after Kafka's retention.bytes /
 * retention.ms): sealed segments are deleted whole, oldest first, while the partition's files
 * (segments and offset indexes) take more than `bytesMax` bytes or the oldest segment's successor
 * was created (so the segment sealed) more than `ageMsMax` ago. The segment being appended to is
 * never deleted, and neither is a segment the caller's `mayDrop` keeps (a reader still needs a
 * record of it), nor any segment after it: what remains is always a suffix of the queue.
 *
 * One implementation for both users: the journal bus's topic partitions
 * (engine/bus/journal/maintenance.ts, holding by consumer groups' committed offsets) and a
 * topology's own queues (engine/service/retention.ts, holding by what each reader's restart
 * needs).
 *
 * Crash safety: each segment is removed segment file first, then its offset index, then the
 * directory is fsynced. A crash in between leaves an offset index without its segment, before the
 * queue's first segment; no reader or appender opens such an index (they go by the segment
 * files), and the next pass removes it ({@link removeOrphanIndexes}). A queue is never left with
 * a gap: segments are removed oldest first, so after any crash the remaining segments are
 * consecutive and every remaining record reads as before.
 */
import fs from 'node:fs';
import path from 'node:path';
import {
  fsyncDir,
  indexFileName,
  indexPath,
  listSegments,
  readSegmentHeader,
  segmentPath,
} from './segment.js';
import { handsOverTo } from './scan.js';

/** Size and age bounds of one partition (either or both). */
export interface SegmentRetention {
  /** Delete the oldest sealed segments while the partition's files take more bytes than this. */
  bytesMax?: number;
  /** Delete sealed segments sealed longer ago than this, ms (sealed = its successor's creation). */
  ageMsMax?: number;
}

/**
 * Called with the first index `next` of the segment after a candidate: true when no reader needs
 * a record below `next` (the candidate and everything before it may go).
 */
export type MayDropBefore = (next: number) => boolean;

function fileBytes(file: string): number {
  try {
    return fs.statSync(file).size;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return 0;
    throw e;
  }
}

/** Creation time of segment `first` (Infinity if its header is not complete: never old). */
function createdMsOf(dir: string, first: number): number {
  let fd: number;
  try {
    fd = fs.openSync(segmentPath(dir, first), 'r');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return Infinity;
    throw e;
  }
  try {
    const h = readSegmentHeader(fd);
    return h.complete ? h.createdMs : Infinity;
  } finally {
    fs.closeSync(fd);
  }
}

/**
 * The queue index before which retention deletes segments of the partition in `dir`, or -1 for
 * none (see the module doc). `activeFirst` is the first index of the segment being appended to
 * (Infinity when the caller does not know it: then the newest segment is taken as the active one,
 * and a segment counts as sealed only when its end-of-segment frame hands over to its successor).
 * Reads file sizes and segment headers only, plus whatever `mayDrop` reads.
 */
export function retentionCutoff(
  dir: string,
  activeFirst: number,
  opts: SegmentRetention,
  nowMs: number,
  mayDrop: MayDropBefore,
): number {
  if (opts.bytesMax === undefined && opts.ageMsMax === undefined) return -1;
  const segs = listSegments(dir);
  const sizes = segs.map((f) => fileBytes(segmentPath(dir, f)) + fileBytes(indexPath(dir, f)));
  let total = 0;
  for (const b of sizes) total += b;
  const writerKnown = Number.isFinite(activeFirst);
  let dropBefore = -1;
  for (let i = 0; i + 1 < segs.length && segs[i] < activeFirst; i++) {
    const next = segs[i + 1];
    const over = opts.bytesMax !== undefined && total > opts.bytesMax;
    const old = opts.ageMsMax !== undefined && nowMs - createdMsOf(dir, next) > opts.ageMsMax;
    if (!over && !old) break;
    // Not the writer: a successor that exists before its predecessor was sealed is one that
    // recovery would remove (and continue the predecessor), so the predecessor is not sealed.
    if (!writerKnown && !handsOverTo(dir, segs[i], next)) break;
    if (!mayDrop(next)) break;
    total -= sizes[i];
    dropBefore = next;
  }
  return dropBefore;
}

/** Called after each file a retention pass removes (a crash test dies here). */
export type RetentionStepHook = (step: 'segment-removed' | 'index-removed', first: number) => void;

function unlinkIfThere(file: string): void {
  try {
    fs.unlinkSync(file);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
  }
}

/**
 * Deletes, oldest first, every segment of `dir` (and its offset index) whose records all have
 * queue indexes below `index`, never the newest segment nor one at or after `activeFirst`; then
 * fsyncs the directory. Returns the first indexes of the deleted segments. Tailers reading a
 * deleted segment finish it (their descriptor stays valid); a tailer moved to a deleted index
 * lands on the queue's new first record. Callers other than the queue's appender must have
 * checked the segments are sealed ({@link retentionCutoff} does).
 */
export function removeSegmentsBefore(
  dir: string,
  index: number,
  activeFirst = Infinity,
  onStep?: RetentionStepHook,
): number[] {
  const segments = listSegments(dir);
  const dropped: number[] = [];
  for (let i = 0; i + 1 < segments.length; i++) {
    if (segments[i] >= activeFirst || segments[i + 1] > index) break;
    // The segment file first: once it is gone the segment is gone for every reader, and a crash
    // before the index goes leaves only an orphan index, removed by the next pass.
    unlinkIfThere(segmentPath(dir, segments[i]));
    onStep?.('segment-removed', segments[i]);
    unlinkIfThere(indexPath(dir, segments[i]));
    onStep?.('index-removed', segments[i]);
    dropped.push(segments[i]);
  }
  if (dropped.length > 0) fsyncDir(path.resolve(dir));
  return dropped;
}

/**
 * Removes offset indexes older than the queue's first segment that have no segment (what a crash
 * between the two unlinks of {@link removeSegmentsBefore} leaves). Returns how many.
 */
export function removeOrphanIndexes(dir: string): number {
  const segs = listSegments(dir);
  if (segs.length === 0) return 0;
  let names: string[];
  try {
    names = fs.readdirSync(dir);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return 0;
    throw e;
  }
  let removed = 0;
  for (const name of names) {
    const m = /^(\d{20})\.idx$/.exec(name);
    if (!m || Number(m[1]) >= segs[0] || name !== indexFileName(Number(m[1]))) continue;
    unlinkIfThere(path.join(dir, name));
    removed++;
  }
  if (removed > 0) fsyncDir(path.resolve(dir));
  return removed;
}
