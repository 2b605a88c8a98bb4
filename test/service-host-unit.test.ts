/**
 * The service host's logic without a worker (engine/service/host-runtime.ts, host-replay.ts), on
 * journal files in a temporary directory: the replay strategy table picks what Chronicle
 * Services' strategies say; a handler that keeps failing is retried then dead-lettered (the
 * letter durable in the dead-letter journal, the output marked); a restart finds LAST_WRITTEN
 * from the outputs' causes and the INPUTS strategy rebuilds the state of the run before it, with
 * outputs suppressed; OUTPUT_REVERSE stops where the service says.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Counter, COUNTER_SLOTS } from '../engine/actor/index.js';
import { EnvelopeWriter, EVENT_TYPE_JSON, encodeJson, queueId } from '../engine/codec/index.js';
import {
  defineService,
  findRestartPositions,
  openQueueLogs,
  readDeadLetters,
  replayStrategyOf,
  REPLAY_STRATEGIES,
  ServiceRuntime,
  type QueueLogs,
  type ServiceDefinition,
  type ServiceHostData,
} from '../engine/service/index.js';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-host-unit-'));
test.after(() => fs.rmSync(dir, { recursive: true, force: true }));

/** Start data of a service `name` with one input `in`/0 and output `out`, under `dir`. */
function hostData(name: string, over: Partial<ServiceHostData> = {}): ServiceHostData {
  const base = path.join(dir, name);
  return {
    service: name,
    moduleFile: `${name}.js`,
    bus: { kind: 'journal' },
    transactionalId: '',
    settings: {},
    inputs: [{ queue: 'in', partition: 0, dir: path.join(base, 'in', '0') }],
    output: {
      queue: 'out',
      dir: path.join(base, 'out', '0'),
      segmentBytes: 1 << 20,
      fsync: 'none',
    },
    startFrom: 'LAST_WRITTEN',
    inputsReplay: 'INPUTS',
    batchSizeMax: 64,
    emitDuringReplay: false,
    errors: { retriesMax: 2, retryBackoffMs: 1, onFailure: 'dead-letter' },
    recordBytesMax: 1 << 20,
    deadLetter: {
      queue: 'dead',
      dir: path.join(base, 'dead', '0'),
      segmentBytes: 1 << 20,
      fsync: 'none',
    },
    ...over,
  };
}

type Sums = Map<string, number>;
/** Running sum per key; the value "bad" throws. */
const sums = defineService<Sums>({
  init: () => new Map(),
  handlers: {
    json(state, event, ctx) {
      const v = event.json<number | string>();
      if (v === 'bad') throw new Error('not a number');
      const sum = (state.get(event.key) ?? 0) + Number(v);
      state.set(event.key, sum);
      ctx.emit(event.key, sum);
    },
  },
  replayOutput(state, event) {
    // Newest first: the first output seen per key is its latest sum; stop at key "stop".
    if (event.key === 'stop') return true;
    if (!state.has(event.key)) state.set(event.key, event.json<number>());
    return false;
  },
});
/** `sums` as the host takes any service (its state unknown). */
const summing = sums as unknown as ServiceDefinition;

/** Appends JSON inputs [key, value] to `d`'s input partition. */
function writeInputs(logs: QueueLogs, d: ServiceHostData, records: [string, unknown][]): void {
  const a = logs.appender({
    ...d.inputs[0],
    segmentBytes: 1 << 20,
    fsync: 'none',
    transactionalId: '',
  });
  const w = new EnvelopeWriter();
  for (const [key, value] of records)
    a.append(w.encode({ type: EVENT_TYPE_JSON, key, eventTimeMs: 1, payload: encodeJson(value) }));
  a.flush();
  a.close();
}

/**
 * Runs `def` over `d`'s input records `from`..end as a live run would (one batch per record),
 * appending each batch's outputs; returns the runtime.
 */
function runLive(logs: QueueLogs, d: ServiceHostData, def: ServiceDefinition, state: unknown) {
  const appender = logs.appender({
    ...d.inputs[0],
    ...d.output,
    queue: 'out',
    partition: 0,
    transactionalId: '',
  });
  const dlqAppender = d.deadLetter
    ? logs.appender({ ...d.deadLetter, partition: 0, transactionalId: '' })
    : null;
  const counters = new Float64Array(COUNTER_SLOTS);
  const rt = new ServiceRuntime(
    {
      data: d,
      def,
      counters,
      log: () => {},
      recordLimit: 1 << 20,
      busName: 'journal',
      appender,
      dlqAppender,
      dlqNewest: {},
    },
    state,
  );
  const t = logs.tailer(d.inputs[0]);
  try {
    for (let rec = t.next(); rec; rec = t.next()) {
      rt.raw.bytes = rec.bytes;
      rt.raw.offset = 0;
      rt.raw.length = rec.bytes.length;
      if (rt.open(d.inputs[0], queueId('in'), rec.index))
        rt.dispatch(d.inputs[0], queueId('in'), rec.index);
      appender.appendBatch(rt.pending);
      appender.flush();
      rt.pending.length = 0;
    }
  } finally {
    t.close();
    appender.close();
    dlqAppender?.close();
  }
  return { rt, counters };
}

test('the replay strategy table: a key-value store first, then OUTPUT, INPUTS (or any snapshot), OUTPUT_REVERSE, NONE', () => {
  const pick = (r: ServiceHostData['inputsReplay'], snapshot: boolean, kv: boolean) =>
    replayStrategyOf(r, snapshot, kv).name;
  assert.is(pick('NONE', false, true), 'KV_STORE');
  assert.is(pick('OUTPUT', true, false), 'OUTPUT');
  assert.is(pick('INPUTS', false, false), 'INPUTS');
  assert.is(
    pick('OUTPUT_REVERSE', true, false),
    'INPUTS',
    'a snapshot replays the inputs after it',
  );
  assert.is(pick('OUTPUT_REVERSE', false, false), 'OUTPUT_REVERSE');
  assert.is(pick('NONE', false, false), 'NONE');
  assert.is(REPLAY_STRATEGIES.NONE.replays, false);
});

test('a failing handler is retried retriesMax times, then dead-lettered durably and marked in the output; the others emit', () => {
  const d = hostData('dlq');
  const logs = openQueueLogs({ kind: 'journal' });
  writeInputs(logs, d, [
    ['a', 1],
    ['b', 'bad'],
    ['a', 2],
  ]);
  const { rt, counters } = runLive(
    logs,
    d,
    summing,
    summing.init({ service: d.service, settings: {} }),
  );
  assert.is(counters[Counter.errors], 3, 'one try and two retries');
  assert.is(rt.deadLettered, 1);
  const letters = readDeadLetters(d.deadLetter!.dir);
  assert.equal(
    letters.map((l) => [l.key, l.index, l.attempts, l.error]),
    [['b', 1, 3, 'not a number']],
  );
  assert.equal([...(rt.state as Sums)], [['a', 3]]);
  const pos = findRestartPositions(
    d,
    logs,
    { queue: 'out', partition: 0, dir: d.output.dir },
    false,
    undefined,
    'w',
  );
  assert.equal(
    pos.last,
    [2],
    'the dead-lettered input counts as processed: LAST_WRITTEN is the last input',
  );
  logs.close();
});

test('a restart: LAST_WRITTEN from the outputs, INPUTS rebuilds the state with outputs suppressed; OUTPUT_REVERSE stops where the service says', () => {
  const d = hostData('restart');
  const logs = openQueueLogs({ kind: 'journal' });
  writeInputs(logs, d, [
    ['a', 1],
    ['b', 10],
    ['a', 2],
    ['stop', 0],
    ['b', 5],
  ]);
  runLive(logs, d, summing, summing.init({ service: d.service, settings: {} }));
  const outPart = { queue: 'out', partition: 0, dir: d.output.dir };
  const positions = findRestartPositions(d, logs, outPart, false, undefined, 'w');
  assert.equal(positions.last, [4]);
  assert.is(positions.found, null);

  const restarted = (state: Sums, over: Partial<ServiceHostData>) => {
    const dd = { ...d, ...over };
    const appender = logs.appender({ ...outPart, ...d.output, transactionalId: '' });
    const counters = new Float64Array(COUNTER_SLOTS);
    const rt = new ServiceRuntime(
      {
        data: dd,
        def: summing,
        counters,
        log: () => {},
        recordLimit: 1 << 20,
        busName: 'journal',
        appender,
        dlqAppender: null,
        dlqNewest: {},
      },
      state,
    );
    const strategy = replayStrategyOf(dd.inputsReplay, false, false);
    const progress: number[] = [];
    const r = strategy.run({
      data: dd,
      rt,
      logs,
      outPart,
      positions,
      base: [-1],
      counters,
      progress: (n) => progress.push(n),
      where: 'w',
      replayOutput: summing.replayOutput as (s: unknown, e: unknown) => boolean,
    });
    const before = appender.nextIndex;
    appender.close();
    return { r, rt, before, strategy: strategy.name };
  };
  const inputs = restarted(new Map(), { inputsReplay: 'INPUTS' });
  assert.is(inputs.strategy, 'INPUTS');
  assert.is(inputs.r.replayed, 5);
  assert.equal([...(inputs.rt.state as Sums)].sort(), [
    ['a', 3],
    ['b', 15],
    ['stop', 0],
  ]);
  assert.is(inputs.rt.pending.length, 0, 'nothing emitted during the replay');
  assert.is(inputs.before, 5, 'the output still holds the first run only');

  const reverse = restarted(new Map(), { inputsReplay: 'OUTPUT_REVERSE' });
  assert.is(reverse.strategy, 'OUTPUT_REVERSE');
  assert.equal([...(reverse.rt.state as Sums)], [['b', 15]], 'newest first, stopped at "stop"');
  assert.is(reverse.r.outputsReplayed, 2);
  logs.close();
});

test('a record that is not a Sluice envelope is dead-lettered with its bytes, and the inputs after it are handled', () => {
  const d = hostData('foreign');
  const logs = openQueueLogs({ kind: 'journal' });
  writeInputs(logs, d, [['a', 1]]);
  const raw = logs.appender({
    ...d.inputs[0],
    segmentBytes: 1 << 20,
    fsync: 'none',
    transactionalId: '',
  });
  raw.append(new TextEncoder().encode('{"plain":"json"}'));
  raw.flush();
  raw.close();
  writeInputs(logs, d, [['a', 2]]);
  const { rt, counters } = runLive(
    logs,
    d,
    summing,
    summing.init({ service: d.service, settings: {} }),
  );
  assert.equal([...(rt.state as Sums)], [['a', 3]], 'both envelopes handled');
  assert.is(counters[Counter.errors], 1);
  const letters = readDeadLetters(d.deadLetter!.dir);
  assert.is(letters.length, 1);
  assert.is(letters[0]!.index, 1);
  assert.match(
    letters[0]!.error,
    /^record is not a Sluice envelope \(envelope root offset out of range/,
  );
  assert.is(new TextDecoder().decode(letters[0]!.bytes), '{"plain":"json"}', 'its bytes kept');
  const noDlq = hostData('foreign-stop', { deadLetter: null });
  writeInputs(logs, noDlq, []);
  const a = logs.appender({
    ...noDlq.inputs[0],
    segmentBytes: 1 << 20,
    fsync: 'none',
    transactionalId: '',
  });
  a.append(new TextEncoder().encode('xx'));
  a.flush();
  a.close();
  assert.throws(
    () => runLive(logs, noDlq, summing, new Map()),
    /^service foreign-stop: in\/0 index 0: record is not a Sluice envelope/,
  );
  logs.close();
});

test.run();
