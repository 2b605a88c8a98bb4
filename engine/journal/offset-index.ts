/**
 * The offset index of a segment (`<first>.idx`): a dense array of uint32 entries, entry k for
 * the record with queue index `first + k`, so a lookup by index is one 4-byte read: O(1) within a
 * segment, O(log segments) to find the segment by name.
 *
 * ```
 *   0                   1                   2                   3
 *   0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
 *  +-+-------------------------------------------------------------+
 *  |U|  frame offset in the segment file / 8 (31 bits)             |
 *  +-+-------------------------------------------------------------+
 *   U = 1 when the frame begins a unit (FLAG_BEGIN): a safe place to start reading
 * ```
 * Offsets are 8-byte aligned, so 31 bits reach 16 GiB (segmentBytes is capped at 1 GiB).
 *
 * The segment file is the source of truth and the index is derived: the appender writes index
 * entries after the frames they point at (one write per flush) and fsyncs the index only when a
 * segment is sealed or the appender closes; recovery rebuilds the entries of the last segment
 * from the frames. Readers therefore treat the index as a hint: an entry is used only after the
 * frame it points at verifies with the expected seq, and a missing or stale tail of the index
 * is bridged by reading frames forward from the last good entry (at most one flush's worth).
 *
 * Chronicle Queue keeps a sparse two-level index inside the memory-mapped queue file; with
 * write(2) and no mmap a separate dense file is simpler and keeps lookups to one read.
 */
export const INDEX_ENTRY_BYTES = 4;
const UNIT_START_BIT = 0x80000000;
const OFFSET_MASK = 0x7fffffff;

/** Encodes an entry for the frame at `offset` (8-byte aligned, < 16 GiB). */
export function encodeIndexEntry(offset: number, unitStart: boolean): number {
  return ((offset / 8) | (unitStart ? UNIT_START_BIT : 0)) >>> 0;
}

/** File offset of the frame an entry points at. */
export function indexEntryOffset(entry: number): number {
  return (entry & OFFSET_MASK) * 8;
}

/** Whether the entry's frame begins a unit. */
export function indexEntryIsUnitStart(entry: number): boolean {
  return (entry & UNIT_START_BIT) !== 0;
}
