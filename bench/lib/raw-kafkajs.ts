/**
 * Raw kafkajs produce and consume on librdkafka's mock cluster: the baseline the Kafka backend
 * is measured against, shared by bench/bus.ts and bench/patterns.ts so both run the same code.
 *
 * Settings (the Kafka backend's defaults, so a ratio compares code, not configuration): produce
 * with sendBatch, acks -1, sends of `batchRecords` records (one transaction each in the txn
 * variant); consume read_committed, kafkajs' default fetch sizes (1 MiB per partition, 10 MiB per
 * fetch, minBytes 1), maxWaitTimeInMs 100, one partition processed at a time, no commits, a group
 * of one member, eachBatch only counts the records, `CONSUME_PASSES` passes over the topic (seek
 * to 0 between). A pass is timed from the first record handed over to the last, so neither the
 * group join (3 s on the mock) nor the wait for the first fetch is timed.
 */
// First: kafkajs must load with the corrected read_committed filter installed.
import '../../engine/bus/kafka/read-committed.js';
import kafkajs from 'kafkajs';
import type { ProducerRecord, TopicSpec } from '../../engine/bus/index.js';

export const VALUE_BYTES = 100;
export const PARTITIONS = 4;
export const CONSUME_PASSES = 3;

/** One side's produce and consume times. */
export interface Row {
  backend: string;
  records: number;
  produceMs: number;
  txnProduceMs: number;
  /** Records read, over all passes. */
  consumed: number;
  consumeMs: number;
  /**
   * CPU time of this process (user + system, µs) inside the produce, transactional produce and
   * consume windows: the client's cost, steadier than the rates on a shared machine (the broker
   * is another process).
   */
  produceCpuUs: number;
  txnProduceCpuUs: number;
  consumeCpuUs: number;
  /** Per round: ms from the consumer being ready (raw: run() returned; bus: assign() returned) to the first record handed over. */
  firstRecordMs: number[];
}

export const value = new Uint8Array(VALUE_BYTES).fill(0x61);

export function batches(topic: string, records: number, batchRecords: number): ProducerRecord[][] {
  const out: ProducerRecord[][] = [];
  for (let i = 0; i < records; i += batchRecords) {
    const b: ProducerRecord[] = [];
    for (let j = i; j < Math.min(records, i + batchRecords); j++)
      b.push({ topic, key: `k${j % 1000}`, value });
    out.push(b);
  }
  return out;
}

export async function timed(f: () => Promise<void>): Promise<number> {
  const t0 = performance.now();
  await f();
  return performance.now() - t0;
}

/** Wall time (ms) and this process's CPU time (user + system, µs) of `f`. */
export async function timedCpu(f: () => Promise<void>): Promise<{ ms: number; cpuUs: number }> {
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  await f();
  const ms = performance.now() - t0;
  const c = process.cpuUsage(c0);
  return { ms, cpuUs: c.user + c.system };
}

/** CPU time (user + system, µs) since `c0` (a process.cpuUsage() value). */
export function cpuSince(c0: NodeJS.CpuUsage): number {
  const c = process.cpuUsage(c0);
  return c.user + c.system;
}

/** Where {@link benchRawKafkajs} runs: librdkafka's mock cluster, or a real broker. */
export interface RawCluster {
  brokers: string[];
  createTopics(topics: TopicSpec[]): Promise<void>;
}

/** How {@link benchRawKafkajs} labels its row and sets up its plain producer. */
export interface RawOptions {
  /** Row label; default 'raw kafkajs (mock)'. */
  backend?: string;
  /**
   * kafkajs `idempotent` of the plain producer (default false: the mock cannot initialise one).
   * On a real broker, true matches the Kafka backend's plain producer.
   */
  idempotent?: boolean;
  /**
   * kafkajs `retry` of the client and of the producers (default kafkajs'). On a real broker the
   * backend's values (engine/bus/kafka/index.ts) matter: after a commit the next transaction's
   * AddPartitionsToTxn can be answered CONCURRENT_TRANSACTIONS until the markers are written,
   * and kafkajs waits initialRetryTime (its default 300 ms, the backend's 100 ms) to retry.
   */
  clientRetry?: kafkajs.RetryOptions;
  producerRetry?: kafkajs.RetryOptions;
}

/** The same three runs with kafkajs directly: sendBatch, transaction per batch, eachBatch consumer. */
export async function benchRawKafkajs(
  mock: RawCluster,
  records: number,
  batchRecords: number,
  opts: RawOptions = {},
): Promise<Row> {
  const topic = `bench-raw-${Date.now()}`;
  await mock.createTopics([
    { name: topic, partitions: PARTITIONS },
    { name: `${topic}-txn`, partitions: PARTITIONS },
  ]);
  const kafka = new kafkajs.Kafka({
    brokers: mock.brokers,
    clientId: 'bench-raw',
    logLevel: kafkajs.logLevel.NOTHING,
    ...(opts.clientRetry ? { retry: opts.clientRetry } : {}),
  });
  const retry = opts.producerRetry ? { retry: opts.producerRetry } : {};
  const buf = Buffer.from(value);
  const msgs = (t: string) =>
    batches(t, records, batchRecords).map((b) => b.map((r) => ({ key: r.key, value: buf })));
  const p = kafka.producer({ idempotent: opts.idempotent ?? false, ...retry });
  await p.connect();
  const plain = msgs(topic);
  const { ms: produceMs, cpuUs: produceCpuUs } = await timedCpu(async () => {
    for (const messages of plain)
      await p.sendBatch({ acks: -1, topicMessages: [{ topic, messages }] });
  });
  const tp = kafka.producer({ transactionalId: `${topic}-tx`, maxInFlightRequests: 1, ...retry });
  await tp.connect();
  const txn = msgs(`${topic}-txn`);
  const { ms: txnProduceMs, cpuUs: txnProduceCpuUs } = await timedCpu(async () => {
    for (const messages of txn) {
      const t = await tp.transaction();
      await t.sendBatch({ acks: -1, topicMessages: [{ topic: `${topic}-txn`, messages }] });
      await t.commit();
    }
  });
  await p.disconnect();
  await tp.disconnect();
  const c = kafka.consumer({ groupId: `${topic}-g`, readUncommitted: false, maxWaitTimeInMs: 100 });
  await c.connect();
  await c.subscribe({ topic, fromBeginning: true });
  let got = 0;
  let t0 = 0;
  let consumeMs = 0;
  let consumeCpuUs = 0;
  let cpu0 = process.cpuUsage();
  let done: () => void = () => undefined;
  const finished = new Promise<void>((resolve) => (done = resolve));
  let pass = 1;
  let firstAt = 0;
  await c.run({
    autoCommit: false,
    eachBatch: async ({ batch, isStale }) => {
      // Batches fetched before the last seek: kafkajs hands them over flagged (the bus drops them too).
      if (isStale()) return;
      if (t0 === 0) {
        t0 = performance.now();
        cpu0 = process.cpuUsage();
      }
      if (firstAt === 0) firstAt = t0;
      got += batch.messages.length;
      if (got < records * pass) return;
      consumeMs += performance.now() - t0;
      consumeCpuUs += cpuSince(cpu0);
      t0 = 0;
      if (pass++ === CONSUME_PASSES) done();
      else
        for (let partition = 0; partition < PARTITIONS; partition++)
          c.seek({ topic, partition, offset: '0' });
    },
  });
  const ready = performance.now();
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([finished, new Promise((r) => (timer = setTimeout(r, 120_000)))]);
  clearTimeout(timer);
  await c.disconnect();
  if (got !== records * CONSUME_PASSES)
    throw new Error(`bench raw kafkajs: consumed ${got} of ${records * CONSUME_PASSES} records`);
  return {
    backend: opts.backend ?? 'raw kafkajs (mock)',
    records,
    produceMs,
    txnProduceMs,
    consumed: got,
    consumeMs,
    produceCpuUs,
    txnProduceCpuUs,
    consumeCpuUs,
    firstRecordMs: [firstAt - ready],
  };
}

/**
 * Creates `topic` (PARTITIONS partitions, replication 1, leaders elected) through `admin` and
 * fills it with `records` 100-byte values (keys from {@link batches}), 1000 per idempotent send
 * with acks -1, through a producer of `kafka` that is closed again.
 */
export async function prefillTopic(
  kafka: import('kafkajs').Kafka,
  admin: import('kafkajs').Admin,
  topic: string,
  records: number,
): Promise<void> {
  await admin.createTopics({
    waitForLeaders: true,
    topics: [{ topic, numPartitions: PARTITIONS, replicationFactor: 1 }],
  });
  const p = kafka.producer({ idempotent: true });
  await p.connect();
  const buf = Buffer.alloc(100, 0x61);
  for (const b of batches(topic, records, 1000))
    await p.sendBatch({
      acks: -1,
      topicMessages: [{ topic, messages: b.map((r) => ({ key: r.key, value: buf })) }],
    });
  await p.disconnect();
}
