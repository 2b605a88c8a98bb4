/**
 * Damage the journal fuzzer (test/fuzz-journal.test.ts) found that a tailer took for a torn tail,
 * waiting forever while later records existed; each is now refused naming the file and offset.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Appender, JournalCorruptionError, Tailer } from '../engine/journal/index.js';
import { listSegments, segmentPath } from '../engine/journal/segment.js';

let dir = '';
test.before.each(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-journal-damage-'));
});
test.after.each(() => {
  fs.rmSync(dir, { recursive: true, force: true });
});

/** Appends `sizes.length` records (record i: `sizes[i]` bytes of value i) to a queue with small segments. */
function write(sizes: number[], segmentBytes = 256): void {
  const a = Appender.open({ dir, segmentBytes, fsync: 'none' });
  sizes.forEach((n, i) => a.append(Buffer.alloc(n, i)));
  a.close();
}

/** Reads from the start; the indexes read and the error that stopped the read (null: none). */
function readAll(): { indexes: number[]; error: Error | null } {
  const t = Tailer.open({ dir });
  const indexes: number[] = [];
  try {
    for (let r = t.next(); r !== null; r = t.next()) indexes.push(r.index);
    return { indexes, error: null };
  } catch (e) {
    return { indexes, error: e as Error };
  } finally {
    t.close();
  }
}

test('a segment cut below its end-of-segment frame, while the next segment holds records, is refused (was: a silent wait at the cut)', () => {
  // Records 0 and 1 (56 and 104 bytes of frame) fill segment 0; record 2 rolls to segment 2.
  write([25, 81, 57]);
  assert.equal(listSegments(dir), [0, 2]);
  const first = segmentPath(dir, 0);
  for (const cut of [216, 213]) {
    // at the end-of-segment frame; inside record 1's padding
    fs.truncateSync(first, cut);
    const { indexes, error } = readAll();
    assert.equal(indexes, [0, 1]);
    assert.instance(error, JournalCorruptionError);
    assert.is((error as JournalCorruptionError).file, first);
    assert.is((error as JournalCorruptionError).offset, cut);
    assert.match(
      error!.message,
      `${first}: offset ${cut}: the segment ends without an end-of-segment frame (after record 1), ` +
        'but the later segment 00000000000000000002.seg holds records: damage, not a torn tail',
    );
  }
});

test('a torn tail of the newest segment is still waited for, not refused', () => {
  write([25, 81, 57]);
  const newest = segmentPath(dir, 2);
  fs.truncateSync(newest, fs.statSync(newest).size - 10); // into record 2 itself
  assert.equal(readAll(), { indexes: [0, 1], error: null });
});

test('a length field damaged to point past the end of the file, while complete frames follow, is refused (was: a silent wait)', () => {
  write([241, 145, 145, 0, 113], 4096);
  const file = segmentPath(dir, 0);
  const bytes = fs.readFileSync(file);
  // Record 2's frame starts at 496; its length field is at 500..503: 145 + 256 = 401 reaches past the end.
  bytes[501] ^= 1;
  fs.writeFileSync(file, bytes);
  const { indexes, error } = readAll();
  assert.equal(indexes, [0, 1]);
  assert.instance(error, JournalCorruptionError);
  assert.is(
    error!.message,
    `${file}: offset 496: frame extends beyond the end of the file (record 2), ` +
      'but a complete frame follows at offset 664: damage, not a torn tail',
  );
});

test.run();
