/**
 * Scans over segment files. Telling a torn tail from damage: When a frame at offset X fails its check, the question is
 * whether anything complete was written after it: a crash (SIGKILL, power loss) only ever
 * leaves garbage at the end of what was written, so "no complete frame after X" means a torn
 * tail (cut it off / wait for it), while "a complete frame after X" means the bytes at X were
 * damaged after they were written, and the journal must refuse rather than drop good records.
 */
import fs from 'node:fs';
import {
  FLAG_END_OF_SEGMENT,
  FRAME_HEADER_BYTES,
  FRAME_ALIGNMENT,
  FrameCheck,
  RECORD_BYTES_MAX,
  checkFrame,
  frameFlags,
  frameLength,
  frameSeq,
} from './frame.js';
import { SEGMENT_HEADER_BYTES, readFully, segmentPath } from './segment.js';

const SCAN_CHUNK_BYTES = 1024 * 1024;

/**
 * Offset of the first complete, checksum-valid frame at an 8-aligned offset in
 * `[from, fileBytes)` whose seq is plausible for a frame after one with seq `seqMin - 1`
 * (seq in `[seqMin, seqMin + remaining / 16]`), or -1. Reads the file in 1 MiB chunks; used only
 * on the error path (O(bytes after X)).
 */
export function findCompleteFrameAfter(
  fd: number,
  fileBytes: number,
  from: number,
  seqMin: number,
): number {
  const start = Math.ceil(from / FRAME_ALIGNMENT) * FRAME_ALIGNMENT;
  const seqMax = seqMin + Math.floor((fileBytes - start) / FRAME_HEADER_BYTES) + 1;
  // Sized to what is there: at a live tail only a few bytes follow `from`.
  const buf = Buffer.alloc(
    Math.min(SCAN_CHUNK_BYTES, Math.max(0, fileBytes - start)) + FRAME_HEADER_BYTES,
  );
  for (
    let chunkStart = start;
    chunkStart + FRAME_HEADER_BYTES <= fileBytes;
    chunkStart += SCAN_CHUNK_BYTES
  ) {
    const n = readFully(fd, buf, 0, Math.min(buf.length, fileBytes - chunkStart), chunkStart);
    const last = Math.min(SCAN_CHUNK_BYTES, n - FRAME_HEADER_BYTES);
    for (let o = 0; o <= last; o += FRAME_ALIGNMENT) {
      const length = frameLength(buf, o);
      if (length > RECORD_BYTES_MAX || chunkStart + o + FRAME_HEADER_BYTES + length > fileBytes)
        continue;
      const seq = frameSeq(buf, o);
      if (seq < seqMin || seq > seqMax) continue;
      if (o + FRAME_HEADER_BYTES + length <= n) {
        if (checkFrame(buf, o, n - o, -1) === FrameCheck.ok) return chunkStart + o;
      } else {
        const frame = Buffer.alloc(FRAME_HEADER_BYTES + length);
        const got = readFully(fd, frame, 0, frame.length, chunkStart + o);
        if (checkFrame(frame, 0, got, -1) === FrameCheck.ok) return chunkStart + o;
      }
    }
  }
  return -1;
}

/**
 * If the segment file open as `fd` (of `fileBytes` bytes) ends with a valid END_OF_SEGMENT
 * frame, the record count that frame carries; else -1. One 16-byte read.
 */
export function readEndOfSegment(fd: number, fileBytes: number): number {
  if (fileBytes < SEGMENT_HEADER_BYTES + FRAME_HEADER_BYTES) return -1;
  const tail = Buffer.alloc(FRAME_HEADER_BYTES);
  if (
    readFully(fd, tail, 0, FRAME_HEADER_BYTES, fileBytes - FRAME_HEADER_BYTES) < FRAME_HEADER_BYTES
  )
    return -1;
  if (
    checkFrame(tail, 0, FRAME_HEADER_BYTES, -1) !== FrameCheck.ok ||
    frameFlags(tail, 0) !== FLAG_END_OF_SEGMENT
  )
    return -1;
  return frameSeq(tail, 0);
}

/**
 * Whether segment `prevFirst` in `dir` is sealed by an END_OF_SEGMENT frame that hands over to
 * segment `first` (prevFirst + its record count = first). A segment whose predecessor is not
 * sealed this way was created early (not by this journal's appender, which seals first) and
 * holds no records of the queue yet.
 */
export function handsOverTo(dir: string, prevFirst: number, first: number): boolean {
  let fd: number;
  try {
    fd = fs.openSync(segmentPath(dir, prevFirst), 'r');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return false;
    throw e;
  }
  try {
    const count = readEndOfSegment(fd, fs.fstatSync(fd).size);
    return count >= 0 && prevFirst + count === first;
  } finally {
    fs.closeSync(fd);
  }
}
