/**
 * A Kafka broker that goes away and comes back (a private single node, testing/kafka-broker.ts,
 * killed with kill -9 and started again on the same port and data): RPC requests pending when
 * the connection is lost reject promptly, and durable, pub/sub, compacted and RPC resume by
 * themselves.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createKafkaBus, type BusBackend } from '../engine/bus/index.js';
import {
  RpcConnectionError,
  startCompacted,
  startDurable,
  startPubSub,
  startRpcResponder,
  startRpcSender,
  stringCodec,
  type RpcSender,
  type Subscription,
} from '../engine/patterns/index.js';
import { startKafka, type KafkaCluster } from '../testing/kafka-broker.js';
import { bytes, echoProcessor, readTopic, text } from './patterns-helpers.js';

const kafka: KafkaCluster = await startKafka();
const bus: BusBackend = createKafkaBus({ brokers: kafka.brokers });
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const [input, output, ps, cmp, req, resp, group] = ['in', 'out', 'ps', 'cmp', 'req', 'resp', 'g'];
await bus.createTopics([
  { name: input, partitions: 2 },
  { name: output, partitions: 2 },
  { name: ps, partitions: 2 },
  { name: cmp, partitions: 2, compacted: true },
  { name: req, partitions: 1 },
  { name: resp, partitions: 1 },
]);
const p = await bus.producer();

async function until(
  cond: () => boolean | Promise<boolean>,
  what: string,
  timeoutMs = 60_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > deadline)
      throw new Error(`timed out after ${timeoutMs} ms waiting until ${what}`);
    await sleep(100);
  }
}

const seen: string[] = [];
const snapshots: Record<string, string>[] = [];
const changes: string[] = [];
let entered!: () => void;
const inside = new Promise<void>((r) => (entered = r));
let release!: () => void;
const released = new Promise<void>((r) => (release = r));
const subs: Subscription[] = [];
let failed: unknown = null;
const track = <S extends Subscription>(s: S): S => {
  subs.push(s);
  s.done.catch((e: unknown) => (failed = e));
  return s;
};
await p.send([
  { topic: cmp, key: 'a', value: bytes('1') },
  { topic: cmp, key: 'b', value: bytes('1') },
]);
track(
  startDurable({
    bus,
    groupId: group,
    topics: [input],
    transactionalId: group,
    codec: stringCodec,
    processor: echoProcessor(output),
    sessionTimeoutMs: 6000,
    retryBackoffMs: 500,
    retriesMax: 1000,
  }),
);
track(
  startPubSub({
    bus,
    topic: ps,
    codec: stringCodec,
    processor: { onNext: (r) => void seen.push(r.value!) },
  }),
);
track(
  startCompacted({
    bus,
    topic: cmp,
    codec: stringCodec,
    processor: {
      onSnapshot: (m) => void snapshots.push(Object.fromEntries(m)),
      onNext: (r, prev) => void changes.push(`${r.key}:${prev}->${r.value}`),
    },
  }),
);
track(
  startRpcResponder({
    bus,
    requestTopic: req,
    responseTopic: resp,
    requestCodec: stringCodec,
    responseCodec: stringCodec,
    processor: {
      onRequest: async (r) =>
        r.value === 'hang' ? (entered(), released.then(() => 'late')) : r.value!,
    },
  }),
);
const sender: RpcSender<string, string> = track(
  startRpcSender({
    bus,
    requestTopic: req,
    responseTopic: resp,
    requestCodec: stringCodec,
    responseCodec: stringCodec,
    timeoutMs: 120_000,
  }),
);
await Promise.all(subs.map((s) => s.ready));

test('an rpc request pending when the broker is killed rejects promptly with RpcConnectionError, not after its timeout', async () => {
  await p.send(
    Array.from({ length: 20 }, (_, i) => ({ topic: input, key: `k${i}`, value: bytes(`v${i}`) })),
  );
  await p.send([{ topic: ps, key: 'a', value: bytes('before') }]);
  await until(
    async () => (await readTopic(bus, output)).length >= 20 && seen.length >= 1,
    'outputs before the restart',
  );
  assert.is(await sender.send('ping'), 'ping');
  const pending = sender.send('hang').then(
    () => null,
    (e: Error) => e,
  );
  await inside;
  const t0 = Date.now();
  await kafka.stopBroker(1, { kill: true });
  const error = await pending;
  const ms = Date.now() - t0;
  assert.instance(error, RpcConnectionError, String(error));
  assert.match(error!.message, /connection to the bus was lost/);
  assert.ok(ms < 30_000, `rejected ${ms} ms after the broker went away (timeout 120000 ms)`);
  console.log(`  pending request rejected ${ms} ms after kill -9 of the broker`);
});

test('after the broker is back, durable, pub/sub, compacted and rpc resume: every input once', async () => {
  await sleep(2000);
  await kafka.startBroker(1);
  release(); // the responder finishes the request that was pending; its late response is dropped
  const t1 = Date.now();
  await p.send(
    Array.from({ length: 20 }, (_, i) => ({
      topic: input,
      key: `k${i}`,
      value: bytes(`v${20 + i}`),
    })),
  );
  await p.send([
    { topic: ps, key: 'a', value: bytes('after') },
    { topic: cmp, key: 'a', value: bytes('2') },
  ]);
  await until(
    async () =>
      (await readTopic(bus, output)).length >= 40 && seen.includes('after') && changes.length >= 1,
    'outputs after the restart',
  );
  assert.is(await sender.send('ping again', { timeoutMs: 30_000 }), 'ping again');
  console.log(`  every pattern answered ${Date.now() - t1} ms after the broker was back`);
  await sleep(1000);
  assert.is(failed, null, `no subscription ended: ${String(failed)}`);
  assert.equal(
    (await readTopic(bus, output)).map(text).sort(),
    Array.from({ length: 40 }, (_, i) => `o:v${i}`).sort(),
    'each input once',
  );
  assert.equal(seen, ['before', 'after']);
  assert.equal(changes, ['a:1->2']);
  assert.equal(
    snapshots,
    [{ a: '1', b: '1' }],
    'a restart with the data kept is no reset: no second snapshot',
  );
});

test.after(async () => {
  for (const s of subs) await s.stop({ abandon: true });
  await p.close().catch(() => undefined);
  await bus.close();
  await kafka.stop({ kill: true });
});
test.run();
