/**
 * Reading a journal-bus partition back from its segment files: the records the in-memory model
 * (engine/bus/memory/log.ts) no longer holds. One engine/journal queue per partition holds one
 * partition batch per write (./codec.ts), in offset order; offsets are not contiguous (markers,
 * aborted and torn transactions leave gaps) and some batches are not valid (their transaction
 * never reached the transaction log; the store says which), so a read by offset is a binary
 * search over queue indexes on the batches' end offsets (they increase: each is the partition's
 * end at its commit), then a forward read. Batches are in commit order, so a transaction that
 * stayed open while others committed has its records in a later batch than higher offsets: the
 * forward read sorts the records it has read and hands out those below the last read batch's
 * stableOffset, below which no later batch has records (./codec.ts). The records it holds back
 * are those committed while one transaction was open (bounded by what overlaps it).
 *
 * Memory: a few cursors per partition ({@link CURSORS_MAX}), each one engine/journal Tailer with
 * a {@link READ_BUFFER_BYTES} read buffer and the one batch it is reading; nothing grows with the
 * history. A consumer reading on sequentially keeps its cursor (no search); a seek costs
 * O(log batches) index lookups and frame reads.
 */
import { listSegments, Tailer } from '../../journal/index.js';
import type { ConsumedRecord } from '../types.js';
import type { ColdPartition } from '../memory/log.js';
import { decodeBatchHeader, decodeConsumed, type BatchHeader } from './codec.js';

/** Cursors (tailers) kept per partition: readers at that many different positions read on without a search. */
export const CURSORS_MAX = 3;
/** Read buffer of a cursor's tailer (it grows to fit a larger batch). */
export const READ_BUFFER_BYTES = 64 * 1024;

/** What a cold reader needs of its partition's store. */
export interface PartitionFiles {
  /** The partition's queue directory. */
  readonly dir: string;
  /** Queue index the next batch gets (buffered ones included). */
  nextIndex(): number;
  /** Writes the appender's buffered batches to the segment file. */
  flush(): void;
  /** Whether a batch written by transaction-log entry `seq` counts (see ./index.ts recovery). */
  isValid(seq: number): boolean;
  /** The partition's end offset (for the start offset of a partition whose batches are all deleted). */
  endOffset(): number;
  /** Bumped whenever segment files are deleted or replaced (retention, compaction). */
  readonly generation: number;
}

interface Cursor {
  tailer: Tailer;
  /** The position the last read returned (a read from it continues without a search). */
  pos: number;
  /** Records read and not handed out yet, ascending by offset from `head`. */
  pending: ConsumedRecord[];
  head: number;
  /** Every record below this offset (and at or above `pos`) is in `pending`. */
  stable: number;
  usedAt: number;
}

/** {@link ColdPartition} over a journal-bus partition's segment files. */
export class JournalColdPartition implements ColdPartition {
  private readonly cursors: Cursor[] = [];
  private generation = -1;
  private useCount = 0;
  private start = -1;

  constructor(private readonly files: PartitionFiles) {}

  flush(): void {
    this.files.flush();
  }

  startOffset(): number {
    this.checkGeneration();
    if (this.start < 0) {
      const segments = listSegments(this.files.dir);
      const first = segments.length > 0 ? segments[0] : 0;
      const c = this.cursor(0);
      const h = this.probe(c.tailer, first);
      // No record of the first batch, nor of any later one, is below min(base, stable).
      if (first === 0) this.start = 0;
      else
        this.start =
          h !== null
            ? Math.min(h.header.baseOffset, h.header.stableOffset)
            : this.files.endOffset();
      c.pos = -1;
    }
    return this.start;
  }

  read(
    topic: string,
    partition: number,
    from: number,
    to: number,
    recordsMax: number,
    out: ConsumedRecord[],
  ): number {
    this.checkGeneration();
    const c = this.cursor(from);
    let taken = 0;
    let fileEnd = false;
    for (;;) {
      const r = c.head < c.pending.length ? c.pending[c.head] : null;
      if (r !== null && (r.offset < c.stable || fileEnd)) {
        if (r.offset >= to) return (c.pos = to);
        if (taken === recordsMax) return (c.pos = r.offset);
        out.push(r);
        taken++;
        c.pending[c.head++] = EMPTY;
        if (c.head === c.pending.length) {
          c.pending.length = 0;
          c.head = 0;
        } else if (c.head >= 1024 && c.head * 2 >= c.pending.length) {
          c.pending.splice(0, c.head);
          c.head = 0;
        }
        continue;
      }
      // Everything below `to` was handed out (every batch with records below it is in the file:
      // they were flushed before the memory let them go).
      if (c.stable >= to || fileEnd) return (c.pos = to);
      if (!this.loadNext(c, topic, partition, from)) fileEnd = true;
    }
  }

  /** Closes the tailers. */
  close(): void {
    for (const c of this.cursors.splice(0)) c.tailer.close();
  }

  /** Segment files changed: reopen every tailer (and let go of deleted files). */
  private checkGeneration(): void {
    if (this.generation === this.files.generation) return;
    this.generation = this.files.generation;
    this.start = -1;
    this.close();
  }

  /** A cursor at `from`: the one that returned it last, else the least recently used, moved there. */
  private cursor(from: number): Cursor {
    this.useCount++;
    let c = this.cursors.find((x) => x.pos === from);
    if (c === undefined) {
      if (this.cursors.length < CURSORS_MAX) {
        c = {
          tailer: Tailer.open({ dir: this.files.dir, readBufferBytes: READ_BUFFER_BYTES }),
          pos: -1,
          pending: [],
          head: 0,
          stable: 0,
          usedAt: 0,
        };
        this.cursors.push(c);
      } else {
        c = this.cursors.reduce((a, b) => (a.usedAt <= b.usedAt ? a : b));
      }
      this.seek(c, from);
    }
    c.usedAt = this.useCount;
    return c;
  }

  /**
   * Moves `c` to the first valid batch whose end offset is above `from` (every batch before it
   * ends at or below `from`): binary search over queue indexes, as valid batches' end offsets
   * increase with the index.
   */
  private seek(c: Cursor, from: number): void {
    const segments = listSegments(this.files.dir);
    let lo = segments.length > 0 ? segments[0] : 0;
    let hi = this.files.nextIndex();
    while (lo < hi) {
      const mid = lo + Math.floor((hi - lo) / 2);
      const h = this.probe(c.tailer, mid);
      if (h === null || h.header.endOffset > from) hi = mid;
      else lo = h.index + 1;
    }
    if (!c.tailer.moveToIndex(lo)) c.tailer.moveToEnd();
    c.pos = from;
    c.pending.length = 0;
    c.head = 0;
    // Batches before `lo` end at or below `from`: nothing at or above `from` is in them.
    c.stable = from;
  }

  /** The first valid batch at queue index >= `index`, or null if there is none (yet). */
  private probe(t: Tailer, index: number): { index: number; header: BatchHeader } | null {
    if (!t.moveToIndex(index)) return null;
    for (let r = t.next(); r !== null; r = t.next()) {
      const header = decodeBatchHeader(r.bytes, `${this.files.dir} record ${r.index}`);
      if (this.files.isValid(header.seq)) return { index: r.index, header };
    }
    return null;
  }

  /**
   * Reads the next valid batch into `c`: its records at or above `from` into `pending` (sorted
   * in), and raises `stable` to its stableOffset. False at the end of the files.
   */
  private loadNext(c: Cursor, topic: string, partition: number, from: number): boolean {
    for (let r = c.tailer.next(); r !== null; r = c.tailer.next()) {
      const where = `${this.files.dir} record ${r.index}`;
      const header = decodeBatchHeader(r.bytes, where);
      if (!this.files.isValid(header.seq)) continue;
      if (header.stableOffset > c.stable) c.stable = header.stableOffset;
      if (header.endOffset <= from || header.count === 0) return true;
      // A copy: record values are views into it, and the tailer reuses its buffer.
      // A plain Uint8Array, not a Buffer: its subarrays (the values) are cheaper to make.
      const bytes = new Uint8Array(r.bytes);
      const p = c.pending;
      if (p.length === c.head || p[p.length - 1].offset < header.baseOffset) {
        // In offset order after what is pending (the usual case): appended as decoded.
        decodeConsumed(bytes, where, topic, partition, from, p);
      } else {
        const recs: ConsumedRecord[] = [];
        decodeConsumed(bytes, where, topic, partition, from, recs);
        for (const rec of recs) insertSorted(c, rec);
      }
      return true;
    }
    return false;
  }
}

const EMPTY: ConsumedRecord = {
  topic: '',
  partition: -1,
  offset: -1,
  key: null,
  value: null,
  headers: {},
  timestampMs: 0,
};

/** Inserts `rec` into `c.pending` by offset (mostly an append: batches are mostly in order). */
function insertSorted(c: Cursor, rec: ConsumedRecord): void {
  const p = c.pending;
  const i = p.length;
  if (i === c.head || p[i - 1].offset < rec.offset) {
    p.push(rec);
    return;
  }
  let lo = c.head;
  let hi = i;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (p[mid].offset < rec.offset) lo = mid + 1;
    else hi = mid;
  }
  p.splice(lo, 0, rec);
}
