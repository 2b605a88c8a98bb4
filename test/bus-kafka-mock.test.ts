/**
 * What librdkafka's mock cluster (tools/kafka-mock) can and cannot do for kafkajs, checked with
 * raw kafkajs so engine/bus/kafka's workarounds stay justified. If one of these starts failing
 * after a librdkafka upgrade, the limit is gone: update engine/bus/kafka/mock-cluster.ts and
 * test/bus-kafka.test.ts's knownLimits.
 */
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import kafkajs from 'kafkajs'
import { startKafkaMockCluster } from '../engine/bus/index.js'

const mock = await startKafkaMockCluster({ brokers: 2, topics: [{ name: 'limits-a', partitions: 2 }] })
const kafka = new kafkajs.Kafka({ brokers: mock.brokers, clientId: 'mock-limits', logLevel: kafkajs.logLevel.NOTHING, retry: { retries: 1, initialRetryTime: 50 } })

test('the launcher prints bootstrap servers and creates topics with the asked partition count', async () => {
  assert.ok(mock.brokers.length === 2 && mock.brokers.every((b) => /^127\.0\.0\.1:\d+$/.test(b)), mock.brokers.join(','))
  const admin = kafka.admin()
  await admin.connect()
  try {
    const { topics } = await admin.fetchTopicMetadata({ topics: ['limits-a'] })
    assert.is(topics[0].partitions.length, 2)
  } finally {
    await admin.disconnect()
  }
})

test('limit: controller id 0, so admin.createTopics fails', async () => {
  const admin = kafka.admin()
  await admin.connect()
  try {
    assert.is((await admin.describeCluster()).controller, 0)
    let error = ''
    await admin.createTopics({ topics: [{ topic: 'limits-b', numPartitions: 1 }] }).catch((e: Error) => (error = e.message))
    assert.match(error, /Broker 0 not found/)
  } finally {
    await admin.disconnect()
  }
})

test('limit: an idempotent producer fails (InitProducerId goes to controller 0)', async () => {
  const p = kafka.producer({ idempotent: true, retry: { retries: 1, initialRetryTime: 50 } })
  let error = ''
  try {
    await p.connect() // kafkajs initialises the producer id at connect
    await p.send({ topic: 'limits-a', messages: [{ value: 'x' }] })
  } catch (e) {
    error = (e as Error).message
  }
  await p.disconnect()
  assert.match(error, /Broker 0 not found/)
})

test('a transactional producer without idempotent runs commit and abort', async () => {
  const p = kafka.producer({ transactionalId: 'limits-tx', maxInFlightRequests: 1 })
  await p.connect()
  let t = await p.transaction()
  await t.send({ topic: 'limits-a', messages: [{ value: 'c', partition: 0 }] })
  await t.commit()
  t = await p.transaction()
  await t.send({ topic: 'limits-a', messages: [{ value: 'a', partition: 0 }] })
  await t.abort()
  await p.disconnect()
})

test('limit: Metadata auto-creates an unknown topic with 4 partitions', async () => {
  const admin = kafka.admin()
  await admin.connect()
  try {
    const { topics } = await admin.fetchTopicMetadata({ topics: ['limits-never-created'] })
    assert.is(topics[0].partitions.length, 4)
  } finally {
    await admin.disconnect()
  }
})

test.after(() => mock.stop())
test.run()
