/**
 * The record limit of a sink's target (`sinks[].to.recordBytesMax`, by default
 * KAFKA_SINK_DEFAULTS.recordBytesMax, under the broker's default message.max.bytes), on the real
 * broker. Journal records a, b, <1.2 MB>, c: a and b are shipped once; the sink stops shipping the
 * partition at the oversized record (index 2) instead of sending it (the broker would refuse the
 * transaction with MESSAGE_TOO_LARGE, which the sink took for an outage and retried forever), so
 * c is not shipped either, and the health is degraded naming the sink, queue, partition, index,
 * size and limit. A restart of the topology stops there again, shipping nothing twice. A raised
 * to.recordBytesMax (on a topic whose max.message.bytes takes it) ships all four once.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
// First: kafkajs must load with the corrected read_committed filter installed.
import '../engine/bus/kafka/read-committed.js';
import kafkajs from 'kafkajs';
import { testKafka } from '../testing/kafka-broker.js';
import { loadTopology, openQueueAppender, startTopology } from '../index.js';
import { healthOf } from '../ops/health.js';
import { readCommitted, deleteTopics } from './lib/kafka-read.js';

const broker = await testKafka();
const admin = new kafkajs.Kafka({
  brokers: broker.brokers,
  logLevel: kafkajs.logLevel.NOTHING,
}).admin();
await admin.connect();
const topics: string[] = [];
/** Over the default limit (1,000,000) and the broker's default message.max.bytes (1048588). */
const BIG_BYTES = 1_200_000;

/**
 * Writes a topology of one journal queue `events` shipped by sink `ship` to `topic` (with
 * `toExtra` in its `to`), and appends a, b, <BIG_BYTES of text>, c to it.
 */
function sinkTopology(toExtra: string) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-sink-limit-'));
  const name = `sinklimit-${randomBytes(5).toString('hex')}`;
  const topic = `${name}.shipped`;
  topics.push(topic);
  const file = path.join(dir, 'topology.yaml');
  fs.writeFileSync(
    file,
    [
      `name: ${name}`,
      'dataDir: ./data',
      'supervisor: { backoffInitialMs: 10 }',
      'queues:',
      '  - { name: events }',
      'sinks:',
      '  - name: ship',
      '    from: events',
      `    to: { brokers: [${broker.brokers.join(', ')}], topic: ${topic}, partitions: 1${toExtra} }`,
      '',
    ].join('\n'),
  );
  const topology = loadTopology(file);
  const appender = openQueueAppender(topology, 'events');
  for (const key of ['a', 'b', 'big', 'c'])
    appender.appendJson(key, key === 'big' ? { text: 'x'.repeat(BIG_BYTES) } : { n: key });
  appender.close();
  return { topology, name, topic };
}

/** Resolves once `cond()` holds; fails naming `what` after `ms`. */
async function until(what: string, cond: () => boolean, ms = 30_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    assert.ok(Date.now() < deadline, `${what} within ${ms / 1000} s`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** The committed offset of the sink's group (the next journal index to ship), -1 if none. */
async function committedIndex(name: string, topic: string): Promise<number> {
  const [o] = await admin.fetchOffsets({ groupId: `sluice.sink.${name}.ship.0`, topics: [topic] });
  return Number(o?.partitions.find((x) => x.partition === 0)?.offset ?? -1);
}

/** [key, sluice.index header] of every committed record of `topic`, in offset order. */
async function shipped(topic: string, expected: number): Promise<[string | null, string][]> {
  const records = await readCommitted(broker.brokers, [topic], expected, {
    timeoutMs: 20_000,
    settleMs: 1500,
  });
  return records.map((r) => [r.key, r.headers['sluice.index']!]);
}

test('a sink stops shipping a partition at a record over to.recordBytesMax: the records before it are shipped once, it and the ones after are not, and the health names sink, queue, index, size and limit', async () => {
  const { topology, name, topic } = sinkTopology('');
  const lines: string[] = [];
  const expectedError = new RegExp(
    'sink "ship" stops shipping queue "events" partition 0 at index 2: output record of ' +
      `(\\d+) bytes exceeds the kafka record limit of 1000000 bytes \\(sinks\\[\\]\\.to\\.recordBytesMax ` +
      `of sink "ship", topic "${topic.replace(/\./g, '\\.')}"\\); the records before it are shipped`,
  );
  for (let run = 0; run < 2; run++) {
    const startMs = Date.now();
    const t = await startTopology(topology, { log: (l) => lines.push(l) });
    try {
      await until(`run ${run}: the health degraded by the sink`, () =>
        healthOf(t.supervisor).degraded.some((d) => d.actor === 'sink:ship/0'),
      );
      const h = healthOf(t.supervisor);
      assert.is(h.status, 'degraded', JSON.stringify(h));
      const d = h.degraded.find((x) => x.actor === 'sink:ship/0')!;
      const size = Number(expectedError.exec(d.error)?.[1]);
      assert.ok(size > BIG_BYTES, `the error names the record's size: ${d.error}`);
      assert.is(d.restarts, 0, 'the sink is not restarted over it');
      console.log(
        `  run ${run}: the sink reported the stop after ${((Date.now() - startMs) / 1000).toFixed(1)} s`,
      );
      assert.is(await committedIndex(name, topic), 2);
      // It stays stopped: no retry, no restart, nothing more shipped.
      await new Promise((r) => setTimeout(r, 2000));
      assert.is(
        healthOf(t.supervisor).degraded.find((x) => x.actor === 'sink:ship/0')?.restarts,
        0,
      );
      assert.equal(t.supervisor.actors().find((a) => a.name === 'sink:ship/0')?.counters.errors, 1);
    } finally {
      await t.stop();
    }
    assert.equal(await shipped(topic, 2), [
      ['a', '0'],
      ['b', '1'],
    ]);
    assert.is(await committedIndex(name, topic), 2);
  }
  // Once per run: reported, not retried.
  assert.is(
    lines.filter((l) => l.startsWith('actor sink:ship/0 failed: ') && expectedError.test(l)).length,
    2,
    `the log names the stop once per run:\n${lines.join('\n')}`,
  );
  assert.not.ok(
    lines.some((l) => /MESSAGE_TOO_LARGE|is down since/.test(l)),
    `not taken for an outage:\n${lines.join('\n')}`,
  );
});

test('a raised to.recordBytesMax, on a topic whose max.message.bytes takes it, ships all four records once, in order', async () => {
  const { topology, topic } = sinkTopology(', recordBytesMax: 2000000');
  await admin.createTopics({
    topics: [
      {
        topic,
        numPartitions: 1,
        configEntries: [{ name: 'max.message.bytes', value: '2100000' }],
      },
    ],
    waitForLeaders: true,
  });
  const t = await startTopology(topology, { log: () => undefined });
  let got: [string | null, string][];
  try {
    got = await shipped(topic, 4);
    assert.is(healthOf(t.supervisor).status, 'ok', JSON.stringify(healthOf(t.supervisor)));
  } finally {
    await t.stop();
  }
  assert.equal(got, [
    ['a', '0'],
    ['b', '1'],
    ['big', '2'],
    ['c', '3'],
  ]);
});

test.after(async () => {
  await deleteTopics(broker.brokers, topics);
  await admin.disconnect();
  await broker.release();
});

test.run();
