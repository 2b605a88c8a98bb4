/**
 * Bus benchmark: records/s of 100-byte records produced and consumed through engine/bus on the
 * memory and kafka backends, with raw kafkajs on the same mock cluster in the same run as the
 * baseline for the kafka numbers.
 *
 * Method: one topic of 4 partitions per run, keys `k<i % 1000>`, 100-byte values, sends of
 * `batchRecords` records (one sendBatch / one transaction each), then one consumer reads all
 * partitions from the start until it has every record. Consumer group joins (3 s on the mock)
 * happen before the clock starts. Produce and consume are timed separately; "produce+consume" is
 * records / (produce time + consume time).
 *
 * The kafka runs alternate raw/bus/bus/raw on one mock cluster and are summed, after one untimed
 * warm-up run of each (a fifth of the records) so neither side pays for kafkajs' cold code.
 *
 * Same settings on both sides: read_committed, kafkajs' default fetch sizes (1 MiB per partition,
 * 10 MiB per fetch, minBytes 1), maxWaitTimeInMs 100, one partition processed at a time, no
 * commits, a group of one member. Differences, both against the bus: the bus's consumer
 * heartbeats every 500 ms (kafkajs default 3000 ms, one extra round trip per 500 ms), and the
 * bus's clock starts when assign() returns, so it includes the first Fetch, while the raw clock
 * starts at the first eachBatch (run() returns at the join, before any fetch).
 *
 * Run: `node dist/bench/bus.js` (prints the markdown table). Env BUS_BENCH_RECORDS overrides the
 * record count of the kafka runs (default 100000; memory runs use 5x).
 */
import { pathToFileURL } from 'node:url'
import kafkajs from 'kafkajs'
import {
  createKafkaBus,
  createMemoryBus,
  startKafkaMockCluster,
  type BusBackend,
  type KafkaMockCluster,
  type ProducerRecord,
} from '../engine/bus/index.js'

const VALUE_BYTES = 100
const PARTITIONS = 4

interface Row {
  backend: string
  records: number
  produceMs: number
  txnProduceMs: number
  consumeMs: number
}

const value = new Uint8Array(VALUE_BYTES).fill(0x61)

function batches(topic: string, records: number, batchRecords: number): ProducerRecord[][] {
  const out: ProducerRecord[][] = []
  for (let i = 0; i < records; i += batchRecords) {
    const b: ProducerRecord[] = []
    for (let j = i; j < Math.min(records, i + batchRecords); j++) b.push({ topic, key: `k${j % 1000}`, value })
    out.push(b)
  }
  return out
}

async function timed(f: () => Promise<void>): Promise<number> {
  const t0 = performance.now()
  await f()
  return performance.now() - t0
}

/** Produce (plain), produce (transactional), consume, through the bus API. */
async function benchBus(name: string, bus: BusBackend, records: number, batchRecords: number): Promise<Row> {
  const topic = `bench-${name.replace(/[^A-Za-z0-9]+/g, "-")}-${Date.now()}`
  const txnTopic = `${topic}-txn`
  await bus.createTopics([{ name: topic, partitions: PARTITIONS }, { name: txnTopic, partitions: PARTITIONS }])
  const plain = batches(topic, records, batchRecords)
  const txnBatches = batches(txnTopic, records, batchRecords)
  const p = await bus.producer()
  const produceMs = await timed(async () => {
    for (const b of plain) await p.send(b)
  })
  const tp = await bus.producer({ transactionalId: `${topic}-tx` })
  const txnProduceMs = await timed(async () => {
    for (const b of txnBatches) {
      const t = await tp.begin()
      await t.send(b)
      await t.commit()
    }
  })
  const c = await bus.consumer({ pollRecordsMax: 5000 })
  await c.assign(Array.from({ length: PARTITIONS }, (_, partition) => ({ topic, partition })))
  let got = 0
  const consumeMs = await timed(async () => {
    const deadline = Date.now() + 120_000
    while (got < records && Date.now() < deadline) got += (await c.poll({ timeoutMs: 100 })).length
  })
  if (got !== records) throw new Error(`bench ${name}: consumed ${got} of ${records} records`)
  await bus.close()
  return { backend: name, records, produceMs, txnProduceMs, consumeMs }
}

/** The same three runs with kafkajs directly: sendBatch, transaction per batch, eachBatch consumer. */
async function benchRawKafkajs(mock: KafkaMockCluster, records: number, batchRecords: number): Promise<Row> {
  const topic = `bench-raw-${Date.now()}`
  await mock.createTopics([{ name: topic, partitions: PARTITIONS }, { name: `${topic}-txn`, partitions: PARTITIONS }])
  const kafka = new kafkajs.Kafka({ brokers: mock.brokers, clientId: 'bench-raw', logLevel: kafkajs.logLevel.NOTHING })
  const buf = Buffer.from(value)
  const msgs = (t: string) => batches(t, records, batchRecords).map((b) => b.map((r) => ({ key: r.key, value: buf })))
  const p = kafka.producer()
  await p.connect()
  const plain = msgs(topic)
  const produceMs = await timed(async () => {
    for (const messages of plain) await p.sendBatch({ acks: -1, topicMessages: [{ topic, messages }] })
  })
  const tp = kafka.producer({ transactionalId: `${topic}-tx`, maxInFlightRequests: 1 })
  await tp.connect()
  const txn = msgs(`${topic}-txn`)
  const txnProduceMs = await timed(async () => {
    for (const messages of txn) {
      const t = await tp.transaction()
      await t.sendBatch({ acks: -1, topicMessages: [{ topic: `${topic}-txn`, messages }] })
      await t.commit()
    }
  })
  await p.disconnect()
  await tp.disconnect()
  const c = kafka.consumer({ groupId: `${topic}-g`, readUncommitted: false, maxWaitTimeInMs: 100 })
  await c.connect()
  await c.subscribe({ topic, fromBeginning: true })
  let got = 0
  let t0 = 0
  let done: () => void = () => undefined
  const finished = new Promise<void>((resolve) => (done = resolve))
  await c.run({
    autoCommit: false,
    eachBatch: async ({ batch }) => {
      if (t0 === 0) t0 = performance.now()
      got += batch.messages.length
      if (got >= records) done()
    },
  })
  // run() resolves after the group join; the clock runs from the first batch, which arrives right after.
  let timer: NodeJS.Timeout | undefined
  await Promise.race([finished, new Promise((r) => (timer = setTimeout(r, 120_000)))])
  clearTimeout(timer)
  const consumeMs = performance.now() - t0
  await c.disconnect()
  if (got !== records) throw new Error(`bench raw kafkajs: consumed ${got} of ${records} records`)
  return { backend: 'raw kafkajs (mock)', records, produceMs, txnProduceMs, consumeMs }
}

function sum(rows: Row[]): Row {
  return rows.reduce((a, r) => ({
    backend: a.backend,
    records: a.records + r.records,
    produceMs: a.produceMs + r.produceMs,
    txnProduceMs: a.txnProduceMs + r.txnProduceMs,
    consumeMs: a.consumeMs + r.consumeMs,
  }))
}

const rate = (records: number, ms: number): string => Math.round((records / ms) * 1000).toLocaleString('en-US')

/** Runs the bus benchmark and returns a markdown table (records/s, higher is better). */
export async function runBusBench(): Promise<string> {
  const kafkaRecords = Number(process.env.BUS_BENCH_RECORDS ?? 100_000)
  const batchRecords = 1000
  const rows: Row[] = []
  rows.push(await benchBus('memory', createMemoryBus(), kafkaRecords * 5, batchRecords))
  const mock = await startKafkaMockCluster({ brokers: 1 })
  try {
    // The mock's speed drifts as its in-memory logs grow and GC runs: alternate raw and bus
    // (raw, bus, bus, raw) and sum the rounds so neither side gets the fresh cluster.
    const raw: Row[] = []
    const bus: Row[] = []
    const kafkaBus = (): BusBackend => createKafkaBus({ brokers: mock.brokers, createTopics: mock.createTopics })
    await benchRawKafkajs(mock, Math.ceil(kafkaRecords / 5), batchRecords)
    await benchBus('kafka (mock)', kafkaBus(), Math.ceil(kafkaRecords / 5), batchRecords)
    raw.push(await benchRawKafkajs(mock, kafkaRecords, batchRecords))
    bus.push(await benchBus('kafka (mock)', kafkaBus(), kafkaRecords, batchRecords))
    bus.push(await benchBus('kafka (mock)', kafkaBus(), kafkaRecords, batchRecords))
    raw.push(await benchRawKafkajs(mock, kafkaRecords, batchRecords))
    rows.push(sum(raw), sum(bus))
  } finally {
    await mock.stop()
  }
  const lines = [
    `Bus: ${VALUE_BYTES}-byte records, ${PARTITIONS} partitions, sends of ${batchRecords} records (one transaction each in the txn column), node ${process.version}, librdkafka 2.0.2 mock cluster (1 broker) on loopback; kafka rows sum two alternating rounds after one warm-up round.`,
    '',
    '| backend | records | produce rec/s | produce txn rec/s | consume rec/s | produce+consume rec/s |',
    '| --- | ---: | ---: | ---: | ---: | ---: |',
    ...rows.map((r) => `| ${r.backend} | ${r.records.toLocaleString('en-US')} | ${rate(r.records, r.produceMs)} | ${rate(r.records, r.txnProduceMs)} | ${rate(r.records, r.consumeMs)} | ${rate(r.records, r.produceMs + r.consumeMs)} |`),
  ]
  const raw = rows.find((r) => r.backend.startsWith('raw'))
  const bus = rows.find((r) => r.backend.startsWith('kafka'))
  if (raw && bus) {
    const ratio = (a: number, b: number): string => `${Math.round((b / a) * 100)}%`
    lines.push('', `kafka backend vs raw kafkajs: produce ${ratio(bus.produceMs, raw.produceMs)}, produce txn ${ratio(bus.txnProduceMs, raw.txnProduceMs)}, consume ${ratio(bus.consumeMs, raw.consumeMs)} of raw throughput.`)
  }
  return lines.join('\n')
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  console.log(await runBusBench())
}
