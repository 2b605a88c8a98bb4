/**
 * Byte-level fuzzing (fast-check) of the journal's on-disk formats: a queue partition written by
 * an Appender (several segments, single records and batches), then damaged (truncation, bit
 * flips, zeroed ranges, garbage appended, segment header bytes overwritten, an index file
 * damaged or removed; one to three of them), then opened by a Tailer and by an Appender. Properties:
 * - every record returned is the record written at that index (no wrong record, no skip: the
 *   records returned are a prefix of those written);
 * - a read that ends without an error returns every record before the first damaged one
 *   (damage to an index file, which is only a hint, loses nothing);
 * - any error is a JournalCorruptionError naming a file of the directory and an offset in it;
 *   never another exception (a RangeError, an fs error) or a hang;
 * - an Appender that opens continues after a prefix that keeps every record before the damage
 *   in its segment, and a record appended then is read back at the index it was given.
 *
 * Counts: SLUICE_FUZZ_JOURNAL_RUNS (default 300; `npm run fuzz` runs 20,000). The seed is
 * printed; replay with SLUICE_FUZZ_SEED=<seed>.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import fc from 'fast-check';
import { Appender, JournalCorruptionError, Tailer } from '../engine/journal/index.js';
import {
  FLAG_BEGIN,
  FLAG_END_OF_SEGMENT,
  FRAME_HEADER_BYTES,
  frameBytes,
  frameFlags,
  frameLength,
} from '../engine/journal/frame.js';
import {
  SEGMENT_HEADER_BYTES,
  listSegments,
  segmentPath,
  indexPath,
} from '../engine/journal/segment.js';

const runs = Number(process.env.SLUICE_FUZZ_JOURNAL_RUNS ?? 300);
const seed = Number(process.env.SLUICE_FUZZ_SEED ?? Date.now() % 2 ** 31);
console.log(
  `fuzz-journal: seed ${seed}, ${runs} damaged directories (SLUICE_FUZZ_SEED=${seed} replays)`,
);

const root = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-fuzz-journal-'));
let caseNo = 0;

/** What the appender writes: units (one record or a batch), with a flush after some. */
interface Written {
  units: Array<{ records: number[]; flush: boolean }>;
  segmentBytes: number;
}

const written: fc.Arbitrary<Written> = fc.record({
  units: fc.array(
    fc.record({
      records: fc.array(fc.integer({ min: 0, max: 300 }), { minLength: 1, maxLength: 4 }),
      flush: fc.boolean(),
    }),
    { minLength: 1, maxLength: 25 },
  ),
  segmentBytes: fc.constantFrom(256, 512, 1024, 4096),
});

/** Payload of record `i` with `n` bytes: distinct per index, so a wrong record is seen. */
function payload(i: number, n: number): Buffer {
  const b = Buffer.alloc(n);
  for (let k = 0; k < n; k++) b[k] = (i * 31 + k * 7 + 1) & 0xff;
  if (n >= 4) b.writeUInt32LE(i, 0);
  return b;
}

/** Where each record's frame lies: segment file and byte range. */
interface Placed {
  index: number;
  /** Index of the first record of its unit (batches are atomic: all or none survive). */
  unitStart: number;
  file: string;
  start: number;
  end: number;
}

/** Parses the frames of the written (undamaged) directory: the oracle's map of records to bytes. */
function layout(dir: string): Placed[] {
  const out: Placed[] = [];
  for (const first of listSegments(dir)) {
    const file = segmentPath(dir, first);
    const bytes = fs.readFileSync(file);
    let pos = SEGMENT_HEADER_BYTES;
    let index = first;
    let unitStart = first;
    while (pos + FRAME_HEADER_BYTES <= bytes.length) {
      const length = frameLength(bytes, pos);
      const flags = frameFlags(bytes, pos);
      if ((flags & FLAG_END_OF_SEGMENT) !== 0) break;
      if ((flags & FLAG_BEGIN) !== 0) unitStart = index;
      out.push({ index, unitStart, file, start: pos, end: pos + FRAME_HEADER_BYTES + length });
      pos += frameBytes(length);
      index++;
    }
  }
  return out;
}

/** One kind of damage to one file of the directory. */
type Damage =
  | { kind: 'truncate'; file: number; at: number }
  | { kind: 'flip'; file: number; at: number; bit: number }
  | { kind: 'zero'; file: number; at: number; length: number }
  | { kind: 'garbage'; file: number; bytes: number[] }
  | { kind: 'header'; file: number; at: number; value: number }
  | { kind: 'remove-index'; file: number };

const damage: fc.Arbitrary<Damage> = fc.oneof(
  fc.record({ kind: fc.constant('truncate' as const), file: fc.nat(), at: fc.nat() }),
  fc.record({
    kind: fc.constant('flip' as const),
    file: fc.nat(),
    at: fc.nat(),
    bit: fc.integer({ min: 0, max: 7 }),
  }),
  fc.record({
    kind: fc.constant('zero' as const),
    file: fc.nat(),
    at: fc.nat(),
    length: fc.integer({ min: 1, max: 64 }),
  }),
  fc.record({
    kind: fc.constant('garbage' as const),
    file: fc.nat(),
    bytes: fc.array(fc.integer({ min: 0, max: 255 }), { minLength: 1, maxLength: 64 }),
  }),
  fc.record({
    kind: fc.constant('header' as const),
    file: fc.nat(),
    at: fc.integer({ min: 0, max: SEGMENT_HEADER_BYTES - 1 }),
    value: fc.integer({ min: 0, max: 255 }),
  }),
  fc.record({ kind: fc.constant('remove-index' as const), file: fc.nat() }),
);

/** The damaged byte range of a segment file (null for index files: they are hints). */
interface Damaged {
  file: string;
  from: number;
  /** Exclusive; Infinity for a truncation (everything from `from` is gone). */
  to: number;
}

/** Applies `d` to the files of `dir`; returns what part of which segment it damaged. */
function applyDamage(dir: string, d: Damage): Damaged | null {
  const segments = listSegments(dir);
  const segFiles = segments.map((s) => segmentPath(dir, s));
  const idxFiles = segments.map((s) => indexPath(dir, s)).filter((f) => fs.existsSync(f));
  const files = [...segFiles, ...idxFiles];
  if (d.kind === 'remove-index') {
    if (idxFiles.length === 0) return null;
    fs.rmSync(idxFiles[d.file % idxFiles.length]!);
    return null;
  }
  const pool = d.kind === 'header' ? segFiles : files;
  const file = pool[d.file % pool.length]!;
  const bytes = fs.readFileSync(file);
  const isSegment = file.endsWith('.seg');
  const range = (from: number, to: number): Damaged | null =>
    isSegment ? { file, from, to } : null;
  switch (d.kind) {
    case 'truncate': {
      const at = bytes.length === 0 ? 0 : d.at % bytes.length;
      fs.truncateSync(file, at);
      return range(at, Infinity);
    }
    case 'flip': {
      if (bytes.length === 0) return null;
      const at = d.at % bytes.length;
      bytes[at] ^= 1 << d.bit;
      fs.writeFileSync(file, bytes);
      return range(at, at + 1);
    }
    case 'zero': {
      if (bytes.length === 0) return null;
      const at = d.at % bytes.length;
      const end = Math.min(bytes.length, at + d.length);
      const before = Buffer.from(bytes.subarray(at, end));
      bytes.fill(0, at, end);
      fs.writeFileSync(file, bytes);
      return before.every((b) => b === 0) ? null : range(at, end);
    }
    case 'garbage':
      fs.appendFileSync(file, Buffer.from(d.bytes));
      return range(bytes.length, bytes.length + d.bytes.length);
    case 'header': {
      if (bytes.length <= d.at || bytes[d.at] === d.value) return null;
      bytes[d.at] = d.value;
      fs.writeFileSync(file, bytes);
      return range(d.at, d.at + 1);
    }
  }
}

/**
 * Records certainly intact: those before the unit of the first record whose frame overlaps the
 * damage (that unit and everything after it may be lost).
 */
function firstDamaged(placed: Placed[], damaged: Damaged | null, total: number): number {
  if (damaged === null) return total;
  const inFile = placed.filter((p) => p.file === damaged.file);
  // A damaged header makes the whole segment unreadable: its first record is the first lost.
  if (damaged.from < SEGMENT_HEADER_BYTES) {
    if (inFile.length > 0) return inFile[0]!.index;
    const later = placed.find((p) => p.file > damaged.file);
    return later ? later.index : total;
  }
  for (const p of inFile) {
    // The frame's padding is not covered by its checksum: damage there loses nothing.
    if (p.end > damaged.from && p.start < damaged.to) return p.unitStart;
    if (damaged.to === Infinity && p.end > damaged.from) return p.unitStart;
  }
  // Garbage after (or inside the trailing end-of-segment frame of) a segment: nothing lost in it.
  return total;
}

/** Checks an error is a JournalCorruptionError naming a file of `dir` and an offset inside it. */
function assertCorruption(e: unknown, dir: string, what: string): void {
  if (!(e instanceof JournalCorruptionError)) {
    throw new Error(`${what}: not a JournalCorruptionError: ${(e as Error)?.stack ?? String(e)}`);
  }
  assert.is(
    path.dirname(e.file),
    dir,
    `${what}: the error names a file of the directory: ${e.message}`,
  );
  const size = fs.existsSync(e.file) ? fs.statSync(e.file).size : 0;
  assert.ok(
    Number.isInteger(e.offset) && e.offset >= 0 && e.offset <= size,
    `${what}: offset ${e.offset} inside ${e.file} (${size} bytes)`,
  );
  assert.ok(
    e.message.startsWith(`${e.file}: offset ${e.offset}: `),
    `${what}: message names file and offset: ${e.message}`,
  );
}

/** Reads every record from the start: the records (prefix-checked) and the error, if any. */
function readAll(dir: string, expected: Buffer[], what: string): { count: number; error: unknown } {
  let count = 0;
  let tailer: Tailer | null = null;
  try {
    tailer = Tailer.open({ dir });
    for (let r = tailer.next(); r !== null; r = tailer.next()) {
      assert.is(r.index, count, `${what}: records come in index order without a gap`);
      const want = expected[count];
      assert.ok(
        want !== undefined && Buffer.from(r.bytes).equals(want),
        `${what}: record ${count} is the record written at ${count}`,
      );
      count++;
    }
    return { count, error: null };
  } catch (e) {
    if (e instanceof assert.Assertion) throw e;
    return { count, error: e };
  } finally {
    tailer?.close();
  }
}

test(`damaged segment and index files: every record before the damage, or a refusal naming file and offset (${runs} directories)`, () => {
  const outcomes = { complete: 0, refusedRead: 0, refusedOpen: 0, appended: 0 };
  fc.assert(
    fc.property(written, fc.array(damage, { minLength: 1, maxLength: 3 }), (w, damages) => {
      const dir = path.join(root, String(caseNo++));
      try {
        // 1. Write.
        const expected: Buffer[] = [];
        const appender = Appender.open({ dir, segmentBytes: w.segmentBytes, fsync: 'none' });
        for (const u of w.units) {
          const batch = u.records.map((n, k) => payload(expected.length + k, n));
          if (batch.length === 1) appender.append(batch[0]!);
          else appender.appendBatch(batch);
          expected.push(...batch);
          if (u.flush) appender.flush();
        }
        appender.close();
        const placed = layout(dir);
        assert.is(placed.length, expected.length, 'the oracle finds every written record');

        // 2. Damage (one to three times; the intact records are those before every damage).
        const damagedRanges = damages.map((d) => applyDamage(dir, d));
        const intact = Math.min(
          ...damagedRanges.map((r) => firstDamaged(placed, r, expected.length)),
        );
        const damaged = damagedRanges.filter((r) => r !== null);

        // 3. Read with a tailer.
        const read = readAll(dir, expected, 'tailer');
        // The offset index is a hint: damage to it alone loses nothing and is never refused.
        if (damaged.length === 0 && read.error !== null) {
          throw new Error(
            `index damage only (${JSON.stringify(damages)}), yet the tailer refused: ${(read.error as Error).message}`,
          );
        }
        if (read.error !== null) {
          assertCorruption(read.error, dir, 'tailer');
          outcomes.refusedRead++;
        } else {
          assert.ok(
            read.count >= intact,
            `tailer returned ${read.count} records, but the first ${intact} are intact (damage ${JSON.stringify(damaged)})`,
          );
          outcomes.complete++;
        }

        // 4. Open an appender (recovery), append one record, read it back.
        let reopened: Appender;
        try {
          reopened = Appender.open({ dir, segmentBytes: w.segmentBytes, fsync: 'none' });
        } catch (e) {
          assertCorruption(e, dir, 'appender');
          outcomes.refusedOpen++;
          return;
        }
        const next = reopened.nextIndex;
        assert.ok(
          next <= expected.length,
          `appender continues at ${next}, at most the ${expected.length} written`,
        );
        const lastSegmentFirst = listSegments(dir).at(-1) ?? 0;
        // Recovery only reads the last segment: it keeps every intact record there.
        if (intact >= lastSegmentFirst)
          assert.ok(
            next >= Math.min(intact, expected.length),
            `appender keeps the ${intact} intact records (continues at ${next})`,
          );
        const added = payload(1_000_000 + next, 17);
        assert.is(reopened.append(added), next);
        reopened.close();
        const after = readAll(dir, [...expected.slice(0, next), added], 'after append');
        if (damaged.length === 0) {
          assert.is(
            after.error,
            null,
            'index damage only: nothing refused after the appender repaired it',
          );
          assert.is(
            next,
            expected.length,
            'index damage only: the appender continues after every record',
          );
        }
        if (after.error !== null) {
          assertCorruption(after.error, dir, 'after append');
        } else {
          assert.is(after.count, next + 1, 'the appended record is read back at its index');
          outcomes.appended++;
        }
      } finally {
        fs.rmSync(dir, { recursive: true, force: true });
      }
    }),
    { numRuns: runs, seed, includeErrorInReport: true },
  );
  console.log(`fuzz-journal: ${JSON.stringify(outcomes)}`);
});

test.after(() => fs.rmSync(root, { recursive: true, force: true }));
test.run();
