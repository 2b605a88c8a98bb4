/**
 * Replacing a sealed segment with a rewritten one holding the same queue indexes (log compaction
 * by the queue's one writer): the records keep their indexes, so a segment can be replaced
 * without renaming its successors, and tailers keep their positions.
 *
 * Protocol, each step durable before the next: 1. `<first>.seg.new` and `<first>.idx.new` are
 * written whole (header with the old creation time, one BEGIN|END frame per record, the
 * END_OF_SEGMENT frame, the dense index) and fsynced; 2. the old `<first>.idx` is removed (a
 * tailer without an index reads the segment from its start: slower, never wrong); 3.
 * `<first>.seg.new` is renamed over `<first>.seg` (atomic: a reader or a recovery finds the old
 * segment or the new one, whole); 4. `<first>.idx.new` is renamed to `<first>.idx`; 5. the
 * directory is fsynced. Leftover `.new` files of a crash are removed by
 * {@link removeRewriteLeftovers}. Tailers that have the old segment open finish reading it.
 */
import fs from 'node:fs';
import path from 'node:path';
import {
  END_OF_SEGMENT_FRAME_BYTES,
  FRAME_HEADER_BYTES,
  FLAG_BEGIN,
  FLAG_END,
  FLAG_END_OF_SEGMENT,
  frameBytes,
  sealFrame,
} from './frame.js';
import { INDEX_ENTRY_BYTES, encodeIndexEntry } from './offset-index.js';
import {
  SEGMENT_HEADER_BYTES,
  encodeSegmentHeader,
  fsyncDir,
  indexPath,
  readSegmentHeader,
  segmentPath,
  writeFully,
} from './segment.js';

const NEW_SUFFIX = '.new';

/** Test hook: called between the protocol's steps with the step's name. */
export type RewriteStepHook = (step: 'written' | 'index-removed' | 'segment-replaced') => void;

/**
 * Replaces sealed segment `first` of queue `dir` by one holding `payloads` (exactly as many as
 * the old segment's records: record k keeps index first + k). Throws Error if the segment does
 * not exist or its header is damaged; rethrows I/O errors (then the old segment is still there
 * or the new one is, whole).
 */
export function rewriteSealedSegment(
  dir: string,
  first: number,
  payloads: readonly Uint8Array[],
  onStep?: RewriteStepHook,
): void {
  const segFile = segmentPath(dir, first);
  const fd0 = fs.openSync(segFile, 'r');
  let createdMs: number;
  try {
    const h = readSegmentHeader(fd0);
    if (!h.complete)
      throw new Error(
        `${segFile}: cannot rewrite a segment whose header is not complete (${h.reason})`,
      );
    createdMs = h.createdMs;
  } finally {
    fs.closeSync(fd0);
  }
  let bytes = SEGMENT_HEADER_BYTES + END_OF_SEGMENT_FRAME_BYTES;
  for (const p of payloads) bytes += frameBytes(p.length);
  const buf = Buffer.alloc(bytes);
  encodeSegmentHeader(first, createdMs).copy(buf, 0);
  const idx = Buffer.alloc(payloads.length * INDEX_ENTRY_BYTES);
  let at = SEGMENT_HEADER_BYTES;
  payloads.forEach((p, k) => {
    buf.set(p, at + FRAME_HEADER_BYTES);
    sealFrame(buf, at, p.length, FLAG_BEGIN | FLAG_END, k);
    idx.writeUInt32LE(encodeIndexEntry(at, true), k * INDEX_ENTRY_BYTES);
    at += frameBytes(p.length);
  });
  sealFrame(buf, at, 0, FLAG_END_OF_SEGMENT, payloads.length);
  const segNew = segFile + NEW_SUFFIX;
  const idxFile = indexPath(dir, first);
  const idxNew = idxFile + NEW_SUFFIX;
  writeWhole(segNew, buf);
  writeWhole(idxNew, idx);
  onStep?.('written');
  fs.rmSync(idxFile, { force: true });
  onStep?.('index-removed');
  fs.renameSync(segNew, segFile);
  onStep?.('segment-replaced');
  fs.renameSync(idxNew, idxFile);
  fsyncDir(path.resolve(dir));
}

function writeWhole(file: string, b: Buffer): void {
  const fd = fs.openSync(file, 'w');
  try {
    writeFully(fd, b, 0, b.length, 0);
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

/** Removes `.new` files a crashed rewrite left in `dir`; returns their names. */
export function removeRewriteLeftovers(dir: string): string[] {
  let names: string[];
  try {
    names = fs.readdirSync(dir);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw e;
  }
  const removed = names.filter((n) => n.endsWith(NEW_SUFFIX));
  for (const n of removed) fs.rmSync(path.join(dir, n), { force: true });
  return removed;
}
