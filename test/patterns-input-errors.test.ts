/**
 * Bad input to the durable and state-and-event patterns gets a clear error naming what and where,
 * at once or through `ready`/`done`, never a silent wait or an endless retry loop (memory bus;
 * these checks run before any bus-specific code); and the buses' own argument checks
 * (allocValue, kafka broker addresses, which need no cluster). Found by a first-time user's review.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { BusError, createKafkaBus, createMemoryBus, type BusBackend } from '../engine/bus/index.js';
import {
  jsonCodec,
  startDurable,
  startRpcSender,
  startStateAndEvent,
  stringCodec,
  type DurableProcessor,
} from '../engine/patterns/index.js';

const echo: DurableProcessor<string> = {
  onNext: (rs) =>
    rs.map((r) => ({ topic: 'out', key: r.key, value: new TextEncoder().encode(String(r.value)) })),
};

async function busWith(values: string[]): Promise<BusBackend> {
  const bus = createMemoryBus();
  await bus.createTopics([
    { name: 'in', partitions: 2 },
    { name: 'out', partitions: 2 },
  ]);
  const p = await bus.producer();
  await p.send(
    values.map((v, i) => ({
      topic: 'in',
      key: `k${i}`,
      value: new TextEncoder().encode(v),
      partition: 0,
    })),
  );
  await p.close();
  return bus;
}

const rejection = (p: Promise<unknown>): Promise<Error> =>
  p.then(
    (): Error => {
      throw new Error('expected a rejection, got a resolution');
    },
    (e: unknown) => e as Error,
  );

test('durable on a topic that does not exist: ready and done reject naming it (no silent wait)', async () => {
  const bus = await busWith([]);
  const sub = startDurable({
    bus,
    groupId: 'g',
    topics: ['in', 'typo'],
    transactionalId: 't',
    codec: stringCodec,
    processor: echo,
  });
  assert.is((await rejection(sub.ready)).message, 'durable topic does not exist, topic=typo');
  assert.is((await rejection(sub.done)).message, 'durable topic does not exist, topic=typo');
  await bus.close();
});

test('durable with fencing partition on a missing topic rejects the same way', async () => {
  const bus = await busWith([]);
  const sub = startDurable({
    bus,
    groupId: 'g',
    topics: ['typo'],
    transactionalId: 't',
    codec: stringCodec,
    processor: echo,
    fencing: 'partition',
  });
  assert.is((await rejection(sub.done)).message, 'durable topic does not exist, topic=typo');
  await bus.close();
});

test('state-and-event names a missing event or state topic', async () => {
  const bus = await busWith([]);
  const num = jsonCodec<number>();
  const base = {
    bus,
    groupId: 'g',
    transactionalId: 't',
    eventCodec: num,
    stateCodec: num,
    processor: { onNext: () => ({}) },
  };
  assert.is(
    (await rejection(startStateAndEvent({ ...base, eventTopic: 'nope', stateTopic: 'in' }).done))
      .message,
    'state-and-event event topic does not exist, topic=nope',
  );
  assert.is(
    (await rejection(startStateAndEvent({ ...base, eventTopic: 'in', stateTopic: 'nope' }).done))
      .message,
    'state-and-event state topic does not exist, topic=nope',
  );
  await bus.close();
});

test('bad retry and sizing options throw at once, naming the option and value', async () => {
  const bus = await busWith([]);
  const start = (extra: object) => () =>
    startDurable({
      bus,
      groupId: 'g',
      topics: ['in'],
      transactionalId: 't',
      codec: stringCodec,
      processor: echo,
      ...extra,
    });
  assert.throws(
    start({ retriesMax: Number.NaN }),
    /durable g: retriesMax must be an integer >= 0, retriesMax=NaN/,
  );
  assert.throws(start({ retriesMax: -1 }), /retriesMax=-1/);
  assert.throws(
    start({ retryBackoffMs: -5 }),
    /retryBackoffMs must be a number of ms >= 0, retryBackoffMs=-5/,
  );
  assert.throws(
    start({ sessionTimeoutMs: Number('abc') }),
    /sessionTimeoutMs must be an integer number of ms >= 1, sessionTimeoutMs=NaN/,
  );
  assert.throws(start({ batchSizeMax: 0 }), /batchSizeMax must be an integer >= 1, batchSizeMax=0/);
  const num = jsonCodec<number>();
  assert.throws(
    () =>
      startStateAndEvent({
        bus,
        groupId: 'h',
        eventTopic: 'in',
        stateTopic: 'in',
        transactionalId: 't',
        eventCodec: num,
        stateCodec: num,
        processor: { onNext: () => ({}) },
        retriesMax: 1.5,
      }),
    /state-and-event h: retriesMax must be an integer >= 0, retriesMax=1.5/,
  );
  await bus.close();
});

test('retriesMax 2: a failing batch is processed 3 times, then done rejects', async () => {
  const bus = await busWith(['a']);
  let calls = 0;
  const sub = startDurable({
    bus,
    groupId: 'g',
    topics: ['in'],
    transactionalId: 't',
    codec: stringCodec,
    retriesMax: 2,
    retryBackoffMs: 0,
    processor: {
      onNext: () => {
        calls++;
        throw new Error('boom');
      },
    },
  });
  assert.match(
    (await rejection(sub.done)).message,
    /durable g: 3 consecutive failed batches, last: boom/,
  );
  assert.is(calls, 3);
  await bus.close();
});

test('onNext returning something else than an array fails the batch with an error naming it', async () => {
  const bus = await busWith(['a', 'b']);
  const sub = startDurable({
    bus,
    groupId: 'g',
    topics: ['in'],
    transactionalId: 't',
    codec: stringCodec,
    retriesMax: 0,
    processor: { onNext: () => undefined as never },
  });
  assert.match(
    (await rejection(sub.done)).message,
    /onNext must return an array of output records \(may be empty\), got undefined for the batch of 2 records from in\/0 at offset 0/,
  );
  await bus.close();
});

test('a value the codec cannot decode: the error names topic, partition and offset', async () => {
  const bus = await busWith(['1', '{bad']);
  const sub = startDurable({
    bus,
    groupId: 'g',
    topics: ['in'],
    transactionalId: 't',
    codec: jsonCodec<number>(),
    retriesMax: 0,
    processor: { onNext: () => [] },
  });
  const e = await rejection(sub.done);
  assert.match(e.message, /last: cannot decode the value of in\/0 at offset 1: /);
  await bus.close();
});

test('allocValue: a non-number size is named with its type; after close it throws closed', async () => {
  const bus = createMemoryBus();
  assert.throws(
    () => bus.allocValue('8' as never),
    (e: unknown) =>
      e instanceof RangeError &&
      (e as Error).message === 'value size must be an integer >= 0, bytes="8" (a string)',
  );
  assert.throws(() => bus.allocValue(2 ** 40), /at most 1073741824 bytes/);
  await bus.close();
  assert.throws(
    () => bus.allocValue(8),
    (e: unknown) => e instanceof BusError && e.code === 'closed',
  );
});

test('rpc send after stop() says the sender is stopped', async () => {
  const bus = await busWith([]);
  const sender = startRpcSender({
    bus,
    requestTopic: 'in',
    responseTopic: 'out',
    requestCodec: stringCodec,
    responseCodec: stringCodec,
    timeoutMs: 200,
  });
  await sender.ready;
  await sender.stop();
  assert.is((await rejection(sender.send('x'))).message, 'rpc sender is stopped, requestTopic=in');
  await bus.close();
});

test('kafka bus: a broker entry that is not host:port is refused at creation, naming the entry', () => {
  const refused = (brokers: string[], entry: string) =>
    assert.throws(
      () => createKafkaBus({ brokers }),
      (e: unknown) =>
        e instanceof BusError &&
        e.code === 'bad-input' &&
        (e as Error).message === `kafka broker must be host:port with a port 1-65535, ${entry}`,
    );
  refused(['nonsense'], 'brokers[0]="nonsense"');
  refused(['127.0.0.1:9092', 'b:x'], 'brokers[1]="b:x"');
  refused(['h:0'], 'brokers[0]="h:0"');
  assert.throws(() => createKafkaBus({ brokers: [] }), /at least one broker/);
  assert.is(createKafkaBus({ brokers: ['127.0.0.1:9092', '[::1]:9093'] }).kind, 'kafka');
});

test.run();
