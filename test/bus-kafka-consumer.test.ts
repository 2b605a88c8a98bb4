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
import {
  crashRestartable,
  decimal,
  filteredBatchRange,
  type KafkaConsumer,
} from '../engine/bus/kafka/consumer.js';
import kafkajs from 'kafkajs';
import type { Consumer } from 'kafkajs';
import { silentNode } from './lib/silent-node.js';

const kafka = await testKafka();
let n = 0;
const topicName = (what: string): string =>
  `consumer-${what}-${process.pid}-${n++}-${Math.random().toString(36).slice(2, 7)}`;
const enc = new TextEncoder();

async function withBus(
  opts: { fetchMaxWaitMs?: number; fetchStallMs?: number },
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

/**
 * The fault: kafkajs stops fetching a partition without an error, a crash or a rejoin (as after a
 * coordinator move on a 3-broker cluster, docs/FAULTS.md defect 8). Injected by pausing the
 * partition in the adapter's kafkajs client behind the adapter's back, which makes kafkajs fetch
 * nothing more for it and say nothing.
 */
async function stallKafkajs(c: KafkaConsumer, topic: string): Promise<void> {
  const kc = (c as unknown as { kc: Consumer | null }).kc;
  assert.ok(kc, 'the consumer has a kafkajs client');
  kc.pause([{ topic, partitions: [0] }]);
  // Let a fetch under way when it was paused come back first.
  await new Promise((r) => setTimeout(r, 500));
}

async function sendValues(bus: BusBackend, topic: string, from: number, count: number) {
  const p = await bus.producer();
  await p.send(
    Array.from({ length: count }, (_, i) => ({
      topic,
      key: null,
      value: enc.encode(`v${from + i}`),
      partition: 0,
    })),
  );
  await p.close();
}

async function pollFor(c: KafkaConsumer, count: number, withinMs: number) {
  const got: ConsumedRecord[] = [];
  const t0 = Date.now();
  while (got.length < count && Date.now() - t0 < withinMs)
    got.push(...(await c.poll({ timeoutMs: 200 })));
  return got;
}

test('an assigned consumer whose kafkajs client stops fetching without an error is replaced after fetchStallMs: every record once, in order; an idle partition at its end is left alone', async () => {
  const fetchStallMs = 2000;
  await withBus({ fetchStallMs }, async (bus) => {
    const topic = topicName('stall');
    await bus.createTopics([{ name: topic, partitions: 1 }]);
    await sendValues(bus, topic, 0, 10);
    const c = (await bus.consumer()) as KafkaConsumer;
    await c.assign([{ topic, partition: 0 }]);
    const first = await pollFor(c, 10, 10_000);
    assert.equal(
      first.map((r) => r.offset),
      Array.from({ length: 10 }, (_, i) => i),
    );
    // At its end and idle for three periods: the broker has nothing beyond, no restart.
    await new Promise((r) => setTimeout(r, 3 * fetchStallMs));
    assert.is(c.stallRestarts, 0, 'no restart of a consumer at its end');

    await stallKafkajs(c, topic);
    await sendValues(bus, topic, 10, 10);
    const t0 = Date.now();
    const rest = await pollFor(c, 10, 20_000);
    const waitedMs = Date.now() - t0;
    assert.equal(
      rest.map((r) => r.offset),
      Array.from({ length: 10 }, (_, i) => 10 + i),
      `offsets 10..19 once, in order, after the stall (waited ${waitedMs} ms)`,
    );
    assert.equal(
      rest.map((r) => new TextDecoder().decode(r.value!)),
      Array.from({ length: 10 }, (_, i) => `v${10 + i}`),
    );
    // One restart; a loaded machine may take longer than fetchStallMs to fetch after the new
    // client's join, which counts as another stall (still from the same position).
    assert.ok(c.stallRestarts >= 1 && c.stallRestarts <= 3, `stall restarts: ${c.stallRestarts}`);
    assert.ok(c.position({ topic, partition: 0 }) === 20, 'position after the last record');
    // Nothing more arrives (no record read twice after the restart's seek).
    assert.is((await c.poll({ timeoutMs: 1000 })).length, 0);
    await c.close();
  });
});

test('the injected stall is real: with fetchStallMs 0 the stalled consumer gets nothing', async () => {
  await withBus({ fetchStallMs: 0 }, async (bus) => {
    const topic = topicName('stall-off');
    await bus.createTopics([{ name: topic, partitions: 1 }]);
    const c = (await bus.consumer()) as KafkaConsumer;
    await c.assign([{ topic, partition: 0 }]);
    await c.poll({ timeoutMs: 1000 });
    await stallKafkajs(c, topic);
    await sendValues(bus, topic, 0, 5);
    assert.is((await pollFor(c, 1, 5000)).length, 0, 'no record while kafkajs is stalled');
    assert.is(c.stallRestarts, 0);
    await c.close();
  });
});

test('a filtered batch with no record at or after its fetched offset (kafkajs firstOffset null) is placed at its fetched offset, never at 0', () => {
  // kafkajs Batch: firstOffset() is null and lastOffset() the fetched offset when every record of
  // the fetch lies below the fetched offset. Number(null) is 0, which matched a seek to 0.
  assert.equal(filteredBatchRange({ firstOffset: null, lastOffset: '8392' }), {
    first: 8392,
    last: 8392,
  });
  assert.equal(filteredBatchRange({ firstOffset: '17', lastOffset: '19' }), {
    first: 17,
    last: 19,
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
/** Settles `p` into what happened within `ms`: resolved, rejected (with the error) or pending. */
async function within(
  p: Promise<unknown>,
  ms: number,
): Promise<{ state: 'resolved' | 'rejected' | 'pending'; error?: Error; ms: number }> {
  const t0 = Date.now();
  let timer: NodeJS.Timeout | undefined;
  const r = await Promise.race([
    p.then(
      () => ({ state: 'resolved' as const }),
      (error: Error) => ({ state: 'rejected' as const, error }),
    ),
    new Promise<{ state: 'pending' }>((resolve) => {
      timer = setTimeout(() => resolve({ state: 'pending' }), ms);
    }),
  ]);
  clearTimeout(timer);
  return { ...r, ms: Date.now() - t0 };
}

test('assign() against a node that accepts connections and answers nothing rejects after assignTimeoutMs, naming the brokers; unbounded, it is still waiting', async () => {
  const node = await silentNode();
  try {
    const bounded = createKafkaBus({ brokers: [node.broker], assignTimeoutMs: 1500 });
    const c = await bounded.consumer();
    const r = await within(c.assign([{ topic: 'never-answered', partition: 0 }]), 10_000);
    assert.is(r.state, 'rejected', `assign() ${r.state} after ${r.ms} ms`);
    assert.ok(r.ms >= 1400 && r.ms < 5000, `rejected after ${r.ms} ms`);
    assert.match(r.error!.message, /got no answer from the cluster within 1500 ms/);
    assert.ok(r.error!.message.includes(node.broker), r.error!.message);
    assert.is((r.error as { code?: string }).code, 'backend');
    await within(bounded.close(), 5000);

    // The control: the same call with the bound off is still waiting (kafkajs' request timeout
    // is 30 s per attempt).
    const unbounded = createKafkaBus({ brokers: [node.broker], assignTimeoutMs: 0 });
    const u = await unbounded.consumer();
    const pending = u.assign([{ topic: 'never-answered', partition: 0 }]);
    pending.catch(() => undefined);
    assert.is((await within(pending, 4000)).state, 'pending');
    await within(unbounded.close(), 5000);
  } finally {
    node.close();
  }
});

test('an assigned consumer restarts kafkajs itself after a crash on a group coordinator not found, and after nothing else kafkajs gives up on', () => {
  // kafkajs' types give this class no constructor arguments; its code passes the message.
  const NotFound = kafkajs.KafkaJSGroupCoordinatorNotFound as unknown as new (m: string) => Error;
  const notFound = new NotFound('Failed to find group coordinator');
  assert.ok(crashRestartable(notFound));
  // kafkajs wraps what its runner threw; the cause chain is followed.
  const wrapped = Object.assign(new kafkajs.KafkaJSNonRetriableError('runner failed'), {
    cause: notFound,
  });
  assert.ok(crashRestartable(wrapped));
  assert.not.ok(
    crashRestartable(new kafkajs.KafkaJSNonRetriableError('TOPIC_AUTHORIZATION_FAILED')),
  );
  assert.not.ok(crashRestartable(new Error('Failed to find group coordinator')));
  assert.not.ok(crashRestartable(undefined));
});

/**
 * Records every CRASH listener the adapter gives its kafkajs clients, so a test can crash one as
 * kafkajs does when it gives up (it disconnects the client, then emits CRASH with restart false).
 */
function crashHook(bus: BusBackend): {
  crash(c: KafkaConsumer, error: Error): Promise<void>;
} {
  const kafka = (bus as unknown as { kafka: { consumer: (cfg: unknown) => Consumer } }).kafka;
  const make = kafka.consumer.bind(kafka);
  const listeners = new Map<Consumer, (e: unknown) => void>();
  kafka.consumer = (cfg: unknown) => {
    const kc = make(cfg);
    const on = kc.on.bind(kc) as (ev: string, fn: (e: unknown) => void) => () => void;
    (kc as unknown as { on: typeof on }).on = (ev, fn) => {
      if (ev === kc.events.CRASH) listeners.set(kc, fn);
      return on(ev, fn);
    };
    return kc;
  };
  return {
    async crash(c, error) {
      const kc = (c as unknown as { kc: Consumer | null }).kc;
      assert.ok(kc && listeners.has(kc), 'the consumer has a hooked kafkajs client');
      await kc.disconnect();
      listeners.get(kc)!({
        type: 'consumer.crash',
        payload: { error, groupId: 'x', restart: false },
      });
    },
  };
}

test('an assigned consumer whose kafkajs client crashed for good on a group coordinator not found starts a new client: every record once, in order; another non-retriable crash fails its polls', async () => {
  await withBus({}, async (bus) => {
    const hook = crashHook(bus);
    const topic = topicName('crash');
    await bus.createTopics([{ name: topic, partitions: 1 }]);
    await sendValues(bus, topic, 0, 5);
    const c = (await bus.consumer()) as KafkaConsumer;
    await c.assign([{ topic, partition: 0 }]);
    assert.is((await pollFor(c, 5, 10_000)).length, 5);
    const warnings: string[] = [];
    const onWarning = (w: Error & { code?: string }) => void warnings.push(w.code ?? '');
    process.on('warning', onWarning);
    const lost: string[] = [];
    c.onConnectionLost((e) => lost.push(e.message));
    try {
      const NotFound = kafkajs.KafkaJSGroupCoordinatorNotFound as unknown as new (
        m: string,
      ) => Error;
      await hook.crash(c, new NotFound('Failed to find group coordinator'));
      await sendValues(bus, topic, 5, 10);
      const rest = await pollFor(c, 10, 20_000);
      assert.equal(
        rest.map((r) => r.offset),
        Array.from({ length: 10 }, (_, i) => 5 + i),
        'offsets 5..14 once, in order, from the new client',
      );
      assert.is((await c.poll({ timeoutMs: 1000 })).length, 0, 'nothing read twice');
      assert.ok(warnings.includes('SLUICE_KAFKA_CONSUMER_RESTART'), `warnings: ${warnings}`);
      assert.is(lost.length, 1, 'the connection-lost listeners heard of it once');
      // The control: kafkajs giving up for another reason still fails the consumer.
      await hook.crash(c, new kafkajs.KafkaJSNonRetriableError('TOPIC_AUTHORIZATION_FAILED'));
      let failed: Error | null = null;
      try {
        await c.poll({ timeoutMs: 500 });
      } catch (e) {
        failed = e as Error;
      }
      assert.ok(failed, 'poll() throws after a crash that is not restarted');
      assert.match(failed.message, /kafka consumer crashed/);
    } finally {
      process.off('warning', onWarning);
      await c.close();
    }
  });
});

test('assignTimeoutMs must be a number of ms >= 0', () => {
  assert.throws(
    () => createKafkaBus({ brokers: kafka.brokers, assignTimeoutMs: -1 }),
    /assignTimeoutMs must be a number of ms >= 0, assignTimeoutMs=-1/,
  );
});

test.run();
