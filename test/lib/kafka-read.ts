/**
 * Test helper (not a test file): reads Kafka topics back with a plain kafkajs consumer at
 * read_committed, independent of Sluice's own bus code, and removes test topics.
 */
// First: kafkajs must load with the corrected read_committed filter installed.
import '../../engine/bus/kafka/read-committed.js';
import kafkajs from 'kafkajs';
import { randomBytes } from 'node:crypto';

const { Kafka, logLevel } = kafkajs;

/** One record as a read_committed consumer sees it. */
export interface ReadRecord {
  topic: string;
  partition: number;
  offset: number;
  key: string | null;
  value: Buffer | null;
  headers: Record<string, string>;
  timestampMs: number;
}

/**
 * Every committed record of `topics` from the beginning: reads until `expected` records are in
 * (or `timeoutMs` passed), then `settleMs` more, so that records beyond the expected count (a
 * duplicate) are seen too. Records are in offset order per partition.
 */
export async function readCommitted(
  brokers: string[],
  topics: string[],
  expected: number,
  opts: { timeoutMs?: number; settleMs?: number } = {},
): Promise<ReadRecord[]> {
  const kafka = new Kafka({
    clientId: 'capkafka-test-reader',
    brokers,
    logLevel: logLevel.NOTHING,
  });
  const consumer = kafka.consumer({
    groupId: `capkafka-test-${randomBytes(6).toString('hex')}`,
    readUncommitted: false,
    maxWaitTimeInMs: 100,
  });
  const out: ReadRecord[] = [];
  await consumer.connect();
  try {
    for (const topic of topics) await consumer.subscribe({ topic, fromBeginning: true });
    await consumer.run({
      autoCommit: false,
      eachMessage: async ({ topic, partition, message }) => {
        const headers: Record<string, string> = {};
        for (const [k, v] of Object.entries(message.headers ?? {}))
          if (v !== undefined) headers[k] = String(Array.isArray(v) ? v[v.length - 1] : v);
        out.push({
          topic,
          partition,
          offset: Number(message.offset),
          key: message.key?.toString('utf8') ?? null,
          value: message.value,
          headers,
          timestampMs: Number(message.timestamp),
        });
      },
    });
    const deadline = Date.now() + (opts.timeoutMs ?? 60_000);
    while (out.length < expected && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 50));
    await new Promise((r) => setTimeout(r, opts.settleMs ?? 1000));
  } finally {
    await consumer.disconnect();
  }
  return out.sort((a, b) =>
    a.topic < b.topic
      ? -1
      : a.topic > b.topic
        ? 1
        : a.partition - b.partition || a.offset - b.offset,
  );
}

/** Creates `topic` with `partitions` (test setup of a conflicting topic). */
export async function createTopic(
  brokers: string[],
  topic: string,
  partitions: number,
): Promise<void> {
  const admin = new Kafka({
    clientId: 'capkafka-test-admin',
    brokers,
    logLevel: logLevel.NOTHING,
  }).admin();
  await admin.connect();
  try {
    await admin.createTopics({
      topics: [{ topic, numPartitions: partitions }],
      waitForLeaders: true,
    });
  } finally {
    await admin.disconnect();
  }
}

/** Deletes the topics (missing ones are ignored). */
export async function deleteTopics(brokers: string[], topics: string[]): Promise<void> {
  const admin = new Kafka({
    clientId: 'capkafka-test-admin',
    brokers,
    logLevel: logLevel.NOTHING,
  }).admin();
  await admin.connect();
  try {
    const existing = new Set(await admin.listTopics());
    const mine = topics.filter((t) => existing.has(t));
    if (mine.length > 0) await admin.deleteTopics({ topics: mine });
  } catch {
    // best effort: a test's topics are named uniquely
  } finally {
    await admin.disconnect();
  }
}
