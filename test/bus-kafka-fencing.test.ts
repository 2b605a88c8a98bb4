/**
 * Producer fencing on the kafka bus against a real Kafka broker: what the durable pattern's
 * 'partition' fencing (engine/patterns/durable.ts) relies on. InitProducerId for a
 * transactionalId the broker knows bumps the epoch of the same producer id (KIP-98); the older
 * producer's open transaction is aborted and its later requests are refused.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
// First: kafkajs must load with the corrected read_committed filter installed.
import '../engine/bus/kafka/read-committed.js';
import kafkajs from 'kafkajs';
import { BusError, createKafkaBus, type BusBackend } from '../engine/bus/index.js';
import { testKafka } from '../testing/kafka-broker.js';

const kafka = await testKafka();
const bus: BusBackend = createKafkaBus({ brokers: kafka.brokers });
const uniq = (base: string): string =>
  `${base}-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;
const topics = { a: uniq('fence-a'), b: uniq('fence-b'), in: uniq('fence-in') };
await bus.createTopics([
  { name: topics.a, partitions: 2 },
  { name: topics.b, partitions: 1 },
  { name: topics.in, partitions: 1 },
]);
const rec = (topic: string, value: string, partition = 0) => ({
  topic,
  key: null,
  value: Buffer.from(value),
  partition,
});

/** Every value in partition `partition` of `topic`, read_committed, from the start. */
async function readAll(topic: string, partition: number): Promise<string[]> {
  const c = await bus.consumer({});
  try {
    await c.assign([{ topic, partition }]);
    await c.seekToBeginning([{ topic, partition }]);
    const { end } = (await bus.offsets([{ topic, partition }]))[0];
    const got: string[] = [];
    const deadline = Date.now() + 10_000;
    while (c.position({ topic, partition }) < end && Date.now() < deadline) {
      for (const r of await c.poll({ timeoutMs: 200 })) got.push(Buffer.from(r.value!).toString());
    }
    return got;
  } finally {
    await c.close();
  }
}

test('a second InitProducerId with the same transactionalId bumps the epoch of the same producer id', async () => {
  // Raw kafkajs with a log hook: the bus's producer() calls transaction() + abort() right after
  // connect, as this does, so the id/epoch pair it gets is the one logged here.
  const inits: { producerId: number; producerEpoch: number }[] = [];
  const logCreator =
    () =>
    ({ log }: { log: { message: string; producerId?: number; producerEpoch?: number } }) => {
      if (log.message.startsWith('Initialized producer id'))
        inits.push({ producerId: log.producerId!, producerEpoch: log.producerEpoch! });
    };
  const k = new kafkajs.Kafka({
    brokers: kafka.brokers,
    clientId: 'fence-init',
    logLevel: kafkajs.logLevel.DEBUG,
    logCreator,
  });
  const id = uniq('fence-init-tx');
  for (let i = 0; i < 2; i++) {
    const p = k.producer({ transactionalId: id, maxInFlightRequests: 1 });
    await p.connect();
    await (await p.transaction()).abort();
    await p.disconnect();
  }
  assert.is(inits.length, 2, 'one InitProducerId per producer');
  assert.is(inits[1].producerId, inits[0].producerId, `same producer id: ${JSON.stringify(inits)}`);
  assert.is(
    inits[1].producerEpoch,
    inits[0].producerEpoch + 1,
    `epoch bumped by one: ${JSON.stringify(inits)}`,
  );
});

test('a newer producer with the same transactionalId fences the older one: its commit throws fenced and readers never see its records', async () => {
  const id = uniq('fence-tx');
  const old = await bus.producer({ transactionalId: id });
  const t = await old.begin();
  await t.send([rec(topics.a, 'zombie-1')]);
  const fresh = await bus.producer({ transactionalId: id }); // InitProducerId: the broker bumps the epoch
  // The zombie's next send is refused (the broker knows the newer epoch), and so is its commit.
  let sendError: unknown = null;
  await t.send([rec(topics.a, 'zombie-2')]).catch((e: unknown) => (sendError = e));
  assert.is((sendError as BusError | null)?.code, 'fenced', `send: ${String(sendError)}`);
  let commitError: unknown = null;
  await t.commit().catch((e: unknown) => (commitError = e));
  assert.instance(commitError, BusError, `the zombie's commit fails: ${String(commitError)}`);
  assert.is((commitError as BusError).code, 'fenced', String(commitError));
  let after: unknown = null;
  await t.commit().catch((e: unknown) => (after = e));
  assert.is((after as BusError | null)?.code, 'txn-state', 'a failed commit ends the transaction');
  const t2 = await fresh.begin();
  await t2.send([rec(topics.a, 'fresh')]);
  await t2.commit();
  await old.close();
  await fresh.close();
  assert.equal(
    await readAll(topics.a, 0),
    ['fresh'],
    'the zombie records are aborted: only the newer producer is visible',
  );
});

test("a fenced zombie's TxnOffsetCommit does not move the group's offsets", async () => {
  const id = uniq('fence-off');
  const group = uniq('fence-group');
  const old = await bus.producer({ transactionalId: id });
  const t = await old.begin();
  await t.send([rec(topics.b, 'x')]);
  await t.sendOffsets(group, [{ topic: topics.in, partition: 0, offset: 1 }]);
  const fresh = await bus.producer({ transactionalId: id });
  let error: unknown = null;
  await t.commit().catch((e: unknown) => (error = e));
  assert.is((error as BusError | null)?.code, 'fenced', String(error));
  assert.match(String((error as Error).message), /PRODUCER_FENCED|INVALID_PRODUCER_EPOCH/);
  await new Promise((r) => setTimeout(r, 500));
  assert.equal(await bus.committed(group, [{ topic: topics.in, partition: 0 }]), [null]);
  assert.equal(await readAll(topics.b, 0), []);
  await old.close();
  await fresh.close();
});

test.after(async () => {
  await bus.close();
  await kafka.release();
});
test.run();
