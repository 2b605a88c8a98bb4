/**
 * Recovery of the last segment when an appender opens: find the last complete unit, cut off the
 * torn tail (a frame cut off by a crash, the frames of a batch whose END frame never made it),
 * and make the offset index agree with the frames again.
 *
 * Cost: the scan starts at the last index entry that begins a unit and verifies, so reopening
 * after a clean close reads one unit; after a crash it reads what was written since the last
 * index write (at most one flush). Without a usable index it reads the whole segment.
 *
 * After Chronicle Queue's "recover the header of an incomplete excerpt on startup", with
 * checksums instead of the not-complete bit.
 */
import fs from 'node:fs';
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
} from './frame.js';
import {
  INDEX_ENTRY_BYTES,
  encodeIndexEntry,
  indexEntryIsUnitStart,
  indexEntryOffset,
} from './offset-index.js';
import { SEGMENT_HEADER_BYTES, readFully, writeFully } from './segment.js';
import { findCompleteFrameAfter } from './scan.js';
import { JournalCorruptionError } from './errors.js';

/** What recovering one segment found and did. */
export interface SegmentRecovery {
  /** Bytes of the segment file after recovery (end of the last complete unit). */
  fileBytes: number;
  /** Complete records in the segment. */
  recordCount: number;
  /** The segment ends with END_OF_SEGMENT: the next record goes to a new segment. */
  sealed: boolean;
  /** Bytes cut off the end of the segment file. */
  truncatedBytes: number;
  /** Complete frames cut off because the batch they belong to has no END frame. */
  droppedRecords: number;
  /** Bytes of frames read and verified. */
  scannedBytes: number;
}

/** Index entries to walk back over, and unit-start entries to try, before scanning from the header. */
const INDEX_WALK_BACK_ENTRIES_MAX = 65536;
const INDEX_WALK_BACK_TRIES_MAX = 64;
const READ_CHUNK_BYTES = 4 * 1024 * 1024;

function readFrameAt(fd: number, offset: number, fileBytes: number): Buffer | null {
  if (offset + FRAME_HEADER_BYTES > fileBytes) return null;
  const head = Buffer.alloc(FRAME_HEADER_BYTES);
  readFully(fd, head, 0, FRAME_HEADER_BYTES, offset);
  const length = frameLength(head, 0);
  if (offset + FRAME_HEADER_BYTES + length > fileBytes || length > RECORD_BYTES_MAX) return null;
  const frame = Buffer.alloc(FRAME_HEADER_BYTES + length);
  readFully(fd, frame, 0, frame.length, offset);
  return frame;
}

/** The last index entry that begins a unit and points at a frame that verifies, or the segment start. */
function findScanStart(
  fd: number,
  idxFd: number,
  fileBytes: number,
): { offset: number; seq: number } {
  const entries = Math.floor(fs.fstatSync(idxFd).size / INDEX_ENTRY_BYTES);
  const n = Math.min(entries, INDEX_WALK_BACK_ENTRIES_MAX);
  if (n > 0) {
    const tail = Buffer.alloc(n * INDEX_ENTRY_BYTES);
    readFully(idxFd, tail, 0, tail.length, (entries - n) * INDEX_ENTRY_BYTES);
    let tries = 0;
    for (let k = n - 1; k >= 0 && tries < INDEX_WALK_BACK_TRIES_MAX; k--) {
      const entry = tail.readUInt32LE(k * INDEX_ENTRY_BYTES);
      if (!indexEntryIsUnitStart(entry)) continue;
      tries++;
      const seq = entries - n + k;
      const offset = indexEntryOffset(entry);
      if (offset < SEGMENT_HEADER_BYTES) continue;
      const frame = readFrameAt(fd, offset, fileBytes);
      if (
        frame &&
        checkFrame(frame, 0, frame.length, seq) === FrameCheck.ok &&
        (frameFlags(frame, 0) & FLAG_BEGIN) !== 0
      ) {
        return { offset, seq };
      }
    }
  }
  return { offset: SEGMENT_HEADER_BYTES, seq: 0 };
}

/**
 * Recovers segment file `segPath` (header already checked complete) and its index `idxPath`
 * (created if missing). Truncates both to the last complete unit and fsyncs what it changed.
 * Throws JournalCorruptionError, naming the file and offset, when a frame fails its check but a
 * complete frame follows it (damage, not a torn tail), or when frames follow END_OF_SEGMENT.
 */
export function recoverSegment(segPath: string, idxPath: string): SegmentRecovery {
  const fd = fs.openSync(segPath, 'r+');
  const idxFd = fs.openSync(idxPath, fs.constants.O_RDWR | fs.constants.O_CREAT, 0o644);
  try {
    const fileBytes = fs.fstatSync(fd).size;
    const start = findScanStart(fd, idxFd, fileBytes);

    let buf = Buffer.alloc(
      Math.min(READ_CHUNK_BYTES, Math.max(FRAME_HEADER_BYTES, fileBytes - start.offset)),
    );
    let bufStart = start.offset;
    let bufLen = 0;
    let pos = start.offset;
    let seq = start.seq;
    let commitPos = pos;
    let commitSeq = seq;
    let sealed = false;
    const rebuilt: number[] = [];

    for (;;) {
      if (pos === fileBytes) break;
      let avail = bufStart + bufLen - pos;
      let off = pos - bufStart;
      const needHeader = avail < FRAME_HEADER_BYTES;
      const needPayload = !needHeader && avail < FRAME_HEADER_BYTES + frameLength(buf, off);
      if (needHeader || needPayload) {
        const want = needHeader
          ? READ_CHUNK_BYTES
          : Math.max(READ_CHUNK_BYTES, FRAME_HEADER_BYTES + frameLength(buf, off));
        const len = Math.min(want, fileBytes - pos);
        if (buf.length < len) buf = Buffer.alloc(len);
        bufStart = pos;
        bufLen = readFully(fd, buf, 0, len, pos);
        avail = bufLen;
        off = 0;
      }
      const check = checkFrame(buf, off, avail, seq);
      if (check !== FrameCheck.ok) {
        const after = findCompleteFrameAfter(fd, fileBytes, pos + FRAME_ALIGNMENT, seq + 1);
        if (after >= 0) {
          throw new JournalCorruptionError(
            segPath,
            pos,
            `${describeFrameCheck(check, buf, off, seq)} (record ${seq} of the segment), ` +
              `but a complete frame follows at offset ${after}: damage, not a torn tail; refusing to drop the records after it`,
          );
        }
        break;
      }
      const flags = frameFlags(buf, off);
      if ((flags & FLAG_END_OF_SEGMENT) !== 0) {
        if (pos !== commitPos) {
          throw new JournalCorruptionError(
            segPath,
            pos,
            `end-of-segment frame inside an unfinished batch (batch began at offset ${commitPos})`,
          );
        }
        commitPos = pos + FRAME_HEADER_BYTES;
        sealed = true;
        if (commitPos < fileBytes) {
          const after = findCompleteFrameAfter(fd, fileBytes, commitPos, seq);
          if (after >= 0)
            throw new JournalCorruptionError(
              segPath,
              after,
              `complete frame after the end-of-segment frame at offset ${pos}`,
            );
        }
        break;
      }
      rebuilt.push(encodeIndexEntry(pos, pos === commitPos));
      pos += frameBytes(frameLength(buf, off));
      seq++;
      if ((flags & FLAG_END) !== 0) {
        commitPos = pos;
        commitSeq = seq;
      }
    }

    const truncatedBytes = fileBytes - commitPos;
    if (truncatedBytes > 0) {
      fs.ftruncateSync(fd, commitPos);
      fs.fsyncSync(fd);
    }
    // Index: keep entries before the scan start, rewrite the scanned ones that are committed.
    const keep = commitSeq - start.seq;
    const entries = Buffer.alloc(keep * INDEX_ENTRY_BYTES);
    for (let i = 0; i < keep; i++) entries.writeUInt32LE(rebuilt[i], i * INDEX_ENTRY_BYTES);
    writeFully(idxFd, entries, 0, entries.length, start.seq * INDEX_ENTRY_BYTES);
    fs.ftruncateSync(idxFd, commitSeq * INDEX_ENTRY_BYTES);
    fs.fsyncSync(idxFd);
    return {
      fileBytes: commitPos,
      recordCount: commitSeq,
      sealed,
      truncatedBytes,
      droppedRecords: seq - commitSeq,
      scannedBytes: pos - start.offset,
    };
  } finally {
    fs.closeSync(idxFd);
    fs.closeSync(fd);
  }
}
