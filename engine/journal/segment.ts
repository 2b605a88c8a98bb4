/**
 * Segment files: naming, the 64-byte segment header, listing a queue directory.
 *
 * A queue partition directory holds, per segment, `<first index, 20 digits>.seg` (header then
 * frames, see frame.ts) and `<first index>.idx` (the offset index, see offset-index.ts), plus the
 * appender's lock file. Naming a segment by the queue index of its first record (Chronicle
 * Queue names files by roll cycle; we roll by size or time, so the index is the stable name)
 * lets a tailer that has seen END_OF_SEGMENT open the next segment by name without listing the
 * directory, and lets a lookup by index binary-search the sorted names.
 *
 * ```
 *   0                   1                   2                   3
 *   0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
 *  +---------------------------------------------------------------+
 *  |  magic "SLUICEQ\0" (8 bytes)                                   |  0
 *  +---------------------------------------------------------------+
 *  |  version: uint32 = 1           |  headerBytes: uint32 = 64     |  8
 *  +---------------------------------------------------------------+
 *  |  firstIndex: float64 (queue index of the first record)        |  16
 *  +---------------------------------------------------------------+
 *  |  createdMs: float64 (appender clock when created; time rolls) |  24
 *  +---------------------------------------------------------------+
 *  |  reserved, zero (20 bytes)                                    |  32
 *  +---------------------------------------------------------------+
 *  |  headerChecksum: uint32  CRC-32 of bytes 0..52                |  52
 *  +---------------------------------------------------------------+
 *  |  completeMarker "COMPLETE" (8 bytes), written last            |  56
 *  +---------------------------------------------------------------+
 * ```
 * The header is written in two writes, the complete marker last, so a crash while a segment is
 * being created leaves a header without the marker, which recovery detects and replaces (case Q3)
 * and a tailer treats as "segment not there yet".
 */
import fs from 'node:fs';
import path from 'node:path';
import { crc32 } from './crc32.js';

export const SEGMENT_HEADER_BYTES = 64;
export const SEGMENT_VERSION = 1;
const MAGIC = Buffer.from('SLUICEQ\0', 'latin1');
const COMPLETE = Buffer.from('COMPLETE', 'latin1');
const VERSION_OFFSET = 8;
const HEADER_BYTES_OFFSET = 12;
const FIRST_INDEX_OFFSET = 16;
const CREATED_MS_OFFSET = 24;
const HEADER_CHECKSUM_OFFSET = 52;
/** Offset of the complete marker: bytes before it are the header body. */
export const SEGMENT_COMPLETE_MARKER_OFFSET = 56;

const NAME_DIGITS = 20;
const SEGMENT_SUFFIX = '.seg';
const INDEX_SUFFIX = '.idx';
const SEGMENT_NAME = /^(\d{20})\.seg$/;

/** `00000000000000000042.seg` for first index 42. */
export function segmentFileName(firstIndex: number): string {
  return String(firstIndex).padStart(NAME_DIGITS, '0') + SEGMENT_SUFFIX;
}

/** `00000000000000000042.idx` for first index 42. */
export function indexFileName(firstIndex: number): string {
  return String(firstIndex).padStart(NAME_DIGITS, '0') + INDEX_SUFFIX;
}

/**
 * First indexes of the segments in `dir`, ascending. A missing directory is an empty queue (a
 * tailer may open before the appender creates the queue).
 */
export function listSegments(dir: string): number[] {
  let names: string[];
  try {
    names = fs.readdirSync(dir);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw e;
  }
  const firsts: number[] = [];
  for (const name of names) {
    const m = SEGMENT_NAME.exec(name);
    if (m) firsts.push(Number(m[1]));
  }
  return firsts.sort((a, b) => a - b);
}

/** The 64 header bytes of a segment, complete marker included. */
export function encodeSegmentHeader(firstIndex: number, createdMs: number): Buffer {
  const b = Buffer.alloc(SEGMENT_HEADER_BYTES);
  MAGIC.copy(b, 0);
  b.writeUInt32LE(SEGMENT_VERSION, VERSION_OFFSET);
  b.writeUInt32LE(SEGMENT_HEADER_BYTES, HEADER_BYTES_OFFSET);
  b.writeDoubleLE(firstIndex, FIRST_INDEX_OFFSET);
  b.writeDoubleLE(createdMs, CREATED_MS_OFFSET);
  b.writeUInt32LE(crc32(b, 0, HEADER_CHECKSUM_OFFSET), HEADER_CHECKSUM_OFFSET);
  COMPLETE.copy(b, SEGMENT_COMPLETE_MARKER_OFFSET);
  return b;
}

export type SegmentHeader =
  { complete: true; firstIndex: number; createdMs: number } | { complete: false; reason: string };

/** Reads and checks the header of an open segment file. Never throws for bad contents. */
export function readSegmentHeader(fd: number): SegmentHeader {
  const b = Buffer.alloc(SEGMENT_HEADER_BYTES);
  const n = fs.readSync(fd, b, 0, SEGMENT_HEADER_BYTES, 0);
  if (n < SEGMENT_HEADER_BYTES)
    return { complete: false, reason: `header has ${n} of ${SEGMENT_HEADER_BYTES} bytes` };
  if (!b.subarray(0, MAGIC.length).equals(MAGIC)) return { complete: false, reason: 'bad magic' };
  if (!b.subarray(SEGMENT_COMPLETE_MARKER_OFFSET).equals(COMPLETE))
    return { complete: false, reason: 'header complete marker missing' };
  if (crc32(b, 0, HEADER_CHECKSUM_OFFSET) !== b.readUInt32LE(HEADER_CHECKSUM_OFFSET))
    return { complete: false, reason: 'header checksum mismatch' };
  const version = b.readUInt32LE(VERSION_OFFSET);
  if (version !== SEGMENT_VERSION)
    return { complete: false, reason: `unsupported version ${version}` };
  return {
    complete: true,
    firstIndex: b.readDoubleLE(FIRST_INDEX_OFFSET),
    createdMs: b.readDoubleLE(CREATED_MS_OFFSET),
  };
}

/** Writes all of `buf[off, off+len)` at file `position`, looping over short writes. */
export function writeFully(
  fd: number,
  buf: Uint8Array,
  off: number,
  len: number,
  position: number,
): void {
  while (len > 0) {
    const n = fs.writeSync(fd, buf, off, len, position);
    off += n;
    len -= n;
    position += n;
  }
}

/** Reads up to `len` bytes at `position`, looping until EOF; returns the bytes read. */
export function readFully(
  fd: number,
  buf: Uint8Array,
  off: number,
  len: number,
  position: number,
): number {
  let total = 0;
  while (total < len) {
    const n = fs.readSync(fd, buf, off + total, len - total, position + total);
    if (n === 0) break;
    total += n;
  }
  return total;
}

/** fsync of a directory, so a created or removed file name survives power loss. */
export function fsyncDir(dir: string): void {
  const fd = fs.openSync(dir, 'r');
  try {
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

export function segmentPath(dir: string, firstIndex: number): string {
  return path.join(dir, segmentFileName(firstIndex));
}

export function indexPath(dir: string, firstIndex: number): string {
  return path.join(dir, indexFileName(firstIndex));
}
