/**
 * Retention and log compaction of journal-bus partitions: what a maintenance run does to one
 * partition's queue (engine/journal segment files of partition batches, ./codec.ts).
 *
 * Retention (after Kafka's retention.bytes / retention.ms): sealed segments are deleted whole,
 * oldest first, while the partition's files take more than `bytesMax` or the oldest segment was
 * sealed more than `ageMsMax` ago; a segment whose last batch ends above the lowest committed
 * position of the consumer groups that committed on the partition is kept (and so is every later
 * one) unless `deleteUncommitted`. The segment being appended to is never deleted.
 *
 * Compaction (after Kafka's log cleaner): one pass over the whole queue finds each key's latest
 * offset among the batches of durable transactions; then each sealed segment holding a record
 * that is not its key's latest (or a tombstone older than `tombstoneRetentionMs` that is) is
 * rewritten with the same batches minus those records: same queue indexes, same offsets, same
 * seqs (engine/journal rewriteSealedSegment replaces one segment atomically). Records without a
 * key, batches that do not count, and batches of transactions not yet durable are left as they
 * are; the segment being appended to is not rewritten (its latest values may still be
 * superseded, as Kafka's active segment is not cleaned). A crash leaves every segment old or new:
 * a key's latest record is never dropped (it is kept in both), so no mix loses or duplicates it.
 * Memory: the key map (at most `keysMax` keys) and one segment's batches while it is rewritten.
 */
import {
  Tailer,
  listSegments,
  retentionCutoff,
  rewriteSealedSegment,
  type RewriteStepHook,
} from '../../journal/index.js';
import type { CompactionOptions, RetentionOptions } from '../types.js';
import type { StoredRecord } from '../store.js';
import { EntryWriter, decodeBatch, decodeBatchHeader, encodePartitionBatch } from './codec.js';

/** Defaults of compaction options. */
export const COMPACTION_DEFAULTS = {
  tombstoneRetentionMs: 24 * 60 * 60 * 1000,
  keysMax: 1_000_000,
} as const;

/** What maintenance needs of a partition. */
export interface MaintainedPartition {
  readonly topic: string;
  readonly partition: number;
  readonly dir: string;
  /** First queue index of the segment being appended to. */
  activeSegmentFirstIndex(): number;
  /** Deletes the sealed segments before queue index `index` (engine/journal dropSegmentsBefore). */
  dropSegmentsBefore(index: number): number[];
  /** Writes buffered batches to the files. */
  flush(): void;
  /** Whether batch seq `seq` counts and its transaction is durable. */
  isSettled(seq: number): boolean;
  /** Lowest committed position of the groups that committed on the partition, or null. */
  holdOffset(): number | null;
  /** Segment files were deleted or replaced: readers must reopen. */
  filesChanged(): void;
}

/** What one maintenance run did (summed over partitions). */
export interface MaintenanceReport {
  segmentsDeleted: number;
  segmentsCompacted: number;
  /** Records compaction dropped (superseded values and expired tombstones). */
  recordsRemoved: number;
  /** Partitions compaction left alone: more distinct keys than keysMax. */
  partitionsOverKeysMax: string[];
}

export function emptyReport(): MaintenanceReport {
  return { segmentsDeleted: 0, segmentsCompacted: 0, recordsRemoved: 0, partitionsOverKeysMax: [] };
}

/** End offset of the batch at queue index `index` (-1 if it cannot be read). */
function batchEndAt(t: Tailer, index: number, where: string): number {
  if (!t.moveToIndex(index)) return -1;
  const r = t.next();
  return r === null ? -1 : decodeBatchHeader(r.bytes, `${where} record ${r.index}`).endOffset;
}

/**
 * Applies `opts` to partition `p` (see the module doc; the size and age rule is engine/journal's
 * retentionCutoff, shared with a topology's queues); adds what it did to `report`.
 */
export function applyRetention(
  p: MaintainedPartition,
  opts: RetentionOptions,
  nowMs: number,
  report: MaintenanceReport,
): void {
  const hold = opts.deleteUncommitted ? null : p.holdOffset();
  const t = hold === null ? null : Tailer.open({ dir: p.dir, readBufferBytes: 64 * 1024 });
  let dropBefore: number;
  try {
    dropBefore = retentionCutoff(p.dir, p.activeSegmentFirstIndex(), opts, nowMs, (next) => {
      if (t === null || hold === null) return true;
      const end = batchEndAt(t, next - 1, p.dir);
      return end >= 0 && end <= hold;
    });
  } finally {
    t?.close();
  }
  if (dropBefore < 0) return;
  report.segmentsDeleted += p.dropSegmentsBefore(dropBefore).length;
  p.filesChanged();
}

/**
 * Compacts partition `p` (see the module doc); `onStep` is rewriteSealedSegment's test hook,
 * called with the number of segments already rewritten in this run.
 */
export function compactPartition(
  p: MaintainedPartition,
  opts: CompactionOptions,
  nowMs: number,
  report: MaintenanceReport,
  onStep?: (segmentsDone: number, step: Parameters<RewriteStepHook>[0]) => void,
): void {
  const keysMax = opts.keysMax ?? COMPACTION_DEFAULTS.keysMax;
  const tombstoneMs = opts.tombstoneRetentionMs ?? COMPACTION_DEFAULTS.tombstoneRetentionMs;
  p.flush();
  const active = p.activeSegmentFirstIndex();
  const segs = listSegments(p.dir).filter((f) => f < active);
  if (segs.length === 0) return;
  // Pass 1: each key's latest offset (offsets are not in queue order: take the highest).
  const latest = new Map<string, number>();
  const t = Tailer.open({ dir: p.dir, readBufferBytes: 64 * 1024 });
  try {
    for (let r = t.next(); r !== null; r = t.next()) {
      const where = `${p.dir} record ${r.index}`;
      if (!p.isSettled(decodeBatchHeader(r.bytes, where).seq)) continue;
      for (const rec of decodeBatch(r.bytes, where).records) {
        const k = rec.record.key;
        if (k === null) continue;
        const seen = latest.get(k);
        if (seen === undefined || rec.offset > seen) latest.set(k, rec.offset);
      }
      if (latest.size > keysMax) {
        report.partitionsOverKeysMax.push(`${p.topic}/${p.partition}`);
        return;
      }
    }
    // Pass 2: rewrite each sealed segment that holds a record to drop.
    const w = new EntryWriter();
    let done = 0;
    for (let i = 0; i < segs.length; i++) {
      const first = segs[i];
      const next = i + 1 < segs.length ? segs[i + 1] : active;
      if (!t.moveToIndex(first)) break;
      const payloads: Uint8Array[] = [];
      let removed = 0;
      for (let index = first; index < next; index++) {
        const r = t.next();
        if (r === null)
          throw new Error(
            `compaction: record ${index} of sealed segment ${first} cannot be read, ${p.dir}`,
          );
        const where = `${p.dir} record ${r.index}`;
        const bytes = Uint8Array.prototype.slice.call(r.bytes) as Uint8Array;
        const h = decodeBatchHeader(bytes, where);
        if (!p.isSettled(h.seq) || h.count === 0) {
          payloads.push(bytes);
          continue;
        }
        const batch = decodeBatch(bytes, where);
        const keep = batch.records.filter((rec) => keeps(rec, latest, nowMs, tombstoneMs));
        if (keep.length === batch.records.length) {
          payloads.push(bytes);
          continue;
        }
        removed += batch.records.length - keep.length;
        payloads.push(
          encodePartitionBatch(w, h.seq, {
            topic: p.topic,
            partition: p.partition,
            records: keep.map((x) => x.record),
            offsets: keep.map((x) => x.offset),
            endOffset: h.endOffset,
            stableOffset: h.stableOffset,
          }),
        );
      }
      if (removed === 0) continue;
      rewriteSealedSegment(
        p.dir,
        first,
        payloads,
        onStep ? (step) => onStep(done, step) : undefined,
      );
      p.filesChanged();
      done++;
      report.segmentsCompacted++;
      report.recordsRemoved += removed;
    }
  } finally {
    t.close();
  }
}

function keeps(
  rec: StoredRecord,
  latest: Map<string, number>,
  nowMs: number,
  tombstoneMs: number,
): boolean {
  const k = rec.record.key;
  if (k === null) return true;
  if (latest.get(k) !== rec.offset) return false;
  return rec.record.value !== null || nowMs - rec.record.timestampMs < tombstoneMs;
}
