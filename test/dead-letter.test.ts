/**
 * Poison events (issue 9, section 3): a handler that throws for one event is retried
 * `errors.retriesMax` times, then the event goes to the service's dead-letter queue with the
 * error, its source position and the attempt count, and every other event is processed; a
 * restart neither reprocesses nor loses a dead-lettered input, nor dead-letters it twice.
 *
 * Each case runs on both buses (test/lib/backends.ts): the embedded journal and the real Kafka
 * broker (the dead-letter queue is a topic; its records and the output's markers are written
 * in transactions). SLUICE_TEST_BUS=journal|kafka runs one.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { loadTopology, startTopology, partitionDir, type Topology } from '../index.js';
import {
  EnvelopeView,
  EnvelopeWriter,
  EVENT_TYPE_JSON,
  decodeJson,
  encodeJson,
} from '../engine/codec/index.js';
import { computeLastWritten, encodeDeadLetter, readDeadLetters } from '../engine/service/index.js';
import { journalBackend, kafkaBackend, type TestBackend } from './lib/backends.js';
import { testKafka } from '../testing/index.js';

const thrower = new URL('./fixtures/services/thrower.js', import.meta.url).pathname;

let dir = '';
let backend: TestBackend = journalBackend();
/** Queue names of the case: prefixed on Kafka (unique topics per run). */
let IN = 'in';
let OUT = 'out';
let SVC = 'pass';
let DLQ = 'pass.dlq';

function writeTopology(errors: string, rings = ''): Topology {
  const file = path.join(dir, 'topology.yaml');
  fs.writeFileSync(
    file,
    [
      `name: dlq-${backend.kind}`,
      'dataDir: ./data',
      ...backend.busLines,
      'supervisor: { restartsMax: 2, backoffInitialMs: 10 }',
      ...(rings ? [`rings: ${rings}`] : []),
      'queues:',
      `  - { name: ${IN}, partitions: 2 }`,
      `  - { name: ${OUT} }`,
      'services:',
      `  - name: ${SVC}`,
      `    module: ${thrower}`,
      `    inputs: [${IN}]`,
      `    output: ${OUT}`,
      `    errors: ${errors}`,
      '',
    ].join('\n'),
  );
  return loadTopology(file);
}

const writer = new EnvelopeWriter();
const cases: [string, () => Promise<void>][] = [];
const caseOf = (name: string, body: () => Promise<void>) => cases.push([name, body]);
async function append(
  t: Topology,
  partition: number,
  events: Record<string, unknown>[],
): Promise<void> {
  await backend.createQueues(t.queues);
  await backend.append(
    t.dataDir,
    IN,
    partition,
    events.map((e) =>
      writer.encode({
        type: EVENT_TYPE_JSON,
        key: String(e.key),
        eventTimeMs: 1,
        payload: encodeJson(e),
      }),
    ),
  );
}

/** The dead-letter queue's records, on either bus. */
function deadLetters(t: Topology) {
  return readDeadLetters(partitionDir(t, DLQ, 0), () => backend.tailer(t.dataDir, DLQ, 0));
}

/** Waits until the output's LAST_WRITTEN reaches `want` (inputKey -> index). */
async function waitForPositions(t: Topology, want: Record<string, number>): Promise<void> {
  const deadline = Date.now() + 30_000;
  const inputs = [0, 1].map((p) => ({ queue: IN, partition: p }));
  for (;;) {
    const tail = backend.tailer(t.dataDir, OUT, 0);
    tail.moveToEnd();
    const { positions } = computeLastWritten(tail, inputs);
    tail.close();
    if (Object.entries(want).every(([k, v]) => positions[`${IN}/${k}`] === v)) return;
    assert.ok(
      Date.now() < deadline,
      `positions ${JSON.stringify(positions)}, want ${JSON.stringify(want)}`,
    );
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** The JSON outputs, as `partition:name` strings in output order. */
function outputs(t: Topology): string[] {
  const tail = backend.tailer(t.dataDir, OUT, 0);
  const view = new EnvelopeView();
  const got: string[] = [];
  for (let rec = tail.next(); rec; rec = tail.next()) {
    view.wrap(rec.bytes, 0, rec.bytes.length);
    if (view.type !== EVENT_TYPE_JSON) continue;
    got.push(`${view.causePartition}:${(decodeJson(view.payload) as { name: string }).name}`);
  }
  tail.close();
  return got;
}

caseOf(
  'a handler that throws on one event: retried, dead-lettered with error, position and attempts; the rest processed',
  async () => {
    const t = writeTopology('{ retriesMax: 2, retryBackoffMs: 5 }');
    await append(t, 0, [
      { key: 'a', name: 'a1' },
      { key: 'b', name: 'b1' },
      { key: 'c', name: 'c1', bad: true },
      { key: 'c', name: 'c2' },
      { key: 'd', name: 'd1' },
    ]);
    // The last input of in/1 is dead-lettered: only its output marker says it was processed.
    await append(t, 1, [
      { key: 'f', name: 'f1' },
      { key: 'e', name: 'e1', bad: true },
    ]);
    const lines: string[] = [];
    const run = await startTopology(t, { log: (l) => lines.push(l) });
    await waitForPositions(t, { 0: 4, 1: 1 });
    const errors = run.supervisor.counters()[`service:${SVC}`].errors;
    const result = await run.stop();

    // Per-key order policy: later events of the key of a dead-lettered event are processed.
    assert.equal(outputs(t).sort(), ['0:a1', '0:b1', '0:c2', '0:d1', '1:f1']);
    const dead = deadLetters(t);
    const byPartition = [...dead].sort((x, y) => x.partition - y.partition);
    assert.equal(
      byPartition.map((d) => [
        d.queue,
        d.partition,
        d.index,
        d.key,
        d.attempts,
        d.error,
        d.service,
      ]),
      [
        [IN, 0, 2, 'c', 3, 'bad event on purpose', SVC],
        [IN, 1, 1, 'e', 3, 'bad event on purpose', SVC],
      ],
    );
    // Kafka: each dead letter is its own transaction (a marker follows each record).
    assert.equal(
      dead.map((d) => d.dlqIndex),
      backend.kind === 'kafka' ? [0, 2] : [0, 1],
    );
    // The original event is kept byte for byte.
    const view = new EnvelopeView();
    const c1 = dead.find((d) => d.key === 'c')!;
    view.wrap(c1.bytes, 0, c1.bytes.length);
    assert.equal(decodeJson(view.payload), { key: 'c', name: 'c1', bad: true });
    assert.is(errors, 6, 'two events, three attempts each');
    assert.is((result.summaries[`service:${SVC}`] as { deadLettered: number }).deadLettered, 2);
    assert.not.ok(
      lines.some((l) => l.includes('restarting')),
      lines.join('\n'),
    );

    // Restart: nothing is processed again, nothing is dead-lettered twice; new events flow.
    await append(t, 0, [{ key: 'c', name: 'c3' }]);
    const again = await startTopology(t, { log: (l) => lines.push(l) });
    await waitForPositions(t, { 0: 5, 1: 1 });
    await again.stop();
    assert.equal(outputs(t).sort(), ['0:a1', '0:b1', '0:c2', '0:c3', '0:d1', '1:f1']);
    assert.is(deadLetters(t).length, 2);
  },
);

caseOf(
  'a crash after the dead-letter append and before the output append: dead-lettered once',
  async () => {
    const t = writeTopology('{ retriesMax: 0 }');
    await append(t, 0, [
      { key: 'a', name: 'a1' },
      { key: 'c', name: 'c1', bad: true },
    ]);
    // The state such a crash leaves: the dead letter is durable, the output has no marker.
    await backend.append(t.dataDir, DLQ, 0, [
      encodeDeadLetter(writer, {
        service: SVC,
        error: 'before the crash',
        attempts: 1,
        queue: IN,
        partition: 0,
        index: 1,
        key: 'c',
        type: EVENT_TYPE_JSON,
        eventTimeMs: 1,
        failedAtMs: 1,
        event: '',
      }),
    ]);
    const run = await startTopology(t, { log: () => undefined });
    await waitForPositions(t, { 0: 1 });
    await run.stop();
    assert.equal(outputs(t), ['0:a1']);
    assert.equal(
      deadLetters(t).map((d) => [d.index, d.error]),
      [[1, 'before the crash']],
    );
  },
);

caseOf(
  'records over the ring limit pass by reference; records over recordBytesMax are dead-lettered',
  async () => {
    const t = writeTopology(
      '{ retriesMax: 0 }',
      '{ capacityBytes: 65536, recordBytesMax: 100000 }',
    );
    const big = 'x'.repeat(50_000); // over the ring's 8 KiB record limit, under recordBytesMax
    const huge = 'y'.repeat(200_000);
    await append(t, 0, [
      { key: 'a', name: 'a1' },
      { key: 'b', name: 'big', text: big },
      { key: 'c', name: 'huge', text: huge },
      { key: 'd', name: 'd1' },
    ]);
    const run = await startTopology(t, { log: () => undefined });
    await waitForPositions(t, { 0: 3 });
    await run.stop();
    assert.equal(outputs(t), ['0:a1', '0:big', '0:d1']);
    const tail = backend.tailer(t.dataDir, OUT, 0);
    const view = new EnvelopeView();
    tail.moveToIndex(0);
    tail.next();
    const rec = tail.next()!;
    view.wrap(rec.bytes, 0, rec.bytes.length);
    assert.is((decodeJson(view.payload) as { text: string }).text, big);
    tail.close();
    const dead = deadLetters(t);
    assert.equal(
      dead.map((d) => [d.index, d.key, d.attempts, d.bytes.length]),
      [[2, 'c', 0, 0]],
    );
    assert.match(dead[0].error, /^record of 2000\d\d bytes exceeds rings.recordBytesMax=100000$/);
  },
);

caseOf(
  'onFailure stop keeps the old behaviour: the group fails and the topology stops',
  async () => {
    const t = writeTopology('{ retriesMax: 0, onFailure: stop }');
    await append(t, 0, [
      { key: 'a', name: 'a1' },
      { key: 'c', name: 'c1', bad: true },
    ]);
    const lines: string[] = [];
    const run = await startTopology(t, { log: (l) => lines.push(l) }).catch((e: Error) => e);
    const err =
      run instanceof Error
        ? run
        : await run.supervisor.done.then(
            () => null,
            (e: Error) => e,
          );
    assert.ok(err, 'the topology stops');
    assert.match(
      err!.message,
      `handler for type 2 failed on ${IN}/0 index 1 (key "c"): bad event on purpose`,
    );
    if (backend.kind === 'journal')
      assert.not.ok(fs.existsSync(partitionDir(t, DLQ, 0)), 'no dead-letter queue');
  },
);

const BUSES = (process.env.SLUICE_TEST_BUS ?? 'journal,kafka').split(',');
for (const bus of BUSES) {
  for (const [name, body] of cases) {
    test(`${bus} bus: ${name}`, async () => {
      dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-dlq-'));
      backend = bus === 'kafka' ? await kafkaBackend('dlq', await testKafka()) : journalBackend();
      IN = backend.queue('in');
      OUT = backend.queue('out');
      SVC = backend.service('pass');
      DLQ = `${SVC}.dlq`;
      try {
        await body();
      } finally {
        await backend.close();
        fs.rmSync(dir, { recursive: true, force: true });
      }
    });
  }
}

test.run();
