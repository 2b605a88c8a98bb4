/**
 * `sluice append` and `sluice tail` on a kafka bus, against the real broker: lines appended from
 * another process reach a service of a running topology (read_committed readers), and `tail`
 * prints the input and output topics as it prints journal queues (last N, --from-start, one
 * partition or all merged). Also: a missing topic is named, quickly, with the topology file.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { loadTopology, startTopology } from '../index.js';
import { testKafka } from '../testing/index.js';
import { kafkaBackend } from './lib/backends.js';
import { sluice } from './lib/cli.js';
import { EnvelopeView, decodeJson } from '../engine/codec/index.js';

const service = new URL('./fixtures/services/running-sum.js', import.meta.url).pathname;
const quiet = (): void => undefined;

const broker = await testKafka();
const backend = await kafkaBackend('clikafka', broker);
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-cli-kafka-'));
const input = backend.queue('in');
const output = backend.queue('out');
const file = path.join(dir, 'topology.yaml');
fs.writeFileSync(
  file,
  [
    'name: clikafka',
    'dataDir: ./data',
    ...backend.busLines,
    'queues:',
    `  - { name: ${input}, partitions: 2 }`,
    `  - { name: ${output} }`,
    'services:',
    `  - { name: ${backend.service('sum')}, module: ${service}, inputs: [${input}], output: ${output} }`,
    '',
  ].join('\n'),
);

interface Line {
  partition?: number;
  index: number;
  key: string;
  value: { key?: string; v?: number; n?: number; sum?: number };
}
const lines = (out: string): Line[] =>
  out
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as Line);

const N = 30;
const KEYS = ['a', 'b', 'c', 'd', 'e'];
const inputLines = Array.from(
  { length: N },
  (_, n) => `{"key":"${KEYS[n % KEYS.length]}","v":${n + 1},"n":${n}}`,
).join('\n');

test('append refuses a missing topic, a topic with another partition count, and a dead-letter queue', async () => {
  const missing = path.join(dir, 'missing.yaml');
  fs.writeFileSync(
    missing,
    `name: clikafka-missing\ndataDir: ./data\n${backend.busLines.join('\n')}\nqueues:\n  - { name: ${backend.queue('never-created')} }\n`,
  );
  const r = await sluice(['append', missing, backend.queue('never-created')], '{"key":"a"}\n');
  assert.is(r.code, 2, r.err);
  assert.match(r.err, `Kafka topic "${backend.queue('never-created')}" does not exist`);
  assert.match(r.err, missing);
  assert.not.match(r.err, /^\s+at /m);

  // The topic has 2 partitions, the file says 3: keys would move, so nothing is appended.
  const other = backend.queue('two');
  await backend.createQueues([{ name: other, partitions: 2 }]);
  const three = path.join(dir, 'three.yaml');
  fs.writeFileSync(
    three,
    `name: clikafka-three\ndataDir: ./data\n${backend.busLines.join('\n')}\nqueues:\n  - { name: ${other}, partitions: 3 }\n`,
  );
  const m = await sluice(['append', three, other], '{"key":"a"}\n');
  assert.is(m.code, 2, m.err);
  assert.match(
    m.err,
    `queue "${other}" has 3 partitions in ${three} but Kafka topic "${other}" has 2`,
  );
  for (const p of [0, 1]) {
    const t = backend.tailer(dir, other, p);
    assert.is(t.next(), null, `nothing appended to ${other}/${p}`);
    t.close();
  }

  const dlq = await sluice(['append', file, `${backend.service('sum')}.dlq`], '{"key":"a"}\n');
  assert.is(dlq.code, 2, dlq.err);
  assert.match(dlq.err, `is written by "${backend.service('sum')}"`);
});

test('lines appended by sluice append reach the running service; tail prints both topics', async () => {
  await backend.createQueues([
    { name: input, partitions: 2 },
    { name: output, partitions: 1 },
  ]);
  const appended = await sluice(['append', file, input], inputLines + '\n');
  assert.is(appended.code, 0, appended.err);
  assert.match(appended.err, `appended ${N} events to ${input}`);

  // Every input, once, across both partitions, each key in one partition in append order.
  const all = lines((await sluice(['tail', file, input, '-a', '-n', '1000'])).out);
  assert.is(all.length, N);
  assert.equal(
    all.map((l) => l.value.n).sort((a, b) => a! - b!),
    [...Array(N).keys()],
  );
  for (const k of KEYS) {
    const ofKey = all.filter((l) => l.key === k);
    assert.is(new Set(ofKey.map((l) => l.partition)).size, 1, `key ${k} in one partition`);
    const ns = ofKey.map((l) => l.value.n!);
    assert.equal(
      ns,
      [...ns].sort((a, b) => a - b),
      `key ${k} in append order`,
    );
  }
  const p0 = all.filter((l) => l.partition === 0);
  const firstTwo = lines(
    (await sluice(['tail', file, input, '-p', '0', '--from-start', '-n', '2'])).out,
  );
  assert.equal(
    firstTwo.map((l) => l.value.n),
    p0.slice(0, 2).map((l) => l.value.n),
  );
  const lastThree = lines((await sluice(['tail', file, input, '-p', '0', '-n', '3'])).out);
  assert.equal(
    lastThree.map((l) => l.value.n),
    p0.slice(-3).map((l) => l.value.n),
  );

  const running = await startTopology(loadTopology(file), { log: quiet });
  try {
    const outTail = backend.tailer(dir, output, 0);
    const view = new EnvelopeView();
    const sums = new Map<string, number>();
    const deadline = Date.now() + 60_000;
    let seen = 0;
    while (seen < N) {
      assert.ok(Date.now() < deadline, `outputs within 60 s: ${seen} of ${N}`);
      const rec = outTail.next();
      if (!rec) {
        outTail.waitForAppend(200);
        continue;
      }
      view.wrap(rec.bytes, 0, rec.bytes.length);
      const v = decodeJson(view.payload) as { key: string; sum: number };
      sums.set(v.key, v.sum);
      seen++;
    }
    outTail.close();
    for (const [i, k] of KEYS.entries()) {
      let want = 0;
      for (let n = i; n < N; n += KEYS.length) want += n + 1;
      assert.is(sums.get(k), want, `sum of key ${k}`);
    }
  } finally {
    await running.stop();
  }
  // The output topic is written in transactions, so its last offset is a commit marker that no
  // reader sees: tail -n steps back over it to the last outputs.
  const outAll = lines((await sluice(['tail', file, output, '--from-start', '-n', '1000'])).out);
  assert.is(outAll.length, N, 'each input has one output');
  const outLast = lines((await sluice(['tail', file, output, '-n', '4'])).out);
  assert.equal(outLast, outAll.slice(-4));
});

test.after(async () => {
  await backend.close();
  await broker.release();
  fs.rmSync(dir, { recursive: true, force: true });
});

test.run();
