/**
 * The Kafka record limit (bus.recordBytesMax, by default KAFKA_SINK_DEFAULTS.recordBytesMax,
 * under the broker's default message.max.bytes) in a running service, against the real broker: an output over it fails its
 * handler (so the input is dead-lettered, naming sizes and limit) instead of failing the batch at
 * the broker with MESSAGE_TOO_LARGE and restarting the service forever; a dead letter that would
 * be over it (the event in base64 is 4/3 of the event) keeps the error and the event's position
 * without the event's bytes. The inputs after both are processed. A snapshot over the limit is
 * written in chunks that fit it, and a restart restores it. A raised bus.recordBytesMax lets an
 * output the default would refuse through to the broker.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { loadTopology, startTopology } from '../index.js';
import { testKafka } from '../testing/index.js';
import { KAFKA_SINK_DEFAULTS } from '../engine/cdc/index.js';
import { jsonKeysOf, kafkaBackend } from './lib/backends.js';
import { sluice } from './lib/cli.js';
import { EnvelopeView, EVENT_TYPE_JSON, decodeJson } from '../engine/codec/index.js';

const bigSnapshotFile = new URL('./fixtures/services/big-snapshot.js', import.meta.url).pathname;
const oversizeFile = new URL('./fixtures/services/oversize.js', import.meta.url).pathname;
const quiet = (): void => undefined;

const broker = await testKafka();
const backend = await kafkaBackend('reclimit', broker);
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-reclimit-'));

/** Keys of the JSON records of `queue` partition 0, read_committed, in offset order. */
const keysOf = (queue: string): string[] => jsonKeysOf(backend, dir, queue);

/**
 * Writes a topology file of one service (`input` -> `output`) on the test's Kafka bus, with one
 * more service line (`extra`), and creates its two topics (1 partition each).
 */
async function serviceTopology(
  file: string,
  t: {
    name: string;
    dataDir: string;
    busLines: readonly string[];
    input: string;
    output: string;
    service: string;
    module: string;
    extra: string;
  },
): Promise<void> {
  fs.writeFileSync(
    file,
    [
      `name: ${t.name}`,
      `dataDir: ${t.dataDir}`,
      ...t.busLines,
      'queues:',
      `  - { name: ${t.input} }`,
      `  - { name: ${t.output} }`,
      'services:',
      `  - name: ${t.service}`,
      `    module: ${t.module}`,
      `    inputs: [${t.input}]`,
      `    output: ${t.output}`,
      `    ${t.extra}`,
      '',
    ].join('\n'),
  );
  await backend.createQueues([
    { name: t.input, partitions: 1 },
    { name: t.output, partitions: 1 },
  ]);
}

test('on Kafka, an output over the record limit is dead-lettered, and so is an event whose dead letter would be over it (without its bytes); the service goes on', async () => {
  const limit = KAFKA_SINK_DEFAULTS.recordBytesMax;
  const input = backend.queue('in');
  const output = backend.queue('out');
  const service = backend.service('grow');
  const dlq = `${service}.dlq`;
  const file = path.join(dir, 'topology.yaml');
  await serviceTopology(file, {
    name: 'reclimit',
    dataDir: './data',
    busLines: backend.busLines,
    input,
    output,
    service,
    module: oversizeFile,
    extra: 'errors: { retriesMax: 1, retryBackoffMs: 1 }',
  });
  // "wide" fits the limit as an input (0.8 of it) but its dead letter would not (4/3 of it).
  const wide = { key: 'wide', bad: true, pad: 'y'.repeat(Math.floor(limit * 0.8)) };
  const lines = [
    { key: 'a' },
    { key: 'big', grow: limit + 1000 },
    { key: 'b' },
    wide,
    { key: 'c' },
  ];
  const a = await sluice(
    ['append', file, input],
    lines.map((l) => JSON.stringify(l)).join('\n') + '\n',
  );
  assert.is(a.code, 0, a.err);

  const running = await startTopology(loadTopology(file), { log: quiet });
  try {
    const deadline = Date.now() + 60_000;
    while (keysOf(output).length < 3) {
      assert.ok(Date.now() < deadline, `3 records in ${output} within 60 s: ${keysOf(output)}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  } finally {
    await running.stop();
  }
  assert.equal(keysOf(output), ['a', 'b', 'c']);

  const list = await sluice(['dlq', 'list', file, dlq]);
  assert.is(list.code, 0, list.err);
  const letters = list.out
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, unknown>);
  assert.is(letters.length, 2, list.out.slice(0, 2000));
  assert.is(letters[0]!.key, 'big');
  assert.is(letters[0]!.index, 1);
  assert.match(
    String(letters[0]!.error),
    new RegExp(
      `^output record of \\d+ bytes exceeds the kafka record limit of ${limit} bytes \\(output queue ${output.replace(/\./g, '\\.')}\\)$`,
    ),
  );
  assert.equal(letters[0]!.value, { key: 'big', grow: limit + 1000 });
  assert.is(letters[1]!.key, 'wide');
  assert.is(letters[1]!.index, 3);
  assert.match(
    String(letters[1]!.error),
    /^bad event on purpose \(the event's \d+ bytes are not kept: the dead letter would be \d+ bytes, over the kafka record limit of 1000000\)$/,
  );
  assert.is(letters[1]!.value, null);

  // Replaying the one without its event says where the event still is.
  const replay = await sluice([
    'dlq',
    'replay',
    file,
    dlq,
    '--index',
    String(letters[1]!.dlqIndex),
  ]);
  assert.is.not(replay.code, 0);
  assert.match(replay.err, `has no event`);
  assert.match(replay.err, `it is still at ${input}/0 index 3`);
});

test('on Kafka, bus.recordBytesMax raises the limit: an output of 1,020,000 bytes passes with 1040000 (the broker takes 1048588), one over 1040000 is dead-lettered naming it', async () => {
  const limit = 1_040_000;
  assert.ok(limit > KAFKA_SINK_DEFAULTS.recordBytesMax);
  const input = backend.queue('raised-in');
  const output = backend.queue('raised-out');
  const service = backend.service('raised');
  const file = path.join(dir, 'raised.yaml');
  const busLine = backend.busLines[0]!;
  assert.match(busLine, / }$/);
  await serviceTopology(file, {
    name: 'reclimit-raised',
    dataDir: './data-raised',
    busLines: [busLine.replace(/ }$/, `, recordBytesMax: ${limit} }`)],
    input,
    output,
    service,
    module: oversizeFile,
    extra: 'errors: { retriesMax: 0, retryBackoffMs: 1 }',
  });
  const lines = [{ key: 'big', grow: 1_020_000 }, { key: 'over', grow: limit }, { key: 'c' }];
  const a = await sluice(
    ['append', file, input],
    lines.map((l) => JSON.stringify(l)).join('\n') + '\n',
  );
  assert.is(a.code, 0, a.err);
  const running = await startTopology(loadTopology(file), { log: quiet });
  try {
    const deadline = Date.now() + 60_000;
    while (keysOf(output).length < 2) {
      assert.ok(Date.now() < deadline, `2 records in ${output} within 60 s: ${keysOf(output)}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  } finally {
    await running.stop();
  }
  assert.equal(keysOf(output), ['big', 'c']);
  const t = backend.tailer(dir, output, 0);
  const sizes: number[] = [];
  for (let rec = t.next(); rec; rec = t.next()) sizes.push(rec.bytes.length);
  t.close();
  assert.ok(sizes[0]! > 1_020_000 && sizes[0]! <= limit, `output sizes: ${sizes.join(', ')}`);

  const list = await sluice(['dlq', 'list', file, `${service}.dlq`]);
  assert.is(list.code, 0, list.err);
  const letters = list.out
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, unknown>);
  assert.equal(
    letters.map((l) => l.key),
    ['over'],
  );
  assert.match(
    String(letters[0]!.error),
    new RegExp(`^output record of \\d+ bytes exceeds the kafka record limit of ${limit} bytes `),
  );
});

test('on Kafka, a snapshot of 2.5 MB is written in chunks under the record limit and restored by a restart', async () => {
  const input = backend.queue('snap-in');
  const output = backend.queue('snap-out');
  const service = backend.service('snap');
  const file = path.join(dir, 'snap.yaml');
  await serviceTopology(file, {
    name: 'reclimit-snap',
    dataDir: './data-snap',
    busLines: backend.busLines,
    input,
    output,
    service,
    module: bigSnapshotFile,
    extra: 'settings: { padBytes: 2500000 }',
  });
  const run = async (keys: string[], want: number): Promise<void> => {
    const a = await sluice(
      ['append', file, input],
      keys.map((key) => JSON.stringify({ key })).join('\n') + '\n',
    );
    assert.is(a.code, 0, a.err);
    const logs: string[] = [];
    const running = await startTopology(loadTopology(file), {
      log: (l) => logs.push(JSON.stringify(l)),
    });
    try {
      const deadline = Date.now() + 60_000;
      while (keysOf(output).length < want) {
        assert.ok(
          Date.now() < deadline,
          `${want} records in ${output} within 60 s: ${logs.join('\n').slice(0, 3000)}`,
        );
        await new Promise((r) => setTimeout(r, 200));
      }
    } finally {
      await running.stop();
    }
  };
  await run(['a', 'b', 'c', 'd'], 4);
  await run(['e'], 5);
  assert.equal(keysOf(output), ['a', 'b', 'c', 'd', 'e']);
  // The restart restored the snapshot taken after "d" (n = 4) and counted on from it.
  const t = backend.tailer(dir, output, 0);
  const view = new EnvelopeView();
  let last: unknown = null;
  const chunks: number[] = [];
  for (let rec = t.next(); rec; rec = t.next()) {
    view.wrap(rec.bytes, 0, rec.bytes.length);
    if (view.type === EVENT_TYPE_JSON) last = decodeJson(view.payload);
    if (view.type === 152) chunks.push(rec.bytes.length);
  }
  t.close();
  assert.equal(last, { key: 'e', n: 5 });
  // At least one snapshot (inputs come in batches: one per batch of 2 or more), in 5 or more
  // chunks, every chunk's record under the limit.
  assert.ok(chunks.length >= 5, `snapshot chunks: ${chunks.join(', ')}`);
  assert.ok(
    chunks.every((b) => b <= KAFKA_SINK_DEFAULTS.recordBytesMax),
    `snapshot chunks: ${chunks.join(', ')}`,
  );
});

test.after(async () => {
  await backend.close();
  await broker.release();
});

test.run();
