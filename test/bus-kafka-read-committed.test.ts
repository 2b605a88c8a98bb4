/**
 * read_committed on the kafka bus against a real Kafka broker when aborted transactions overlap:
 * the broker lists a partition's aborted transactions in abort order, and a transaction that
 * started earlier but was aborted later must still be hidden (kafkajs 2.2.4's own filter showed
 * it; engine/bus/kafka/read-committed.ts replaces that filter). The shape is the one two killed
 * transactional producers leave when their restarts fence them one after the other.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createKafkaBus, type BusBackend, type BusProducer } from '../engine/bus/index.js';
import {
  filterAbortedRecords,
  readCommittedFilterInstalled,
} from '../engine/bus/kafka/read-committed.js';
import { testKafka } from '../testing/kafka-broker.js';
import { readCommitted, deleteTopics } from './lib/kafka-read.js';

const kafka = await testKafka();
const bus: BusBackend = createKafkaBus({ brokers: kafka.brokers });
const uniq = (base: string): string =>
  `${base}-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;

/** Values of partition 0 of `topic` read by the bus consumer from `from` to the end. */
async function busRead(topic: string, from: number): Promise<string[]> {
  const tp = { topic, partition: 0 };
  const c = await bus.consumer({});
  try {
    await c.assign([tp]);
    c.seek(tp, from);
    const { end } = (await bus.offsets([tp]))[0]!;
    const got: string[] = [];
    const deadline = Date.now() + 30_000;
    while (c.position(tp) < end && Date.now() < deadline)
      for (const r of await c.poll({ timeoutMs: 200 })) got.push(Buffer.from(r.value!).toString());
    assert.ok(c.position(tp) >= end, `read ${topic} to its end ${end}`);
    return got;
  } finally {
    await c.close();
  }
}

test('kafkajs loads with the corrected filter in this process', () => {
  assert.ok(readCommittedFilterInstalled());
});

test('a transaction aborted after a later-started one is aborted stays hidden from read_committed', async () => {
  const topic = uniq('rc-overlap');
  await bus.createTopics([{ name: topic, partitions: 1 }]);
  const producers: BusProducer[] = [];
  try {
    const [x, y, z] = await Promise.all(
      ['x', 'y', 'z'].map(async (n) => {
        const p = await bus.producer({ transactionalId: uniq(`rc-${n}`) });
        producers.push(p);
        return p;
      }),
    );
    const rec = (value: string) => ({ topic, partition: 0, key: null, value: Buffer.from(value) });
    // Offsets: 0 x1, 1 y1, 2 x2, 3 ABORT(y), 4 ABORT(x), 5 z1, 6 COMMIT(z), 7 y2, 8 COMMIT(y).
    const tx = await x!.begin();
    await tx.send([rec('x1')]);
    const ty = await y!.begin();
    await ty.send([rec('y1')]);
    await tx.send([rec('x2')]);
    await ty.abort();
    await tx.abort();
    const tz = await z!.begin();
    await tz.send([rec('z1')]);
    await tz.commit();
    const ty2 = await y!.begin();
    await ty2.send([rec('y2')]);
    await ty2.commit();

    assert.equal(await busRead(topic, 0), ['z1', 'y2'], 'bus consumer from the start');
    assert.equal(await busRead(topic, 1), ['z1', 'y2'], 'bus consumer from inside both');
    const plain = await readCommitted(kafka.brokers, [topic], 2, { settleMs: 500 });
    assert.equal(
      plain.map((r) => r.value!.toString()),
      ['z1', 'y2'],
      'plain kafkajs consumer',
    );
  } finally {
    for (const p of producers) await p.close().catch(() => undefined);
    await deleteTopics(kafka.brokers, [topic]);
  }
});

test('the filter orders aborted transactions by first offset, as the broker lists them by abort', () => {
  const m = (offset: number, producerId: string, opts: { control?: 'abort' | 'commit' } = {}) => ({
    offset: String(offset),
    key: opts.control ? Buffer.from([0, 0, 0, opts.control === 'abort' ? 0 : 1]) : Buffer.from('k'),
    isControlRecord: opts.control !== undefined,
    batchContext: { producerId, inTransaction: true, isControlBatch: opts.control !== undefined },
  });
  const messages = [
    m(0, '7'),
    m(1, '8'),
    m(2, '7'),
    m(3, '8', { control: 'abort' }),
    m(4, '7', { control: 'abort' }),
    m(5, '9'),
    m(6, '9', { control: 'commit' }),
    m(7, '8'),
    m(8, '8', { control: 'commit' }),
  ];
  const kept = filterAbortedRecords({
    messages,
    abortedTransactions: [
      { producerId: '8', firstOffset: '1' },
      { producerId: '7', firstOffset: '0' },
    ],
  }).map((r) => Number(r.offset));
  // Control records stay (kafkajs' Batch drops them after the filter).
  assert.equal(kept, [3, 4, 5, 6, 7, 8]);
});

test.after(async () => {
  await bus.close();
  await kafka.release();
});

test.run();
