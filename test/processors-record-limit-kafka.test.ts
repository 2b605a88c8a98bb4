/**
 * The Kafka record limit (bus.recordBytesMax) in topology processors, against the real broker:
 * a durable processor's output just over the limit fails the handler call that returned it, so
 * its input is retried alone and dead-lettered (the error naming the processor, the size, the
 * limit, the topic and the key) instead of a transaction the broker refuses with
 * MESSAGE_TOO_LARGE at every retry and restart; an output of exactly the limit goes through; a
 * dead letter that would be over the limit keeps its error without the input's bytes. Inline and
 * in a pool thread; the records after them are processed, and the processor is never restarted.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { loadTopology, startTopology } from '../index.js';
import { testKafka } from '../testing/kafka-broker.js';
import { bytes, text, waitForRecords } from './patterns-helpers.js';

const root = fileURLToPath(new URL('../../', import.meta.url));
const fixture = path.join(root, 'test', 'fixtures', 'processors', 'sized.ts');
const kafka = await testKafka();
/** The smallest bus.recordBytesMax the topology takes: the test's records stay small. */
const LIMIT = 65_536;

test('kafka: a durable output over bus.recordBytesMax is dead-lettered naming it, one of the limit passes, an oversized dead letter drops its bytes; inline and pooled, no restart', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'processors_reclimit_kafka-'));
  const x = `proc-reclimit-${process.pid}`;
  const file = path.join(dir, 'topology.yaml');
  const processor = (name: string, pool: string): string[] => [
    `  - name: ${name}`,
    '    pattern: durable',
    `    module: ${fixture}`,
    `    inputs: [${x}-in]`,
    `    outputs: [${x}-${name}-out]`,
    `    group: ${x}-${name}`,
    '    codec: string',
    `    deadLetterTopic: ${x}-${name}-dead`,
    '    retriesMax: 1',
    '    retryBackoffMs: 10',
    ...(pool ? [`    ${pool}`] : []),
  ];
  fs.writeFileSync(
    file,
    [
      'name: proc-reclimit',
      `dataDir: ${dir}/data`,
      `bus: { kind: kafka, brokers: ${JSON.stringify(kafka.brokers)}, recordBytesMax: ${LIMIT} }`,
      'queues:',
      `  - { name: ${x}-in }`,
      ...['inline', 'pooled'].flatMap((n) => [
        `  - { name: ${x}-${n}-out }`,
        `  - { name: ${x}-${n}-dead }`,
      ]),
      'processors:',
      ...processor('inline', ''),
      ...processor('pooled', 'pool: { threads: 1, batchSize: 8 }'),
    ].join('\n'),
  );
  const logs: string[] = [];
  const running = await startTopology(loadTopology(file), { log: (m: string) => logs.push(m) });
  try {
    const bus = running.bus!;
    const p = await bus.producer();
    // An input over the limit too (a producer of its own; the broker takes it): the handler
    // outputs it as it is, so it is dead-lettered, and its dead letter cannot hold it.
    const big = 'y'.repeat(LIMIT + 10);
    const inputs = ['100', String(LIMIT), String(LIMIT + 1), big, '200'];
    try {
      await p.send(inputs.map((v, i) => ({ topic: `${x}-in`, key: `k${i}`, value: bytes(v) })));
    } finally {
      await p.close();
    }
    for (const name of ['inline', 'pooled']) {
      const out = await waitForRecords(bus, `${x}-${name}-out`, 3, 30_000);
      const dead = await waitForRecords(bus, `${x}-${name}-dead`, 2, 30_000);
      assert.equal(
        out.map((r) => [r.key, r.value!.length]),
        [
          ['k0', 100],
          ['k1', LIMIT],
          ['k4', 200],
        ],
        `${name}: every output within the limit, once, in order`,
      );
      assert.equal(
        dead.map((r) => [r.key, r.headers.source, r.headers.attempts]),
        [
          ['k2', `${x}-in:0:2`, '2'],
          ['k3', `${x}-in:0:3`, '2'],
        ],
        `${name}: the two inputs whose outputs are over the limit, after their retry`,
      );
      assert.is(text(dead[0]!), String(LIMIT + 1), `${name}: the dead letter holds the input`);
      assert.is(
        dead[0]!.headers.error,
        `output record of ${LIMIT + 1} bytes exceeds the kafka record limit of ${LIMIT} bytes (processor ${name}, topic "${x}-${name}-out", key "k2")`,
      );
      assert.is(dead[1]!.value, null, `${name}: a dead letter over the limit is without its value`);
      assert.is(
        dead[1]!.headers.error,
        `output record of ${LIMIT + 10} bytes exceeds the kafka record limit of ${LIMIT} bytes (processor ${name}, topic "${x}-${name}-out", key "k3") (the record's ${LIMIT + 10} bytes are not kept: the dead letter would be over the kafka record limit of ${LIMIT} bytes)`,
      );
    }
    assert.equal(
      logs.filter((m) => /restarting|failed/.test(m)),
      [],
      'no processor failed or restarted',
    );
  } finally {
    const result = await running.stop();
    assert.equal(result.terminated, []);
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test.after(() => kafka.release());
test.run();
