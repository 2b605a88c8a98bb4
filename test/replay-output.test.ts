/**
 * inputsReplay OUTPUT: inputs are replayed in exactly the interleaving in which they were
 * processed, reconstructed from the processed records written with the outputs.
 *
 * Property (engine/replay, in process): for randomized interleavings of two and three input
 * queues, batches of random size, outputs for only some inputs, and a stop at a random batch
 * end, a restart (scan + replay of processed records) rebuilds a non-commutative state
 * (last-writer-wins + running affine product mod a prime) equal to the state before it.
 * The seed is printed on failure; SLUICE_TEST_SEED replays one.
 *
 * End to end (service host): a topology with three input queues runs, stops, and restarts; the
 * state the restart rebuilt equals the state before it, and the output equals the reference.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Appender, Tailer } from '../engine/journal/index.js';
import {
  EnvelopeWriter,
  EnvelopeView,
  EVENT_TYPE_JSON,
  decodeJson,
  encodeJson,
  queueId,
} from '../engine/codec/index.js';
import {
  ProcessedRecorder,
  decodeProcessed,
  encodeSnapshot,
  scanOutput,
  replayProcessed,
  EVENT_TYPE_PROCESSED,
  type ReplayInputDir,
} from '../engine/replay/index.js';
import { loadTopology, startTopology } from '../index.js';
import { step, digest, parseDigest } from './fixtures/services/lww-product.js';
import {
  rng,
  appendLwwInputs,
  verifyLwwOutput,
  readLiveFile,
  type InputValues,
} from './replay-helpers.js';

const TRIALS = 60;
const SNAPSHOT_TYPE = 150;

type State = { count: number; acc: number; last: Map<string, number> };
const fresh = (): State => ({ count: 0, acc: 1, last: new Map() });

/**
 * One trial: a simulated host processes a random interleaving and stops at a random batch end;
 * then a restart rebuilds the state from the output. Returns a failure message or null.
 */
function trial(seed: number, queues: number, withSnapshots: boolean): string | null {
  const random = rng(seed);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-replay-prop-'));
  try {
    const inputs: ReplayInputDir[] = [];
    for (let q = 0; q < queues; q++) {
      // the last queue has two partitions: positions are per partition, not per queue
      const parts = q === queues - 1 ? 2 : 1;
      for (let p = 0; p < parts; p++)
        inputs.push({
          queue: `in${q}`,
          partition: p,
          dir: path.join(dir, 'queues', `in${q}`, String(p)),
        });
    }
    const values: InputValues = new Map();
    const perPartition = 50 + Math.floor(random() * 150);
    appendLwwInputs(dir, inputs, perPartition, random, values);

    // the host: runs of random length from random inputs, in batches of 1..4 runs
    const outDir = path.join(dir, 'queues', 'out', '0');
    const out = Appender.open({ dir: outDir });
    const writer = new EnvelopeWriter();
    const recorder = new ProcessedRecorder(
      inputs,
      inputs.map(() => -1),
    );
    const state = fresh();
    const next = inputs.map(() => 0);
    const stopAfter = Math.floor(random() * perPartition * inputs.length);
    let processed = 0;
    while (processed < stopAfter) {
      const pending: Uint8Array[] = [];
      const runs = 1 + Math.floor(random() * 4);
      for (let r = 0; r < runs && processed < stopAfter; r++) {
        const i = Math.floor(random() * inputs.length);
        const len = 1 + Math.floor(random() * 6);
        for (
          let n = 0;
          n < len && next[i] < perPartition && processed < stopAfter;
          n++, processed++
        ) {
          const index = next[i]++;
          const input = values.get(`${inputs[i].queue}/${inputs[i].partition}`)![index];
          step(state, input.key, input.v);
          recorder.note(i, index);
          if (input.v % 3 !== 0) {
            pending.push(
              writer.encode({
                type: EVENT_TYPE_JSON,
                key: input.key,
                causeQueue: queueId(inputs[i].queue),
                causePartition: inputs[i].partition,
                causeIndex: index,
                payload: encodeJson({ count: state.count, digest: digest(state) }),
              }),
            );
          }
        }
      }
      if (recorder.runs === 0) continue;
      pending.push(writer.encode({ type: EVENT_TYPE_PROCESSED, payload: recorder.take() }));
      if (withSnapshots && random() < 0.2) {
        const at: Record<string, number> = {};
        inputs.forEach((x, n) => (at[`${x.queue}/${x.partition}`] = recorder.positions[n]));
        // small chunks so snapshots span several records
        for (const e of encodeSnapshot(
          writer,
          SNAPSHOT_TYPE,
          new TextEncoder().encode(digest(state)),
          at,
          0,
          7,
        ))
          pending.push(e);
      }
      out.appendBatch(pending);
      out.flush();
    }
    out.close();
    const before = digest(state);

    // the restart
    const back = Tailer.open({ dir: outDir });
    back.moveToEnd();
    const scan = scanOutput(back, inputs, withSnapshots ? SNAPSHOT_TYPE : undefined, 'out');
    back.close();
    const positions = scan.positions ?? inputs.map(() => -1);
    if (positions.some((p, n) => p !== recorder.positions[n]))
      return `positions ${positions} != ${recorder.positions}`;
    const rebuilt: State = scan.snapshot
      ? parseDigest(new TextDecoder().decode(scan.snapshot.bytes))
      : fresh();
    const view = new EnvelopeView();
    const r = replayProcessed(
      outDir,
      scan.snapshot ? scan.snapshot.markerIndex + 1 : 0,
      inputs,
      scan.snapshot ? scan.snapshot.positions : inputs.map(() => -1),
      (_i, _index, bytes) => {
        view.wrap(bytes, 0, bytes.length);
        step(rebuilt, view.key!, (decodeJson(view.payload) as { v: number }).v);
      },
      'out',
    );
    if (r.positions.some((p, n) => p !== positions[n]))
      return `replay ended at ${r.positions}, expected ${positions}`;
    if (digest(rebuilt) !== before)
      return `state after restart ${digest(rebuilt)} != before ${before}`;
    // the output itself is consistent with the reference
    verifyLwwOutput(outDir, inputs, values, 'processed', false, `seed ${seed}`);
    return null;
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

for (const queues of [2, 3]) {
  for (const withSnapshots of [false, true]) {
    test(`OUTPUT replay rebuilds the state of ${queues} input queues exactly, randomized interleavings${withSnapshots ? ', from a snapshot' : ''}`, () => {
      const base = Number(
        process.env.SLUICE_TEST_SEED ?? 20261130 + queues * 1000 + (withSnapshots ? 500 : 0),
      );
      const trials = process.env.SLUICE_TEST_SEED ? 1 : TRIALS;
      for (let t = 0; t < trials; t++) {
        const seed = base + t;
        let failure: string | null;
        try {
          failure = trial(seed, queues, withSnapshots);
        } catch (err) {
          failure = (err as Error).stack ?? String(err);
        }
        assert.is(failure, null, `seed ${seed} (rerun: SLUICE_TEST_SEED=${seed}): ${failure}`);
      }
    });
  }
}

test('processed record: runs and positions round-trip, a gap or repeat is refused', () => {
  const inputs = [
    { queue: 'a', partition: 0 },
    { queue: 'b', partition: 1 },
  ];
  const rec = new ProcessedRecorder(inputs, [4, -1]);
  rec.note(0, 5);
  rec.note(0, 6);
  rec.note(1, 0);
  rec.note(0, 7);
  assert.is(rec.runs, 3);
  const payload = rec.take();
  assert.is(payload.length, 8 + 16 * (2 + 3));
  assert.is(rec.runs, 0);
  const inputsAfter = [
    { queue: 'b', partition: 1 },
    { queue: 'a', partition: 0 },
    { queue: 'c', partition: 0 },
  ];
  // decoding maps onto the caller's order; an input the record does not name gets -1
  assert.equal(decodeProcessed(payload, inputsAfter, 'x'), {
    positions: [0, 7, -1],
    runs: [
      { input: 1, first: 5, count: 2 },
      { input: 0, first: 0, count: 1 },
      { input: 1, first: 7, count: 1 },
    ],
  });
  assert.throws(() => rec.note(0, 9), /index 9, expected 8/);
  assert.throws(() => rec.note(1, 0), /index 0, expected 1/);
  assert.throws(
    () => decodeProcessed(payload, [{ queue: 'b', partition: 1 }], 'out#3'),
    /out#3: run 0 .* no longer an input/,
  );
});

test('restart with OUTPUT: three input queues run, stop and restart; the rebuilt state equals the state before', async () => {
  const seed = Number(process.env.SLUICE_TEST_SEED ?? 7);
  const random = rng(seed);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-replay-e2e-'));
  try {
    const liveFile = path.join(dir, 'live.jsonl');
    const file = path.join(dir, 'topology.yaml');
    fs.writeFileSync(
      file,
      [
        'name: output-e2e',
        'dataDir: ./data',
        'queues:',
        '  - { name: a }',
        '  - { name: b }',
        '  - { name: c, partitions: 2 }',
        '  - { name: out }',
        'services:',
        '  - name: lww',
        `    module: ${new URL('./fixtures/services/lww-product.js', import.meta.url).pathname}`,
        '    inputs: [a, b, c]',
        '    output: out',
        '    inputsReplay: OUTPUT',
        '    batchSizeMax: 16',
        `    settings: { liveFile: ${JSON.stringify(liveFile)} }`,
        '',
      ].join('\n'),
    );
    const topology = loadTopology(file);
    const inputs = [
      { queue: 'a', partition: 0 },
      { queue: 'b', partition: 0 },
      { queue: 'c', partition: 0 },
      { queue: 'c', partition: 1 },
    ];
    const values: InputValues = new Map();
    const outDir = path.join(topology.dataDir, 'queues', 'out', '0');
    const quiet = () => {};
    for (let round = 0; round < 3; round++) {
      appendLwwInputs(topology.dataDir, inputs, 400, random, values);
      const running = await startTopology(topology, { log: quiet });
      const want = (round + 1) * 400 - 1;
      for (let waited = 0; ; waited += 10) {
        const back = Tailer.open({ dir: outDir });
        back.moveToEnd();
        const scan = scanOutput(back, inputs, undefined, 'out');
        back.close();
        if (scan.positions && scan.positions.every((p) => p === want)) break;
        assert.ok(waited < 20_000, `round ${round}: not caught up after 20 s`);
        await new Promise((r) => setTimeout(r, 10));
      }
      await running.stop();
    }
    const verdict = verifyLwwOutput(outDir, inputs, values, 'processed', false, `seed ${seed}`);
    const live = readLiveFile(liveFile);
    assert.is(live.length, 3);
    assert.equal(
      live.map((l) => l.count),
      [0, 1600, 3200],
    );
    for (const l of live)
      assert.is(l.digest, verdict.digests[l.count], `start at count ${l.count}`);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
