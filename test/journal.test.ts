/**
 * engine/journal: appender, tailer, index lookups, batches, rolls, lock, options.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import zlib from 'node:zlib';
import {
  Appender,
  Tailer,
  JournalLockedError,
  type JournalRecord,
} from '../engine/journal/index.js';
import { crc32, crc32Js } from '../engine/journal/crc32.js';
import {
  FLAG_BEGIN,
  FLAG_END,
  frameBytes,
  sealFrame,
  FRAME_HEADER_BYTES,
} from '../engine/journal/frame.js';
import { segmentFileName, indexFileName, encodeSegmentHeader } from '../engine/journal/segment.js';

function withDir(fn: (dir: string) => void | Promise<void>): () => Promise<void> {
  return async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-journal-'));
    try {
      await fn(dir);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  };
}

const rec = (s: string): Buffer => Buffer.from(s);
const text = (r: JournalRecord | null): string | null =>
  r === null ? null : Buffer.from(r.bytes).toString();

function readAll(t: Tailer): string[] {
  const out: string[] = [];
  for (let r = t.next(); r; r = t.next()) out.push(Buffer.from(r.bytes).toString());
  return out;
}

function segFiles(dir: string): string[] {
  return fs.readdirSync(dir).filter((f) => f.endsWith('.seg'));
}

/** Appends `text` through claim + commit (the encode-once path); returns its index. */
function claimText(a: Appender, s: string): number {
  const b = Buffer.from(s);
  const off = a.claim(b.length);
  a.claimBuffer.set(b, off);
  return a.commit();
}

test(
  "records appended through claim + commit are read by a tailer like append()'s, interleaved with them",
  withDir((dir) => {
    const a = Appender.open({ dir });
    assert.is(claimText(a, 'c0'), 0);
    assert.is(a.append(rec('a1')), 1);
    assert.is(claimText(a, ''), 2);
    assert.is(claimText(a, 'c3'.repeat(500)), 3);
    const t = Tailer.open({ dir });
    assert.is(t.next(), null, 'nothing visible before flush');
    a.flush();
    assert.equal(readAll(t), ['c0', 'a1', '', 'c3'.repeat(500)]);
    t.close();
    a.close();
    const again = Appender.open({ dir });
    assert.is(again.nextIndex, 4, 'reopened: all four records recovered');
    again.close();
  }),
);

test(
  'a claim not committed never reaches the file: the next claim, append or flush discards it',
  withDir((dir) => {
    const a = Appender.open({ dir });
    let off = a.claim(5);
    a.claimBuffer.set(rec('lost1'), off);
    assert.is(a.append(rec('kept')), 0);
    off = a.claim(5);
    a.claimBuffer.set(rec('lost2'), off);
    a.flush();
    assert.throws(() => a.commit(), /commit without a claim/);
    a.close();
    const t = Tailer.open({ dir });
    assert.equal(readAll(t), ['kept']);
    t.close();
  }),
);

test(
  'a claimed batch is one unit: its records appear together after endBatch and flush; truncateBatch drops its tail; an empty batch appends nothing',
  withDir((dir) => {
    const a = Appender.open({ dir });
    a.beginBatch();
    assert.is(claimText(a, 'b0'), 0);
    assert.is(claimText(a, 'b1'), 1);
    assert.is(claimText(a, 'x2'), 2);
    assert.is(a.batchLength, 3);
    a.truncateBatch(2);
    assert.is(a.nextIndex, 2);
    assert.is(claimText(a, 'b2'), 2);
    assert.throws(() => a.flush(), /while a batch is open/);
    assert.throws(() => a.append(rec('no')), /while a batch is open/);
    assert.throws(() => a.beginBatch(), /while a batch is open/);
    assert.is(a.endBatch(), 0, 'first index of the batch');
    a.beginBatch();
    assert.is(a.endBatch(), 3, 'empty batch: nextIndex');
    a.beginBatch();
    claimText(a, 'gone');
    a.truncateBatch(0);
    a.endBatch();
    a.flush();
    const t = Tailer.open({ dir });
    assert.equal(readAll(t), ['b0', 'b1', 'b2']);
    t.close();
    a.close();
    const b = Appender.open({ dir });
    assert.is(b.nextIndex, 3);
    assert.is(b.recovery.droppedRecords, 0, 'the batch ended with its END frame');
    b.close();
  }),
);

test(
  'a claimed batch that outgrows its segment moves whole to the next segment, and every record reads back in order',
  withDir((dir) => {
    const a = Appender.open({ dir, segmentBytes: 512 });
    const want: string[] = [];
    for (let b = 0; b < 6; b++) {
      a.beginBatch();
      for (let i = 0; i < 3; i++) {
        const s = `batch${b}-rec${i}`.padEnd(40, '.');
        want.push(s);
        claimText(a, s);
      }
      a.endBatch();
      if (b % 2 === 1) a.flush();
    }
    a.flush();
    assert.ok(segFiles(dir).length >= 2, `rolled (${segFiles(dir).length} segments)`);
    const t = Tailer.open({ dir });
    const got: string[] = [];
    for (let r = t.next(); r; r = t.next()) {
      assert.is(r.index, got.length);
      got.push(Buffer.from(r.bytes).toString());
    }
    assert.equal(got, want);
    t.close();
    a.close();
    const again = Appender.open({ dir, segmentBytes: 512 });
    assert.is(again.nextIndex, 18);
    assert.is(again.recovery.truncatedBytes, 0);
    again.close();
    // Every segment starts with the first record of a batch: no batch spans segments.
    const firsts = fs
      .readdirSync(dir)
      .filter((f) => f.endsWith('.seg'))
      .map((f) => Number(f.slice(0, -4)))
      .sort((x, y) => x - y);
    for (const first of firsts) assert.is(first % 3, 0, `segment ${first} starts a batch`);
  }),
);

test(
  'records appended and flushed are read back in order with consecutive indexes from 0',
  withDir((dir) => {
    const a = Appender.open({ dir });
    assert.is(a.nextIndex, 0);
    assert.is(a.append(rec('a')), 0);
    assert.is(a.append(new Uint8Array(0)), 1);
    assert.is(a.appendBatch([rec('b'), rec('c')]), 2);
    assert.is(a.nextIndex, 4);
    const t = Tailer.open({ dir });
    assert.is(t.next(), null, 'nothing is visible before flush()');
    a.flush();
    const got: [number, string][] = [];
    for (let r = t.next(); r; r = t.next()) got.push([r.index, Buffer.from(r.bytes).toString()]);
    assert.equal(got, [
      [0, 'a'],
      [1, ''],
      [2, 'b'],
      [3, 'c'],
    ]);
    assert.is(t.index, 4);
    a.close();
    t.close();
  }),
);

test(
  'a reopened appender continues after the last record with nothing truncated',
  withDir((dir) => {
    const a = Appender.open({ dir });
    for (let i = 0; i < 10; i++) a.append(rec(`r${i}`));
    a.close();
    const b = Appender.open({ dir });
    assert.is(b.nextIndex, 10);
    assert.equal(
      [b.recovery.truncatedBytes, b.recovery.droppedRecords, b.recovery.replacedSegment],
      [0, 0, null],
    );
    b.append(rec('r10'));
    b.close();
    const t = Tailer.open({ dir });
    assert.equal(
      readAll(t),
      Array.from({ length: 11 }, (_, i) => `r${i}`),
    );
    t.close();
  }),
);

test(
  'the queue rolls to a new segment, named by its first index, when segmentBytes would be exceeded',
  withDir((dir) => {
    const a = Appender.open({ dir, segmentBytes: 1024 });
    const payload = Buffer.alloc(100, 1); // 120-byte frames: 7 per 1024-byte segment (64 header + 16 end marker)
    for (let i = 0; i < 20; i++) a.append(payload);
    a.close();
    assert.equal(segFiles(dir), [segmentFileName(0), segmentFileName(7), segmentFileName(14)]);
    for (const f of segFiles(dir))
      assert.ok(fs.statSync(path.join(dir, f)).size <= 1024, `${f} within segmentBytes`);
    const t = Tailer.open({ dir });
    let n = 0;
    for (let r = t.next(); r; r = t.next()) assert.is(r.index, n++);
    assert.is(n, 20);
    t.close();
  }),
);

test(
  'flushAsync writes before it returns, resolves once synced, and survives rolls and close while syncs are in flight',
  withDir(async (dir) => {
    const a = Appender.open({ dir, segmentBytes: 1024 });
    const payload = Buffer.alloc(100, 2); // 120-byte frames: 7 per 1024-byte segment
    const synced: Promise<void>[] = [];
    for (let i = 0; i < 20; i++) {
      a.append(payload);
      synced.push(a.flushAsync());
      assert.is(a.bufferedBytes, 0, `record ${i} written to the file before flushAsync returns`);
    }
    // Rolls closed two segments while their syncs were queued; close() now, syncs still in flight.
    a.close();
    await Promise.all(synced);
    assert.equal(segFiles(dir), [segmentFileName(0), segmentFileName(7), segmentFileName(14)]);
    const t = Tailer.open({ dir });
    let n = 0;
    for (let r = t.next(); r; r = t.next()) assert.is(r.index, n++);
    assert.is(n, 20);
    t.close();
    const b = Appender.open({ dir, fsync: 'none' });
    b.append(payload);
    await b.flushAsync(); // 'none': resolves without a sync
    assert.is(b.nextIndex, 21);
    b.close();
  }),
);

test(
  'a batch never spans segments, and one larger than segmentBytes gets a segment of its own',
  withDir((dir) => {
    const a = Appender.open({ dir, segmentBytes: 512 });
    a.append(rec('x'));
    a.appendBatch(Array.from({ length: 10 }, () => Buffer.alloc(100, 2))); // 1200 bytes of frames
    a.append(rec('y'));
    a.close();
    assert.equal(segFiles(dir), [segmentFileName(0), segmentFileName(1), segmentFileName(11)]);
    const t = Tailer.open({ dir });
    assert.is(readAll(t).length, 12);
    t.close();
  }),
);

test(
  'moveToIndex lands on any record (batch middle, other segment), allows the end, refuses beyond and stays put',
  withDir((dir) => {
    const a = Appender.open({ dir, segmentBytes: 2048 });
    for (let i = 0; i < 50; i++) {
      if (i % 10 === 0) a.appendBatch([rec(`r${i}`), rec(`r${i + 1}`), rec(`r${i + 2}`)]);
      else if (i % 10 > 2) a.append(rec(`r${i}`));
    }
    a.close();
    const t = Tailer.open({ dir });
    for (const i of [0, 1, 2, 3, 21, 31, 49, 17]) {
      assert.ok(t.moveToIndex(i), `moveToIndex(${i})`);
      assert.is(t.index, i);
      const r = t.next();
      assert.equal([r?.index, text(r ?? null)], [i, `r${i}`]);
    }
    assert.ok(t.moveToIndex(50), 'the end is a valid position');
    assert.is(t.next(), null);
    assert.ok(t.moveToIndex(5));
    assert.is(t.moveToIndex(51), false);
    assert.is(t.index, 5, 'a refused move leaves the position unchanged');
    assert.throws(() => t.moveToIndex(-1), /index must be a non-negative safe integer, index=-1/);
    t.close();
  }),
);

test(
  'moveToIndex and previous still work when offset index files are missing (reads frames instead)',
  withDir((dir) => {
    const a = Appender.open({ dir, segmentBytes: 1024 });
    for (let i = 0; i < 30; i++) a.append(rec(`r${i}`));
    a.close();
    for (const f of fs.readdirSync(dir).filter((f) => f.endsWith('.idx')))
      fs.unlinkSync(path.join(dir, f));
    const t = Tailer.open({ dir });
    assert.ok(t.moveToIndex(25));
    assert.is(text(t.next()), 'r25');
    assert.is(text(t.previous()), 'r25');
    assert.is(text(t.previous()), 'r24');
    t.moveToEnd();
    assert.is(t.index, 30);
    t.close();
  }),
);

test(
  'previous() walks back across segments and batches to the first record',
  withDir((dir) => {
    const a = Appender.open({ dir, segmentBytes: 512 });
    const want: string[] = [];
    for (let i = 0; i < 40; i += 4) {
      const batch = [0, 1, 2, 3].map((k) => `r${i + k}`);
      a.appendBatch(batch.map(rec));
      want.push(...batch);
    }
    a.close();
    assert.ok(segFiles(dir).length >= 3, 'spans several segments');
    const t = Tailer.open({ dir, from: 'end' });
    const back: string[] = [];
    for (let r = t.previous(); r; r = t.previous()) {
      assert.is(r.index, t.index);
      back.push(Buffer.from(r.bytes).toString());
    }
    assert.equal(back, want.slice().reverse());
    assert.equal(readAll(t), want, 'and forwards again from there');
    t.close();
  }),
);

test(
  'a tailer returns none of a batch until its END frame is complete',
  withDir((dir) => {
    const a = Appender.open({ dir });
    a.append(rec('before'));
    a.close();
    // Write a batch's frames by hand, END last, as an appender's write would land.
    const seg = path.join(dir, segmentFileName(0));
    const frames = Buffer.alloc(3 * frameBytes(2));
    ['b0', 'b1', 'b2'].forEach((s, i) => {
      const off = i * frameBytes(2);
      frames.write(s, off + FRAME_HEADER_BYTES);
      sealFrame(frames, off, 2, i === 0 ? FLAG_BEGIN : i === 2 ? FLAG_END : 0, 1 + i);
    });
    const t = Tailer.open({ dir });
    assert.is(text(t.next()), 'before');
    fs.appendFileSync(seg, frames.subarray(0, 2 * frameBytes(2)));
    assert.is(t.next(), null, 'two of three frames: not there yet');
    fs.appendFileSync(seg, frames.subarray(2 * frameBytes(2), 2 * frameBytes(2) + 10));
    assert.is(t.next(), null, 'END frame partly written: not there yet');
    fs.appendFileSync(seg, frames.subarray(2 * frameBytes(2) + 10));
    assert.equal(
      [text(t.next()), text(t.next()), text(t.next()), t.next()],
      ['b0', 'b1', 'b2', null],
    );
    t.close();
  }),
);

test(
  'records larger than the read buffer are read whole',
  withDir((dir) => {
    const a = Appender.open({ dir });
    const big = Buffer.alloc(300_000);
    for (let i = 0; i < big.length; i++) big[i] = i % 251;
    a.append(big);
    a.appendBatch([big, rec('small')]);
    a.close();
    const t = Tailer.open({ dir, readBufferBytes: 4096 });
    const r0 = t.next();
    assert.ok(r0 && Buffer.from(r0.bytes).equals(big));
    const r1 = t.next();
    assert.ok(r1 && Buffer.from(r1.bytes).equals(big));
    assert.is(text(t.next()), 'small');
    t.close();
  }),
);

test(
  "fsync 'record' makes each append visible without flush()",
  withDir((dir) => {
    const a = Appender.open({ dir, fsync: 'record' });
    const t = Tailer.open({ dir });
    a.append(rec('one'));
    assert.is(text(t.next()), 'one');
    a.close();
    t.close();
  }),
);

test(
  'appends are written without flush() once the write buffer passes writeBufferBytes',
  withDir((dir) => {
    const a = Appender.open({ dir, writeBufferBytes: 4096, fsync: 'none' });
    const t = Tailer.open({ dir });
    for (let i = 0; i < 100; i++) a.append(Buffer.alloc(100));
    let n = 0;
    while (t.next()) n++;
    assert.ok(n >= 30 && n < 100, `some records written by the full buffer (n=${n})`);
    a.close();
    t.close();
  }),
);

test(
  'an appender reopened next to an early, empty segment file removes it and continues without a hole',
  withDir((dir) => {
    const a = Appender.open({ dir });
    a.append(rec('m0'));
    a.close();
    const early = path.join(dir, segmentFileName(5));
    fs.writeFileSync(early, encodeSegmentHeader(5, 0));
    const b = Appender.open({ dir });
    assert.is(b.recovery.replacedSegment, early);
    assert.is(b.append(rec('m1')), 1);
    b.close();
    assert.equal(segFiles(dir), [segmentFileName(0)]);
    const t = Tailer.open({ dir });
    assert.equal(readAll(t), ['m0', 'm1']);
    t.close();
  }),
);

test(
  'a tailer opened before the queue exists waits for it and reads from index 0',
  withDir((dir) => {
    const qdir = path.join(dir, 'not-yet');
    const t = Tailer.open({ dir: qdir });
    assert.is(t.index, 0);
    assert.is(t.next(), null);
    assert.is(t.previous(), null);
    assert.is(t.moveToIndex(1), false);
    assert.ok(t.moveToIndex(0));
    const a = Appender.open({ dir: qdir });
    a.append(rec('first'));
    a.flush();
    assert.is(text(t.next()), 'first');
    a.close();
    t.close();
  }),
);

test(
  'one appender per directory: a second open in this process, or while a live process holds the lock, throws',
  withDir((dir) => {
    const a = Appender.open({ dir });
    assert.throws(
      () => Appender.open({ dir }),
      /already open on this queue directory in this process/,
    );
    a.close();
    // A live process (our parent shell is alive for sure) holding the lock.
    fs.writeFileSync(path.join(dir, 'appender.lock'), `${process.ppid}\n`);
    try {
      Appender.open({ dir });
      assert.unreachable('should have thrown');
    } catch (e) {
      assert.instance(e, JournalLockedError);
      assert.match(
        (e as Error).message,
        new RegExp(`appender.lock: queue is locked by live process ${process.ppid}`),
      );
    }
    fs.unlinkSync(path.join(dir, 'appender.lock'));
  }),
);

test(
  'a stale lock of a dead process is taken over',
  withDir((dir) => {
    const pid = spawnSync(process.execPath, ['-e', '0']).pid;
    assert.ok(pid > 0);
    fs.writeFileSync(path.join(dir, 'appender.lock'), `${pid}\n`);
    const a = Appender.open({ dir });
    assert.is(a.recovery.lockTakenOverFromPid, pid);
    assert.match(
      fs.readFileSync(path.join(dir, 'appender.lock'), 'utf8'),
      new RegExp(`^${process.pid} `),
    );
    a.close();
    assert.not.ok(fs.existsSync(path.join(dir, 'appender.lock')), 'close releases the lock');
  }),
);

test('options are validated up front with the option named', () => {
  assert.throws(() => Appender.open({ dir: '' }), /dir must be a non-empty string/);
  assert.throws(
    () => Appender.open({ dir: '/tmp/x', segmentBytes: 0 }),
    /segmentBytes must be an integer in \[256, 1073741824\], segmentBytes=0/,
  );
  assert.throws(
    () => Appender.open({ dir: '/tmp/x', fsync: 'always' as 'none' }),
    /fsync must be 'none', 'batch' or 'record', fsync=always/,
  );
  assert.throws(
    () => Tailer.open({ dir: '/tmp/x', notifier: new SharedArrayBuffer(8) }),
    /notifier must be a SharedArrayBuffer from createQueueNotifier/,
  );
  assert.throws(
    () => Tailer.open({ dir: '/tmp/x', from: 'middle' as 'end' }),
    /from must be 'start' or 'end', from=middle/,
  );
});

test(
  'use after close and empty batches are programmer errors',
  withDir((dir) => {
    const a = Appender.open({ dir });
    assert.throws(
      () => a.appendBatch([]),
      /appendBatch needs at least one payload, payloads.length=0/,
    );
    a.close();
    a.close();
    assert.throws(() => a.append(rec('x')), /is closed/);
    const t = Tailer.open({ dir });
    t.close();
    assert.throws(() => t.next(), /is closed/);
  }),
);

test('the JavaScript slice-by-8 CRC-32 agrees with zlib.crc32 at every length and offset', () => {
  const b = Buffer.alloc(1100);
  for (let i = 0; i < b.length; i++) b[i] = (i * 31 + 7) & 0xff;
  for (let n = 0; n <= 1000; n += 1 + (n >> 4)) {
    for (const start of [0, 3])
      assert.is(
        crc32Js(b, start, start + n),
        zlib.crc32(b.subarray(start, start + n)),
        `length ${n} at ${start}`,
      );
    assert.is(crc32(b, 0, n), zlib.crc32(b.subarray(0, n)));
  }
  assert.is(crc32(Buffer.from('123456789')), 0xcbf43926, 'the CRC-32 check value');
});

test('segment and index files are named by the first index, zero-padded to 20 digits', () => {
  assert.is(segmentFileName(42), '00000000000000000042.seg');
  assert.is(indexFileName(2 ** 53 - 1), '00009007199254740991.idx');
});

test.run();
