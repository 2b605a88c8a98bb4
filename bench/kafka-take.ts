/**
 * The Kafka backend's own consume cost per record, without the broker's and kafkajs' noise:
 * KafkaConsumer's take() (engine/bus/kafka/consumer.ts: kafkajs messages -> ConsumedRecords, as
 * poll() runs it) over real kafkajs messages, for this build and, with `--baseline`, another
 * build's consumer.js, alternated in one process (issue 8).
 *
 * Method: `--records` 100-byte records (keys `k<i % 1000>`, sends of 1000, as bench/bus.ts) are
 * produced into a fresh 4-partition topic and read once with raw kafkajs (read_committed); the
 * messages of each eachBatch are kept as kafkajs made them. Then, `--rounds` times, each side
 * converts all of them: a consumer with no kafkajs client, every partition owned, each
 * partition's buffer set to its messages, take(5000, out) until the buffers are empty (the
 * bench's pollRecordsMax), the returned records dropped. Printed per side: CPU µs (this thread's
 * process.cpuUsage, user + system) per record, median and range over the rounds, and the ratio
 * to the first side per round.
 *
 *   node dist/bench/kafka-take.js --brokers host:port [--records 200000] [--rounds 15]
 *     [--baseline OTHER_DIST/engine/bus/kafka/consumer.js]
 *
 * The baseline build's engine/bus/kafka/read-committed.js must be a symlink to this build's (one
 * kafkajs, one filter; see bench/kafka-consume.ts).
 */
// First: kafkajs must load with the backend's read_committed filter installed.
import '../engine/bus/kafka/read-committed.js';
import path from 'node:path';
import kafkajs, { type KafkaMessage } from 'kafkajs';
import { KafkaConsumer } from '../engine/bus/kafka/consumer.js';
import type { KafkaBusInternals } from '../engine/bus/kafka/index.js';
import type { ConsumedRecord } from '../engine/bus/index.js';
import { PARTITIONS, prefillTopic } from './lib/raw-kafkajs.js';

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

/** take() and the partition state it reads: private in KafkaConsumer, used here as poll() does. */
interface Internals {
  own(tp: { topic: string; partition: number }, position: number): void;
  owned: Map<string, { buffer: KafkaMessage[]; head: number; position: number }>;
  take(recordsMax: number, out: ConsumedRecord[]): void;
}

type ConsumerClass = typeof KafkaConsumer;

/** Converts every batch once through `Consumer`'s take(); CPU µs spent, records converted. */
function convert(
  Consumer: ConsumerClass,
  topic: string,
  fetched: { partition: number; offset: number; messages: KafkaMessage[] }[],
): { cpuUs: number; records: number } {
  const c = new Consumer({} as KafkaBusInternals, { pollRecordsMax: 5000 }, () => undefined);
  const ci = c as unknown as Internals;
  for (let partition = 0; partition < PARTITIONS; partition++) ci.own({ topic, partition }, 0);
  const states = [...ci.owned.values()];
  let records = 0;
  const c0 = process.cpuUsage();
  // One kafkajs batch at a time, as eachBatch hands them over, drained as poll() would.
  for (const f of fetched) {
    const st = states[f.partition];
    st.buffer = f.messages;
    st.head = 0;
    st.position = f.offset;
    for (;;) {
      const out: ConsumedRecord[] = [];
      ci.take(5000, out);
      if (out.length === 0) break;
      records += out.length;
    }
  }
  const u = process.cpuUsage(c0);
  return { cpuUs: u.user + u.system, records };
}

async function main(): Promise<void> {
  const records = Number(arg('records') ?? 200_000);
  const rounds = Number(arg('rounds') ?? 15);
  const given = arg('brokers') ?? process.env.SLUICE_KAFKA_BROKERS;
  if (!given) throw new Error('--brokers host:port (or SLUICE_KAFKA_BROKERS) is required');
  const brokers = given.split(',').map((b) => b.trim());
  const sides: { name: string; Consumer: ConsumerClass; perRecord: number[] }[] = [
    { name: 'this build', Consumer: KafkaConsumer, perRecord: [] },
  ];
  const baseline = arg('baseline');
  if (baseline) {
    const mod = (await import(path.resolve(baseline))) as { KafkaConsumer: ConsumerClass };
    sides.push({ name: baseline, Consumer: mod.KafkaConsumer, perRecord: [] });
  }
  const kafka = new kafkajs.Kafka({
    brokers,
    clientId: 'bench-take',
    logLevel: kafkajs.logLevel.NOTHING,
  });
  const admin = kafka.admin();
  await admin.connect();
  const topic = `bench-take-${Date.now()}`;
  const fetched: { partition: number; offset: number; messages: KafkaMessage[] }[] = [];
  try {
    await prefillTopic(kafka, admin, topic, records);
    const c = kafka.consumer({
      groupId: `${topic}-g`,
      readUncommitted: false,
      maxWaitTimeInMs: 100,
    });
    await c.connect();
    await c.subscribe({ topic, fromBeginning: true });
    let got = 0;
    let done: () => void = () => undefined;
    const finished = new Promise<void>((resolve) => (done = resolve));
    await c.run({
      autoCommit: false,
      eachBatch: async ({ batch }) => {
        if (batch.messages.length === 0) return;
        fetched.push({
          partition: batch.partition,
          offset: Number(batch.firstOffset()),
          messages: batch.messages,
        });
        got += batch.messages.length;
        if (got >= records) done();
      },
    });
    await finished;
    await c.disconnect();
  } finally {
    await admin.deleteTopics({ topics: [topic] }).catch(() => undefined);
    await admin.disconnect();
  }
  for (const s of sides) convert(s.Consumer, topic, fetched); // warm-up
  for (let r = 0; r < rounds; r++) {
    const order = r % 2 === 0 ? sides : [...sides].reverse();
    for (const s of order) {
      const { cpuUs, records: n } = convert(s.Consumer, topic, fetched);
      if (n !== records) throw new Error(`${s.name}: converted ${n} of ${records} records`);
      s.perRecord.push((cpuUs * 1000) / n);
    }
  }
  const median = (xs: number[]): number => {
    const v = [...xs].sort((a, b) => a - b);
    return v.length % 2 ? v[(v.length - 1) / 2] : (v[v.length / 2 - 1] + v[v.length / 2]) / 2;
  };
  const lines = [
    `take() over ${records.toLocaleString('en-US')} real kafkajs messages (${fetched.length} batches), ${rounds} alternating rounds, node ${process.version}; CPU ns per record:`,
  ];
  for (const s of sides)
    lines.push(
      `- ${s.name}: median ${median(s.perRecord).toFixed(0)}, range ${Math.min(...s.perRecord).toFixed(0)}-${Math.max(...s.perRecord).toFixed(0)}`,
    );
  if (sides.length === 2) {
    const ratio = sides[0].perRecord.map((x, i) => x / sides[1].perRecord[i]);
    lines.push(
      `- this build / baseline per round: median ${Math.round(median(ratio) * 100)}%, range ${Math.round(Math.min(...ratio) * 100)}%-${Math.round(Math.max(...ratio) * 100)}%`,
    );
  }
  console.log(lines.join('\n'));
}

await main();
