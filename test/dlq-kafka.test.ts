/**
 * `sluice dlq list|replay|purge` on a kafka bus, against the real broker: a poison event
 * dead-lettered by a running topology is listed from the dead-letter topic, replayed into its
 * source topic once the handler is fixed (and then processed), and purged (Kafka DeleteRecords).
 * A broker that cannot be reached is named with the topology file. The operations API's
 * dead-letter routes do the same on Kafka (asynchronously: ops/kafka-dlq.ts).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { loadTopology, startTopology } from '../index.js';
import { createKafkaBus } from '../engine/bus/index.js';
import { testKafka } from '../testing/index.js';
import { jsonKeysOf, kafkaBackend } from './lib/backends.js';
import { sluice } from './lib/cli.js';

const poisonFile = new URL('./fixtures/services/poison-file.js', import.meta.url).pathname;
const quiet = (): void => undefined;

const broker = await testKafka();
const backend = await kafkaBackend('dlqkafka', broker);
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-dlq-kafka-'));
/** A topology of its own (queues prefixed by the backend, unique to this run). */
function setup(tag: string) {
  const input = backend.queue(`${tag}-in`);
  const output = backend.queue(`${tag}-out`);
  const other = backend.queue(`${tag}-other`);
  const service = backend.service(`${tag}-pass`);
  const poison = path.join(dir, `${tag}-poison`);
  const file = path.join(dir, `${tag}.yaml`);
  fs.writeFileSync(
    file,
    [
      `name: dlqkafka-${tag}`,
      'dataDir: ./data',
      ...backend.busLines,
      'queues:',
      `  - { name: ${input} }`,
      `  - { name: ${output} }`,
      `  - { name: ${other} }`,
      'services:',
      `  - name: ${service}`,
      `    module: ${poisonFile}`,
      `    inputs: [${input}]`,
      `    output: ${output}`,
      '    errors: { retriesMax: 1, retryBackoffMs: 1 }',
      `    settings: { poisonFile: ${JSON.stringify(poison)} }`,
      '',
    ].join('\n'),
  );
  fs.writeFileSync(poison, '');
  return { input, output, other, service, dlq: `${service}.dlq`, poison, file };
}

/** Keys of the JSON records of `queue` partition 0, read_committed, in offset order. */
const keysOf = (queue: string): string[] => jsonKeysOf(backend, dir, queue);

/**
 * Runs the topology of `file` (with the operations API) until `queue` holds `want` JSON
 * records, then runs `during` with the API's URL, then drains it.
 */
async function runUntil(
  file: string,
  queue: string,
  want: number,
  during: (url: string) => Promise<void> = async () => undefined,
): Promise<void> {
  const running = await startTopology(loadTopology(file), { log: quiet, http: { port: 0 } });
  try {
    const deadline = Date.now() + 60_000;
    while (keysOf(queue).length < want) {
      assert.ok(Date.now() < deadline, `${want} records in ${queue} within 60 s`);
      await new Promise((r) => setTimeout(r, 200));
    }
    await during(running.ops.server!.url);
  } finally {
    await running.stop();
  }
}

test('sluice dlq on Kafka: a dead letter listed, replayed into its source topic and processed, replayed --to another topic, purged', async () => {
  const { input, output, other, service, dlq, poison, file } = setup('cli');
  await backend.createQueues([
    { name: input, partitions: 1 },
    { name: output, partitions: 1 },
    { name: other, partitions: 1 },
  ]);
  const a = await sluice(
    ['append', file, input],
    '{"key":"a"}\n{"key":"b","bad":true}\n{"key":"c"}\n',
  );
  assert.is(a.code, 0, a.err);
  await runUntil(file, output, 2);
  assert.equal(keysOf(output), ['a', 'c']);

  const list = await sluice(['dlq', 'list', file, dlq]);
  assert.is(list.code, 0, list.err);
  const lines = list.out
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, unknown>);
  assert.is(lines.length, 1, list.out);
  assert.type(lines[0]!.dlqIndex, 'number');
  assert.type(lines[0]!.failedAtMs, 'number');
  delete lines[0]!.failedAtMs;
  delete lines[0]!.dlqIndex;
  assert.equal(lines[0], {
    service,
    queue: input,
    partition: 0,
    index: 1,
    key: 'b',
    attempts: 2,
    error: 'bad event on purpose',
    value: { key: 'b', bad: true },
  });

  // The fix, then replay into the source topic (offsets come from the broker: index -1) and
  // into another topic with --to.
  fs.rmSync(poison);
  const replay = await sluice(['dlq', 'replay', file, dlq]);
  assert.is(replay.code, 0, replay.err);
  assert.match(
    replay.out.trim(),
    new RegExp(
      `^\\{"dlqIndex":\\d+,"queue":"${input.replace(/\./g, '\\.')}","partition":0,"index":-1\\}$`,
    ),
  );
  assert.is(replay.err.trim(), `sluice: replayed 1 dead letter from ${dlq}`);
  const toOther = await sluice(['dlq', 'replay', file, dlq, '--to', other]);
  assert.is(toOther.code, 0, toOther.err);
  assert.equal(keysOf(other), ['b']);
  await runUntil(file, output, 3);
  assert.equal(
    keysOf(output),
    ['a', 'c', 'b'],
    'the replayed event processed once, after the others',
  );

  const purge = await sluice(['dlq', 'purge', file, dlq]);
  assert.is(purge.code, 0, purge.err);
  assert.is(purge.err.trim(), `sluice: purged 1 dead letter from ${dlq}`);
  const after = await sluice(['dlq', 'list', file, dlq]);
  assert.is(after.code, 0, after.err);
  assert.is(after.out, '');
});

test('a record that is not a Sluice envelope on a service input topic is dead-lettered with its bytes; the service goes on', async () => {
  const { input, output, dlq, file } = setup('foreign');
  await backend.createQueues([
    { name: input, partitions: 1 },
    { name: output, partitions: 1 },
  ]);
  const first = await sluice(['append', file, input], '{"key":"a"}\n');
  assert.is(first.code, 0, first.err);
  // A producer of its own writes a plain JSON value, not an envelope.
  const bus = createKafkaBus({ brokers: broker.brokers, clientId: 'dlq-foreign' });
  try {
    const p = await bus.producer();
    await p.send([{ topic: input, key: 'x', value: new TextEncoder().encode('{"plain":"json"}') }]);
    await p.close();
  } finally {
    await bus.close();
  }
  const last = await sluice(['append', file, input], '{"key":"c"}\n');
  assert.is(last.code, 0, last.err);
  await runUntil(file, output, 2);
  assert.equal(keysOf(output), ['a', 'c'], 'the records around it handled, once each');
  const list = await sluice(['dlq', 'list', file, dlq]);
  assert.is(list.code, 0, list.err);
  const lines = list.out
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, unknown>);
  assert.is(lines.length, 1, list.out);
  assert.is(lines[0]!.index, 1);
  assert.match(
    String(lines[0]!.error),
    /^record is not a Sluice envelope \(envelope root offset out of range/,
  );
  assert.equal(lines[0]!.value, { plain: 'json' }, 'listed with its value');
  // sluice tail prints it between the two envelopes.
  const tail = await sluice(['tail', file, input, '-n', '10']);
  assert.is(tail.code, 0, tail.err);
  const values = tail.out
    .trim()
    .split('\n')
    .map((l) => (JSON.parse(l) as { type: number | null; value: unknown }).value);
  assert.equal(values, [{ key: 'a' }, { plain: 'json' }, { key: 'c' }]);
});

test('the operations API on Kafka: GET /dlq and /dlq/{queue}, POST replay; POST purge refused while the topology runs', async () => {
  const { input, output, other, dlq, file } = setup('api');
  await backend.createQueues([
    { name: input, partitions: 1 },
    { name: output, partitions: 1 },
    { name: other, partitions: 1 },
  ]);
  const a = await sluice(['append', file, input], '{"key":"x","bad":true}\n{"key":"y"}\n');
  assert.is(a.code, 0, a.err);
  await runUntil(file, output, 1, async (url) => {
    const json = async (r: Promise<Response>) => {
      const res = await r;
      return { status: res.status, body: (await res.json()) as Record<string, unknown> };
    };
    const post = (p: string, body: unknown) =>
      fetch(`${url}${p}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
    // The dead letter is appended before the output of the input after it (y): it is there.
    const all = await json(fetch(`${url}/dlq`));
    assert.is(all.status, 200, JSON.stringify(all.body));
    const mine = (all.body.queues as { queue: string; deadLetters: number }[]).find(
      (q) => q.queue === dlq,
    );
    assert.is(mine?.deadLetters, 1, JSON.stringify(all.body));
    const one = await json(fetch(`${url}/dlq/${encodeURIComponent(dlq)}`));
    assert.is(one.status, 200, JSON.stringify(one.body));
    assert.is(one.body.total, 1);
    const [d] = one.body.deadLetters as { key: string; index: number; error: string }[];
    assert.equal([d!.key, d!.index, d!.error], ['x', 0, 'bad event on purpose']);
    const missing = await json(fetch(`${url}/dlq/no-such.dlq`));
    assert.is(missing.status, 404);

    const replayed = await json(post(`/dlq/${encodeURIComponent(dlq)}/replay`, { to: other }));
    assert.is(replayed.status, 200, JSON.stringify(replayed.body));
    assert.equal(
      (replayed.body.replayed as { queue: string; index: number }[]).map((r) => [r.queue, r.index]),
      [[other, -1]],
    );
    assert.equal(keysOf(other), ['x']);
    const refused = await json(post(`/dlq/${encodeURIComponent(dlq)}/replay`, { to: output }));
    assert.is(refused.status, 409, 'a service output has one writer');
    // A request naming what is not there is a bad request, and says what is there.
    const unknownTo = await json(post(`/dlq/${encodeURIComponent(dlq)}/replay`, { to: 'nope' }));
    assert.is(unknownTo.status, 400, JSON.stringify(unknownTo.body));
    assert.match(String(unknownTo.body.error), 'unknown queue "nope"');
    const unknownIndex = await json(
      post(`/dlq/${encodeURIComponent(dlq)}/replay`, { to: other, indexes: [99999] }),
    );
    assert.is(unknownIndex.status, 400, JSON.stringify(unknownIndex.body));
    assert.match(String(unknownIndex.body.error), 'has no index 99999');
    assert.equal(keysOf(other), ['x'], 'nothing appended by the refused requests');

    // The topology runs: its service writes the dead-letter topic, so the API does not purge it
    // (the journal's appender lock refuses it likewise); sluice dlq purge does, once stopped.
    const purged = await json(post(`/dlq/${encodeURIComponent(dlq)}/purge`, {}));
    assert.is(purged.status, 409, JSON.stringify(purged.body));
    assert.match(String(purged.body.error), 'purge with the topology stopped: sluice dlq purge');
    const still = await json(fetch(`${url}/dlq/${encodeURIComponent(dlq)}`));
    assert.is(still.body.total, 1);
  });
});

test('a kafka broker that cannot be reached is named with the topology file', async () => {
  const { dlq, file } = setup('down');
  const down = path.join(dir, 'down-broker.yaml');
  fs.writeFileSync(
    down,
    fs.readFileSync(file, 'utf8').replace(/brokers: \[[^\]]*\]/, 'brokers: [127.0.0.1:1]'),
  );
  const r = await sluice(['dlq', 'list', down, dlq]);
  assert.is(r.code, 2, r.out + r.err);
  assert.is(r.out, '');
  assert.match(r.err, `sluice: kafka bus 127.0.0.1:1 (${down}): `);
  assert.match(r.err, 'ECONNREFUSED');
});

test.after(async () => {
  await backend.close();
  await broker.release();
  fs.rmSync(dir, { recursive: true, force: true });
});

test.run();
