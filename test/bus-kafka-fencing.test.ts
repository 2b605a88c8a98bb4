/**
 * Producer fencing on the kafka bus against librdkafka's mock cluster: what the durable pattern's
 * 'partition' fencing (engine/patterns/durable.ts) relies on. What the mock cannot show is
 * printed as a `SKIP [kafka] ...` line with the observed value, never asserted falsely.
 *
 * Observed with librdkafka 2.0.2: the mock answers every InitProducerId with a new random
 * producer id and epoch 0, even for a transactionalId it has seen, so it never fences; and it
 * writes no abort markers, so read_committed readers get aborted records. It can be told to
 * answer a request with an error (`injectRequestErrors`), which shows how the bus maps a broker's
 * fencing answer.
 */
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import kafkajs from 'kafkajs'
import { BusError, createKafkaBus, startKafkaMockCluster, type BusBackend } from '../engine/bus/index.js'

const mock = await startKafkaMockCluster({ brokers: 1, topics: [{ name: 'fence-a', partitions: 2 }, { name: 'fence-b', partitions: 1 }, { name: 'fence-in', partitions: 1 }] })
const bus: BusBackend = createKafkaBus({ brokers: mock.brokers, createTopics: mock.createTopics })
const rec = (topic: string, value: string, partition = 0) => ({ topic, key: null, value: Buffer.from(value), partition })
/** Kafka API key of EndTxn and error code of INVALID_PRODUCER_EPOCH (Kafka protocol). */
const END_TXN = 26
const INVALID_PRODUCER_EPOCH = 47

/** Every value in partition `partition` of `topic`, read_committed, from the start. */
async function readAll(topic: string, partition: number): Promise<string[]> {
  const c = await bus.consumer({})
  try {
    await c.assign([{ topic, partition }])
    await c.seekToBeginning([{ topic, partition }])
    const { end } = (await bus.offsets([{ topic, partition }]))[0]
    const got: string[] = []
    const deadline = Date.now() + 10_000
    while (c.position({ topic, partition }) < end && Date.now() < deadline) {
      for (const r of await c.poll({ timeoutMs: 200 })) got.push(Buffer.from(r.value!).toString())
    }
    return got
  } finally {
    await c.close()
  }
}

test('creating a transactional producer sends InitProducerId at once: the mock gives each a new producer id, epoch 0', async () => {
  // Raw kafkajs with a log hook: the bus's producer() calls transaction() + abort() right after
  // connect, as this does, so the id/epoch pair it gets is the one logged here.
  const inits: { producerId: number; producerEpoch: number }[] = []
  const logCreator = () => ({ log }: { log: { message: string; producerId?: number; producerEpoch?: number } }) => {
    if (log.message.startsWith('Initialized producer id')) inits.push({ producerId: log.producerId!, producerEpoch: log.producerEpoch! })
  }
  const kafka = new kafkajs.Kafka({ brokers: mock.brokers, clientId: 'fence-init', logLevel: kafkajs.logLevel.DEBUG, logCreator })
  for (let i = 0; i < 2; i++) {
    const p = kafka.producer({ transactionalId: 'fence-init-tx', maxInFlightRequests: 1 })
    await p.connect()
    await (await p.transaction()).abort()
    await p.disconnect()
  }
  assert.is(inits.length, 2, 'one InitProducerId per producer')
  if (inits[1].producerId === inits[0].producerId && inits[1].producerEpoch > inits[0].producerEpoch) return
  console.log(`  SKIP [kafka] "a second InitProducerId with the same transactionalId bumps the epoch of the same producer id": librdkafka 2.0.2 mock ignores the transactionalId; observed: ${JSON.stringify(inits)}`)
})

test('a newer producer with the same transactionalId fences the older one: its commit throws fenced and readers never see its records', async () => {
  const id = `fence-tx-${process.pid}`
  const old = await bus.producer({ transactionalId: id })
  const t = await old.begin()
  await t.send([rec('fence-a', 'zombie-1')])
  const fresh = await bus.producer({ transactionalId: id }) // InitProducerId: a broker bumps the epoch here
  let commitError: unknown = null
  try {
    await t.send([rec('fence-a', 'zombie-2')])
    await t.commit()
  } catch (e) {
    commitError = e
  }
  if (commitError !== null) {
    assert.instance(commitError, BusError)
    assert.is((commitError as BusError).code, 'fenced')
  }
  const t2 = await fresh.begin()
  await t2.send([rec('fence-a', 'fresh')])
  await t2.commit()
  await old.close()
  await fresh.close()
  const seen = await readAll('fence-a', 0)
  assert.ok(seen.includes('fresh'), `the newer producer's commit is visible: ${JSON.stringify(seen)}`)
  const zombie = seen.filter((v) => v.startsWith('zombie'))
  if (commitError !== null && zombie.length === 0) return
  // One SKIP line per test (the test runner counts SKIP lines as skipped tests).
  console.log(`  SKIP [kafka] "the older producer's commit throws fenced and read_committed readers never see its records": librdkafka 2.0.2 mock does not fence (every InitProducerId gets a new producer id) and writes no abort markers; observed: commit ${commitError === null ? 'succeeded' : `threw ${String(commitError)}`}, reader got ${JSON.stringify(seen)}`)
})

test('a commit the broker answers INVALID_PRODUCER_EPOCH (injected on the mock) throws BusError fenced, and the transaction is over', async () => {
  const p = await bus.producer({ transactionalId: `fence-inject-${process.pid}` })
  const t = await p.begin()
  await t.send([rec('fence-b', 'x')])
  await t.sendOffsets('fence-group', [{ topic: 'fence-in', partition: 0, offset: 1 }])
  await mock.injectRequestErrors(END_TXN, INVALID_PRODUCER_EPOCH, 1)
  let error: unknown = null
  await t.commit().catch((e: unknown) => (error = e))
  assert.instance(error, BusError)
  assert.is((error as BusError).code, 'fenced', String(error))
  assert.match(String((error as Error).message), /INVALID_PRODUCER_EPOCH/)
  let after: unknown = null
  await t.commit().catch((e: unknown) => (after = e))
  assert.is((after as BusError | null)?.code, 'txn-state', 'a failed commit ends the transaction')
  await p.close()
})

test.after(async () => {
  await bus.close()
  await mock.stop()
})
test.run()
