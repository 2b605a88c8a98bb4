/**
 * The two buses a topology runs on, for tests that run the same cases on both: the embedded
 * journal (queue partitions under `<dataDir>/queues`) and the real Kafka broker (testKafka();
 * queue names get a prefix unique to the run, so topics of other tests and runs never collide,
 * and the topics are deleted by close()).
 *
 * Inputs are written on Kafka by a plain idempotent producer (no transactions), so an input
 * partition's offsets are 0, 1, 2, ... as on the journal and a test can name inputs by index.
 */
import path from 'node:path';
import { Appender } from '../../engine/journal/index.js';
import { createKafkaBus, type BusBackend, type BusProducer } from '../../engine/bus/index.js';
import { openQueueLogs, type PartitionTailer, type QueueLogs } from '../../engine/service/index.js';
import type { TestKafka } from '../../testing/index.js';
import { EnvelopeView, EVENT_TYPE_JSON, decodeJson } from '../../engine/codec/index.js';
// First: kafkajs must load with the corrected read_committed filter installed.
import '../../engine/bus/kafka/read-committed.js';
import kafkajs from 'kafkajs';

/** One bus for a test. */
export interface TestBackend {
  readonly kind: 'journal' | 'kafka';
  /** Topology lines of its `bus` section (none for the journal, the default). */
  readonly busLines: string[];
  /** The queue name to declare for `name` (Kafka: prefixed, unique to this run). */
  queue(name: string): string;
  /**
   * The service name to declare for `name` (Kafka: prefixed, so its default dead-letter queue
   * `<service>.dlq` is a topic of this run, deleted by close()).
   */
  service(name: string): string;
  /** Creates the queues' topics (Kafka; a no-op on the journal, whose appenders create them). */
  createQueues(queues: readonly { name: string; partitions: number }[]): Promise<void>;
  /** Appends records to a partition, durably, in order. */
  append(
    dataDir: string,
    queue: string,
    partition: number,
    batch: readonly Uint8Array[],
  ): Promise<void>;
  /** A tailer over a partition (call close() on it). */
  tailer(dataDir: string, queue: string, partition: number): PartitionTailer;
  /** Deletes the topics it made (Kafka) and closes its clients. */
  close(): Promise<void>;
}

/** The embedded journal. */
export function journalBackend(): TestBackend {
  return {
    kind: 'journal',
    busLines: [],
    queue: (name) => name,
    service: (name) => name,
    createQueues: async () => undefined,
    async append(dataDir, queue, partition, batch) {
      const a = Appender.open({ dir: path.join(dataDir, 'queues', queue, String(partition)) });
      try {
        a.appendBatch(batch);
      } finally {
        a.close();
      }
    },
    tailer: (dataDir, queue, partition) =>
      openQueueLogs({ kind: 'journal' }).tailer({
        queue,
        partition,
        dir: path.join(dataDir, 'queues', queue, String(partition)),
      }),
    close: async () => undefined,
  };
}

let runs = 0;

/**
 * The real broker: `broker` is the test file's testKafka() (called in the test file itself, so
 * scripts/run-tests.mjs sees that the file needs Kafka and starts one shared broker for the run);
 * close() releases it. `tag` goes into the queue prefix (lowercase, digits, dashes).
 */
export async function kafkaBackend(tag: string, broker: TestKafka): Promise<TestBackend> {
  const prefix = `svckafka.${tag}.${process.pid}.${Date.now() % 1e8}.${runs++}.`;
  const bus: BusBackend = createKafkaBus({ brokers: broker.brokers, clientId: 'svckafka-test' });
  let producer: BusProducer | null = null;
  let logs: QueueLogs | null = null;
  const made = new Set<string>();
  return {
    kind: 'kafka',
    busLines: [`bus: { kind: kafka, brokers: [${broker.brokers.join(', ')}] }`],
    queue: (name) => {
      made.add(prefix + name);
      return prefix + name;
    },
    service: (name) => {
      made.add(`${prefix}${name}.dlq`);
      return prefix + name;
    },
    async createQueues(queues) {
      for (const q of queues) made.add(q.name);
      await bus.createTopics(queues.map((q) => ({ name: q.name, partitions: q.partitions })));
    },
    async append(_dataDir, queue, partition, batch) {
      made.add(queue);
      const n = await bus.partitionCount(queue);
      if (n === null)
        throw new Error(
          `append: topic ${queue} does not exist (start the topology once first, or create it)`,
        );
      producer ??= await bus.producer();
      for (let i = 0; i < batch.length; i += 1000) {
        await producer.send(
          batch.slice(i, i + 1000).map((value) => ({ topic: queue, partition, key: null, value })),
        );
      }
    },
    tailer: (_dataDir, queue, partition) => {
      logs ??= openQueueLogs({
        kind: 'kafka',
        connection: { brokers: broker.brokers, clientId: 'svckafka-test' },
      });
      return logs.tailer({ queue, partition, dir: '' });
    },
    async close() {
      logs?.close();
      await bus.close();
      const admin = new kafkajs.Kafka({
        brokers: broker.brokers,
        logLevel: kafkajs.logLevel.NOTHING,
      }).admin();
      try {
        await admin.connect();
        const existing = new Set(await admin.listTopics());
        const topics = [...made].filter((t) => existing.has(t));
        if (topics.length > 0) await admin.deleteTopics({ topics });
      } catch (e) {
        // Best effort: a broker slow after a test's restarts (a DeleteTopics timeout in ci-4)
        // must not fail the file after its tests ran; the topics' names are unique to the run.
        console.log(`  (cleanup: test topics not deleted: ${(e as Error).message})`);
      } finally {
        await admin.disconnect();
        await broker.release();
      }
    },
  };
}

/**
 * The `key` fields of the JSON records of `queue` partition 0 on `backend` (read_committed on
 * Kafka), in offset order; records of other types are left out.
 */
export function jsonKeysOf(backend: TestBackend, dataDir: string, queue: string): string[] {
  const t = backend.tailer(dataDir, queue, 0);
  const view = new EnvelopeView();
  const keys: string[] = [];
  for (let rec = t.next(); rec; rec = t.next()) {
    view.wrap(rec.bytes, 0, rec.bytes.length);
    if (view.type === EVENT_TYPE_JSON) keys.push((decodeJson(view.payload) as { key: string }).key);
  }
  t.close();
  return keys;
}
