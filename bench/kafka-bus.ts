/**
 * Kafka backend vs raw kafkajs on a real Apache Kafka broker, same run: plain produce,
 * transactional produce (one transaction per send), consume (read_committed). The goal
 * (issue 8): the backend within 10% of raw kafkajs.
 *
 * Both sides run bench/bus.ts's method, unchanged (bench/lib/raw-kafkajs.ts for raw kafkajs,
 * benchBus for the backend): one topic of 4 partitions per side and round, keys `k<i % 1000>`,
 * 100-byte values, sends of 1000 records, `CONSUME_PASSES` consume passes with a seek to 0
 * between, each pass timed from the first record handed over to the last. Same settings on both
 * sides: acks -1, idempotent plain producer (the backend's default on a real broker), the
 * transactional producer with maxInFlightRequests 1, read_committed, kafkajs' default fetch sizes,
 * maxWaitTimeInMs 100.
 *
 * Rounds: one untimed warm-up of each side (a fifth of the records), then `--rounds` pairs in
 * alternating order (raw, bus, bus, raw, raw, bus, ...) on one broker, so neither side gets the
 * fresh broker or a quieter minute of a shared machine more often. Printed: the summed rates, the
 * ratio of the sums, each pair's ratio (the spread a shared machine gives), and the client's CPU
 * time per record in the same windows (process.cpuUsage; steadier than rates when other jobs
 * share the CPUs, since it does not count time the process waits for a core or the broker).
 *
 *   node dist/bench/kafka-bus.js [--brokers host:port] [--records 100000] [--rounds 4]
 *
 * Without --brokers (or SLUICE_KAFKA_BROKERS) a private single-node broker is started for the
 * run (testing/kafka-broker.ts) and stopped at the end.
 */
// First: kafkajs must load with the backend's read_committed filter installed (the backend
// refuses a consumer otherwise), as bench/lib/raw-kafkajs.ts does.
import '../engine/bus/kafka/read-committed.js';
import kafkajs from 'kafkajs';
import { createKafkaBus, type TopicSpec } from '../engine/bus/index.js';
import { startKafka, type KafkaCluster } from '../testing/kafka-broker.js';
import { benchBus, sum } from './bus.js';
import {
  benchRawKafkajs,
  CONSUME_PASSES,
  PARTITIONS,
  VALUE_BYTES,
  type Row,
} from './lib/raw-kafkajs.js';

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

function positiveInt(name: string, fallback: number): number {
  const v = arg(name);
  if (v === undefined) return fallback;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1)
    throw new Error(`--${name} must be a positive integer, got "${v}"`);
  return n;
}

const rate = (records: number, ms: number): number => (records / ms) * 1000;
const fmt = (n: number): string => Math.round(n).toLocaleString('en-US');
const pct = (bus: number, raw: number): string => `${Math.round((bus / raw) * 100)}%`;

/** Per side: client CPU µs per record of plain produce, transactional produce, consume. */
function cpuPerRecord(r: Row): [number, number, number] {
  return [r.produceCpuUs / r.records, r.txnProduceCpuUs / r.records, r.consumeCpuUs / r.consumed];
}

/** Per side: plain produce, transactional produce, consume rates, records/s. */
function rates(r: Row): [number, number, number] {
  return [
    rate(r.records, r.produceMs),
    rate(r.records, r.txnProduceMs),
    rate(r.consumed, r.consumeMs),
  ];
}

async function main(): Promise<void> {
  const records = positiveInt('records', 100_000);
  const rounds = positiveInt('rounds', 4);
  const batchRecords = 1000;
  const given = arg('brokers') ?? process.env.SLUICE_KAFKA_BROKERS;
  let cluster: KafkaCluster | null = null;
  let brokers: string[];
  if (given) brokers = given.split(',').map((b) => b.trim());
  else {
    cluster = await startKafka();
    brokers = cluster.brokers;
  }
  const admin = new kafkajs.Kafka({
    brokers,
    clientId: 'bench-admin',
    logLevel: kafkajs.logLevel.NOTHING,
  }).admin();
  await admin.connect();
  const raw = {
    brokers,
    async createTopics(topics: TopicSpec[]): Promise<void> {
      await admin.createTopics({
        waitForLeaders: true,
        topics: topics.map((t) => ({
          topic: t.name,
          numPartitions: t.partitions,
          replicationFactor: 1,
        })),
      });
    },
  };
  // The backend's kafkajs settings (engine/bus/kafka/index.ts: the client's retry and
  // PRODUCER_RETRY), so the ratio compares code, not configuration.
  const rawOpts = {
    backend: 'raw kafkajs',
    idempotent: true,
    clientRetry: { retries: 5, initialRetryTime: 100 },
    producerRetry: { retries: 12, initialRetryTime: 100, maxRetryTime: 3200 },
  };
  const runRaw = (n: number) => benchRawKafkajs(raw, n, batchRecords, rawOpts);
  const runBus = (n: number) =>
    benchBus('kafka backend', createKafkaBus({ brokers, clientId: 'bench-bus' }), n, batchRecords);
  const rawRows: Row[] = [];
  const busRows: Row[] = [];
  try {
    await runRaw(Math.ceil(records / 5));
    await runBus(Math.ceil(records / 5));
    for (let i = 0; i < rounds; i++) {
      if (i % 2 === 0) {
        rawRows.push(await runRaw(records));
        busRows.push(await runBus(records));
      } else {
        busRows.push(await runBus(records));
        rawRows.push(await runRaw(records));
      }
      process.stderr.write(`round ${i + 1}/${rounds} done\n`);
    }
  } finally {
    // This run's topics (bench/bus.ts names them bench-<side>-<ms>[-txn]).
    const topics = (await admin.listTopics()).filter(
      (t) => t.startsWith('bench-raw-') || t.startsWith('bench-kafka-backend-'),
    );
    if (topics.length > 0) await admin.deleteTopics({ topics }).catch(() => undefined);
    await admin.disconnect();
    await cluster?.stop({ kill: true });
  }
  const r = sum(rawRows);
  const b = sum(busRows);
  const [rp, rt, rc] = rates(r);
  const [bp, bt, bc] = rates(b);
  const lines = [
    `Kafka backend vs raw kafkajs, real broker (Apache Kafka, single node ${given ? `at ${brokers.join(',')}` : 'started for the run'}), node ${process.version}: ${VALUE_BYTES}-byte records, ${PARTITIONS} partitions, sends of ${batchRecords} records (one transaction each in the txn column), ${CONSUME_PASSES} consume passes per round; ${rounds} alternating rounds of ${fmt(records)} records per side after one warm-up round each.`,
    '',
    '| side | records | produce rec/s | produce txn rec/s | consume rec/s |',
    '| --- | ---: | ---: | ---: | ---: |',
    `| raw kafkajs | ${fmt(r.records)} | ${fmt(rp)} | ${fmt(rt)} | ${fmt(rc)} |`,
    `| kafka backend | ${fmt(b.records)} | ${fmt(bp)} | ${fmt(bt)} | ${fmt(bc)} |`,
    `| backend / raw | | ${pct(bp, rp)} | ${pct(bt, rt)} | ${pct(bc, rc)} |`,
    '',
    'Client CPU per record (this process, user + system, µs; the broker is another process):',
    '',
    '| side | produce | produce txn | consume |',
    '| --- | ---: | ---: | ---: |',
    ...[r, b].map((row) => {
      const [p, t, c] = cpuPerRecord(row);
      return `| ${row.backend} | ${p.toFixed(2)} | ${t.toFixed(2)} | ${c.toFixed(2)} |`;
    }),
    (() => {
      const [p1, t1, c1] = cpuPerRecord(r);
      const [p2, t2, c2] = cpuPerRecord(b);
      return `| backend / raw | ${pct(p2, p1)} | ${pct(t2, t1)} | ${pct(c2, c1)} |`;
    })(),
    '',
    'backend / raw per round (produce, produce txn, consume):',
    ...rawRows.map((raw, i) => {
      const [p1, t1, c1] = rates(raw);
      const [p2, t2, c2] = rates(busRows[i]);
      return `- round ${i + 1} (${i % 2 === 0 ? 'raw first' : 'backend first'}): ${pct(p2, p1)}, ${pct(t2, t1)}, ${pct(c2, c1)}`;
    }),
    '',
    `ms from consumer ready to first record, per round (not in the rates): raw kafkajs ${r.firstRecordMs.map((ms) => ms.toFixed(0)).join(', ')}; kafka backend ${b.firstRecordMs.map((ms) => ms.toFixed(0)).join(', ')}.`,
  ];
  console.log(lines.join('\n'));
}

await main();
