/**
 * The durable pattern's 'partition' fencing (engine/patterns/durable.ts) on the kafka bus, against
 * a real Kafka broker (testing/kafka-broker.ts), with one group member: the fence needs no second
 * consumer, only a second producer with the partition's transactionalId, whose InitProducerId
 * bumps the epoch (KIP-98). The zombie's next transaction on that partition is refused by the
 * broker, and what it wrote stays invisible to read_committed readers.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import {
  BusError,
  createKafkaBus,
  type BusBackend,
  type ProducerOptions,
} from '../engine/bus/index.js';
import {
  partitionTransactionalId,
  startDurable,
  stringCodec,
  type DurableOutcome,
  type PatternRecord,
} from '../engine/patterns/index.js';
import { testKafka } from '../testing/kafka-broker.js';
import { bytes, readTopic, text, waitForRecords } from './patterns-helpers.js';

let seq = 0;
const name = (base: string): string =>
  `${base}-${process.pid}-${++seq}-${Math.random().toString(36).slice(2, 7)}`;
const topics = {
  pfIn: name('pf-in'),
  pfOut: name('pf-out'),
  pzIn: name('pz-in'),
  pzOut: name('pz-out'),
  mIn: name('m-in'),
  mOut: name('m-out'),
};
const kafka = await testKafka();
{
  const setup = createKafkaBus({ brokers: kafka.brokers });
  await setup.createTopics(Object.values(topics).map((t) => ({ name: t, partitions: 3 })));
  await setup.close();
}

/** A kafka bus that records the transactionalId of every producer made through it. */
function recordingBus(): { bus: BusBackend; ids: (string | undefined)[] } {
  const inner = createKafkaBus({ brokers: kafka.brokers });
  const ids: (string | undefined)[] = [];
  const bus = new Proxy(inner, {
    get(target, prop) {
      if (prop === 'producer')
        return (o?: ProducerOptions) => (ids.push(o?.transactionalId), target.producer(o));
      const v = Reflect.get(target, prop, target) as unknown;
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
  return { bus, ids };
}

async function until(
  cond: () => boolean | Promise<boolean>,
  what: string,
  timeoutMs = 20_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

test("partition fencing: inputs on 3 partitions each yield their output once; one onNext call and one producer 'prefix:topic:partition' per input partition", async () => {
  const { bus, ids } = recordingBus();
  const input = topics.pfIn;
  const output = topics.pfOut;
  const prefix = name('pf-group');
  const plain = await bus.producer();
  await plain.send(
    Array.from({ length: 30 }, (_, i) => ({
      topic: input,
      key: `k${i}`,
      value: bytes(`v${i}`),
      partition: i % 3,
    })),
  );
  const calls: string[][] = [];
  const outcomes: DurableOutcome[] = [];
  const sub = startDurable({
    bus,
    groupId: prefix,
    topics: [input],
    transactionalId: prefix,
    codec: stringCodec,
    sessionTimeoutMs: 3000,
    processor: {
      onNext: (rs: PatternRecord<string>[]) => (
        calls.push([...new Set(rs.map((r) => `${r.topic}:${r.partition}`))]),
        rs.map((r) => ({ topic: output, key: r.key, value: bytes(`o:${r.value}`) }))
      ),
    },
    onOutcome: (o) => outcomes.push(o),
  });
  try {
    await sub.ready;
    // Outcomes first, then one read (a concurrent read once failed when KafkaBus.offsets()
    // replaced the shared admin client on a retry; offsets() now retries on a client of its own).
    await until(() => outcomes.reduce((n, o) => n + o.records, 0) >= 30, 'outcomes of 30 inputs');
    // A commit's outcome comes with EndTxn, before the broker has written the transaction markers
    // (KIP-98: they follow asynchronously), so a read_committed read at once can still end at the
    // older last stable offset: wait until the 30 are visible (a duplicate shows as more than 30).
    const got = await waitForRecords(bus, output, 30);
    assert.equal(
      got.map(text).sort(),
      Array.from({ length: 30 }, (_, i) => `o:v${i}`).sort(),
      'each input yields its output exactly once',
    );
    assert.ok(
      calls.every((c) => c.length === 1),
      `each onNext call holds one input partition: ${JSON.stringify(calls)}`,
    );
    assert.ok(
      outcomes.every((o) => o.committed && o.batches === 1),
      `one committed transaction per onNext call: ${JSON.stringify(outcomes)}`,
    );
    assert.is(sub.stats.recordsCommitted, 30);
    const expected = [0, 1, 2].map((partition) =>
      partitionTransactionalId(prefix, { topic: input, partition }),
    );
    assert.equal(
      ids.filter((id) => id !== undefined).sort(),
      expected.sort(),
      'one transactional producer per input partition, no member producer',
    );
    assert.is(expected[0], `${prefix}:${input}:0`);
  } finally {
    await sub.stop();
    await plain.close();
    await bus.close();
  }
});

test('member fencing on kafka: inputs on 3 partitions each yield their output once, through the one member producer', async () => {
  const { bus, ids } = recordingBus();
  const group = name('m-group');
  const plain = await bus.producer();
  await plain.send(
    Array.from({ length: 30 }, (_, i) => ({
      topic: topics.mIn,
      key: `k${i}`,
      value: bytes(`v${i}`),
      partition: i % 3,
    })),
  );
  const outcomes: DurableOutcome[] = [];
  const sub = startDurable({
    bus,
    groupId: group,
    topics: [topics.mIn],
    transactionalId: `${group}-a`,
    codec: stringCodec,
    sessionTimeoutMs: 3000,
    fencing: 'member',
    processor: {
      onNext: (rs: PatternRecord<string>[]) =>
        rs.map((r) => ({ topic: topics.mOut, key: r.key, value: bytes(`o:${r.value}`) })),
    },
    onOutcome: (o) => outcomes.push(o),
  });
  try {
    await sub.ready;
    await until(
      () => outcomes.reduce((n, o) => n + (o.committed ? o.records : 0), 0) >= 30,
      'committed outcomes of 30 inputs',
    );
    const got = await readTopic(bus, topics.mOut);
    assert.equal(
      got.map(text).sort(),
      Array.from({ length: 30 }, (_, i) => `o:v${i}`).sort(),
      'each input yields its output exactly once',
    );
    assert.equal(
      ids.filter((id) => id !== undefined),
      [`${group}-a`],
      "one transactional producer, the member's",
    );
  } finally {
    await sub.stop();
    await plain.close();
    await bus.close();
  }
});

test("partition fencing: a zombie's commit for a partition whose id a new producer took is refused (fenced), not retried; its other partitions keep committing", async () => {
  const { bus } = recordingBus();
  const input = topics.pzIn;
  const output = topics.pzOut;
  const prefix = name('pz-group');
  const plain = await bus.producer();
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  let blocked = false;
  const seen: string[] = [];
  const outcomes: DurableOutcome[] = [];
  const sub = startDurable({
    bus,
    groupId: prefix,
    topics: [input],
    transactionalId: prefix,
    codec: stringCodec,
    sessionTimeoutMs: 3000,
    retryBackoffMs: 10,
    processor: {
      onNext: async (rs: PatternRecord<string>[]) => {
        for (const r of rs) seen.push(`${r.partition}:${r.value}`);
        if (rs.some((r) => r.value === 'block')) {
          blocked = true;
          await gate; // A stalls here, past its session timeout in the story; its partition 0 moves
        }
        return rs.map((r) => ({ topic: output, key: r.key, value: bytes(`o:${r.value}`) }));
      },
    },
    onOutcome: (o) => outcomes.push(o),
  });
  let newOwner: Awaited<ReturnType<BusBackend['producer']>> | null = null;
  try {
    await sub.ready;
    await plain.send([{ topic: input, key: 'a', value: bytes('before'), partition: 1 }]);
    await until(() => outcomes.some((o) => o.committed), 'a first committed transaction');
    await plain.send([{ topic: input, key: 'z', value: bytes('block'), partition: 0 }]);
    await until(() => blocked, 'onNext blocked on partition 0');
    // What partition 0's new owner does on assignment: a producer with A's id for partition 0.
    newOwner = await bus.producer({
      transactionalId: partitionTransactionalId(prefix, { topic: input, partition: 0 }),
    });
    // The broker bumped the epoch of partition 0's id: A's transaction for it is refused.
    release();
    await until(() => sub.stats.partitionsFenced === 1, 'the fenced commit');
    const fencedOutcome = outcomes.find((o) => !o.committed);
    assert.ok(fencedOutcome, 'the blocked call is reported not committed');
    assert.is((fencedOutcome!.error as BusError).code, 'fenced');
    assert.is(sub.stats.batchesFailed, 0, 'a fence is not a failure to retry');
    // Partition 0 is out of A's work; 1 and 2 keep going.
    await plain.send([
      { topic: input, key: 'b', value: bytes('after-1'), partition: 1 },
      { topic: input, key: 'c', value: bytes('after-2'), partition: 2 },
      { topic: input, key: 'd', value: bytes('after-0'), partition: 0 },
    ]);
    await until(
      () => outcomes.filter((o) => o.committed).length >= 3,
      'commits of partitions 1 and 2 after the fence',
    );
    await new Promise((r) => setTimeout(r, 500));
    assert.ok(
      seen.includes('1:after-1') && seen.includes('2:after-2'),
      `other partitions processed: ${JSON.stringify(seen)}`,
    );
    assert.not.ok(
      seen.includes('0:after-0'),
      `the fenced partition is not processed again by the zombie: ${JSON.stringify(seen)}`,
    );
    assert.is(
      seen.filter((s) => s === '0:block').length,
      1,
      'the fenced input is not retried by the zombie',
    );
    let stopped: unknown = 'running';
    sub.done.then(
      () => (stopped = 'resolved'),
      (e: unknown) => (stopped = e),
    );
    await new Promise((r) => setImmediate(r));
    assert.is(stopped, 'running', 'the subscription keeps running');
    const out = (await readTopic(bus, output)).map(text);
    assert.ok(out.includes('o:after-1') && out.includes('o:after-2'), JSON.stringify(out));
    assert.not.ok(
      out.includes('o:block'),
      `the fenced transaction's outputs stay invisible to read_committed readers: ${JSON.stringify(out)}`,
    );
  } finally {
    release();
    await sub.stop();
    await newOwner?.close();
    await plain.close();
    await bus.close();
  }
});

test.after(() => kafka.release());
test.run();
