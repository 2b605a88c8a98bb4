/**
 * The pool stage of a topology processor on the real broker: a pooled durable processor
 * (2 piscina threads) outputs every record once to a read_committed reader, in order per key;
 * the record its handler keeps throwing on is in the dead-letter topic, in the same
 * transactions as the outputs and the consumed offsets.
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
const fixture = path.join(root, 'test', 'fixtures', 'processors', 'pool-transform.ts');
const kafka = await testKafka();
const N = 300;
const KEYS = 12;

test('kafka: a pooled durable processor outputs every record once in order per key; the poison record is dead-lettered', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'processors_pool_kafka-'));
  const x = `processors-pool-${process.pid}`;
  const file = path.join(dir, 'topology.yaml');
  fs.writeFileSync(
    file,
    [
      'name: pool-kafka',
      `dataDir: ${dir}/data`,
      `bus: { kind: kafka, brokers: ${JSON.stringify(kafka.brokers)} }`,
      'queues:',
      `  - { name: ${x}-in, partitions: 4 }`,
      `  - { name: ${x}-out, partitions: 4 }`,
      `  - { name: ${x}-dead }`,
      'processors:',
      '  - name: t',
      '    pattern: durable',
      `    module: ${fixture}`,
      `    inputs: [${x}-in]`,
      `    outputs: [${x}-out]`,
      `    group: ${x}-g`,
      '    codec: string',
      `    deadLetterTopic: ${x}-dead`,
      '    retriesMax: 1',
      '    retryBackoffMs: 10',
      '    pool: { threads: 2, batchSize: 8 }',
      '    settings: { poisonKey: k5, poisonSeq: 77 }',
    ].join('\n'),
  );
  const running = await startTopology(loadTopology(file), { log: () => {} });
  try {
    const bus = running.bus!;
    const p = await bus.producer();
    await p.send(
      Array.from({ length: N }, (_, i) => ({
        topic: `${x}-in`,
        key: `k${i % KEYS}`,
        value: bytes(JSON.stringify({ k: `k${i % KEYS}`, seq: i })),
      })),
    );
    const out = await waitForRecords(bus, `${x}-out`, N - 1, 60_000);
    const dead = await waitForRecords(bus, `${x}-dead`, 1, 20_000);
    const sorted = [...out].sort((a, b) => a.partition - b.partition || a.offset - b.offset);
    const values = sorted.map(
      (r) => JSON.parse(text(r)) as { k: string; seq: number; pooled: boolean },
    );
    assert.equal(
      values.map((v) => v.seq).sort((a, b) => a - b),
      Array.from({ length: N }, (_, i) => i).filter((i) => i !== 77),
      'every other record once',
    );
    const last = new Map<string, number>();
    for (const v of values) {
      assert.ok(v.seq > (last.get(v.k) ?? -1), `key ${v.k}: seq ${v.seq} in order`);
      assert.ok(v.pooled, 'computed in a pool thread');
      last.set(v.k, v.seq);
    }
    assert.is(dead.length, 1);
    assert.equal(JSON.parse(text(dead[0]!)), { k: 'k5', seq: 77 });
    assert.is(dead[0]!.headers.attempts, '2');
    assert.match(dead[0]!.headers.source!, new RegExp(`^${x}-in:[0-3]:\\d+$`));
  } finally {
    const result = await running.stop();
    assert.equal(result.terminated, []);
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test.after(() => kafka.release());
test.run();
