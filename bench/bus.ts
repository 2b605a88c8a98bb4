/**
 * Bus benchmark: records/s of 100-byte records produced and consumed through engine/bus on the
 * memory and kafka backends, with raw kafkajs on the same mock cluster in the same run as the
 * baseline for the kafka numbers.
 *
 * Method: one topic of 4 partitions per run, keys `k<i % 1000>`, 100-byte values, sends of
 * `batchRecords` records (one sendBatch / one transaction each), then one consumer reads all
 * partitions from the start until it has every record, `CONSUME_PASSES` times: after each pass it
 * seeks every partition back to offset 0 (no new group join). Produce and consume are timed
 * separately. A pass is timed from the first record handed to the application (raw: first
 * eachBatch; bus: first poll() that returns records) to the last, on both sides, so neither the
 * group join (3 s on the mock) nor the wait for the first fetch after a seek is timed: the raw
 * consumer seeks inside eachBatch, before kafkajs sends its next Fetch, while the bus seeks after
 * poll() returned, when that Fetch is already waiting (up to fetchMaxWaitMs) at the end of the
 * log. "consume" is records read / consume time over all passes, "produce+consume" is records /
 * (produce time + consume time of one pass). Why passes: one pass of 100,000 records takes ~0.2 s
 * on the mock, too short a window on a shared 2-CPU machine. The time from the consumer being
 * ready (raw: run() returned after the join; bus: assign() returned) to its first record is
 * printed per round below the table, outside the rates.
 *
 * The kafka runs alternate raw/bus/bus/raw on one mock cluster and are summed, after one untimed
 * warm-up run of each (a fifth of the records) so neither side pays for kafkajs' cold code.
 *
 * Same settings on both sides: read_committed, kafkajs' default fetch sizes (1 MiB per partition,
 * 10 MiB per fetch, minBytes 1), maxWaitTimeInMs 100, one partition processed at a time, no
 * commits, a group of one member, raw eachBatch only counts the records. The one difference: the
 * bus's consumer heartbeats every 500 ms (kafkajs default 3000 ms), one extra round trip per
 * 500 ms, against the bus.
 *
 * Run: `node dist/bench/bus.js` (prints the markdown table). Env BUS_BENCH_RECORDS overrides the
 * record count of the kafka runs (default 100000; memory runs use 5x).
 */
import { pathToFileURL } from 'node:url';
import {
  createKafkaBus,
  createMemoryBus,
  startKafkaMockCluster,
  type BusBackend,
} from '../engine/bus/index.js';
import {
  batches,
  benchRawKafkajs,
  CONSUME_PASSES,
  PARTITIONS,
  timedCpu,
  cpuSince,
  VALUE_BYTES,
  type Row,
} from './lib/raw-kafkajs.js';

/**
 * Produce (plain), produce (transactional), consume, through the bus API (the method of the file
 * comment); closes `bus` at the end.
 */
export async function benchBus(
  name: string,
  bus: BusBackend,
  records: number,
  batchRecords: number,
): Promise<Row> {
  const topic = `bench-${name.replace(/[^A-Za-z0-9]+/g, '-')}-${Date.now()}`;
  const txnTopic = `${topic}-txn`;
  await bus.createTopics([
    { name: topic, partitions: PARTITIONS },
    { name: txnTopic, partitions: PARTITIONS },
  ]);
  const plain = batches(topic, records, batchRecords);
  const txnBatches = batches(txnTopic, records, batchRecords);
  const p = await bus.producer();
  const { ms: produceMs, cpuUs: produceCpuUs } = await timedCpu(async () => {
    for (const b of plain) await p.send(b);
  });
  const tp = await bus.producer({ transactionalId: `${topic}-tx` });
  const { ms: txnProduceMs, cpuUs: txnProduceCpuUs } = await timedCpu(async () => {
    for (const b of txnBatches) {
      const t = await tp.begin();
      await t.send(b);
      await t.commit();
    }
  });
  const c = await bus.consumer({ pollRecordsMax: 5000 });
  const tps = Array.from({ length: PARTITIONS }, (_, partition) => ({ topic, partition }));
  await c.assign(tps);
  const ready = performance.now();
  let firstAt = 0;
  let got = 0;
  let consumeMs = 0;
  let consumeCpuUs = 0;
  const deadline = Date.now() + 120_000;
  for (let pass = 1; pass <= CONSUME_PASSES; pass++) {
    let t0 = 0;
    let cpu0 = process.cpuUsage();
    while (got < records * pass && Date.now() < deadline) {
      const n = (await c.poll({ timeoutMs: 100 })).length;
      if (n > 0 && t0 === 0) {
        t0 = performance.now();
        cpu0 = process.cpuUsage();
      }
      if (firstAt === 0) firstAt = t0;
      got += n;
    }
    consumeMs += performance.now() - t0;
    consumeCpuUs += cpuSince(cpu0);
    if (pass < CONSUME_PASSES) for (const tp of tps) c.seek(tp, 0);
  }
  if (got !== records * CONSUME_PASSES)
    throw new Error(`bench ${name}: consumed ${got} of ${records * CONSUME_PASSES} records`);
  await bus.close();
  return {
    backend: name,
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

/** One row summing `rows` (times, records and per-round first-record waits); the first's label. */
export function sum(rows: Row[]): Row {
  return rows.reduce((a, r) => ({
    backend: a.backend,
    records: a.records + r.records,
    produceMs: a.produceMs + r.produceMs,
    txnProduceMs: a.txnProduceMs + r.txnProduceMs,
    consumed: a.consumed + r.consumed,
    consumeMs: a.consumeMs + r.consumeMs,
    produceCpuUs: a.produceCpuUs + r.produceCpuUs,
    txnProduceCpuUs: a.txnProduceCpuUs + r.txnProduceCpuUs,
    consumeCpuUs: a.consumeCpuUs + r.consumeCpuUs,
    firstRecordMs: [...a.firstRecordMs, ...r.firstRecordMs],
  }));
}

const rate = (records: number, ms: number): string =>
  Math.round((records / ms) * 1000).toLocaleString('en-US');

/** Runs the bus benchmark and returns a markdown table (records/s, higher is better). */
export async function runBusBench(): Promise<string> {
  const kafkaRecords = Number(process.env.BUS_BENCH_RECORDS ?? 100_000);
  const batchRecords = 1000;
  const rows: Row[] = [];
  rows.push(await benchBus('memory', createMemoryBus(), kafkaRecords * 5, batchRecords));
  const mock = await startKafkaMockCluster({ brokers: 1 });
  try {
    // The mock's speed drifts as its in-memory logs grow and GC runs: alternate raw and bus
    // (raw, bus, bus, raw) and sum the rounds so neither side gets the fresh cluster.
    const raw: Row[] = [];
    const bus: Row[] = [];
    const kafkaBus = (): BusBackend =>
      createKafkaBus({ brokers: mock.brokers, createTopics: mock.createTopics, idempotent: false });
    await benchRawKafkajs(mock, Math.ceil(kafkaRecords / 5), batchRecords);
    await benchBus('kafka (mock)', kafkaBus(), Math.ceil(kafkaRecords / 5), batchRecords);
    raw.push(await benchRawKafkajs(mock, kafkaRecords, batchRecords));
    bus.push(await benchBus('kafka (mock)', kafkaBus(), kafkaRecords, batchRecords));
    bus.push(await benchBus('kafka (mock)', kafkaBus(), kafkaRecords, batchRecords));
    raw.push(await benchRawKafkajs(mock, kafkaRecords, batchRecords));
    rows.push(sum(raw), sum(bus));
  } finally {
    await mock.stop();
  }
  const lines = [
    `Bus: ${VALUE_BYTES}-byte records, ${PARTITIONS} partitions, sends of ${batchRecords} records (one transaction each in the txn column), ${CONSUME_PASSES} consume passes per round (seek to 0 between), node ${process.version}, librdkafka 2.0.2 mock cluster (1 broker) on loopback; kafka rows sum two alternating rounds after one warm-up round.`,
    '',
    '| backend | records | produce rec/s | produce txn rec/s | consume rec/s | produce+consume rec/s |',
    '| --- | ---: | ---: | ---: | ---: | ---: |',
    ...rows.map(
      (r) =>
        `| ${r.backend} | ${r.records.toLocaleString('en-US')} | ${rate(r.records, r.produceMs)} | ${rate(r.records, r.txnProduceMs)} | ${rate(r.consumed, r.consumeMs)} | ${rate(r.records, r.produceMs + (r.consumeMs * r.records) / r.consumed)} |`,
    ),
  ];
  const raw = rows.find((r) => r.backend.startsWith('raw'));
  const bus = rows.find((r) => r.backend.startsWith('kafka'));
  if (raw && bus) {
    const ratio = (a: number, b: number): string => `${Math.round((b / a) * 100)}%`;
    const first = (r: Row): string => r.firstRecordMs.map((ms) => ms.toFixed(0)).join(', ');
    lines.push(
      '',
      `ms from consumer ready to first record, per round (not in the rates): raw kafkajs ${first(raw)}; kafka backend ${first(bus)}.`,
    );
    lines.push(
      '',
      `kafka backend vs raw kafkajs: produce ${ratio(bus.produceMs, raw.produceMs)}, produce txn ${ratio(bus.txnProduceMs, raw.txnProduceMs)}, consume ${ratio(bus.consumeMs, raw.consumeMs)} of raw throughput.`,
    );
  }
  return lines.join('\n');
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  console.log(await runBusBench());
}
