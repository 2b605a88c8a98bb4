/**
 * Retention of a topology's own queues (`queues[].retention`, engine/service/retention.ts): real
 * topologies (services and queue readers in worker threads) over real journal files, with 4 KiB
 * segments so a few thousand records make dozens of them.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  loadTopology,
  openQueueAppender,
  startTopology,
  type RunningTopology,
  type Topology,
} from '../index.js';
import { Appender, Tailer, listSegments } from '../engine/journal/index.js';
import { EVENT_TYPE_JSON, decodeEnvelope, decodeJson } from '../engine/codec/index.js';
import { partitionDir } from '../actors/index.js';

const fixture = (name: string) =>
  new URL(`./fixtures/services/${name}.js`, import.meta.url).pathname;
const quiet = () => {};
const SEGMENT_BYTES = 4096;

function tmp(): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-queue-retention-'));
}

function writeTopology(dir: string, lines: string[]): Topology {
  const file = path.join(dir, 'topology.yaml');
  fs.writeFileSync(
    file,
    [
      `name: qr-${process.pid}`,
      'dataDir: ./data',
      'rings: { capacityBytes: 4096 }',
      ...lines,
      '',
    ].join('\n'),
  );
  return loadTopology(file);
}

/** Bytes of a partition's segment and index files. */
function partitionBytes(dir: string): number {
  let total = 0;
  for (const f of fs.existsSync(dir) ? fs.readdirSync(dir) : []) {
    if (f.endsWith('.seg') || f.endsWith('.idx')) total += fs.statSync(path.join(dir, f)).size;
  }
  return total;
}

interface Out {
  index: number;
  key: string;
  sum: number;
  n: number;
}

/** The JSON outputs `{ key, sum, n }` of a running-sum service still in its output queue. */
function readOutputs(dir: string): Out[] {
  const out: Out[] = [];
  const t = Tailer.open({ dir });
  try {
    for (let rec = t.next(); rec; rec = t.next()) {
      const e = decodeEnvelope(rec.bytes);
      if (e.type !== EVENT_TYPE_JSON) continue;
      const v = decodeJson(e.payload) as { key: string; sum: number; n: number };
      out.push({ index: rec.index, ...v });
    }
  } finally {
    t.close();
  }
  return out;
}

/** Appends `count` events `{ v: n + 1, n }` for n = from .. from+count-1 with key `key`. */
function append(topology: Topology, queue: string, key: string, from: number, count: number) {
  const a = openQueueAppender(topology, queue);
  try {
    for (let n = from; n < from + count; n++) a.appendJson(key, { v: n + 1, n });
    a.flush();
  } finally {
    a.close();
  }
}

async function until(done: () => boolean, what: string, timeoutMs = 60_000): Promise<void> {
  for (const t0 = Date.now(); !done(); await new Promise((r) => setTimeout(r, 20))) {
    assert.ok(Date.now() - t0 < timeoutMs, `${what}: not after ${timeoutMs} ms`);
  }
}

/** n values of key `key` in `outs`, each must appear once and in order from `from`. */
function assertEachOnce(outs: Out[], key: string, from: number, to: number, label: string) {
  const ns = outs.filter((o) => o.key === key).map((o) => o.n);
  const want = Array.from({ length: to - from }, (_, i) => from + i);
  assert.equal(ns, want, `${label}: outputs of ${key} are ${from}..${to - 1} once each, in order`);
}

test('a queue with retention.bytesMax stays within it (plus the segment being written) while a service consumes it', async () => {
  const dir = tmp();
  let running: RunningTopology | null = null;
  try {
    const t = writeTopology(dir, [
      'queues:',
      `  - { name: in, segmentBytes: ${SEGMENT_BYTES}, retention: { bytesMax: 16384 } }`,
      `  - { name: out, segmentBytes: ${SEGMENT_BYTES} }`,
      'services:',
      `  - { name: sum, module: ${fixture('running-sum')}, inputs: [in], output: out }`,
    ]);
    running = await startTopology(t, { log: quiet, retentionIntervalMs: 0 });
    const inDir = partitionDir(t, 'in', 0);
    const outDir = partitionDir(t, 'out', 0);
    let deleted = 0;
    let maxAfterPass = 0;
    const rounds = 20;
    const perRound = 250;
    for (let r = 0; r < rounds; r++) {
      append(t, 'in', 'k', r * perRound, perRound);
      await until(() => readOutputs(outDir).length === (r + 1) * perRound, `round ${r} consumed`);
      deleted += running.retention!.pass().segmentsDeleted;
      maxAfterPass = Math.max(maxAfterPass, partitionBytes(inDir));
    }
    const written = rounds * perRound;
    assert.ok(deleted > 10, `segments deleted: ${deleted}`);
    assert.ok(
      maxAfterPass <= 16384 + SEGMENT_BYTES,
      `in/0 took ${maxAfterPass} bytes after a pass; bound 16384 + one segment`,
    );
    assert.ok(listSegments(inDir)[0] > 0, 'the oldest segments are gone');
    // Nothing the service had not consumed was lost: every input has its output, sums exact.
    const outs = readOutputs(outDir);
    assertEachOnce(outs, 'k', 0, written, 'consumed');
    assert.is(outs[outs.length - 1].sum, (written * (written + 1)) / 2);
    await running.stop();
    running = null;
  } finally {
    await running?.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('a lagging reader keeps the segments it has not consumed; they go once it has', async () => {
  const dir = tmp();
  let running: RunningTopology | null = null;
  try {
    const t = writeTopology(dir, [
      'queues:',
      `  - { name: in, segmentBytes: ${SEGMENT_BYTES}, retention: { bytesMax: 4096 } }`,
      `  - { name: out, segmentBytes: ${SEGMENT_BYTES} }`,
      'services:',
      `  - { name: sum, module: ${fixture('running-sum')}, inputs: [in], output: out, settings: { spinUs: 2000 } }`,
    ]);
    running = await startTopology(t, { log: quiet, retentionIntervalMs: 0 });
    const inDir = partitionDir(t, 'in', 0);
    const outDir = partitionDir(t, 'out', 0);
    const total = 1500;
    append(t, 'in', 'k', 0, total);
    let held = 0;
    let deleted = 0;
    const t0 = Date.now();
    while (readOutputs(outDir).length < total) {
      assert.ok(
        Date.now() - t0 < 60_000,
        `lagging reader: ${readOutputs(outDir).length} of ${total} outputs after 60 s`,
      );
      const r = running.retention!.pass();
      if (r.held.includes('in/0')) held++;
      deleted += r.segmentsDeleted;
      // Never a segment above what the service has made durable (its next input).
      const outs = readOutputs(outDir);
      const next = outs.length === 0 ? 0 : outs[outs.length - 1].n + 1;
      const segs = listSegments(inDir);
      assert.ok(
        segs.length === 1 || segs[1] > next || segs[0] <= next,
        `first retained segment ${segs[0]} is at or below the reader's next input ${next}`,
      );
      await new Promise((r) => setTimeout(r, 20));
    }
    deleted += running.retention!.pass().segmentsDeleted;
    assert.ok(held > 0, 'the lagging reader held in/0 in some pass');
    assert.ok(deleted > 10, `segments deleted as the reader moved on: ${deleted}`);
    assert.ok(partitionBytes(inDir) <= 4096 + SEGMENT_BYTES, 'bounded once consumed');
    assertEachOnce(readOutputs(outDir), 'k', 0, total, 'lagging reader');
    await running.stop();
    running = null;
  } finally {
    await running?.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('LAST_WRITTEN restart after retention deleted input and output segments: every later input once, none again (an idle input holds the output)', async () => {
  const dir = tmp();
  let running: RunningTopology | null = null;
  try {
    const t = writeTopology(dir, [
      'queues:',
      `  - { name: a, segmentBytes: ${SEGMENT_BYTES}, retention: { bytesMax: 8192 } }`,
      `  - { name: b, segmentBytes: ${SEGMENT_BYTES}, retention: { bytesMax: 8192 } }`,
      `  - { name: out, segmentBytes: ${SEGMENT_BYTES}, retention: { bytesMax: 8192 } }`,
      'services:',
      `  - { name: sum, module: ${fixture('running-sum')}, inputs: [a, b], output: out }`,
    ]);
    const outDir = partitionDir(t, 'out', 0);
    running = await startTopology(t, { log: quiet, retentionIntervalMs: 0 });
    // b gets its records first and then none: its last output ends up old in the output.
    append(t, 'b', 'b', 0, 300);
    await until(() => readOutputs(outDir).length === 300, 'b consumed');
    for (let r = 0; r < 10; r++) append(t, 'a', 'a', r * 300, 300);
    await until(
      () => readOutputs(outDir).filter((o) => o.key === 'a').length === 3000,
      'a consumed',
    );
    const report = running.retention!.pass();
    await running.stop();
    running = null;
    assert.ok(listSegments(partitionDir(t, 'a', 0))[0] > 0, 'a lost its oldest segments');
    assert.ok(listSegments(partitionDir(t, 'b', 0))[0] > 0, 'b lost its oldest segments');
    assert.ok(report.held.includes('out/0'), "b's last output holds the output queue");
    const outs = readOutputs(outDir);
    assert.ok(
      outs.some((o) => o.key === 'b' && o.n === 299),
      "b's last output is kept",
    );
    const end = outs[outs.length - 1].index;

    append(t, 'a', 'a', 3000, 100);
    append(t, 'b', 'b', 300, 10);
    running = await startTopology(t, { log: quiet, retentionIntervalMs: 0 });
    await until(() => readOutputs(outDir).filter((o) => o.index > end).length >= 110, 'resumed');
    await new Promise((r) => setTimeout(r, 300));
    const after = readOutputs(outDir).filter((o) => o.index > end);
    assertEachOnce(after, 'a', 3000, 3100, 'after restart');
    assertEachOnce(after, 'b', 300, 310, 'after restart');
    await running.stop();
    running = null;
  } finally {
    await running?.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('INPUTS restart with a snapshot after retention deleted the inputs before it: the state is exact; without a snapshot the input is held whole', async () => {
  const dir = tmp();
  let running: RunningTopology | null = null;
  try {
    const t = writeTopology(dir, [
      'queues:',
      `  - { name: in, segmentBytes: ${SEGMENT_BYTES}, retention: { bytesMax: 8192 } }`,
      `  - { name: in2, segmentBytes: ${SEGMENT_BYTES}, retention: { bytesMax: 8192 } }`,
      `  - { name: out, segmentBytes: ${SEGMENT_BYTES} }`,
      `  - { name: out2, segmentBytes: ${SEGMENT_BYTES} }`,
      'services:',
      `  - { name: snap, module: ${fixture('running-sum-snapshot')}, inputs: [in], output: out, inputsReplay: INPUTS }`,
      `  - { name: plain, module: ${fixture('running-sum')}, inputs: [in2], output: out2, inputsReplay: INPUTS }`,
    ]);
    const outDir = partitionDir(t, 'out', 0);
    const inDir = partitionDir(t, 'in', 0);
    const in2Dir = partitionDir(t, 'in2', 0);
    running = await startTopology(t, { log: quiet, retentionIntervalMs: 0 });
    append(t, 'in', 'k', 0, 2050);
    append(t, 'in2', 'k', 0, 500);
    await until(() => readOutputs(outDir).length === 2050, 'in consumed');
    await until(() => readOutputs(partitionDir(t, 'out2', 0)).length === 500, 'in2 consumed');
    const report = running.retention!.pass();
    await running.stop();
    running = null;
    const first = listSegments(inDir)[0];
    assert.ok(first > 0, `in lost its oldest segments (first retained ${first})`);
    assert.ok(first <= 2001, `inputs after the newest snapshot (at 1999) are kept: ${first}`);
    assert.ok(report.held.includes('in2/0'), 'INPUTS without a snapshot holds its input');
    assert.is(listSegments(in2Dir)[0], 0, 'in2 keeps every segment');

    append(t, 'in', 'k', 2050, 50);
    running = await startTopology(t, { log: quiet, retentionIntervalMs: 0 });
    await until(() => readOutputs(outDir).length === 2100, 'resumed');
    const outs = readOutputs(outDir);
    assertEachOnce(outs, 'k', 0, 2100, 'INPUTS restart');
    // The state after the restart counts every input since the first one.
    const last = outs[outs.length - 1];
    assert.is(last.sum, (2100 * 2101) / 2, 'sum over the whole history');
    await running.stop();
    running = null;
  } finally {
    await running?.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('kill -9 in the middle of a retention pass leaves a consistent queue; the next pass finishes the job', async () => {
  const dir = tmp();
  try {
    const t = writeTopology(dir, [
      'queues:',
      `  - { name: in, segmentBytes: ${SEGMENT_BYTES}, retention: { bytesMax: 8192, deleteUncommitted: true } }`,
    ]);
    const inDir = partitionDir(t, 'in', 0);
    append(t, 'in', 'k', 0, 2000);
    const before = listSegments(inDir);
    assert.ok(before.length > 20, `segments: ${before.length}`);
    for (const point of ['index-removed@2', 'segment-removed@3']) {
      const child = spawn(
        process.execPath,
        [fileURLToPath(new URL('./queue-retention.child.js', import.meta.url)), t.file],
        { env: { ...process.env, SLUICE_RETENTION_FAULT: point }, stdio: 'inherit' },
      );
      const signal = await new Promise<string | null>((r) => child.on('exit', (_c, s) => r(s)));
      assert.is(signal, 'SIGKILL', `${point}: the pass died at its fault point`);
      // Remaining segments: a suffix of the old ones, every record readable, in order.
      const segs = listSegments(inDir);
      assert.ok(segs[0] > before[0], `${point}: some segments were deleted`);
      assert.equal(segs, before.slice(before.indexOf(segs[0])), `${point}: consecutive suffix`);
      const tl = Tailer.open({ dir: inDir });
      let expect = segs[0];
      for (let rec = tl.next(); rec; rec = tl.next()) {
        assert.is(rec.index, expect++);
        assert.is((decodeJson(decodeEnvelope(rec.bytes).payload) as { n: number }).n, rec.index);
      }
      tl.close();
      assert.is(expect, 2000, `${point}: reads through the end`);
    }
    // A crash between a segment's two unlinks leaves its index: the next pass removes it, and
    // the appender continues the queue.
    const a = Appender.open({ dir: inDir, segmentBytes: SEGMENT_BYTES });
    assert.is(a.nextIndex, 2000);
    a.close();
    append(t, 'in', 'k', 2000, 10);
    const child = spawn(
      process.execPath,
      [fileURLToPath(new URL('./queue-retention.child.js', import.meta.url)), t.file],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    let out = '';
    child.stdout!.on('data', (b: Buffer) => (out += b));
    const code = await new Promise<number | null>((r) => child.on('exit', (c) => r(c)));
    assert.is(code, 0);
    const report = JSON.parse(out) as { orphanIndexesRemoved: number; segmentsDeleted: number };
    assert.is(report.orphanIndexesRemoved, 1, 'the orphan index of the second crash');
    const left = fs.readdirSync(inDir).filter((f) => f.endsWith('.idx') || f.endsWith('.seg'));
    assert.is(left.length, 2 * listSegments(inDir).length, 'one index per segment');
    assert.ok(partitionBytes(inDir) <= 8192 + SEGMENT_BYTES);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
