/**
 * The tailer: a reader of one queue partition, forwards and backwards, in any thread or
 * process, concurrent with the appender.
 *
 * Reading is pread into a read-ahead buffer; a record is returned only after the whole unit it
 * belongs to (a single record, or a batch up to its END frame) has been read and every frame in
 * it has verified length, checksum and seq. Anything else at the tail is "not there yet". The
 * tailer leaves a segment only after reading its END_OF_SEGMENT frame, so a newer segment file
 * appearing early never makes it skip records still to come in the older one (case Q2), and a
 * half-created segment is waited for, not skipped (case Q3).
 *
 * After Chronicle Queue's ExcerptTailer (forward/backward direction, moveToIndex, toEnd), over
 * pread instead of mmap.
 */
import fs from 'node:fs';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import {
  FLAG_BEGIN,
  FLAG_END,
  FLAG_END_OF_SEGMENT,
  FRAME_ALIGNMENT,
  FRAME_HEADER_BYTES,
  FrameCheck,
  RECORD_BYTES_MAX,
  checkFrame,
  describeFrameCheck,
  frameBytes,
  frameFlags,
  frameLength,
  frameSeq,
} from './frame.js';
import { INDEX_ENTRY_BYTES, indexEntryIsUnitStart, indexEntryOffset } from './offset-index.js';
import {
  SEGMENT_HEADER_BYTES,
  indexPath,
  listSegments,
  readFully,
  readSegmentHeader,
  segmentPath,
} from './segment.js';
import { findCompleteFrameAfter, handsOverTo, readEndOfSegment } from './scan.js';
import { JournalCorruptionError } from './errors.js';
import { loadPublishSeq, parkUntilPublished } from './notifier.js';
import {
  JOURNAL_DEFAULTS,
  resolveOptions,
  type ResolvedOptions,
  type TailerOptions,
} from './options.js';

/**
 * A record read from a queue: its queue index and its payload. `bytes` is a view into the
 * tailer's read buffer, valid until the next call on that tailer; copy it to keep it, with
 * `new Uint8Array(bytes)`: it is a Buffer, whose slice() does not copy.
 */
export interface JournalRecord {
  index: number;
  bytes: Uint8Array;
}

/** Diagnostics of waitForAppend: how it waited. */
export interface TailerStats {
  /** Looks at the file made inside waitForAppend. */
  polls: number;
  /** Times waitForAppend parked on the notifier (Atomics.wait). */
  parks: number;
}

const enum Unit {
  /** A verified unit starts at readPos. */
  ready,
  /** Nothing complete at readPos yet. */
  none,
  /** END_OF_SEGMENT at readPos. */
  endOfSegment,
}

/** Index entries cached per read (4 KiB per read), and entries walked back to find a unit start. */
const INDEX_CACHE_ENTRIES = 1024;
const INDEX_WALK_BACK_ENTRIES_MAX = 65536;
/** Room kept after a frame's offset when reading a window for previous(). */
const BACKWARD_WINDOW_SLACK_BYTES = 4096;

/**
 * Reader of one queue partition directory. Not thread-safe: one tailer per thread; open as many
 * as needed. The tailer's position is a cursor between records: `index` is the index of the
 * record `next()` returns; `previous()` returns the record before it.
 */
export class Tailer {
  /** How waitForAppend waited (for tests and counters). */
  readonly stats: TailerStats = { polls: 0, parks: 0 };

  private readonly opts: ResolvedOptions;
  private segments: number[] = [];
  private segFirst = -1;
  private segPath = '';
  private fd = -1;
  private idxFd = -1;
  /** File offset of the frame of record `idx` (or of END_OF_SEGMENT). */
  private readPos = 0;
  /** Frames in [readPos, verifiedEnd) are verified, complete and in the buffer. */
  private verifiedEnd = 0;
  private idx = 0;
  /** Segment to open before reading on: after END_OF_SEGMENT, or before the queue exists. -1: none. */
  private wantSegment = -1;
  private buf: Buffer;
  private bufStart = 0;
  private bufLen = 0;
  private refills = 0;
  private failPos = 0;
  private failSeq = 0;
  private failCheck: FrameCheck = FrameCheck.ok;
  private idxCache: Buffer = Buffer.alloc(INDEX_CACHE_ENTRIES * INDEX_ENTRY_BYTES);
  private idxCacheSeg = -1;
  private idxCacheFrom = 0;
  private idxCacheCount = 0;
  /** A frame already judged torn (not damage) at this segment/offset/file size. */
  private tornSeg = -1;
  private tornPos = -1;
  private tornFileBytes = -1;
  private readonly sleeper = new Int32Array(new SharedArrayBuffer(4));
  private closed = false;

  private constructor(opts: ResolvedOptions) {
    this.opts = opts;
    this.buf = Buffer.alloc(opts.readBufferBytes);
  }

  /**
   * Opens a tailer on `opts.dir`, at the first record (`from: 'start'`, default) or after the
   * last complete one (`from: 'end'`). The directory need not exist yet: the tailer then waits
   * for the queue's first segment. Throws Error for invalid options, JournalCorruptionError for
   * a damaged segment header.
   */
  static open(options: TailerOptions): Tailer {
    const opts = resolveOptions(options);
    const from = options.from ?? 'start';
    if (from !== 'start' && from !== 'end')
      throw new Error(`from must be 'start' or 'end', from=${String(from)}`);
    const t = new Tailer(opts);
    if (from === 'start') t.moveToStart();
    else t.moveToEnd();
    return t;
  }

  /** Queue index of the record next() returns (also: records before the position). */
  get index(): number {
    return this.idx;
  }

  /**
   * The next complete record, or null at the end of what is complete (records being written,
   * a batch without its END frame yet, a segment without its complete header yet: all "not
   * there yet"). Never throws at a torn tail. Throws JournalCorruptionError (file, offset) for
   * a frame that fails its checks while complete frames follow it, or a damaged frame in a
   * sealed segment.
   */
  next(): JournalRecord | null {
    this.checkOpen();
    if (!this.advanceAvailable()) return null;
    const o = this.readPos - this.bufStart;
    const length = frameLength(this.buf, o);
    const rec = {
      index: this.idx,
      bytes: this.buf.subarray(o + FRAME_HEADER_BYTES, o + FRAME_HEADER_BYTES + length),
    };
    this.readPos += frameBytes(length);
    this.idx++;
    return rec;
  }

  /**
   * The record before the position (index - 1), moving the position back onto it; null before
   * the first record (the same shape as next() at the end: case Q4). One index-file read and
   * at most one frame read per call (reads are windowed, so walking back is mostly in memory).
   * Throws JournalCorruptionError if that record fails its checksum.
   */
  previous(): JournalRecord | null {
    this.checkOpen();
    const target = this.idx - 1;
    if (target < 0) return null;
    let first = this.fd >= 0 && target >= this.segFirst ? this.segFirst : -1;
    if (first < 0) {
      first = this.openSegmentContaining(target);
      if (first < 0) return null;
    }
    const k = target - first;
    const entry = this.indexEntry(k);
    if (entry >= 0) {
      const offset = indexEntryOffset(entry);
      if (offset >= SEGMENT_HEADER_BYTES && this.loadBackward(offset)) {
        const o = offset - this.bufStart;
        const check = checkFrame(this.buf, o, this.bufStart + this.bufLen - offset, k);
        if (check === FrameCheck.ok && (frameFlags(this.buf, o) & FLAG_END_OF_SEGMENT) === 0) {
          const length = frameLength(this.buf, o);
          this.readPos = offset;
          this.verifiedEnd = offset + frameBytes(length);
          this.idx = target;
          this.wantSegment = -1;
          return {
            index: target,
            bytes: this.buf.subarray(o + FRAME_HEADER_BYTES, o + FRAME_HEADER_BYTES + length),
          };
        }
        if (check === FrameCheck.badChecksum && frameSeq(this.buf, o) === k) {
          throw new JournalCorruptionError(
            this.segPath,
            offset,
            `${describeFrameCheck(check, this.buf, o, k)} (record ${target}, read backwards)`,
          );
        }
      }
    }
    // No usable index entry: read forwards from the nearest unit start, then step back once.
    if (!this.positionAt(target))
      throw new Error(
        `record ${target} is behind the tailer's position but could not be read in ${this.opts.dir}`,
      );
    const rec = this.next();
    if (rec === null)
      throw new Error(
        `record ${target} is behind the tailer's position but could not be read in ${this.opts.dir}`,
      );
    this.readPos -= frameBytes(rec.bytes.length);
    this.idx = target;
    return rec;
  }

  /**
   * Moves so that next() returns record `index`. Returns false, leaving the position unchanged,
   * if `index` is beyond the end of the complete records; `index` equal to the end is allowed
   * (next() then waits for it). O(log segments) to find the segment, one index-file read, then
   * at most the unindexed tail or the rest of one batch is read to land on `index`.
   * Throws Error if `index` is not a non-negative integer.
   */
  moveToIndex(index: number): boolean {
    this.checkOpen();
    if (typeof index !== 'number' || !Number.isSafeInteger(index) || index < 0) {
      throw new Error(`index must be a non-negative safe integer, index=${String(index)}`);
    }
    const saved = this.idx;
    if (this.positionAt(index)) return true;
    if (!this.positionAt(saved))
      throw new Error(`could not return to index ${saved} in ${this.opts.dir}`);
    return false;
  }

  /** Moves before the first record of the queue (or, for a queue not created yet, to index 0). */
  moveToStart(): void {
    this.checkOpen();
    this.segments = listSegments(this.opts.dir);
    for (const first of this.segments) {
      if (this.openSegment(first)) return;
    }
    this.closeSegment();
    this.idx = this.segments.length > 0 ? this.segments[0] : 0;
    this.wantSegment = this.idx;
  }

  /** Moves after the last complete record: next() returns null until something is appended. */
  moveToEnd(): void {
    this.checkOpen();
    this.segments = listSegments(this.opts.dir);
    for (let i = this.segments.length - 1; i >= 0; i--) {
      const first = this.segments[i];
      if (this.isPremature(this.segments, i) || !this.openSegment(first)) continue;
      const entries = this.indexEntryCount();
      const start = entries > 0 ? this.unitStartAtOrBefore(entries - 1) : null;
      if (start) {
        this.readPos = this.verifiedEnd = start.offset;
        this.idx = first + start.seq;
      }
      while (this.next() !== null) {
        /* skip to the end */
      }
      return;
    }
    this.moveToStart();
  }

  /**
   * Waits up to `timeoutMs` until next() has a record; true if it has. With a notifier (same
   * process as the appender) it parks in Atomics.wait until the appender publishes a flush
   * (re-checking the file every JOURNAL_DEFAULTS.notifierRecheckMs, in case the appender is
   * in another process); without one it checks the file every `pollIntervalMs`. Blocks the
   * calling thread. Throws Error for a negative or non-finite timeout.
   */
  waitForAppend(timeoutMs: number): boolean {
    this.checkOpen();
    if (typeof timeoutMs !== 'number' || !(timeoutMs >= 0) || !Number.isFinite(timeoutMs)) {
      throw new Error(`timeoutMs must be a finite number >= 0, timeoutMs=${String(timeoutMs)}`);
    }
    const deadline = performance.now() + timeoutMs;
    const n = this.opts.notifier;
    for (;;) {
      // Load the publish count before looking, so a publish in between ends the park at once.
      const seen = n ? loadPublishSeq(n) : 0;
      this.stats.polls++;
      if (this.advanceAvailable()) return true;
      const remaining = deadline - performance.now();
      if (remaining <= 0) return false;
      if (n) {
        this.stats.parks++;
        parkUntilPublished(n, seen, Math.min(remaining, JOURNAL_DEFAULTS.notifierRecheckMs));
      } else {
        Atomics.wait(this.sleeper, 0, 0, Math.min(remaining, this.opts.pollIntervalMs));
      }
    }
  }

  /** Closes the files. Idempotent; other calls throw afterwards. */
  close(): void {
    if (this.closed) return;
    this.closeSegment();
    this.closed = true;
  }

  private checkOpen(): void {
    if (this.closed) throw new Error(`Tailer for ${this.opts.dir} is closed`);
  }

  // ---- segments ----

  /** Opens segment `first` at its first record. False if it does not exist or its header is not complete yet. */
  private openSegment(first: number): boolean {
    const file = segmentPath(this.opts.dir, first);
    let fd: number;
    try {
      fd = fs.openSync(file, 'r');
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return false;
      throw e;
    }
    const header = readSegmentHeader(fd);
    if (!header.complete || header.firstIndex !== first) {
      fs.closeSync(fd);
      if (header.complete)
        throw new JournalCorruptionError(
          file,
          0,
          `header says first index ${header.firstIndex} but the file name says ${first}`,
        );
      // Half-created (a crash while rolling; the next appender replaces it): wait, unless a newer
      // segment exists, which proves this one will never be finished.
      this.segments = listSegments(this.opts.dir);
      if (this.segments[this.segments.length - 1] > first) {
        throw new JournalCorruptionError(
          file,
          0,
          `segment header is damaged (${header.reason}) and newer segments exist`,
        );
      }
      return false;
    }
    this.closeSegment();
    this.fd = fd;
    this.segFirst = first;
    this.segPath = file;
    this.readPos = this.verifiedEnd = SEGMENT_HEADER_BYTES;
    this.idx = first;
    this.wantSegment = -1;
    this.bufStart = 0;
    this.bufLen = 0;
    return true;
  }

  /**
   * Whether segment `list[i]` exists before its time: its predecessor is not sealed with an
   * END_OF_SEGMENT frame handing over to it, so it holds no records yet (case Q2: a file that
   * appears early must not be taken for the end of the queue). One small read per lookup.
   */
  private isPremature(list: number[], i: number): boolean {
    return i > 0 && !handsOverTo(this.opts.dir, list[i - 1], list[i]);
  }

  private closeSegment(): void {
    if (this.fd >= 0) fs.closeSync(this.fd);
    if (this.idxFd >= 0) fs.closeSync(this.idxFd);
    this.fd = -1;
    this.idxFd = -1;
    this.segFirst = -1;
    this.bufLen = 0;
  }

  /**
   * Opens the segment holding `index` (the newest whose first index is <= it and whose header is
   * complete) and returns its first index, or -1 if `index` is before the first segment. Binary
   * search over the cached directory listing, refreshed when `index` may be in a newer segment.
   */
  private openSegmentContaining(index: number): number {
    const segs = this.segments;
    if (segs.length === 0 || index >= segs[segs.length - 1] || index < segs[0])
      this.segments = listSegments(this.opts.dir);
    const list = this.segments;
    let lo = 0;
    let hi = list.length - 1;
    let found = -1;
    while (lo <= hi) {
      const mid = (lo + hi) >>> 1;
      if (list[mid] <= index) {
        found = mid;
        lo = mid + 1;
      } else {
        hi = mid - 1;
      }
    }
    for (let i = found; i >= 0; i--) {
      if (this.isPremature(list, i)) continue;
      if (this.openSegment(list[i])) return list[i];
    }
    return -1;
  }

  // ---- positioning ----

  /** Positions at `target` if it is at or before the end of the complete records. */
  private positionAt(target: number): boolean {
    const first = this.openSegmentContaining(target);
    if (first < 0) {
      // Before the first segment, or no segment yet: only the queue's very start is a position.
      const start = this.segments.length > 0 ? this.segments[0] : 0;
      if (target !== start) return false;
      this.closeSegment();
      this.idx = start;
      this.wantSegment = start;
      return true;
    }
    const start = this.unitStartAtOrBefore(target - first);
    if (start) {
      this.readPos = this.verifiedEnd = start.offset;
      this.idx = first + start.seq;
    }
    while (this.idx < target && this.next() !== null) {
      /* step to target */
    }
    return this.idx === target;
  }

  /**
   * The nearest index entry at or before entry `k` of the open segment that begins a unit and
   * whose frame header agrees (seq, BEGIN flag); null if none (read from the segment start).
   * Only the header is checked here: next() verifies the whole frame when it reads it.
   */
  private unitStartAtOrBefore(k: number): { offset: number; seq: number } | null {
    const count = this.indexEntryCount();
    const head = Buffer.alloc(FRAME_HEADER_BYTES);
    const stop = Math.max(0, k - INDEX_WALK_BACK_ENTRIES_MAX);
    for (let e = Math.min(k, count - 1); e >= stop; e--) {
      const entry = this.indexEntry(e);
      if (entry < 0) return null;
      if (!indexEntryIsUnitStart(entry)) continue;
      const offset = indexEntryOffset(entry);
      if (
        offset < SEGMENT_HEADER_BYTES ||
        readFully(this.fd, head, 0, FRAME_HEADER_BYTES, offset) < FRAME_HEADER_BYTES
      )
        return null;
      if (frameSeq(head, 0) !== e || (frameFlags(head, 0) & FLAG_BEGIN) === 0) return null;
      return { offset, seq: e };
    }
    return null;
  }

  private indexEntryCount(): number {
    if (!this.openIndex()) return 0;
    return Math.floor(fs.fstatSync(this.idxFd).size / INDEX_ENTRY_BYTES);
  }

  private openIndex(): boolean {
    if (this.idxFd >= 0) return true;
    try {
      this.idxFd = fs.openSync(indexPath(this.opts.dir, this.segFirst), 'r');
      return true;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return false;
      throw e;
    }
  }

  /** Entry `k` of the open segment's offset index, or -1 if not (yet) written. */
  private indexEntry(k: number): number {
    if (
      this.idxCacheSeg === this.segFirst &&
      k >= this.idxCacheFrom &&
      k < this.idxCacheFrom + this.idxCacheCount
    ) {
      return this.idxCache.readUInt32LE((k - this.idxCacheFrom) * INDEX_ENTRY_BYTES);
    }
    if (!this.openIndex()) return -1;
    // Read a block ending at k: lookups walk backwards (previous(), unit starts).
    const from = Math.max(0, k - INDEX_CACHE_ENTRIES + 1);
    const n = readFully(
      this.idxFd,
      this.idxCache,
      0,
      (k - from + 1) * INDEX_ENTRY_BYTES,
      from * INDEX_ENTRY_BYTES,
    );
    this.idxCacheSeg = this.segFirst;
    this.idxCacheFrom = from;
    this.idxCacheCount = Math.floor(n / INDEX_ENTRY_BYTES);
    if (k >= from + this.idxCacheCount) return -1;
    return this.idxCache.readUInt32LE((k - from) * INDEX_ENTRY_BYTES);
  }

  // ---- reading ----

  /** True when [readPos, verifiedEnd) holds a record, reading and verifying the next unit if needed. */
  private advanceAvailable(): boolean {
    for (;;) {
      if (this.readPos < this.verifiedEnd) return true;
      if (this.wantSegment >= 0) {
        if (!this.openSegment(this.wantSegment)) return false;
        continue;
      }
      if (this.fd < 0) return false;
      const unit = this.verifyUnit();
      if (unit === Unit.ready) return true;
      if (unit === Unit.none) return false;
      // END_OF_SEGMENT: the next record is the first of the segment named by its index. Stay
      // on this segment until that one is complete (it may still be being created).
      this.wantSegment = this.idx;
    }
  }

  /**
   * Reads and verifies the unit starting at readPos: all frames up to and including one with
   * END must be complete with good checksum and consecutive seq. Sets verifiedEnd on success.
   * A failure is judged only on bytes read by this call: the buffer may hold bytes read before
   * a crash and the recovery that rewrote them, so a pass over old bytes that fails is retried
   * once over a fresh read.
   */
  private verifyUnit(): Unit {
    const start = this.readPos;
    const startsFresh = !(
      start >= this.bufStart && start + FRAME_HEADER_BYTES <= this.bufStart + this.bufLen
    );
    const first = this.scanUnit(start);
    if (first !== null) return first;
    if (!startsFresh) {
      this.refill(start, this.failPos - start + FRAME_HEADER_BYTES);
      const second = this.scanUnit(start);
      if (second !== null) return second;
    }
    return this.judgeFailure(this.failPos, this.failSeq, this.failCheck);
  }

  /** One pass of verifyUnit; null on failure, with the failing frame in failPos/failSeq/failCheck. */
  private scanUnit(start: number): Unit | null {
    let pos = start;
    let seq = this.idx - this.segFirst;
    for (;;) {
      const refills = this.refills;
      const check = this.loadFrame(start, pos);
      if (check === FrameCheck.ok && this.refills !== refills && pos !== start) {
        // The buffer was re-read from `start`: verify the unit's earlier frames again on these
        // bytes, so every returned record is checked on the bytes it is returned from.
        pos = start;
        seq = this.idx - this.segFirst;
        continue;
      }
      const o = pos - this.bufStart;
      if (check === FrameCheck.ok) {
        const c = checkFrame(this.buf, o, this.bufStart + this.bufLen - pos, seq);
        if (c === FrameCheck.ok) {
          const flags = frameFlags(this.buf, o);
          if ((flags & FLAG_END_OF_SEGMENT) !== 0) {
            if (pos === start) return Unit.endOfSegment;
            throw new JournalCorruptionError(
              this.segPath,
              pos,
              `end-of-segment frame inside a batch that began at offset ${start}`,
            );
          }
          pos += frameBytes(frameLength(this.buf, o));
          seq++;
          if ((flags & FLAG_END) !== 0) {
            this.verifiedEnd = pos;
            return Unit.ready;
          }
          continue;
        }
        this.failCheck = c;
      } else {
        this.failCheck = check;
      }
      this.failPos = pos;
      this.failSeq = seq;
      return null;
    }
  }

  /**
   * Makes the buffer hold the whole frame at `pos` (refilling from the unit start `start`, so
   * the unit's earlier frames stay in the buffer). `incomplete` if the file does not have it
   * yet, `badLength` for an impossible length field, else `ok` (not yet checksummed).
   */
  private loadFrame(start: number, pos: number): FrameCheck {
    if (!this.ensure(start, pos - start + FRAME_HEADER_BYTES)) return FrameCheck.incomplete;
    let length = frameLength(this.buf, pos - this.bufStart);
    if (length > RECORD_BYTES_MAX) return FrameCheck.badLength;
    const end = pos + FRAME_HEADER_BYTES + length;
    if (end > this.bufStart + this.bufLen) {
      this.refill(start, end - start);
      if (pos + FRAME_HEADER_BYTES > this.bufStart + this.bufLen) return FrameCheck.incomplete;
      // The refill may have brought newer bytes for this header too.
      length = frameLength(this.buf, pos - this.bufStart);
      if (length > RECORD_BYTES_MAX) return FrameCheck.badLength;
      if (pos + FRAME_HEADER_BYTES + length > this.bufStart + this.bufLen)
        return FrameCheck.incomplete;
    }
    return FrameCheck.ok;
  }

  /**
   * A frame at `pos` failed `check` on fresh bytes. A torn tail (crash, or a write in progress)
   * is "not yet": Unit.none. Damage throws: a frame that fails while a complete frame follows
   * it, or any failure in a segment that is sealed (ends with a valid END_OF_SEGMENT frame), as
   * nothing can still be being written there.
   */
  private judgeFailure(pos: number, seq: number, check: FrameCheck): Unit {
    if (this.bufStart + this.bufLen <= pos) {
      // Nothing at all written at pos yet: the live end of the queue, the hot path of a polling
      // tailer, so a later segment is looked for only in the listing already cached (never
      // there at the live end: the tailer moves on at END_OF_SEGMENT before it needs one).
      const last = this.segments.length > 0 ? this.segments[this.segments.length - 1]! : -1;
      if (last <= this.segFirst) return Unit.none;
      const fileBytes = fs.fstatSync(this.fd).size;
      if (
        this.tornSeg === this.segFirst &&
        this.tornPos === pos &&
        this.tornFileBytes === fileBytes
      )
        return Unit.none;
      const successor = this.successorWithFrames(false);
      if (successor !== null) {
        throw new JournalCorruptionError(
          this.segPath,
          Math.min(pos, fileBytes),
          `the segment ends without an end-of-segment frame ` +
            `(after record ${this.segFirst + seq - 1}), but the later segment ${path.basename(successor)} holds records: damage, not a torn tail`,
        );
      }
      this.tornSeg = this.segFirst;
      this.tornPos = pos;
      this.tornFileBytes = fileBytes;
      return Unit.none;
    }
    const fileBytes = fs.fstatSync(this.fd).size;
    if (this.tornSeg === this.segFirst && this.tornPos === pos && this.tornFileBytes === fileBytes)
      return Unit.none;
    const o = pos - this.bufStart;
    const problem = describeFrameCheck(check, this.buf, o, seq);
    if (this.isSealed(fileBytes, seq)) {
      throw new JournalCorruptionError(
        this.segPath,
        pos,
        `${problem} (record ${this.segFirst + seq}) in a sealed segment`,
      );
    }
    // Also for an incomplete frame: a damaged length field can point past the end of the file.
    // At the live tail the search costs little (only what follows pos, less than one flush) and
    // finds nothing: the appender writes frames in order, so nothing complete can follow a frame
    // still being written.
    const after = findCompleteFrameAfter(this.fd, fileBytes, pos + FRAME_ALIGNMENT, seq + 1);
    if (after >= 0) {
      // A read(2) racing the appender's write(2) copies page by page: it can catch this frame's
      // page before the write reached it and a later page after, so the bytes failed here may
      // be a write that finished since. Damage only if the frame still fails on a fresh read.
      if (this.frameNowComplete(pos, seq)) return Unit.none;
      throw new JournalCorruptionError(
        this.segPath,
        pos,
        `${problem} (record ${this.segFirst + seq}), but a complete frame follows at offset ${after}: damage, not a torn tail`,
      );
    }
    const successor = this.successorWithFrames(true);
    if (successor !== null) {
      // The appender seals a segment (END_OF_SEGMENT, synced) before it creates the next one, so
      // a later segment holding frames proves nothing more will be written here.
      throw new JournalCorruptionError(
        this.segPath,
        pos,
        `${problem} (record ${this.segFirst + seq}) where the segment should ` +
          `continue or end with an end-of-segment frame, but the later segment ${path.basename(successor)} holds records: damage, not a torn tail`,
      );
    }
    this.tornSeg = this.segFirst;
    this.tornPos = pos;
    this.tornFileBytes = fileBytes;
    return Unit.none;
  }

  /**
   * Whether the frame at `pos` (seq `seq`) passes its checks on bytes read now. Leaves the
   * buffer starting at `pos`, so the next verifyUnit of a unit starting there reads from it.
   */
  private frameNowComplete(pos: number, seq: number): boolean {
    this.refill(pos, FRAME_HEADER_BYTES);
    const avail = this.bufLen;
    if (avail < FRAME_HEADER_BYTES) return false;
    const length = frameLength(this.buf, 0);
    if (length > RECORD_BYTES_MAX) return false;
    if (FRAME_HEADER_BYTES + length > avail) this.refill(pos, FRAME_HEADER_BYTES + length);
    return checkFrame(this.buf, 0, this.bufLen, seq) === FrameCheck.ok;
  }

  /**
   * A later segment file of the directory holding more than its header, or null; `refresh`
   * lists the directory again, else the cached listing is used.
   */
  private successorWithFrames(refresh: boolean): string | null {
    if (refresh) this.segments = listSegments(this.opts.dir);
    for (const first of this.segments) {
      if (first <= this.segFirst) continue;
      const file = segmentPath(this.opts.dir, first);
      try {
        if (fs.statSync(file).size > SEGMENT_HEADER_BYTES) return file;
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
      }
    }
    return null;
  }

  /** Whether the open segment ends with a valid END_OF_SEGMENT frame whose seq is beyond `seq`. */
  private isSealed(fileBytes: number, seq: number): boolean {
    return readEndOfSegment(this.fd, fileBytes) > seq;
  }

  /** Makes the buffer cover [start, start + n) if the file has those bytes; refills from `start`. */
  private ensure(start: number, n: number): boolean {
    if (start >= this.bufStart && start + n <= this.bufStart + this.bufLen) return true;
    this.refill(start, n);
    return start + n <= this.bufStart + this.bufLen;
  }

  private refill(start: number, n: number): void {
    if (n > this.buf.length) {
      let size = this.buf.length;
      while (size < n) size *= 2;
      this.buf = Buffer.alloc(size);
    }
    this.bufStart = start;
    this.bufLen = fs.readSync(this.fd, this.buf, 0, this.buf.length, start);
    this.refills++;
  }

  /**
   * Loads the frame at `offset` for reading backwards: a window that ends a little after it, so
   * the records before it are read by the same pread. False if the frame is not in the file.
   */
  private loadBackward(offset: number): boolean {
    const covers = (n: number): boolean =>
      offset >= this.bufStart && offset + n <= this.bufStart + this.bufLen;
    if (
      !covers(FRAME_HEADER_BYTES) ||
      !covers(FRAME_HEADER_BYTES + frameLength(this.buf, offset - this.bufStart))
    ) {
      const windowStart = Math.max(
        SEGMENT_HEADER_BYTES,
        offset + BACKWARD_WINDOW_SLACK_BYTES - this.buf.length,
      );
      this.refill(windowStart - ((windowStart - SEGMENT_HEADER_BYTES) % FRAME_ALIGNMENT), 0);
      if (!covers(FRAME_HEADER_BYTES)) return false;
      const need = FRAME_HEADER_BYTES + frameLength(this.buf, offset - this.bufStart);
      if (need > RECORD_BYTES_MAX + FRAME_HEADER_BYTES) return false;
      if (!covers(need)) {
        this.refill(offset, need);
        if (!covers(need)) return false;
      }
    }
    return true;
  }
}
