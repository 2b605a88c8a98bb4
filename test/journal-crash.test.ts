/**
 * engine/journal under real crashes and damage: a writer child killed with SIGKILL at random
 * moments, again and again; damaged bytes in the middle of a segment.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { Appender, Tailer, JournalCorruptionError } from '../engine/journal/index.js';
import { frameBytes, FRAME_HEADER_BYTES, FRAME_LENGTH_OFFSET } from '../engine/journal/frame.js';
import { segmentFileName, indexFileName, SEGMENT_HEADER_BYTES } from '../engine/journal/segment.js';

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

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

interface WriterRun {
  signal: NodeJS.Signals | null;
  readyIndex: number;
  flushedIndex: number;
  stderr: string;
}

/**
 * Runs the writer child until it dies: killed by us after `killAfterMs` once it is ready, or by
 * its own injected fault (`fault`). Returns what it reported before dying.
 */
async function runWriter(
  dir: string,
  runId: number,
  killAfterMs: number | null,
  fault: string | null,
): Promise<WriterRun> {
  const env = { ...process.env };
  if (fault) env.SLUICE_JOURNAL_FAULT = fault;
  else delete env.SLUICE_JOURNAL_FAULT;
  const p = spawn(process.execPath, [child, 'writer', dir, String(runId)], {
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const run: WriterRun = { signal: null, readyIndex: -1, flushedIndex: -1, stderr: '' };
  let partial = '';
  let readyResolve: () => void = () => {};
  const ready = new Promise<void>((r) => (readyResolve = r));
  p.stdout.setEncoding('utf8');
  p.stdout.on('data', (chunk: string) => {
    const lines = (partial + chunk).split('\n');
    partial = lines.pop()!;
    for (const line of lines) {
      const m = /^(ready|flushed) (\d+)/.exec(line);
      if (!m) continue;
      if (m[1] === 'ready') {
        run.readyIndex = Number(m[2]);
        readyResolve();
      } else {
        run.flushedIndex = Number(m[2]);
      }
    }
  });
  p.stderr.setEncoding('utf8');
  p.stderr.on('data', (s: string) => (run.stderr += s));
  const exited = new Promise<void>((r) =>
    p.on('exit', (_code, signal) => {
      run.signal = signal;
      readyResolve();
      r();
    }),
  );
  await ready;
  if (killAfterMs !== null) {
    await sleep(killAfterMs);
    p.kill('SIGKILL');
  }
  await exited;
  return run;
}

/** What the writer child encodes: [runId u32][batch u32][i u32][n u32][filler = (batch + i) & 0xff]. */
interface WriterRecord {
  run: number;
  batch: number;
  i: number;
  n: number;
}

test(
  'kill -9 at random moments, 16 times: every record complete, in order, consecutive, no batch torn, nothing flushed lost',
  withDir(async (dir) => {
    let seed = 12345;
    const rand = (n: number): number => {
      seed = (seed * 1103515245 + 12345) & 0x7fffffff;
      return seed % n;
    };
    let verified = 0; // records verified so far (immutable once complete)
    let last: WriterRecord | null = null;
    let truncations = 0;
    const RUNS = 16;
    for (let run = 0; run < RUNS; run++) {
      // Three in four runs are killed by us at a random moment; every fourth dies by an injected
      // torn write, which guarantees torn frames and unfinished batches are exercised.
      const injected = run % 4 === 3;
      const r = await runWriter(
        dir,
        run,
        injected ? null : 20 + rand(230),
        injected ? `torn-write@${1 + rand(8)}` : null,
      );
      assert.is(r.signal, 'SIGKILL', `run ${run}: writer died by SIGKILL (stderr: ${r.stderr})`);
      assert.is(
        r.readyIndex,
        verified,
        `run ${run}: the writer started after the last verified record`,
      );

      const a = Appender.open({ dir });
      if (a.recovery.truncatedBytes > 0) truncations++;
      const count = a.nextIndex;
      a.close();
      assert.ok(
        count >= r.flushedIndex,
        `run ${run}: ${count} records survive, the writer had flushed ${r.flushedIndex}`,
      );

      const t = Tailer.open({ dir });
      assert.ok(t.moveToIndex(verified), `run ${run}: moveToIndex(${verified})`);
      for (let rec = t.next(); rec; rec = t.next()) {
        assert.is(rec.index, verified, 'consecutive indexes');
        const b = Buffer.from(rec.bytes);
        const cur: WriterRecord = {
          run: b.readUInt32LE(0),
          batch: b.readUInt32LE(4),
          i: b.readUInt32LE(8),
          n: b.readUInt32LE(12),
        };
        if (b.length > 16)
          assert.ok(
            b[16] === ((cur.batch + cur.i) & 0xff) && b[b.length - 1] === b[16],
            `record ${rec.index}: payload intact`,
          );
        if (last !== null && last.i < last.n - 1) {
          assert.equal(cur, { ...last, i: last.i + 1 }, `record ${rec.index}: continues the batch`);
        } else {
          assert.is(cur.i, 0, `record ${rec.index}: starts a batch`);
          const next = last === null || cur.run !== last.run ? 0 : last.batch + 1;
          assert.ok(last === null || cur.run >= last.run, 'runs in order');
          assert.is(
            cur.batch,
            next,
            `record ${rec.index}: batches consecutive within run ${cur.run}`,
          );
        }
        last = cur;
        verified++;
      }
      t.close();
      assert.is(verified, count, `run ${run}: the tailer reads exactly the recovered records`);
      assert.ok(last === null || last.i === last.n - 1, `run ${run}: the last batch is complete`);
    }
    assert.ok(verified > 1000, `the writer made progress (${verified} records)`);
    assert.ok(
      truncations >= RUNS / 4,
      `torn tails were cut off in at least the injected runs (${truncations})`,
    );
  }),
);

/** Five records of 20 bytes in segment 0; returns the byte offset of record k's frame. */
function fiveRecords(dir: string): (k: number) => number {
  const a = Appender.open({ dir });
  for (let i = 0; i < 5; i++) a.append(Buffer.from(`record-${i}`.padEnd(20, '.')));
  a.close();
  return (k) => SEGMENT_HEADER_BYTES + k * frameBytes(20);
}

function flipByte(file: string, offset: number): void {
  const fd = fs.openSync(file, 'r+');
  const b = Buffer.alloc(1);
  fs.readSync(fd, b, 0, 1, offset);
  b[0] ^= 0x20;
  fs.writeSync(fd, b, 0, 1, offset);
  fs.closeSync(fd);
}

test(
  'a bad checksum in the middle of a segment makes the tailer throw, naming the segment file and byte offset',
  withDir((dir) => {
    const at = fiveRecords(dir);
    const seg = path.join(dir, segmentFileName(0));
    flipByte(seg, at(2) + FRAME_HEADER_BYTES + 3);
    const t = Tailer.open({ dir });
    assert.is(t.next()?.index, 0);
    assert.is(t.next()?.index, 1);
    try {
      t.next();
      assert.unreachable('should have thrown');
    } catch (e) {
      assert.instance(e, JournalCorruptionError);
      const err = e as JournalCorruptionError;
      assert.is(err.file, seg);
      assert.is(err.offset, at(2));
      assert.is(
        err.message,
        `${seg}: offset ${at(2)}: checksum mismatch (record 2), but a complete frame follows at offset ${at(3)}: damage, not a torn tail`,
      );
    }
    assert.is(t.index, 2, 'the tailer stays before the damaged record');
    t.close();
  }),
);

test(
  'Appender.open refuses a segment with a bad checksum in the middle instead of truncating good records',
  withDir((dir) => {
    const at = fiveRecords(dir);
    const seg = path.join(dir, segmentFileName(0));
    flipByte(seg, at(1) + FRAME_HEADER_BYTES);
    fs.unlinkSync(path.join(dir, indexFileName(0))); // without an index, recovery verifies the whole segment
    const sizeBefore = fs.statSync(seg).size;
    assert.throws(
      () => Appender.open({ dir }),
      (e: Error) =>
        e instanceof JournalCorruptionError &&
        e.offset === at(1) &&
        e.message.startsWith(
          `${seg}: offset ${at(1)}: checksum mismatch (record 1 of the segment), but a complete frame follows at offset ${at(2)}`,
        ),
    );
    assert.is(fs.statSync(seg).size, sizeBefore, 'nothing was truncated');
    assert.not.ok(
      fs.existsSync(path.join(dir, 'appender.lock')),
      'the lock is released after the failed open',
    );
  }),
);

test(
  'a damaged length field in a sealed segment is reported, not waited on as a record being written',
  withDir((dir) => {
    const a = Appender.open({ dir, segmentBytes: 256 });
    for (let i = 0; i < 6; i++) a.append(Buffer.from(`r${i}`.padEnd(20, '.')));
    a.close();
    const seg = path.join(dir, segmentFileName(0));
    const at2 = SEGMENT_HEADER_BYTES + 2 * frameBytes(20);
    const fd = fs.openSync(seg, 'r+');
    const len = Buffer.alloc(4);
    len.writeUInt32LE(100_000);
    fs.writeSync(fd, len, 0, 4, at2 + FRAME_LENGTH_OFFSET);
    fs.closeSync(fd);
    const t = Tailer.open({ dir });
    t.next();
    t.next();
    assert.throws(
      () => t.next(),
      (e: Error) =>
        e instanceof JournalCorruptionError &&
        e.offset === at2 &&
        /frame extends beyond the end of the file \(record 2\) in a sealed segment/.test(e.message),
    );
    t.close();
  }),
);

test.run();
