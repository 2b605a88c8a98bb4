/**
 * Poison events (issue 9, section 3): a handler that throws for one event is retried
 * `errors.retriesMax` times, then the event goes to the service's dead-letter queue with the
 * error, its source position and the attempt count, and every other event is processed; a
 * restart neither reprocesses nor loses a dead-lettered input, nor dead-letters it twice.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { loadTopology, startTopology, partitionDir, type Topology } from '../index.js';
import { Appender, Tailer } from '../engine/journal/index.js';
import { EnvelopeView, EnvelopeWriter, EVENT_TYPE_JSON, decodeJson, encodeJson } from '../engine/codec/index.js';
import { computeLastWritten, encodeDeadLetter, readDeadLetters } from '../engine/service/index.js';

const thrower = new URL('./fixtures/services/thrower.js', import.meta.url).pathname;

let dir = '';
test.before.each(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-dlq-'));
});
test.after.each(() => {
  fs.rmSync(dir, { recursive: true, force: true });
});

function writeTopology(errors: string, rings = ''): Topology {
  const file = path.join(dir, 'topology.yaml');
  fs.writeFileSync(file, [
    'name: dlq',
    'dataDir: ./data',
    'supervisor: { restartsMax: 2, backoffInitialMs: 10 }',
    ...(rings ? [`rings: ${rings}`] : []),
    'queues:',
    '  - { name: in, partitions: 2 }',
    '  - { name: out }',
    'services:',
    '  - name: pass',
    `    module: ${thrower}`,
    '    inputs: [in]',
    '    output: out',
    `    errors: ${errors}`,
    '',
  ].join('\n'));
  return loadTopology(file);
}

const writer = new EnvelopeWriter();
function append(t: Topology, partition: number, events: Record<string, unknown>[]): void {
  const a = Appender.open({ dir: partitionDir(t, 'in', partition) });
  for (const e of events) {
    a.append(writer.encode({ type: EVENT_TYPE_JSON, key: String(e.key), eventTimeMs: 1, payload: encodeJson(e) }));
  }
  a.close();
}

/** Waits until the output's LAST_WRITTEN reaches `want` (inputKey -> index). */
async function waitForPositions(t: Topology, want: Record<string, number>): Promise<void> {
  const deadline = Date.now() + 30_000;
  const inputs = [0, 1].map((p) => ({ queue: 'in', partition: p }));
  for (;;) {
    const tail = Tailer.open({ dir: partitionDir(t, 'out', 0) });
    tail.moveToEnd();
    const { positions } = computeLastWritten(tail, inputs);
    tail.close();
    if (Object.entries(want).every(([k, v]) => positions[k] === v)) return;
    assert.ok(Date.now() < deadline, `positions ${JSON.stringify(positions)}, want ${JSON.stringify(want)}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** The JSON outputs, as `partition:name` strings in output order. */
function outputs(t: Topology): string[] {
  const tail = Tailer.open({ dir: partitionDir(t, 'out', 0) });
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

test('a handler that throws on one event: retried, dead-lettered with error, position and attempts; the rest processed', async () => {
  const t = writeTopology('{ retriesMax: 2, retryBackoffMs: 5 }');
  append(t, 0, [
    { key: 'a', name: 'a1' }, { key: 'b', name: 'b1' }, { key: 'c', name: 'c1', bad: true },
    { key: 'c', name: 'c2' }, { key: 'd', name: 'd1' },
  ]);
  // The last input of in/1 is dead-lettered: only its output marker says it was processed.
  append(t, 1, [{ key: 'f', name: 'f1' }, { key: 'e', name: 'e1', bad: true }]);
  const lines: string[] = [];
  const run = await startTopology(t, { log: (l) => lines.push(l) });
  await waitForPositions(t, { 'in/0': 4, 'in/1': 1 });
  const errors = run.supervisor.counters()['service:pass'].errors;
  const result = await run.stop();

  // Per-key order policy: later events of the key of a dead-lettered event are processed.
  assert.equal(outputs(t).sort(), ['0:a1', '0:b1', '0:c2', '0:d1', '1:f1']);
  const dead = readDeadLetters(partitionDir(t, 'pass.dlq', 0));
  const byPartition = [...dead].sort((x, y) => x.partition - y.partition);
  assert.equal(byPartition.map((d) => [d.queue, d.partition, d.index, d.key, d.attempts, d.error, d.service]), [
    ['in', 0, 2, 'c', 3, 'bad event on purpose', 'pass'],
    ['in', 1, 1, 'e', 3, 'bad event on purpose', 'pass'],
  ]);
  assert.equal(dead.map((d) => d.dlqIndex), [0, 1]);
  // The original event is kept byte for byte.
  const view = new EnvelopeView();
  const c1 = dead.find((d) => d.key === 'c')!;
  view.wrap(c1.bytes, 0, c1.bytes.length);
  assert.equal(decodeJson(view.payload), { key: 'c', name: 'c1', bad: true });
  assert.is(errors, 6, 'two events, three attempts each');
  assert.is((result.summaries['service:pass'] as { deadLettered: number }).deadLettered, 2);
  assert.not.ok(lines.some((l) => l.includes('restarting')), lines.join('\n'));

  // Restart: nothing is processed again, nothing is dead-lettered twice; new events flow.
  append(t, 0, [{ key: 'c', name: 'c3' }]);
  const again = await startTopology(t, { log: (l) => lines.push(l) });
  await waitForPositions(t, { 'in/0': 5, 'in/1': 1 });
  await again.stop();
  assert.equal(outputs(t).sort(), ['0:a1', '0:b1', '0:c2', '0:c3', '0:d1', '1:f1']);
  assert.is(readDeadLetters(partitionDir(t, 'pass.dlq', 0)).length, 2);
});

test('a crash after the dead-letter append and before the output append: dead-lettered once', async () => {
  const t = writeTopology('{ retriesMax: 0 }');
  append(t, 0, [{ key: 'a', name: 'a1' }, { key: 'c', name: 'c1', bad: true }]);
  // The state such a crash leaves: the dead letter is durable, the output has no marker.
  const dlq = Appender.open({ dir: partitionDir(t, 'pass.dlq', 0) });
  dlq.append(encodeDeadLetter(writer, {
    service: 'pass', error: 'before the crash', attempts: 1, queue: 'in', partition: 0, index: 1,
    key: 'c', type: EVENT_TYPE_JSON, eventTimeMs: 1, failedAtMs: 1, event: '',
  }));
  dlq.close();
  const run = await startTopology(t, { log: () => undefined });
  await waitForPositions(t, { 'in/0': 1 });
  await run.stop();
  assert.equal(outputs(t), ['0:a1']);
  assert.equal(readDeadLetters(partitionDir(t, 'pass.dlq', 0)).map((d) => [d.index, d.error]), [
    [1, 'before the crash'],
  ]);
});

test('records over the ring limit pass by reference; records over recordBytesMax are dead-lettered', async () => {
  const t = writeTopology('{ retriesMax: 0 }', '{ capacityBytes: 65536, recordBytesMax: 100000 }');
  const big = 'x'.repeat(50_000); // over the ring's 8 KiB record limit, under recordBytesMax
  const huge = 'y'.repeat(200_000);
  append(t, 0, [
    { key: 'a', name: 'a1' }, { key: 'b', name: 'big', text: big }, { key: 'c', name: 'huge', text: huge },
    { key: 'd', name: 'd1' },
  ]);
  const run = await startTopology(t, { log: () => undefined });
  await waitForPositions(t, { 'in/0': 3 });
  await run.stop();
  assert.equal(outputs(t), ['0:a1', '0:big', '0:d1']);
  const tail = Tailer.open({ dir: partitionDir(t, 'out', 0) });
  const view = new EnvelopeView();
  tail.moveToIndex(1);
  const rec = tail.next()!;
  view.wrap(rec.bytes, 0, rec.bytes.length);
  assert.is((decodeJson(view.payload) as { text: string }).text, big);
  tail.close();
  const dead = readDeadLetters(partitionDir(t, 'pass.dlq', 0));
  assert.equal(dead.map((d) => [d.index, d.key, d.attempts, d.bytes.length]), [[2, 'c', 0, 0]]);
  assert.match(dead[0].error, /^record of 2000\d\d bytes exceeds rings.recordBytesMax=100000$/);
});

test('onFailure stop keeps the old behaviour: the group fails and the topology stops', async () => {
  const t = writeTopology('{ retriesMax: 0, onFailure: stop }');
  append(t, 0, [{ key: 'a', name: 'a1' }, { key: 'c', name: 'c1', bad: true }]);
  const lines: string[] = [];
  const run = await startTopology(t, { log: (l) => lines.push(l) }).catch((e: Error) => e);
  const err = run instanceof Error ? run : await run.supervisor.done.then(() => null, (e: Error) => e);
  assert.ok(err, 'the topology stops');
  assert.match(err!.message, 'handler for type 2 failed on in/0 index 1 (key "c"): bad event on purpose');
  assert.not.ok(fs.existsSync(partitionDir(t, 'pass.dlq', 0)), 'no dead-letter queue');
});

test.run();
