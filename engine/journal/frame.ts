/**
 * Record frame: the one module that owns the byte layout of a record inside a segment file.
 * Every other file asks this module for offsets and checks.
 *
 * ```
 *   0                   1                   2                   3
 *   0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
 *  +---------------------------------------------------------------+
 *  |  checksum: uint32  CRC-32 of bytes 4 .. 16+length             |  0
 *  +---------------------------------------------------------------+
 *  |  length: uint32    payload bytes (not counting header/padding)|  4
 *  +---------------------------------------------------------------+
 *  |  flags: uint32     BEGIN | END | END_OF_SEGMENT              |  8
 *  +---------------------------------------------------------------+
 *  |  seq: uint32       record's queue index - segment first index |  12
 *  +---------------------------------------------------------------+
 *  |  payload (length bytes) ... zero padding to a multiple of 8   |  16
 *  +---------------------------------------------------------------+
 * ```
 * All fields little-endian. A frame starts on an 8-byte boundary of the segment file.
 *
 * Units and batches (the commit protocol): a *unit* is the run of frames from a frame with
 * BEGIN up to and including the next frame with END. `append` writes a one-frame unit
 * (BEGIN|END); `appendBatch` writes BEGIN on the first record and END on the last, so a batch is
 * visible to tailers, and survives recovery, only once its END frame is complete. The
 * END_OF_SEGMENT frame (length 0, seq = record count of the segment) is its own unit and the
 * last frame of a sealed segment; tailers move to the next segment only after seeing it.
 *
 * The checksum covers length, flags and seq as well as the payload, so a frame of zeros (a
 * preallocated or never-written region) never verifies, and `seq` ties a frame to its index: a
 * stale offset-index entry can never make a tailer return the wrong record.
 *
 * After Chronicle Queue's excerpt header (length + flags word, "not complete" until the writer
 * finishes) and Agrona's record descriptor (8-byte alignment); the checksum and seq are ours,
 * since we write with write(2) instead of Chronicle's memory-mapped ordered stores.
 */
import { crc32 } from './crc32.js';

export const FRAME_HEADER_BYTES = 16;
export const FRAME_ALIGNMENT = 8;

export const FRAME_CHECKSUM_OFFSET = 0;
export const FRAME_LENGTH_OFFSET = 4;
export const FRAME_FLAGS_OFFSET = 8;
export const FRAME_SEQ_OFFSET = 12;

/** First frame of a unit (a single record, or the first record of a batch). */
export const FLAG_BEGIN = 1;
/** Last frame of a unit: the commit point of a batch. */
export const FLAG_END = 2;
/** Seals the segment; the next record is in the segment named by the next index. */
export const FLAG_END_OF_SEGMENT = 4;
const FLAGS_KNOWN = FLAG_BEGIN | FLAG_END | FLAG_END_OF_SEGMENT;

/** Largest payload of one record: 256 MiB. Bounds the memory a reader needs for one frame. */
export const RECORD_BYTES_MAX = 1 << 28;

/** Bytes an END_OF_SEGMENT frame takes. */
export const END_OF_SEGMENT_FRAME_BYTES = FRAME_HEADER_BYTES;

/** Bytes a frame with `length` payload bytes occupies, header and padding included. */
export function frameBytes(length: number): number {
  return (FRAME_HEADER_BYTES + length + FRAME_ALIGNMENT - 1) & ~(FRAME_ALIGNMENT - 1);
}

/**
 * Completes a frame whose payload is already at `off + FRAME_HEADER_BYTES` of `buf`: writes
 * length, flags, seq, zero padding, then the checksum over them. `buf` must hold
 * `frameBytes(length)` bytes from `off`.
 */
export function sealFrame(
  buf: Buffer,
  off: number,
  length: number,
  flags: number,
  seq: number,
): void {
  putU32(buf, off + FRAME_LENGTH_OFFSET, length);
  putU32(buf, off + FRAME_FLAGS_OFFSET, flags);
  putU32(buf, off + FRAME_SEQ_OFFSET, seq);
  const end = off + FRAME_HEADER_BYTES + length;
  const padded = off + frameBytes(length);
  for (let i = end; i < padded; i++) buf[i] = 0;
  putU32(buf, off + FRAME_CHECKSUM_OFFSET, crc32(buf, off + FRAME_LENGTH_OFFSET, end));
}

/**
 * Little-endian uint32 store/load by bytes: on the per-record path these are ~3x cheaper than
 * Buffer#writeUInt32LE / readUInt32LE, which validate their arguments on every call.
 */
export function putU32(buf: Uint8Array, off: number, v: number): void {
  buf[off] = v;
  buf[off + 1] = v >>> 8;
  buf[off + 2] = v >>> 16;
  buf[off + 3] = v >>> 24;
}

export function getU32(buf: Uint8Array, off: number): number {
  return (buf[off] | (buf[off + 1] << 8) | (buf[off + 2] << 16) | (buf[off + 3] << 24)) >>> 0;
}

/** Outcome of {@link checkFrame}. */
export const enum FrameCheck {
  /** Header and payload present, checksum, flags and seq good. */
  ok = 0,
  /** Fewer bytes than the header, or than the length field announces: not (yet) complete. */
  incomplete = 1,
  /** Length field beyond {@link RECORD_BYTES_MAX}. */
  badLength = 2,
  /** Unknown flag bits, or an END_OF_SEGMENT frame with a payload. */
  badFlags = 3,
  badChecksum = 4,
  /** Checksum good but the seq is not the one expected at this position. */
  badSeq = 5,
}

/**
 * Checks the frame at `buf[off]` with `avail` bytes readable from `off`. `expectedSeq` < 0 skips
 * the seq check. Pure; never throws.
 */
export function checkFrame(
  buf: Buffer,
  off: number,
  avail: number,
  expectedSeq: number,
): FrameCheck {
  if (avail < FRAME_HEADER_BYTES) return FrameCheck.incomplete;
  const length = getU32(buf, off + FRAME_LENGTH_OFFSET);
  if (length > RECORD_BYTES_MAX) return FrameCheck.badLength;
  if (avail < FRAME_HEADER_BYTES + length) return FrameCheck.incomplete;
  const flags = getU32(buf, off + FRAME_FLAGS_OFFSET);
  if ((flags & ~FLAGS_KNOWN) !== 0) return FrameCheck.badFlags;
  if ((flags & FLAG_END_OF_SEGMENT) !== 0 && (length !== 0 || flags !== FLAG_END_OF_SEGMENT))
    return FrameCheck.badFlags;
  const sum = crc32(buf, off + FRAME_LENGTH_OFFSET, off + FRAME_HEADER_BYTES + length);
  if (sum !== getU32(buf, off + FRAME_CHECKSUM_OFFSET)) return FrameCheck.badChecksum;
  if (expectedSeq >= 0 && getU32(buf, off + FRAME_SEQ_OFFSET) !== expectedSeq)
    return FrameCheck.badSeq;
  return FrameCheck.ok;
}

/** Human words for a failed check, for error messages. */
export function describeFrameCheck(
  check: FrameCheck,
  buf: Buffer,
  off: number,
  expectedSeq: number,
): string {
  switch (check) {
    case FrameCheck.ok:
      return 'ok';
    case FrameCheck.incomplete:
      return 'frame extends beyond the end of the file';
    case FrameCheck.badLength:
      return `length ${getU32(buf, off + FRAME_LENGTH_OFFSET)} exceeds the ${RECORD_BYTES_MAX}-byte record limit`;
    case FrameCheck.badFlags:
      return `invalid flags 0x${getU32(buf, off + FRAME_FLAGS_OFFSET).toString(16)}`;
    case FrameCheck.badChecksum:
      return 'checksum mismatch';
    case FrameCheck.badSeq:
      return `seq ${getU32(buf, off + FRAME_SEQ_OFFSET)} where ${expectedSeq} was expected`;
  }
}

export function frameLength(buf: Buffer, off: number): number {
  return getU32(buf, off + FRAME_LENGTH_OFFSET);
}

export function frameFlags(buf: Buffer, off: number): number {
  return getU32(buf, off + FRAME_FLAGS_OFFSET);
}

export function frameSeq(buf: Buffer, off: number): number {
  return getU32(buf, off + FRAME_SEQ_OFFSET);
}
