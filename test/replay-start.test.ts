/**
 * Chronicle Services' startFrom START with inputsReplay INPUTS: a (re)start replays the inputs
 * from index 0 through LAST_WRITTEN with outputs suppressed, then goes live after it; the option
 * emitDuringReplay appends the outputs of the replayed inputs too; snapshots triggered by
 * periodic update (timer) events instead of an input count. The kill -9 loop of the START +
 * INPUTS combination is in replay-crash.test.ts.
 *
 * Each case runs on both buses (test/lib/backends.ts): the embedded journal and the real Kafka
 * broker (the timer actor writes its ticks there with a plain idempotent producer, so the tick
 * queue's offsets are 0, 1, 2, ... as on the journal). SLUICE_TEST_BUS=journal|kafka runs one.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { loadTopology, startTopology, type Topology } from '../index.js';
import {
  EnvelopeView,
  EVENT_TYPE_JSON,
  decodeJson,
  decodeEnvelope,
} from '../engine/codec/index.js';
import {
  EVENT_TYPE_SNAPSHOT_END,
  decodeSnapshotMarker,
  scanOutput,
} from '../engine/replay/index.js';
import {
  rng,
  appendLwwInputsTo,
  verifyLwwOutput,
  readLiveFile,
  type InputValues,
} from './replay-helpers.js';
import { journalBackend, kafkaBackend, type TestBackend } from './lib/backends.js';
import { testKafka } from '../testing/index.js';
import { step, digest } from './fixtures/services/lww-product.js';

const fixture = (name: string) =>
  new URL(`./fixtures/services/${name}.js`, import.meta.url).pathname;
const quiet = () => {};
const cases: [string, () => Promise<void>][] = [];
const caseOf = (name: string, body: () => Promise<void>) => cases.push([name, body]);

interface Output {
  index: number;
  cause: number;
  count: number;
  digest: string;
  replaying: boolean;
}

/** The JSON outputs of a lww-product service (markReplay), with their causes, in order. */
function readOutputs(topology: Topology): Output[] {
  const out: Output[] = [];
  const t = backend.tailer(topology.dataDir, q('out'), 0);
  try {
    for (let rec = t.next(); rec; rec = t.next()) {
      const e = decodeEnvelope(rec.bytes);
      if (e.type !== EVENT_TYPE_JSON) continue;
      const v = decodeJson(e.payload) as { count: number; digest: string; replaying: boolean };
      out.push({
        index: rec.index,
        cause: e.causeIndex,
        count: v.count,
        digest: v.digest,
        replaying: v.replaying,
      });
    }
  } finally {
    t.close();
  }
  return out;
}

/** Reference digests of one input partition: digests[c] = the state after c inputs. */
function referenceDigests(values: InputValues, key: string): string[] {
  const s = { count: 0, acc: 1, last: new Map<string, number>() };
  const digests = [digest(s)];
  for (const input of values.get(key) ?? []) {
    step(s, input.key, input.v);
    digests.push(digest(s));
  }
  return digests;
}

let backend: TestBackend = journalBackend();
/** A queue name of the case (prefixed on Kafka: unique topics per run). */
const q = (name: string) => backend.queue(name);

async function writeTopology(dir: string, lines: string[]): Promise<Topology> {
  const file = path.join(dir, 'topology.yaml');
  fs.writeFileSync(
    file,
    [
      `name: replay-start-${backend.kind}-${process.pid}`,
      'dataDir: ./data',
      ...backend.busLines,
      ...lines,
      '',
    ].join('\n'),
  );
  const t = loadTopology(file);
  await backend.createQueues(t.queues);
  return t;
}

/** Waits until `done()` holds, polling every 10 ms, at most `timeoutMs`. */
async function until(done: () => boolean, what: string, timeoutMs = 30_000): Promise<void> {
  for (const t0 = Date.now(); !done(); await new Promise((r) => setTimeout(r, 10))) {
    assert.ok(Date.now() - t0 < timeoutMs, `${what}: not after ${timeoutMs} ms`);
  }
}

caseOf(
  'startFrom START with inputsReplay INPUTS: each restart replays 0..LAST_WRITTEN with outputs suppressed, then only later inputs live',
  async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-replay-start-'));
    try {
      const liveFile = path.join(dir, 'live.jsonl');
      const topology = await writeTopology(dir, [
        'queues:',
        `  - { name: ${q('a')} }`,
        `  - { name: ${q('out')} }`,
        'services:',
        `  - name: ${backend.service('lww')}`,
        `    module: ${fixture('lww-product')}`,
        `    inputs: [${q('a')}]`,
        `    output: ${q('out')}`,
        '    startFrom: START',
        '    inputsReplay: INPUTS',
        '    batchSizeMax: 16',
        `    settings: ${JSON.stringify({ liveFile, emitAll: true, markReplay: true })}`,
      ]);
      const inputs = [{ queue: q('a'), partition: 0 }];
      const values: InputValues = new Map();
      const random = rng(11);
      const replayed: number[] = [];
      for (let round = 1; round <= 3; round++) {
        await appendLwwInputsTo(backend, topology.dataDir, inputs, 300, random, values);
        const running = await startTopology(topology, { log: quiet });
        replayed.push(running.supervisor.counters()[`service:${backend.service('lww')}`]!.replayed);
        await until(() => readOutputs(topology).length === round * 300, `round ${round}`);
        await running.stop();
      }
      // every input has exactly one output, in input order, with the reference state after it
      const verdict = verifyLwwOutput(
        backend.tailer(topology.dataDir, q('out'), 0),
        inputs,
        values,
        'outputs',
        true,
        'START + INPUTS',
      );
      assert.equal(verdict.positions, { [`${q('a')}/0`]: 899 });
      assert.is(verdict.outputs, 900);
      assert.ok(
        readOutputs(topology).every((o) => !o.replaying),
        'an output was emitted during the replay',
      );
      assert.equal(replayed, [0, 300, 600]);
      const digests = referenceDigests(values, `${q('a')}/0`);
      assert.equal(
        readLiveFile(liveFile).map((l) => [l.count, l.digest]),
        [
          [0, digests[0]],
          [300, digests[300]],
          [600, digests[600]],
        ],
      );
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  },
);

caseOf(
  'emitDuringReplay: the replayed inputs emit again (replaying, stamped with their inputs); live reading still resumes after LAST_WRITTEN',
  async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-replay-emit-'));
    try {
      const liveFile = path.join(dir, 'live.jsonl');
      const topology = await writeTopology(dir, [
        'queues:',
        `  - { name: ${q('a')} }`,
        `  - { name: ${q('out')} }`,
        'services:',
        `  - name: ${backend.service('lww')}`,
        `    module: ${fixture('lww-product')}`,
        `    inputs: [${q('a')}]`,
        `    output: ${q('out')}`,
        '    startFrom: START',
        '    inputsReplay: INPUTS',
        '    emitDuringReplay: true',
        '    batchSizeMax: 16',
        `    settings: ${JSON.stringify({ liveFile, emitAll: true, markReplay: true })}`,
      ]);
      const inputs = [{ queue: q('a'), partition: 0 }];
      const values: InputValues = new Map();
      const random = rng(12);
      const live = (o: Output[]) => o.filter((x) => !x.replaying).length;
      // 1: 300 inputs live; 2: replay of 300 (emitted), 300 more live; 3: replay of 600, nothing new
      for (const [round, more, liveOutputs] of [
        [1, 300, 300],
        [2, 300, 600],
        [3, 0, 600],
      ] as const) {
        if (more > 0)
          await appendLwwInputsTo(backend, topology.dataDir, inputs, more, random, values);
        const running = await startTopology(topology, { log: quiet });
        await until(() => live(readOutputs(topology)) === liveOutputs, `round ${round}`);
        await running.stop();
      }
      const outputs = readOutputs(topology);
      const range = (from: number, to: number) =>
        Array.from({ length: to - from }, (_, k) => from + k);
      const expected = [
        ...range(0, 300).map((cause) => ({ cause, replaying: false })),
        ...range(0, 300).map((cause) => ({ cause, replaying: true })),
        ...range(300, 600).map((cause) => ({ cause, replaying: false })),
        ...range(0, 600).map((cause) => ({ cause, replaying: true })),
      ];
      assert.equal(
        outputs.map((o) => ({ cause: o.cause, replaying: o.replaying })),
        expected,
      );
      const digests = referenceDigests(values, `${q('a')}/0`);
      for (const o of outputs)
        assert.is(o.digest, digests[o.cause + 1], `output #${o.index} (input ${o.cause})`);
      // the positions come from the processed records, not from the replayed outputs' causes
      const back = backend.tailer(topology.dataDir, q('out'), 0);
      back.moveToEnd();
      assert.equal(scanOutput(back, inputs, undefined, 'out').positions, [599]);
      back.close();
      assert.equal(
        readLiveFile(liveFile).map((l) => l.count),
        [0, 300, 600],
      );
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  },
);

caseOf(
  'snapshots every 5 periodic update events: written at timer events only, and a restart restores the newest and replays only what follows it',
  async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-replay-timer-snap-'));
    try {
      const liveFile = path.join(dir, 'live.jsonl');
      const topology = await writeTopology(dir, [
        'queues:',
        `  - { name: ${q('a')} }`,
        `  - { name: ${q('ticks')} }`,
        `  - { name: ${q('out')} }`,
        'services:',
        `  - name: ${backend.service('lww')}`,
        `    module: ${fixture('lww-timer-snapshot')}`,
        `    inputs: [${q('a')}, ${q('ticks')}]`,
        `    output: ${q('out')}`,
        '    inputsReplay: OUTPUT',
        '    batchSizeMax: 16',
        `    settings: ${JSON.stringify({ liveFile, emitAll: true, timerQueue: q('ticks'), timerIntervalMs: 20 })}`,
      ]);
      const inputs = [
        { queue: q('a'), partition: 0 },
        { queue: q('ticks'), partition: 0 },
      ];
      const values: InputValues = new Map();
      const random = rng(13);
      const markers = () => {
        const found: { index: number; positions: Record<string, number> }[] = [];
        const t = backend.tailer(topology.dataDir, q('out'), 0);
        const view = new EnvelopeView();
        for (let rec = t.next(); rec; rec = t.next()) {
          view.wrap(rec.bytes, 0, rec.bytes.length);
          if (view.type === EVENT_TYPE_SNAPSHOT_END)
            found.push({
              index: rec.index,
              positions: decodeSnapshotMarker(view.payload, 'out').positions,
            });
        }
        t.close();
        return found;
      };
      await appendLwwInputsTo(backend, topology.dataDir, [inputs[0]!], 2000, random, values);
      let running = await startTopology(topology, { log: quiet });
      await until(
        () => readOutputs(topology).length === 2000 && markers().length >= 3,
        'first run',
      );
      await running.stop();

      const written = markers();
      let previousTick = -1;
      for (const m of written) {
        // each snapshot follows the 5th (or a later) timer event since the one before it
        assert.ok(
          m.positions[`${q('ticks')}/0`]! - previousTick >= 5,
          `snapshot at ${m.index} after ticks ${previousTick}..${m.positions[`${q('ticks')}/0`]}`,
        );
        previousTick = m.positions[`${q('ticks')}/0`]!;
      }
      const back = backend.tailer(topology.dataDir, q('out'), 0);
      back.moveToEnd();
      const [lastA, lastTick] = scanOutput(back, inputs, 151, 'out').positions!;
      back.close();
      const newest = written[written.length - 1]!;

      await appendLwwInputsTo(backend, topology.dataDir, [inputs[0]!], 500, random, values);
      running = await startTopology(topology, { log: quiet });
      // the replay covers what follows the newest snapshot, not the whole history
      const replayedAfter =
        running.supervisor.counters()[`service:${backend.service('lww')}`]!.replayed;
      assert.is(
        replayedAfter,
        lastA! -
          newest.positions[`${q('a')}/0`]! +
          lastTick! -
          newest.positions[`${q('ticks')}/0`]!,
      );
      await until(() => readOutputs(topology).length === 2500, 'second run');
      await running.stop();
      const digests = referenceDigests(values, `${q('a')}/0`);
      const starts = readLiveFile(liveFile) as { count: number; digest: string; ticks: number }[];
      assert.is(starts.length, 2);
      assert.equal(starts[1], { count: 2000, digest: digests[2000], ticks: lastTick! + 1 });
      for (const o of readOutputs(topology))
        assert.is(o.digest, digests[o.count], `output #${o.index}`);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  },
);

const BUSES = (process.env.SLUICE_TEST_BUS ?? 'journal,kafka').split(',');
for (const bus of BUSES) {
  for (const [name, body] of cases) {
    test(`${bus} bus: ${name}`, async () => {
      backend =
        bus === 'kafka' ? await kafkaBackend('replay-start', await testKafka()) : journalBackend();
      try {
        await body();
      } finally {
        await backend.close();
      }
    });
  }
}

test.run();
