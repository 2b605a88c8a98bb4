/**
 * The durable queue cases Q1..Q5 (/work/shared/cases/queue.md), one test each, plus the batch
 * form of Q1. Crashes are real: a child process killed by SIGKILL at the injected point.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { Appender, Tailer, type JournalRecord } from '../engine/journal/index.js';
import {
  encodeSegmentHeader,
  segmentFileName,
  SEGMENT_HEADER_BYTES,
} from '../engine/journal/segment.js';
import { frameBytes } from '../engine/journal/frame.js';

const child = new URL('./journal-crash.child.js', import.meta.url).pathname;

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

/** Runs the crash child; asserts it died by SIGKILL (the injected fault), not by finishing. */
function crashChild(mode: string, dir: string, fault: string): void {
  const r = spawnSync(process.execPath, [child, mode, dir], {
    env: { ...process.env, SLUICE_JOURNAL_FAULT: fault },
    encoding: 'utf8',
  });
  assert.is(
    r.signal,
    'SIGKILL',
    `child ${mode} should die by SIGKILL; status=${r.status} stdout=${r.stdout} stderr=${r.stderr}`,
  );
}

function text(r: JournalRecord | null): string | null {
  return r === null ? null : Buffer.from(r.bytes).toString();
}

/** Reads every complete record from the start: [index, text][]. */
function readAll(dir: string): [number, string][] {
  const t = Tailer.open({ dir });
  try {
    const out: [number, string][] = [];
    for (let r = t.next(); r; r = t.next()) out.push([r.index, Buffer.from(r.bytes).toString()]);
    return out;
  } finally {
    t.close();
  }
}

test(
  'Q1: a record cut off by SIGKILL mid-write is cut off on reopen; "world" gets index 1 right after "hello"',
  withDir((dir) => {
    crashChild('torn-record', dir, 'torn-write@2');
    const seg = path.join(dir, segmentFileName(0));
    const helloEnd = SEGMENT_HEADER_BYTES + frameBytes(5);
    const tornBytes = frameBytes(100) >>> 1;
    assert.is(
      fs.statSync(seg).size,
      helloEnd + tornBytes,
      'the crash left half of the second frame on disk',
    );

    // A tailer that reads before the restart sees "hello" and then nothing, not the cut-off bytes.
    const early = Tailer.open({ dir });
    assert.equal([early.next()?.index, text(early.next() ?? null)], [0, null]);
    assert.is(early.index, 1);

    const a = Appender.open({ dir });
    assert.is(a.recovery.truncatedBytes, tornBytes);
    assert.is(
      a.recovery.lockTakenOverFromPid !== null,
      true,
      "the dead child's lock was taken over",
    );
    assert.is(a.nextIndex, 1);
    assert.is(a.append(Buffer.from('world')), 1);
    a.close();

    assert.equal(readAll(dir), [
      [0, 'hello'],
      [1, 'world'],
    ]);
    // The tailer that waited at index 1 continues with "world": no hole to stall on.
    const r = early.next();
    assert.equal([r?.index, text(r ?? null)], [1, 'world']);
    assert.is(early.next(), null);
    early.close();
  }),
);

test(
  'Q1 (batch form): a batch cut off by SIGKILL mid-write is dropped whole, complete frames included',
  withDir((dir) => {
    crashChild('torn-batch', dir, 'torn-write@2');
    assert.equal(readAll(dir), [[0, 'hello']], 'tailers never return part of the unfinished batch');
    const a = Appender.open({ dir });
    assert.is(
      a.recovery.droppedRecords,
      1,
      'the first 1000-byte record was complete but its batch was not',
    );
    assert.is(a.append(Buffer.from('world')), 1);
    a.close();
    assert.equal(readAll(dir), [
      [0, 'hello'],
      [1, 'world'],
    ]);
  }),
);

test(
  "a claimed batch torn by a crash is cut off like appendBatch's: tailers and recovery keep only what precedes it",
  withDir((dir) => {
    crashChild('torn-claim-batch', dir, 'torn-write@2');
    assert.equal(
      readAll(dir),
      [[0, 'hello']],
      'tailers never return part of the unfinished claimed batch',
    );
    const a = Appender.open({ dir });
    assert.is(
      a.recovery.droppedRecords,
      1,
      'the first claimed record was complete but its batch was not',
    );
    assert.is(a.append(Buffer.from('world')), 1);
    a.close();
    assert.equal(readAll(dir), [
      [0, 'hello'],
      [1, 'world'],
    ]);
  }),
);

test(
  'a claim written but not committed when the process is killed leaves nothing on disk',
  withDir((dir) => {
    const r = spawnSync(process.execPath, [child, 'uncommitted-claim', dir], { encoding: 'utf8' });
    assert.is(r.signal, 'SIGKILL', `child killed itself (stderr: ${r.stderr})`);
    const a = Appender.open({ dir });
    assert.is(a.nextIndex, 1);
    assert.is(a.recovery.truncatedBytes, 0, 'nothing of the claim reached the file');
    a.close();
    assert.equal(readAll(dir), [[0, 'hello']]);
  }),
);

test(
  'Q2: a tailer at the end of a segment reads m1 from it before m2 from a newer segment that appeared early',
  withDir((dir) => {
    let now = 0;
    const a = Appender.open({ dir, rollIntervalMs: 1000, clock: () => now });
    a.append(Buffer.from('m0'));
    a.flush();
    const t = Tailer.open({ dir });
    assert.equal([t.next()?.index, t.next()], [0, null]);

    // The next segment file appears (complete header, empty) before segment 0 is finished.
    fs.writeFileSync(path.join(dir, segmentFileName(2)), encodeSegmentHeader(2, 1000));
    assert.is(t.next(), null, 'the tailer does not jump to the newer segment');
    const other = Tailer.open({ dir, from: 'end' });
    assert.is(other.index, 1, 'nor is the early segment taken for the end of the queue');
    assert.is(other.moveToIndex(2), false);
    other.close();

    a.append(Buffer.from('m1'));
    a.flush();
    const r1 = t.next();
    assert.equal([r1?.index, text(r1 ?? null)], [1, 'm1']);

    now = 1000; // the time window ends: the queue rolls and m2 goes to the segment named 2
    a.append(Buffer.from('m2'));
    a.flush();
    const r2 = t.next();
    assert.equal([r2?.index, text(r2 ?? null)], [2, 'm2']);
    assert.is(t.next(), null);
    t.close();
    a.close();
    assert.equal(
      fs.readdirSync(dir).filter((f) => f.endsWith('.seg')),
      [segmentFileName(0), segmentFileName(2)],
    );
  }),
);

test(
  'Q3: a segment whose header was never finished is replaced; a tailer from the older segment reads m1, m2, m3',
  withDir((dir) => {
    crashChild('torn-segment-header', dir, 'torn-segment-header@2');
    const half = path.join(dir, segmentFileName(1));
    assert.ok(
      fs.existsSync(half) && fs.statSync(half).size < SEGMENT_HEADER_BYTES,
      'the crash left segment 1 with an incomplete header',
    );

    const t = Tailer.open({ dir });
    assert.is(text(t.next()), 'm0'.padEnd(100, '.'));
    assert.is(t.next(), null, 'a half-created segment is waited for, not read as garbage');

    const a = Appender.open({ dir, segmentBytes: 320 });
    assert.is(a.recovery.replacedSegment, half);
    const pad = (s: string): Buffer => Buffer.from(s.padEnd(100, '.'));
    assert.is(a.append(pad('m1')), 1);
    assert.is(a.append(pad('m2')), 2);
    a.flush();
    assert.is(a.append(pad('m3')), 3); // segment 1 is full: m3 rolls into segment 3
    a.close();

    const got: [number, string][] = [];
    for (let r = t.next(); r; r = t.next())
      got.push([r.index, Buffer.from(r.bytes).toString().replace(/\.+$/, '')]);
    assert.equal(got, [
      [1, 'm1'],
      [2, 'm2'],
      [3, 'm3'],
    ]);
    t.close();
    assert.equal(
      fs.readdirSync(dir).filter((f) => f.endsWith('.seg')),
      [segmentFileName(0), segmentFileName(1), segmentFileName(3)],
    );
  }),
);

test(
  'Q4: reading backwards past the first record returns null, the same shape as the end going forwards',
  withDir((dir) => {
    const a = Appender.open({ dir });
    a.appendBatch([Buffer.from('m0'), Buffer.from('m1')]);
    a.close();
    const t = Tailer.open({ dir, from: 'end' });
    assert.is(t.index, 2);
    assert.is(t.next(), null, 'forwards at the end: null');
    const r1 = t.previous();
    const r0 = t.previous();
    assert.equal([r1?.index, text(r1 ?? null), r0?.index, text(r0 ?? null)], [1, 'm1', 0, 'm0']);
    assert.is(t.previous(), null, 'backwards before the first: null');
    assert.is(t.previous(), null, 'and again');
    assert.is(t.index, 0);
    assert.is(text(t.next()), 'm0', 'the position is unchanged by the null');
    t.close();
  }),
);

test(
  'Q5: after a restart in a later time window the old segment is sealed; a tailer reads m0 then m1 without waiting',
  withDir((dir) => {
    let now = 10_000;
    const a = Appender.open({ dir, rollIntervalMs: 60_000, clock: () => now });
    a.append(Buffer.from('m0'));
    a.close();

    const waiting = Tailer.open({ dir });
    assert.is(text(waiting.next()), 'm0');
    assert.is(waiting.next(), null);

    now = 10_000 + 3 * 60_000; // the roll policy says a new segment is due
    const b = Appender.open({ dir, rollIntervalMs: 60_000, clock: () => now });
    assert.is(b.append(Buffer.from('m1')), 1);
    b.close();

    const started = Date.now();
    assert.equal(readAll(dir), [
      [0, 'm0'],
      [1, 'm1'],
    ]);
    assert.ok(
      waiting.waitForAppend(5000),
      'the tailer parked at the end of the old segment moves on',
    );
    const r = waiting.next();
    assert.equal([r?.index, text(r ?? null)], [1, 'm1']);
    assert.ok(Date.now() - started < 1000, 'no waiting at the end of the old segment');
    waiting.close();
    assert.equal(
      fs.readdirSync(dir).filter((f) => f.endsWith('.seg')),
      [segmentFileName(0), segmentFileName(1)],
    );
  }),
);

test.run();
