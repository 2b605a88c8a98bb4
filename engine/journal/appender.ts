/**
 * The appender: the single writer of a queue partition.
 *
 * Appends are encoded straight into an in-memory write buffer as frames (frame.ts); `flush()`
 * writes the buffer with one pwrite to the segment file and one to its offset index, fdatasyncs
 * per the fsync policy, then bumps the notifier. Syscalls, fsyncs and Atomics operations are
 * thus paid per flush, not per record (batch at the seams).
 *
 * After Chronicle Queue's ExcerptAppender (single writer, roll cycles, an explicit
 * end-of-cycle marker so tailers know a file is finished), over write(2) instead of mmap.
 */
import fs from 'node:fs';
import path from 'node:path';
import {
  END_OF_SEGMENT_FRAME_BYTES,
  FLAG_BEGIN,
  FLAG_END,
  FLAG_END_OF_SEGMENT,
  FRAME_FLAGS_OFFSET,
  FRAME_HEADER_BYTES,
  FRAME_LENGTH_OFFSET,
  RECORD_BYTES_MAX,
  frameBytes,
  getU32,
  putU32,
  sealFrame,
} from './frame.js';
import { INDEX_ENTRY_BYTES, encodeIndexEntry, indexEntryOffset } from './offset-index.js';
import {
  SEGMENT_COMPLETE_MARKER_OFFSET,
  SEGMENT_HEADER_BYTES,
  encodeSegmentHeader,
  fsyncDir,
  indexPath,
  listSegments,
  readSegmentHeader,
  segmentFileName,
  segmentPath,
  writeFully,
} from './segment.js';
import { handsOverTo } from './scan.js';
import { recoverSegment } from './recovery.js';
import { removeSegmentsBefore } from './retention.js';
import { acquireAppenderLock, type AppenderLock } from './lock.js';
import { publish, registeredQueueNotifier } from './notifier.js';
import { FaultInjector, crashNow, readFaultPlan } from './fault.js';
import { JournalCorruptionError } from './errors.js';
import { resolveOptions, type JournalOptions, type ResolvedOptions } from './options.js';

/** What `Appender.open` found on disk and repaired. */
export interface RecoveryReport {
  /** Segment file whose tail was recovered, or null for a new queue. */
  segment: string | null;
  /** Bytes of frames read and verified while recovering. */
  scannedBytes: number;
  /** Bytes cut off the end of the last segment (torn record, unfinished batch, garbage). */
  truncatedBytes: number;
  /** Complete frames cut off because their batch had no END frame. */
  droppedRecords: number;
  /**
   * A segment file that held no records and could not be continued, removed (the appender
   * creates the segment of that name again when it rolls): its header was never finished (a
   * crash while rolling, case Q3), or it was created before its predecessor was sealed. Else null.
   */
  replacedSegment: string | null;
  /** Pid of a dead process whose stale lock was taken over; else null. */
  lockTakenOverFromPid: number | null;
}

interface ActiveSegment {
  first: number;
  path: string;
  fd: number;
  idxFd: number;
  /** Bytes in the file (header + written frames). */
  fileBytes: number;
  /** Records written to the file. */
  recordCount: number;
  createdMs: number;
}

const WRITE_BUFFER_BYTES_INITIAL = 64 * 1024;
const INDEX_BUFFER_ENTRIES_INITIAL = 1024;

/**
 * The single writer of one queue partition directory. Not thread-safe: use it from one thread.
 *
 * Durability: records are buffered; `flush()` writes them (one write for frames, one for index
 * entries), fdatasyncs per `fsync` (default 'batch': once per flush), then wakes same-process
 * tailers through the notifier. Tailers never see unflushed records. A process crash loses
 * only unflushed records; with 'batch' or 'record' a power loss loses only records whose flush
 * had not returned.
 */
export class Appender {
  /** What opening found and repaired. */
  readonly recovery: RecoveryReport;

  private readonly opts: ResolvedOptions;
  private readonly lock: AppenderLock;
  private readonly faults: FaultInjector;
  private seg: ActiveSegment;
  private next: number;
  private pending: Buffer = Buffer.alloc(WRITE_BUFFER_BYTES_INITIAL);
  private pendingBytes = 0;
  private pendingRecords = 0;
  private pendingIndex: Buffer = Buffer.alloc(INDEX_BUFFER_ENTRIES_INITIAL * INDEX_ENTRY_BYTES);
  /** Claim in progress (claim() called, commit() not yet): its frame's offset in `pending`, else -1. */
  private claimOff = -1;
  private claimLength = 0;
  /** A batch opened by beginBatch(): where its frames start in `pending`, and how many. -1: none. */
  private batchOff = -1;
  private batchRecords = 0;
  /** Offset in `pending` of the batch's last committed frame, and its flags. */
  private batchLastOff = -1;
  /** fdatasyncs started by flushAsync() and not yet finished. */
  private syncsInFlight = 0;
  /** Descriptors whose close waits for the syncs in flight (one of them may name it). */
  private closeWhenSynced: number[] = [];
  private closed = false;
  /**
   * The I/O error (ENOSPC, EIO, ...) a write, fsync or roll failed with, or null. A failed
   * appender refuses every later call but close(): its buffer still holds frames that may be
   * half on disk, so only a fresh appender (whose recovery cuts a torn tail) may go on.
   */
  private failure: Error | null = null;

  private constructor(
    opts: ResolvedOptions,
    lock: AppenderLock,
    faults: FaultInjector,
    seg: ActiveSegment,
    recovery: RecoveryReport,
  ) {
    this.opts = opts;
    this.lock = lock;
    this.faults = faults;
    this.seg = seg;
    this.next = seg.first + seg.recordCount;
    this.recovery = recovery;
  }

  /**
   * Opens (creating if needed) the queue partition in `opts.dir` for appending.
   *
   * Takes the directory's exclusive appender lock (a stale lock of a dead pid is taken over),
   * then recovers: a last segment whose header was never completed is replaced; the last
   * segment's torn tail (a frame cut off by a crash, a batch without its END frame) is cut off;
   * its offset index is made to match; a segment sealed by END_OF_SEGMENT gets its successor.
   * Nothing complete is dropped. See `recovery` for what was done. Without `notifier`, uses
   * the one registered for `dir` in this thread (registerQueueNotifier), if any.
   *
   * Throws: Error for invalid options; JournalLockedError if a live process holds the lock;
   * JournalCorruptionError (file + offset) for damage that is not a torn tail.
   */
  static open(options: JournalOptions): Appender {
    // Without a notifier of its own, the one a running topology registered for the directory.
    const registeredNotifier =
      options.notifier === undefined && typeof options.dir === 'string'
        ? registeredQueueNotifier(options.dir)
        : undefined;
    const opts = resolveOptions(
      registeredNotifier ? { ...options, notifier: registeredNotifier } : options,
    );
    const faults = new FaultInjector(readFaultPlan());
    fs.mkdirSync(opts.dir, { recursive: true });
    const lock = acquireAppenderLock(opts.dir);
    try {
      const report: RecoveryReport = {
        segment: null,
        scannedBytes: 0,
        truncatedBytes: 0,
        droppedRecords: 0,
        replacedSegment: null,
        lockTakenOverFromPid: lock.takenOverFromPid,
      };
      const seg = Appender.recover(opts, faults, report);
      const appender = new Appender(opts, lock, faults, seg, report);
      // Tailers parked while the previous appender died learn about the repaired tail.
      if (opts.notifier) publish(opts.notifier);
      return appender;
    } catch (e) {
      lock.release();
      throw e;
    }
  }

  private static recover(
    opts: ResolvedOptions,
    faults: FaultInjector,
    report: RecoveryReport,
  ): ActiveSegment {
    const segments = listSegments(opts.dir);
    if (segments.length === 0) return createSegment(opts, faults, 0);

    let last = segments[segments.length - 1];
    let header = readHeaderOf(opts.dir, last);
    if (!header.complete) {
      // A crash while rolling: the segment never held a record (records are written only after
      // the complete marker). Remove it; the predecessor's recovery says where to continue.
      report.replacedSegment = segmentPath(opts.dir, last);
      removeSegmentFiles(opts.dir, last);
      segments.pop();
      if (segments.length === 0) return createSegment(opts, faults, last);
      last = segments[segments.length - 1];
      header = readHeaderOf(opts.dir, last);
      if (!header.complete) {
        throw new JournalCorruptionError(
          segmentPath(opts.dir, last),
          0,
          `segment header is damaged (${header.reason}) and it is not the newest segment`,
        );
      }
    }
    if (segments.length >= 2 && !handsOverTo(opts.dir, segments[segments.length - 2], last)) {
      // Created before its predecessor was sealed (not by this appender, which seals first):
      // it cannot hold records of this queue yet. Continue the predecessor instead.
      const file = segmentPath(opts.dir, last);
      if (fs.statSync(file).size > SEGMENT_HEADER_BYTES) {
        throw new JournalCorruptionError(
          file,
          SEGMENT_HEADER_BYTES,
          `segment holds frames but its predecessor ${segmentFileName(segments[segments.length - 2])} is not sealed with an end-of-segment frame handing over to it`,
        );
      }
      report.replacedSegment = file;
      removeSegmentFiles(opts.dir, last);
      segments.pop();
      last = segments[segments.length - 1];
      header = readHeaderOf(opts.dir, last);
      if (!header.complete)
        throw new JournalCorruptionError(
          segmentPath(opts.dir, last),
          0,
          `segment header is damaged (${header.reason}) and it is not the newest segment`,
        );
    }
    const segPath = segmentPath(opts.dir, last);
    if (header.firstIndex !== last) {
      throw new JournalCorruptionError(
        segPath,
        0,
        `header says first index ${header.firstIndex} but the file name says ${last}`,
      );
    }
    const r = recoverSegment(segPath, indexPath(opts.dir, last));
    report.segment = segPath;
    report.scannedBytes = r.scannedBytes;
    report.truncatedBytes = r.truncatedBytes;
    report.droppedRecords = r.droppedRecords;
    if (r.sealed) return createSegment(opts, faults, last + r.recordCount);
    const fd = fs.openSync(segPath, 'r+');
    const idxFd = fs.openSync(indexPath(opts.dir, last), 'r+');
    return {
      first: last,
      path: segPath,
      fd,
      idxFd,
      fileBytes: r.fileBytes,
      recordCount: r.recordCount,
      createdMs: header.createdMs,
    };
  }

  /** Queue index the next appended record will get (0-based; counts buffered records). */
  get nextIndex(): number {
    return this.next;
  }

  /** Directory of this queue partition. */
  get dir(): string {
    return this.opts.dir;
  }

  /**
   * Buffers one record; returns its queue index. The payload is copied, so the caller may
   * reuse it. With fsync 'record' the record is written and fdatasynced before this returns;
   * otherwise it becomes visible to tailers at the next flush() (or when the write buffer
   * passes `writeBufferBytes`). May roll to a new segment first (size or time).
   *
   * Throws Error if closed, or if `payload` is not a Uint8Array or exceeds RECORD_BYTES_MAX.
   */
  append(payload: Uint8Array): number {
    this.checkNoBatch('append');
    checkPayload(payload, 0);
    const bytes = frameBytes(payload.length);
    this.rollIfDue(bytes);
    const index = this.next;
    this.addFrame(payload, FLAG_BEGIN | FLAG_END);
    this.afterAppend();
    return index;
  }

  /**
   * Buffers `payloads` as one atomic batch; returns the index of the first record (indexes are
   * consecutive). Atomic across crashes and for readers: the records are marked BEGIN .. END,
   * recovery cuts off a batch without its END frame, and tailers return none of a batch until
   * all of it is complete. A batch never spans segments. An empty batch is a programmer error.
   *
   * Throws Error if closed, if `payloads` is empty, or for a payload as in append().
   */
  appendBatch(payloads: readonly Uint8Array[]): number {
    this.checkNoBatch('appendBatch');
    if (!Array.isArray(payloads) || payloads.length === 0) {
      throw new Error(
        `appendBatch needs at least one payload, payloads.length=${Array.isArray(payloads) ? payloads.length : 'not an array'}`,
      );
    }
    let bytes = 0;
    for (let i = 0; i < payloads.length; i++) {
      checkPayload(payloads[i], i);
      bytes += frameBytes(payloads[i].length);
    }
    this.rollIfDue(bytes);
    const index = this.next;
    const lastI = payloads.length - 1;
    for (let i = 0; i <= lastI; i++) {
      this.addFrame(payloads[i], (i === 0 ? FLAG_BEGIN : 0) | (i === lastI ? FLAG_END : 0));
    }
    this.afterAppend();
    return index;
  }

  /**
   * Encode-once appends: reserves room for a record of `length` payload bytes in the write
   * buffer and returns the offset in `claimBuffer` where the caller writes the payload (e.g.
   * `EnvelopeWriter.copyTo(appender.claimBuffer, offset)`), then calls `commit()`. Saves the
   * copy `append()` makes of a payload built elsewhere. Outside a batch, claim + commit is one
   * record, as `append()`; inside beginBatch() .. endBatch(), one record of the batch. A claim not
   * committed is discarded by the next claim, flush or close (it never reaches the file), so a
   * caller that fails while writing the payload leaves nothing behind. May roll first, as append.
   *
   * Throws Error if closed, or if `length` is not an integer in 0 .. RECORD_BYTES_MAX.
   */
  claim(length: number): number {
    this.checkOpen();
    if (!(Number.isInteger(length) && length >= 0 && length <= RECORD_BYTES_MAX)) {
      throw new Error(
        `claim length must be an integer in 0 .. ${RECORD_BYTES_MAX}, length=${length}`,
      );
    }
    this.claimOff = -1;
    const bytes = frameBytes(length);
    if (this.batchOff < 0) this.rollIfDue(bytes);
    else this.rollBatchIfDue(bytes);
    this.reserve(bytes);
    this.claimOff = this.pendingBytes;
    this.claimLength = length;
    return this.claimOff + FRAME_HEADER_BYTES;
  }

  /**
   * The write buffer a claim's payload goes into, at the offset claim() returned. Valid only
   * until the next call on the appender (it may be replaced when it grows).
   */
  get claimBuffer(): Buffer {
    return this.pending;
  }

  /**
   * Seals the claimed record (its payload now in claimBuffer) and returns its queue index.
   * Outside a batch it is buffered like append() (flushed per the fsync policy); in a batch it
   * becomes visible with the batch's END at endBatch().
   * Throws Error if closed or nothing is claimed.
   */
  commit(): number {
    this.checkOpen();
    const off = this.claimOff;
    if (off < 0) throw new Error(`commit without a claim on ${this.opts.dir}`);
    this.claimOff = -1;
    const index = this.next;
    if (this.batchOff < 0) {
      this.sealPending(off, this.claimLength, FLAG_BEGIN | FLAG_END);
      this.afterAppend();
    } else {
      const flags = this.batchRecords === 0 ? FLAG_BEGIN : 0;
      this.sealPending(off, this.claimLength, flags);
      this.batchLastOff = off;
      this.batchRecords++;
    }
    return index;
  }

  /**
   * Opens a batch: the records claimed and committed until endBatch() are one atomic unit, as
   * appendBatch() (nothing of it visible to tailers or kept by recovery before its END frame).
   * A batch never spans segments: when the segment fills up during one, the batch's frames move
   * to the next segment. Throws Error if closed or a batch is open already.
   */
  beginBatch(): void {
    this.checkOpen();
    if (this.batchOff >= 0) throw new Error(`beginBatch while a batch is open on ${this.opts.dir}`);
    this.claimOff = -1;
    this.batchOff = this.pendingBytes;
    this.batchRecords = 0;
    this.batchLastOff = -1;
  }

  /** Records committed in the open batch (0 when none is open). */
  get batchLength(): number {
    return this.batchOff < 0 ? 0 : this.batchRecords;
  }

  /**
   * Drops the open batch's records after the first `records` (for a caller undoing the outputs
   * of a failed attempt). Throws Error if no batch is open or `records` is not in
   * 0 .. batchLength.
   */
  truncateBatch(records: number): void {
    this.checkOpen();
    if (this.batchOff < 0)
      throw new Error(`truncateBatch without an open batch on ${this.opts.dir}`);
    if (!(Number.isInteger(records) && records >= 0 && records <= this.batchRecords)) {
      throw new Error(
        `truncateBatch records must be an integer in 0 .. ${this.batchRecords}, records=${records}`,
      );
    }
    this.claimOff = -1;
    const drop = this.batchRecords - records;
    if (drop === 0) return;
    const firstDropped = this.pendingRecords - drop;
    this.pendingBytes = this.pendingOffsetOf(firstDropped);
    this.batchLastOff = records === 0 ? -1 : this.pendingOffsetOf(firstDropped - 1);
    this.pendingRecords -= drop;
    this.batchRecords = records;
    this.next -= drop;
  }

  /**
   * Closes the open batch: marks its last record END (resealing that frame), after which it is
   * one unit like appendBatch(); flushes per the policy as append does. An empty batch appends
   * nothing. Returns the index of the batch's first record (nextIndex if empty).
   * Throws Error if closed or no batch is open.
   */
  endBatch(): number {
    this.checkOpen();
    if (this.batchOff < 0) throw new Error(`endBatch without an open batch on ${this.opts.dir}`);
    this.claimOff = -1;
    const records = this.batchRecords;
    const last = this.batchLastOff;
    this.batchOff = -1;
    this.batchRecords = 0;
    this.batchLastOff = -1;
    if (records === 0) return this.next;
    const seq = this.seg.recordCount + this.pendingRecords - 1;
    const length = getU32(this.pending, last + FRAME_LENGTH_OFFSET);
    const flags = getU32(this.pending, last + FRAME_FLAGS_OFFSET) | FLAG_END;
    sealFrame(this.pending, last, length, flags, seq);
    this.afterAppend();
    return this.next - records;
  }

  /**
   * Writes buffered records (one write for frames, one for index entries), fdatasyncs unless
   * fsync is 'none', then wakes same-process tailers. No-op when nothing is buffered.
   * Throws Error if closed; rethrows I/O errors (e.g. ENOSPC), after which the appender should
   * be closed and reopened (recovery makes the files consistent again).
   */
  flush(): void {
    this.checkNoBatch('flush');
    if (this.pendingBytes === 0) return;
    this.writePending(this.opts.fsync !== 'none');
    if (this.opts.notifier) publish(this.opts.notifier);
  }

  /**
   * flush() with the fdatasync on libuv's thread pool instead of the calling thread: the
   * buffered frames are written (one write for frames, one for index entries) before this
   * returns, so later appends land after them in the file; the promise resolves once they are
   * durable per the policy (at once with 'none'), and same-process tailers are woken then. While
   * a sync is in flight the caller may append and flush again; a later sync covers every earlier
   * write of the segment. Lets a caller prepare its next batch while the disk syncs (group
   * commit after the write-ahead logs of databases, e.g. PostgreSQL's WAL writer).
   *
   * Throws Error if closed; rethrows write errors; the promise rejects with the fdatasync error
   * (then close and reopen, as after a failed flush()).
   */
  flushAsync(): Promise<void> {
    this.checkNoBatch('flushAsync');
    if (this.pendingBytes > 0) this.writePending(false);
    if (this.opts.fsync === 'none') {
      if (this.opts.notifier) publish(this.opts.notifier);
      return Promise.resolve();
    }
    const fd = this.seg.fd;
    const notifier = this.opts.notifier;
    this.syncsInFlight++;
    return new Promise((resolve, reject) => {
      fs.fdatasync(fd, (err) => {
        if (--this.syncsInFlight === 0 && this.closeWhenSynced.length > 0) {
          for (const f of this.closeWhenSynced.splice(0)) fs.closeSync(f);
        }
        if (err) {
          this.failure ??= err;
          return reject(err);
        }
        if (notifier) publish(notifier);
        resolve();
      });
    });
  }

  /**
   * Writes buffered records, then fsyncs, whatever the policy, every segment (and offset index)
   * holding records with indexes >= `fromIndex` (default: the segment being appended to only)
   * and the directory: afterwards those records survive a power loss. For a writer whose own
   * write-ahead log lets it run this queue with fsync 'none' and make it durable at its
   * checkpoints (it passes the nextIndex of its previous checkpoint). Throws Error if closed;
   * rethrows I/O errors.
   */
  sync(fromIndex = this.seg.first): void {
    this.checkNoBatch('sync');
    if (this.pendingBytes > 0) this.writePending(false);
    if (fromIndex < this.seg.first) {
      const segments = listSegments(this.opts.dir);
      for (let i = 0; i < segments.length && segments[i] < this.seg.first; i++) {
        if (i + 1 < segments.length && segments[i + 1] <= fromIndex) continue;
        for (const file of [
          segmentPath(this.opts.dir, segments[i]),
          indexPath(this.opts.dir, segments[i]),
        ]) {
          fsyncFile(file);
        }
      }
    }
    this.io(() => {
      fs.fdatasyncSync(this.seg.fd);
      fs.fsyncSync(this.seg.idxFd);
      fsyncDir(path.resolve(this.opts.dir));
    });
    if (this.opts.notifier) publish(this.opts.notifier);
  }

  /** First queue index of the segment being appended to. */
  get activeSegmentFirstIndex(): number {
    return this.seg.first;
  }

  /**
   * Deletes, oldest first, every sealed segment (and its offset index) whose records all have
   * queue indexes below `index`; never the segment being appended to. Returns the first indexes
   * of the deleted segments. Tailers reading a deleted segment finish it (their descriptor
   * stays valid); a tailer moved to a deleted index lands on the queue's new first record
   * (moveToStart). For retention and write-ahead-log truncation by the queue's one writer.
   */
  dropSegmentsBefore(index: number): number[] {
    this.checkOpen();
    return removeSegmentsBefore(this.opts.dir, index, this.seg.first);
  }

  /** Bytes appended and not yet written to the segment file. */
  get bufferedBytes(): number {
    return this.pendingBytes;
  }

  /** Closes a segment descriptor, or defers it while a flushAsync() sync may still use it. */
  private closeFd(fd: number): void {
    if (this.syncsInFlight > 0) this.closeWhenSynced.push(fd);
    else fs.closeSync(fd);
  }

  /**
   * Flushes, fsyncs the segment and its index (whatever the policy), closes the files and
   * releases the lock. Idempotent. Does not seal the segment: the next appender continues it.
   */
  close(): void {
    if (this.closed) return;
    if (this.failure) {
      // Nothing more is written: the buffered frames are the failed ones.
      this.closed = true;
      if (this.seg.fd >= 0) this.closeFd(this.seg.fd);
      if (this.seg.idxFd >= 0) fs.closeSync(this.seg.idxFd);
      this.lock.release();
      return;
    }
    try {
      // An open batch is not complete: like a crash before its END frame, it is not kept.
      if (this.batchOff >= 0) this.truncateBatch(0);
      this.batchOff = -1;
      this.claimOff = -1;
      if (this.pendingBytes > 0) {
        this.writePending(false);
        if (this.opts.notifier) publish(this.opts.notifier);
      }
      fs.fsyncSync(this.seg.fd);
      fs.fsyncSync(this.seg.idxFd);
    } finally {
      this.closed = true;
      this.closeFd(this.seg.fd);
      fs.closeSync(this.seg.idxFd);
      this.lock.release();
    }
  }

  private checkOpen(): void {
    if (this.closed) throw new Error(`Appender for ${this.opts.dir} is closed`);
    if (this.failure) {
      throw new Error(
        `Appender for ${this.opts.dir} failed earlier (${this.failure.message}); close it and open a new one`,
      );
    }
  }

  /** Runs an I/O step; on an error the appender is failed (see `failure`) and it is rethrown. */
  private io<T>(step: () => T): T {
    try {
      return step();
    } catch (e) {
      this.failure = e instanceof Error ? e : new Error(String(e));
      throw e;
    }
  }

  /** checkOpen, and that no batch of beginBatch() is open; discards an uncommitted claim. */
  private checkNoBatch(what: string): void {
    this.checkOpen();
    if (this.batchOff >= 0)
      throw new Error(`${what} while a batch is open on ${this.opts.dir} (call endBatch first)`);
    this.claimOff = -1;
  }

  private addFrame(payload: Uint8Array, flags: number): void {
    this.reserve(frameBytes(payload.length));
    const off = this.pendingBytes;
    this.pending.set(payload, off + FRAME_HEADER_BYTES);
    this.sealPending(off, payload.length, flags);
  }

  /** Makes room for one more frame of `bytes` and its index entry in the write buffers. */
  private reserve(bytes: number): void {
    if (this.pendingBytes + bytes > this.pending.length) {
      this.pending = grow(this.pending, this.pendingBytes, this.pendingBytes + bytes);
    }
    if ((this.pendingRecords + 1) * INDEX_ENTRY_BYTES > this.pendingIndex.length) {
      this.pendingIndex = grow(
        this.pendingIndex,
        this.pendingRecords * INDEX_ENTRY_BYTES,
        (this.pendingRecords + 1) * INDEX_ENTRY_BYTES,
      );
    }
  }

  /** Seals the frame whose payload is at `off` + header in `pending` as the next record. */
  private sealPending(off: number, length: number, flags: number): void {
    sealFrame(this.pending, off, length, flags, this.seg.recordCount + this.pendingRecords);
    const fileOffset = this.seg.fileBytes + off;
    putU32(
      this.pendingIndex,
      this.pendingRecords * INDEX_ENTRY_BYTES,
      encodeIndexEntry(fileOffset, (flags & FLAG_BEGIN) !== 0),
    );
    this.pendingBytes = off + frameBytes(length);
    this.pendingRecords++;
    this.next++;
  }

  /** Offset in `pending` of the frame of buffered record `k` (0 = the first buffered one). */
  private pendingOffsetOf(k: number): number {
    return indexEntryOffset(getU32(this.pendingIndex, k * INDEX_ENTRY_BYTES)) - this.seg.fileBytes;
  }

  /**
   * rollIfDue for a claim inside an open batch: a batch never spans segments, so when the
   * segment cannot take the batch so far plus `bytes`, the batch's frames are taken out, the
   * segment is rolled (writing what preceded the batch), and they are resealed at the start of
   * the next segment with their new seqs and offsets.
   */
  private rollBatchIfDue(bytes: number): void {
    const seg = this.seg;
    const batchBytes = this.pendingBytes - this.batchOff;
    const full =
      seg.fileBytes + this.pendingBytes + bytes + END_OF_SEGMENT_FRAME_BYTES >
      this.opts.segmentBytes;
    const interval = this.opts.rollIntervalMs;
    const late =
      interval !== null &&
      Math.floor(this.opts.clock() / interval) !== Math.floor(seg.createdMs / interval);
    if (!(full || late) || seg.recordCount + this.pendingRecords - this.batchRecords === 0) return;
    const frames = Buffer.from(this.pending.subarray(this.batchOff, this.pendingBytes));
    const records = this.batchRecords;
    this.pendingBytes = this.batchOff;
    this.pendingRecords -= records;
    this.next -= records;
    this.roll();
    this.batchOff = 0;
    this.batchLastOff = -1;
    this.reserve(batchBytes);
    frames.copy(this.pending, 0);
    for (let o = 0, k = 0; k < records; k++) {
      const length = getU32(this.pending, o + FRAME_LENGTH_OFFSET);
      const flags = getU32(this.pending, o + FRAME_FLAGS_OFFSET);
      this.reserve(0);
      this.sealPending(o, length, flags);
      this.batchLastOff = o;
      o += frameBytes(length);
    }
  }

  private afterAppend(): void {
    if (this.opts.fsync === 'record' || this.pendingBytes >= this.opts.writeBufferBytes)
      this.flush();
  }

  /** Rolls before adding `bytes` of frames if the segment is full or its time window is over. */
  private rollIfDue(bytes: number): void {
    const seg = this.seg;
    if (seg.recordCount + this.pendingRecords === 0) return;
    const full =
      seg.fileBytes + this.pendingBytes + bytes + END_OF_SEGMENT_FRAME_BYTES >
      this.opts.segmentBytes;
    const interval = this.opts.rollIntervalMs;
    const late =
      interval !== null &&
      Math.floor(this.opts.clock() / interval) !== Math.floor(seg.createdMs / interval);
    if (full || late) this.roll();
  }

  /**
   * Seals the current segment with END_OF_SEGMENT and starts the next one, named by the next
   * index. Order matters for tailers and recovery: buffered frames, then END_OF_SEGMENT (both
   * fsynced unless fsync is 'none'), then the new segment's header (complete marker last), then
   * publish. A tailer moves to the new segment only after reading END_OF_SEGMENT (case Q2).
   */
  private roll(): void {
    this.io(() => this.rollNow());
  }

  private rollNow(): void {
    const sync = this.opts.fsync !== 'none';
    if (this.pendingBytes > 0) this.writePending(false);
    const seg = this.seg;
    const eos = Buffer.alloc(END_OF_SEGMENT_FRAME_BYTES);
    sealFrame(eos, 0, 0, FLAG_END_OF_SEGMENT, seg.recordCount);
    writeFully(seg.fd, eos, 0, eos.length, seg.fileBytes);
    seg.fileBytes += eos.length;
    if (sync) {
      fs.fdatasyncSync(seg.fd);
      fs.fsyncSync(seg.idxFd);
    }
    this.closeFd(seg.fd);
    fs.closeSync(seg.idxFd);
    // Closed: never used again, even if the next segment cannot be created (the numbers may be
    // reused by other files at once).
    seg.fd = -1;
    seg.idxFd = -1;
    this.seg = createSegment(this.opts, this.faults, this.next);
    if (this.opts.notifier) publish(this.opts.notifier);
  }

  private writePending(sync: boolean): void {
    this.io(() => this.writePendingNow(sync));
  }

  private writePendingNow(sync: boolean): void {
    const seg = this.seg;
    const bytes = this.pendingBytes;
    if (this.faults.hit('torn-write')) {
      writeFully(seg.fd, this.pending, 0, Math.max(1, bytes >>> 1), seg.fileBytes);
      crashNow();
    }
    writeFully(seg.fd, this.pending, 0, bytes, seg.fileBytes);
    writeFully(
      seg.idxFd,
      this.pendingIndex,
      0,
      this.pendingRecords * INDEX_ENTRY_BYTES,
      seg.recordCount * INDEX_ENTRY_BYTES,
    );
    if (sync) fs.fdatasyncSync(seg.fd);
    seg.fileBytes += bytes;
    seg.recordCount += this.pendingRecords;
    this.pendingBytes = 0;
    this.pendingRecords = 0;
  }
}

function checkPayload(payload: Uint8Array, i: number): void {
  if (!(payload instanceof Uint8Array))
    throw new Error(`payload ${i} must be a Uint8Array, got ${typeof payload}`);
  if (payload.length > RECORD_BYTES_MAX)
    throw new Error(`payload ${i} must be <= ${RECORD_BYTES_MAX} bytes, length=${payload.length}`);
}

function grow(buf: Buffer, used: number, needed: number): Buffer {
  let size = buf.length;
  while (size < needed) size *= 2;
  const bigger = Buffer.alloc(size);
  buf.copy(bigger, 0, 0, used);
  return bigger;
}

function readHeaderOf(dir: string, first: number): ReturnType<typeof readSegmentHeader> {
  const fd = fs.openSync(segmentPath(dir, first), 'r');
  try {
    return readSegmentHeader(fd);
  } finally {
    fs.closeSync(fd);
  }
}

/** fsync of a file by name; a file deleted meanwhile (dropSegmentsBefore) needs none. */
function fsyncFile(file: string): void {
  let fd: number;
  try {
    fd = fs.openSync(file, 'r');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw e;
  }
  try {
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

function removeSegmentFiles(dir: string, first: number): void {
  for (const file of [segmentPath(dir, first), indexPath(dir, first)]) {
    try {
      fs.unlinkSync(file);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
    }
  }
}

/**
 * Creates (or replaces: a half-created or premature file of that name holds no records) the
 * segment whose first record will have index `first`, with an empty offset index. The header
 * body is written first and the complete marker second, so a crash in between is detectable.
 */
function createSegment(opts: ResolvedOptions, faults: FaultInjector, first: number): ActiveSegment {
  const segPath = segmentPath(opts.dir, first);
  const createdMs = opts.clock();
  const header = encodeSegmentHeader(first, createdMs);
  const fd = fs.openSync(segPath, 'w+');
  let idxFd = -1;
  try {
    writeFully(fd, header, 0, SEGMENT_COMPLETE_MARKER_OFFSET, 0);
    if (faults.hit('torn-segment-header')) crashNow();
    writeFully(
      fd,
      header,
      SEGMENT_COMPLETE_MARKER_OFFSET,
      SEGMENT_HEADER_BYTES - SEGMENT_COMPLETE_MARKER_OFFSET,
      SEGMENT_COMPLETE_MARKER_OFFSET,
    );
    idxFd = fs.openSync(indexPath(opts.dir, first), 'w+');
    if (opts.fsync !== 'none') {
      fs.fsyncSync(fd);
      fs.fsyncSync(idxFd);
      fsyncDir(path.resolve(opts.dir));
    }
  } catch (e) {
    fs.closeSync(fd);
    if (idxFd >= 0) fs.closeSync(idxFd);
    throw e;
  }
  return {
    first,
    path: segPath,
    fd,
    idxFd,
    fileBytes: SEGMENT_HEADER_BYTES,
    recordCount: 0,
    createdMs,
  };
}
