/**
 * The kafka backend's pull adapter (engine/bus/kafka/consumer.ts) on its own, against librdkafka's
 * mock cluster: what the bus conformance suite does not pin down because it is specific to
 * driving kafkajs' push consumer (when fetching starts, buffering ahead of poll()).
 */
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { createKafkaBus, startKafkaMockCluster, type BusBackend, type ConsumedRecord } from '../engine/bus/index.js'

const mock = await startKafkaMockCluster({ brokers: 1 })
let n = 0
const topicName = (what: string): string => `consumer-${what}-${process.pid}-${n++}`
const enc = new TextEncoder()

async function withBus(opts: { fetchMaxWaitMs?: number }, body: (bus: BusBackend) => Promise<void>): Promise<void> {
  const bus = createKafkaBus({ brokers: mock.brokers, createTopics: mock.createTopics, ...opts })
  try {
    await body(bus)
  } finally {
    await bus.close()
  }
}

test('assign() fetches its partitions from the first fetch: the first record comes well before fetchMaxWaitMs', async () => {
  const fetchMaxWaitMs = 6000
  await withBus({ fetchMaxWaitMs }, async (bus) => {
    const topic = topicName('first')
    await bus.createTopics([{ name: topic, partitions: 2 }])
    const p = await bus.producer()
    await p.send([{ topic, key: null, value: enc.encode('a'), partition: 0 }, { topic, key: null, value: enc.encode('b'), partition: 1 }])
    const c = await bus.consumer()
    await c.assign([{ topic, partition: 0 }, { topic, partition: 1 }])
    const t0 = Date.now()
    const got: ConsumedRecord[] = []
    while (got.length < 2 && Date.now() - t0 < fetchMaxWaitMs / 2) got.push(...(await c.poll({ timeoutMs: 100 })))
    const waitedMs = Date.now() - t0
    // A partition paused by the join leaves kafkajs with nothing to fetch: it sleeps fetchMaxWaitMs.
    assert.is(got.length, 2, `both records within ${fetchMaxWaitMs / 2} ms of assign(), waited ${waitedMs} ms`)
  })
})

test.after(() => mock.stop())
test.run()
