/**
 * The kafka backend's pull adapter (engine/bus/kafka/consumer.ts) on its own, against a real
 * Kafka broker (testing/kafka-broker.ts): what the bus conformance suite does not pin down because it is specific to
 * driving kafkajs' push consumer (when fetching starts, buffering ahead of poll()).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import {
  BUS_DEFAULTS,
  createKafkaBus,
  type BusBackend,
  type ConsumedRecord,
} from '../engine/bus/index.js';
import { testKafka } from '../testing/kafka-broker.js';
import { decimal } from '../engine/bus/kafka/consumer.js';

const kafka = await testKafka();
let n = 0;
const topicName = (what: string): string =>
  `consumer-${what}-${process.pid}-${n++}-${Math.random().toString(36).slice(2, 7)}`;
const enc = new TextEncoder();

async function withBus(
  opts: { fetchMaxWaitMs?: number },
  body: (bus: BusBackend) => Promise<void>,
): Promise<void> {
  const bus = createKafkaBus({ brokers: kafka.brokers, ...opts });
  try {
    await body(bus);
  } finally {
    await bus.close();
  }
}

test('assign() fetches its partitions from the first fetch: the first record comes well before fetchMaxWaitMs', async () => {
  const fetchMaxWaitMs = 6000;
  await withBus({ fetchMaxWaitMs }, async (bus) => {
    const topic = topicName('first');
    await bus.createTopics([{ name: topic, partitions: 2 }]);
    const p = await bus.producer();
    await p.send([
      { topic, key: null, value: enc.encode('a'), partition: 0 },
      { topic, key: null, value: enc.encode('b'), partition: 1 },
    ]);
    const c = await bus.consumer();
    await c.assign([
      { topic, partition: 0 },
      { topic, partition: 1 },
    ]);
    const t0 = Date.now();
    const got: ConsumedRecord[] = [];
    while (got.length < 2 && Date.now() - t0 < fetchMaxWaitMs / 2)
      got.push(...(await c.poll({ timeoutMs: 100 })));
    const waitedMs = Date.now() - t0;
    // A partition paused by the join leaves kafkajs with nothing to fetch: it sleeps fetchMaxWaitMs.
    assert.is(
      got.length,
      2,
      `both records within ${fetchMaxWaitMs / 2} ms of assign(), waited ${waitedMs} ms`,
    );
  });
});

test('records fetched ahead of poll() come out in offset order per partition, at most recordsMax per poll, positions after the last returned', async () => {
  await withBus({}, async (bus) => {
    const topic = topicName('ahead');
    await bus.createTopics([{ name: topic, partitions: 2 }]);
    const p = await bus.producer();
    const perPartition = 3000;
    for (let i = 0; i < perPartition; i += 500) {
      const batch = [];
      for (let j = i; j < i + 500; j++) {
        batch.push({
          topic,
          key: `k${j}`,
          value: enc.encode(`v${j}`),
          headers: { i: String(j) },
          partition: 0,
        });
        batch.push({
          topic,
          key: `k${j}`,
          value: enc.encode(`v${j}`),
          headers: { i: String(j) },
          partition: 1,
        });
      }
      await p.send(batch);
    }
    const tps = [
      { topic, partition: 0 },
      { topic, partition: 1 },
    ];
    const c = await bus.consumer({ pollRecordsMax: 333 });
    await c.assign(tps);
    // Let several fetches pile up in the buffers before the first poll.
    await new Promise((r) => setTimeout(r, 500));
    const got: ConsumedRecord[][] = [[], []];
    const deadline = Date.now() + 20_000;
    while (got[0].length + got[1].length < 2 * perPartition && Date.now() < deadline) {
      const recs = await c.poll({ timeoutMs: 200 });
      assert.ok(recs.length <= 333, `poll returned ${recs.length} > pollRecordsMax 333`);
      for (const r of recs) got[r.partition].push(r);
      for (const tp of tps) {
        const mine = got[tp.partition];
        if (mine.length > 0)
          assert.is(
            c.position(tp),
            mine[mine.length - 1].offset + 1,
            `position of partition ${tp.partition}`,
          );
      }
    }
    for (const part of [0, 1]) {
      const mine = got[part];
      assert.is(mine.length, perPartition, `records of partition ${part}`);
      mine.forEach((r, j) => {
        if (
          r.offset !== j ||
          r.key !== `k${j}` ||
          new TextDecoder().decode(r.value!) !== `v${j}` ||
          r.headers.i !== String(j) ||
          r.topic !== topic
        ) {
          assert.unreachable(
            `partition ${part} record ${j}: ${JSON.stringify({ ...r, value: new TextDecoder().decode(r.value!) })}`,
          );
        }
      });
    }
    assert.equal(await c.poll({ timeoutMs: 200 }), [], 'nothing more');
  });
});

test('a partition paused at fetchBufferRecordsMax is resumed at half of it: every record once, in order, the buffer bounded', async () => {
  await withBus({}, async (bus) => {
    const topic = topicName('watermark');
    await bus.createTopics([{ name: topic, partitions: 1 }]);
    const p = await bus.producer();
    // 200-byte values: a 1 MiB partition fetch holds about 4,500 records, so the 10,000-record
    // buffer pauses the partition several times on the way through 40,000.
    const total = 4 * BUS_DEFAULTS.fetchBufferRecordsMax;
    const value = new Uint8Array(200);
    for (let i = 0; i < total; i += 2000) {
      const batch = [];
      for (let j = i; j < i + 2000; j++) batch.push({ topic, key: `k${j}`, value, partition: 0 });
      await p.send(batch);
    }
    const c = await bus.consumer({ pollRecordsMax: 1000 });
    await c.assign([{ topic, partition: 0 }]);
    // Fill the buffer up to the pause before the first poll.
    await new Promise((r) => setTimeout(r, 1000));
    const state = (c as unknown as { owned: Map<string, { buffer: unknown[] }> }).owned;
    let next = 0;
    let longest = 0;
    const deadline = Date.now() + 60_000;
    while (next < total && Date.now() < deadline) {
      for (const r of await c.poll({ timeoutMs: 200 })) {
        if (r.offset !== next || r.key !== `k${next}`)
          assert.unreachable(`record ${next}: offset ${r.offset}, key ${r.key}`);
        next++;
      }
      for (const st of state.values()) longest = Math.max(longest, st.buffer.length);
      // A slow consumer: the resumed fetch lands while the buffer still holds records.
      await new Promise((r) => setTimeout(r, 20));
    }
    assert.is(next, total, 'every record, once, in offset order');
    // At most the bound plus the fetches under way when it paused (a few of ~4,500 records), and
    // never the records already returned (the buffer drops them when a batch is appended).
    assert.ok(
      longest <= BUS_DEFAULTS.fetchBufferRecordsMax + 15_000,
      `buffer held ${longest} kafkajs messages`,
    );
    assert.equal(await c.poll({ timeoutMs: 200 }), [], 'nothing more');
  });
});

test('decimal() reads the offsets and timestamps kafkajs hands over as strings, exactly, as Number() does', () => {
  const cases = [
    '0',
    '7',
    '42',
    '1764468000000',
    '999999999999999',
    '1000000000000000',
    '9007199254740991',
    '-1',
    '',
    '12a',
    ' 3',
  ];
  for (const s of cases)
    assert.is(
      Object.is(decimal(s), Number(s)),
      true,
      `decimal(${JSON.stringify(s)}) = ${decimal(s)}, Number() = ${Number(s)}`,
    );
  assert.is(decimal('1764468000000'), 1_764_468_000_000);
  assert.is(decimal('999999999999999'), 999_999_999_999_999);
});

test.after(() => kafka.release());
test.run();
