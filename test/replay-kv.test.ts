/**
 * The idempotent key-value store: every put/remove is an output event; timer events write the
 * map in snapshot cycles of `snapshotBatchSize` entries; a restart replays only from the start
 * of the newest complete cycle, or from the queue's start if none completed.
 * Engine level (randomized, seed printed): the restored map equals the map at the stop, for
 * stops inside a cycle after a complete one and stops before any cycle completes.
 * End to end: kill -9 at random moments of a topology whose timer actor appends the periodic
 * update events; every restart rebuilds the reference map; each input's effect is in the output
 * exactly once. The end-to-end case runs on both buses (test/lib/backends.ts): the embedded
 * journal and the real Kafka broker (the service's outputs are written in transactions; the
 * restore reads the output topic backwards by offset). SLUICE_TEST_BUS=journal|kafka runs one;
 * the Kafka case is long (10 kills of a slower start) and runs with SLUICE_KAFKA_CRASH=all
 * (`npm run test:kafka-services`).
 */
import { runChild as runChildProcess, type KillAt, type ChildRun } from './lib/kill-child.js';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Appender, Tailer } from '../engine/journal/index.js';
import {
  EnvelopeView,
  EnvelopeWriter,
  EVENT_TYPE_JSON,
  decodeJson,
  encodeJson,
} from '../engine/codec/index.js';
import {
  KvStore,
  restoreKvStore,
  EVENT_TYPE_KV_PUT,
  EVENT_TYPE_KV_REMOVE,
  EVENT_TYPE_KV_CYCLE_START,
  EVENT_TYPE_KV_CYCLE_END,
  EVENT_TYPE_TIMER,
} from '../engine/replay/index.js';
import { rng } from './replay-helpers.js';
import { journalBackend, kafkaBackend, type TestBackend } from './lib/backends.js';
import { testKafka } from '../testing/index.js';
import type { PartitionTailer } from '../engine/service/index.js';

const sorted = (o: Record<string, unknown>) =>
  JSON.stringify(Object.fromEntries(Object.entries(o).sort(([a], [b]) => (a < b ? -1 : 1))));

/**
 * Simulates a service with a store: `ops` random puts/removes over `keys` keys, a timer event
 * with probability `timerP` per op, batches of 1..8 ops appended atomically, stop after
 * `batches` batches (timers from batch `timersFrom`). Returns the map at the stop and where cycles started/ended.
 */
function simulate(
  dir: string,
  seed: number,
  opts: { keys: number; batchSize: number; timerP: number; batches: number; timersFrom?: number },
) {
  const random = rng(seed);
  const out = Appender.open({ dir });
  const writer = new EnvelopeWriter();
  const pending: Uint8Array[] = [];
  let index = 0;
  const store = new KvStore(
    writer,
    (e) => pending.push(e),
    () => ({ queue: 1, partition: 0, index }),
    opts.batchSize,
  );
  const starts: number[] = [];
  const ends: number[] = [];
  for (let b = 0; b < opts.batches; b++) {
    const n = 1 + Math.floor(random() * 8);
    for (let i = 0; i < n; i++, index++) {
      const key = `k${Math.floor(random() * opts.keys)}`;
      if (random() < 0.25) store.remove(key);
      else store.put(key, Math.floor(random() * 5));
      if (b >= (opts.timersFrom ?? 0) && random() < opts.timerP) store.onTimer();
    }
    if (pending.length === 0) continue;
    const first = out.appendBatch(pending);
    pending.forEach((e, k) => {
      const t = new EnvelopeView().wrap(e, 0, e.length).type;
      if (t === EVENT_TYPE_KV_CYCLE_START) starts.push(first + k);
      if (t === EVENT_TYPE_KV_CYCLE_END) ends.push(first + k);
    });
    pending.length = 0;
    out.flush();
  }
  out.close();
  return { map: store.toObject(), starts, ends, cycling: store.cycling };
}

function restore(dir: string | PartitionTailer) {
  const store = new KvStore(
    new EnvelopeWriter(),
    () => {
      throw new Error('a restore must not write');
    },
    () => ({ queue: 0, partition: 0, index: 0 }),
  );
  const t = typeof dir === 'string' ? Tailer.open({ dir }) : dir;
  try {
    const r = restoreKvStore(store, t, 'out');
    return { map: store.toObject(), ...r };
  } finally {
    t.close();
  }
}

test('restart after a partial snapshot cycle restores the exact map, replaying from the newest complete cycle start', () => {
  const base = Number(process.env.SLUICE_TEST_SEED ?? 3303);
  let partial = 0;
  for (let s = 0; s < 40; s++) {
    const seed = base + s;
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-kv-'));
    try {
      const sim = simulate(dir, seed, {
        keys: 60,
        batchSize: 4,
        timerP: 0.15,
        batches: 60 + (s % 7) * 20,
      });
      assert.ok(sim.ends.length >= 1, `seed ${seed}: no cycle completed`);
      if (sim.cycling) partial++;
      const r = restore(dir);
      assert.is(sorted(r.map), sorted(sim.map), `seed ${seed} (rerun: SLUICE_TEST_SEED=${seed})`);
      // the start of the cycle whose end is the newest end
      const lastEnd = sim.ends[sim.ends.length - 1];
      const start = sim.starts.filter((i) => i < lastEnd).pop();
      assert.is(
        r.fromIndex,
        start,
        `seed ${seed}: replay started at ${r.fromIndex}, the newest complete cycle starts at ${start}`,
      );
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }
  assert.ok(partial >= 10, `only ${partial} of 40 stops were inside a cycle`);
});

test('restart before any snapshot cycle completes replays from the start of the queue', () => {
  const base = Number(process.env.SLUICE_TEST_SEED ?? 4404);
  for (let s = 0; s < 20; s++) {
    const seed = base + s;
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-kv-'));
    try {
      // a big map and small batches: the first cycle does not finish within the run
      const sim = simulate(dir, seed, {
        keys: 500,
        batchSize: 2,
        timerP: 0.2,
        batches: 40,
        timersFrom: 25,
      });
      assert.is(sim.ends.length, 0, `seed ${seed}`);
      assert.ok(sim.starts.length === 1, `seed ${seed}: a cycle started`);
      const r = restore(dir);
      assert.is(r.fromIndex, 0);
      assert.is(sorted(r.map), sorted(sim.map), `seed ${seed} (rerun: SLUICE_TEST_SEED=${seed})`);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }
});

test('a put of the value already stored writes nothing; a remove of an absent key writes nothing', () => {
  const written: Uint8Array[] = [];
  const store = new KvStore(
    new EnvelopeWriter(),
    (e) => written.push(e),
    () => ({ queue: 1, partition: 0, index: 5 }),
    10,
  );
  store.put('a', { x: 1 });
  store.put('a', { x: 1 });
  assert.is(store.remove('b'), false);
  store.put('a', { x: 2 });
  assert.is(store.remove('a'), true);
  const view = new EnvelopeView();
  assert.equal(
    written.map((e) => view.wrap(e, 0, e.length).type),
    [EVENT_TYPE_KV_PUT, EVENT_TYPE_KV_PUT, EVENT_TYPE_KV_REMOVE],
  );
  assert.is(view.wrap(written[0], 0, written[0].length).causeIndex, 5);
  assert.throws(
    () =>
      new KvStore(
        new EnvelopeWriter(),
        () => {},
        () => ({ queue: 0, partition: 0, index: 0 }),
        0,
      ),
    /snapshotBatchSize must be an integer >= 1, snapshotBatchSize=0/,
  );
});

// End to end: kill -9 loop with the timer actor.
const child = new URL('./replay-crash.child.js', import.meta.url).pathname;
/** Runs the child with the topology and record count in ops mode; see test/lib/kill-child.ts. */
function runChild(
  topology: string,
  perPartition: number,
  kill: KillAt | null,
  opsQueue: string,
): Promise<ChildRun> {
  return runChildProcess(child, [topology, String(perPartition), opsQueue], kill);
}

const BUSES = (process.env.SLUICE_TEST_BUS ?? 'journal,kafka')
  .split(',')
  .filter((b) => b !== 'kafka' || process.env.SLUICE_KAFKA_CRASH === 'all');
for (const bus of BUSES)
  test(`${bus} bus: kill -9 at random moments, key-value store with timer events: every restart rebuilds the reference map; each input is in the output once`, async () => {
    const backend: TestBackend =
      bus === 'kafka' ? await kafkaBackend('kv', await testKafka()) : journalBackend();
    const q = (name: string) => backend.queue(name);
    const KILLS = bus === 'kafka' ? 10 : 12;
    const CHUNK = 2000;
    const seed = Number(process.env.SLUICE_TEST_SEED ?? Date.now() % 100000);
    const random = rng(seed);
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-kv-crash-'));
    try {
      const liveFile = path.join(dir, 'live.jsonl');
      const topologyFile = path.join(dir, 'topology.yaml');
      fs.writeFileSync(
        topologyFile,
        [
          `name: kv-crash-${bus}-${process.pid}`,
          'dataDir: ./data',
          ...backend.busLines,
          'supervisor: { backoffInitialMs: 10, restartsMax: 50 }',
          'queues:',
          `  - { name: ${q('ops')} }`,
          `  - { name: ${q('ticks')} }`,
          `  - { name: ${q('out')} }`,
          'services:',
          `  - name: ${backend.service('kv')}`,
          `    module: ${new URL('./fixtures/services/kv-counter.js', import.meta.url).pathname}`,
          `    inputs: [${q('ops')}, ${q('ticks')}]`,
          `    output: ${q('out')}`,
          '    batchSizeMax: 32',
          `    settings: ${JSON.stringify({ spinUs: 60, liveFile, timerQueue: q('ticks'), timerIntervalMs: 5 })}`,
          '',
        ].join('\n'),
      );
      const ops: { op: 'put' | 'remove'; key: string; v: number }[] = [];
      const refs: string[] = [sorted({})];
      const ref: Record<string, unknown> = {};
      const writer = new EnvelopeWriter();
      await backend.createQueues(
        [q('ops'), q('ticks'), q('out')].map((name) => ({ name, partitions: 1 })),
      );
      const more = async () => {
        const batch: Uint8Array[] = [];
        for (let n = 0; n < CHUNK; n++) {
          const o = {
            op: random() < 0.2 ? ('remove' as const) : ('put' as const),
            key: `k${Math.floor(random() * 40)}`,
            v: Math.floor(random() * 4),
          };
          ops.push(o);
          if (o.op === 'put') ref[o.key] = o.v;
          else delete ref[o.key];
          ref.__n = ops.length;
          refs.push(sorted(ref));
          batch.push(writer.encode({ type: EVENT_TYPE_JSON, key: o.key, payload: encodeJson(o) }));
        }
        await backend.append(path.join(dir, 'data'), q('ops'), 0, batch);
      };
      await more();
      let killed = 0;
      let runs = 0;
      // One kill in four at a random moment of the start (restore, replay); the others at a
      // random moment of the live run after it, spread over a clean run's live time as measured.
      let liveMs = bus === 'kafka' ? 4000 : 800;
      while (killed < KILLS) {
        assert.ok(++runs <= 60, `(seed ${seed}) 60 runs without ${KILLS} kills`);
        const kill =
          random() < 0.25
            ? { from: 'spawn' as const, afterMs: 100 + Math.floor(random() * 500) }
            : { from: 'live' as const, afterMs: Math.floor(random() * liveMs) };
        const r = await runChild(topologyFile, ops.length, kill, q('ops'));
        if (r.signal === 'SIGKILL') {
          killed++;
          continue;
        }
        assert.is(r.code, 0, `run ${runs} exited ${r.code} (seed ${seed}):\n${r.out}`);
        if (r.liveToExitMs !== null) liveMs = (liveMs + r.liveToExitMs) / 2;
        await more();
      }
      const final = await runChild(topologyFile, ops.length, null, q('ops'));
      assert.is(final.code, 0, `final run failed (seed ${seed}):\n${final.out}`);

      // every start rebuilt the map the reference has after the same number of inputs
      const live = fs
        .readFileSync(liveFile, 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as { n: number; map: Record<string, unknown> });
      let rebuilt = 0;
      for (const l of live) {
        assert.is(
          sorted(l.map),
          refs[l.n],
          `(seed ${seed}) a start rebuilt the map after ${l.n} inputs wrongly`,
        );
        if (l.n > 0) rebuilt++;
      }
      assert.ok(rebuilt >= KILLS / 3, `(seed ${seed}) only ${rebuilt} starts had a map to rebuild`);
      // the output: __n puts caused by inputs count 1, 2, 3, ... (each input once, none lost);
      // cycles completed; a restore now gives the final reference map
      const dataDir = path.join(dir, 'data');
      const t = backend.tailer(dataDir, q('out'), 0);
      const view = new EnvelopeView();
      let n = 0;
      let cycles = 0;
      let timerEvents = 0;
      for (let rec = t.next(); rec; rec = t.next()) {
        view.wrap(rec.bytes, 0, rec.bytes.length);
        if (view.type === EVENT_TYPE_KV_CYCLE_END) cycles++;
        if (view.type === EVENT_TYPE_TIMER) timerEvents++;
        if (view.type !== EVENT_TYPE_KV_PUT || !view.hasCause || view.key !== '__n') continue;
        const v = decodeJson(view.payload) as number;
        assert.is(
          v,
          n + 1,
          `(seed ${seed}) output #${rec.index}: __n = ${v} after ${n} (an input lost or processed twice)`,
        );
        assert.is(
          view.causeIndex,
          n,
          `(seed ${seed}) output #${rec.index}: cause ${view.causeIndex}, expected input ${n}`,
        );
        n = v;
      }
      t.close();
      assert.is(n, ops.length);
      assert.is(timerEvents, 0, 'timer events are inputs, never outputs');
      assert.ok(cycles >= 3, `(seed ${seed}) ${cycles} snapshot cycles completed`);
      const r = restore(backend.tailer(dataDir, q('out'), 0));
      assert.is(sorted(r.map), refs[ops.length]);
      assert.ok(r.fromIndex > 0, 'a restart replays from a cycle start, not the queue start');
      process.stdout.write(
        `\n  ${bus} bus, key-value store: seed ${seed}, ${killed} kills in ${runs + 1} runs, ${rebuilt} starts rebuilt the map, ${cycles} cycles, restore reads from output #${r.fromIndex}\n`,
      );
    } finally {
      await backend.close();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

test.run();
