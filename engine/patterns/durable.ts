/**
 * Durable pattern (consume-process-produce, exactly once): after Corda 5's DurableSubscription
 * and Kafka's transactional read-process-write loop (KIP-98, KIP-447).
 *
 * A member of consumer group `groupId` reads its partitions from the oldest unconsumed record in
 * batches. Per batch the processor returns output records (any topics); the outputs, the
 * dead-lettered undecodable inputs and the consumed positions are committed in ONE bus
 * transaction (journal: one atomic transaction-log append; kafka: a transaction carrying the
 * offsets, sendOffsetsToTransaction). A failed batch (processor error, commit error, partitions
 * revoked: 'not-assigned') is aborted, every owned partition is rewound to its committed position
 * and the batch is read and processed again, so each input's outputs appear exactly once to
 * read_committed readers. A crash before commit leaves nothing; the next member resumes at the
 * committed positions.
 */
import { BusError, type BusBackend, type BusConsumer, type BusProducer, type ConsumedRecord, type ProducerRecord, type RebalanceListener, type TopicPartition } from '../bus/index.js'
import type { Codec } from './codec.js'
import { decodeRecord, deferred, settleLoop, PATTERN_DEFAULTS, sleep, type PatternRecord, type Subscription } from './subscription.js'

/** The application side of a durable subscription. */
export interface DurableProcessor<V> {
  /**
   * Processes one batch (records of several partitions, in offset order per partition) and
   * returns the outputs to commit with it. May be called again with the same records after a
   * failure: it must not have effects outside its return value. Throwing fails the batch (retried).
   */
  onNext(records: PatternRecord<V>[]): ProducerRecord[] | Promise<ProducerRecord[]>
}

/** Options of {@link startDurable}. */
export interface DurableOptions<V> {
  bus: BusBackend
  groupId: string
  topics: string[]
  /** Fences older instances; unique per instance (e.g. `${groupId}-${host}-${n}`). */
  transactionalId: string
  codec: Codec<V>
  processor: DurableProcessor<V>
  /** Records that fail to decode go here (raw, with header `error`), exactly once, in the batch's transaction. Without it a decode error fails the batch. */
  deadLetterTopic?: string
  /** Most records per batch. Default: the bus's pollRecordsMax. */
  batchSizeMax?: number
  /** Default {@link PATTERN_DEFAULTS.retriesMax}. */
  retriesMax?: number
  /** Default {@link PATTERN_DEFAULTS.retryBackoffMs}. */
  retryBackoffMs?: number
  sessionTimeoutMs?: number
  /**
   * Told which partitions this member gains and loses (run inside the pattern's poll, between
   * batches; `assigned` after the new partitions' positions are set to the group's committed
   * offsets). For observing how a group of processes splits the input, e.g. in logs.
   */
  listener?: RebalanceListener
  /** Test hooks: called after the transaction's sends, before its commit. */
  faults?: { beforeCommit?(records: ConsumedRecord[]): void | Promise<void> }
}

/** Counters of a durable subscription. */
export interface DurableStats {
  batchesCommitted: number
  recordsCommitted: number
  batchesFailed: number
}

/**
 * Starts a durable subscription. Returns at once; `ready` resolves once it is a group member.
 * `done` rejects after `retriesMax` consecutive failed batches, or on 'fenced' / 'closed'.
 */
export function startDurable<V>(opts: DurableOptions<V>): Subscription & { readonly stats: DurableStats } {
  if (opts.topics.length === 0) throw new Error('topics must name at least one topic, topics=[]')
  const retriesMax = opts.retriesMax ?? PATTERN_DEFAULTS.retriesMax
  const retryBackoffMs = opts.retryBackoffMs ?? PATTERN_DEFAULTS.retryBackoffMs
  const stats: DurableStats = { batchesCommitted: 0, recordsCommitted: 0, batchesFailed: 0 }
  const ready = deferred()
  const done = deferred()
  let stopping = false
  let consumer: BusConsumer | null = null
  let producer: BusProducer | null = null

  const closeAll = async (): Promise<void> => {
    await consumer?.close().catch(() => {})
    await producer?.close().catch(() => {})
  }

  /** Seeks every owned partition back to its committed position (or the start). */
  const rewind = async (c: BusConsumer): Promise<void> => {
    const owned = c.assignment()
    if (owned.length === 0) return
    const committed = await c.committed(owned)
    const starts = await opts.bus.offsets(owned)
    owned.forEach((tp, i) => c.seek(tp, committed[i] ?? starts[i].start))
  }

  const processBatch = async (c: BusConsumer, p: BusProducer, batch: ConsumedRecord[]): Promise<void> => {
    const tps = new Map<string, TopicPartition>()
    for (const r of batch) tps.set(`${r.topic}:${r.partition}`, { topic: r.topic, partition: r.partition })
    const positions = [...tps.values()].map((tp) => ({ ...tp, offset: c.position(tp) }))
    const good: PatternRecord<V>[] = []
    const dead: ProducerRecord[] = []
    for (const r of batch) {
      try {
        good.push(decodeRecord(r, opts.codec))
      } catch (e) {
        if (opts.deadLetterTopic === undefined) throw e
        dead.push({ topic: opts.deadLetterTopic, key: r.key, value: r.value, headers: { ...r.headers, error: String((e as Error).message), source: `${r.topic}:${r.partition}:${r.offset}` } })
      }
    }
    const outputs = good.length > 0 ? await opts.processor.onNext(good) : []
    const txn = await p.begin()
    try {
      if (outputs.length + dead.length > 0) await txn.send([...outputs, ...dead])
      await txn.sendOffsets(c.groupMetadata() ?? opts.groupId, positions)
      await opts.faults?.beforeCommit?.(batch)
      await txn.commit()
    } catch (e) {
      await txn.abort().catch(() => {})
      throw e
    }
  }

  const run = async (): Promise<void> => {
    consumer = await opts.bus.consumer({ groupId: opts.groupId, pollRecordsMax: opts.batchSizeMax, sessionTimeoutMs: opts.sessionTimeoutMs, autoOffsetReset: 'earliest' })
    producer = await opts.bus.producer({ transactionalId: opts.transactionalId })
    await consumer.subscribe(opts.topics, opts.listener)
    ready.resolve()
    let failures = 0
    while (!stopping) {
      const c = consumer
      const batch = await c.poll({ timeoutMs: PATTERN_DEFAULTS.pollTimeoutMs })
      if (batch.length === 0 || stopping) continue
      try {
        await processBatch(c, producer, batch)
        stats.batchesCommitted++
        stats.recordsCommitted += batch.length
        failures = 0
      } catch (e) {
        if (stopping) return
        if (e instanceof BusError && (e.code === 'fenced' || e.code === 'closed')) throw e
        stats.batchesFailed++
        if (++failures > retriesMax) throw new Error(`durable ${opts.groupId}: ${failures} consecutive failed batches, last: ${(e as Error).message}`, { cause: e })
        await sleep(retryBackoffMs)
        await rewind(c)
      }
    }
  }

  settleLoop(run(), closeAll, ready, done)

  return {
    stats,
    ready: ready.promise,
    done: done.promise,
    async stop(o = {}) {
      stopping = true
      if (o.abandon) {
        await closeAll()
        return
      }
      await done.promise.catch(() => {})
    },
  }
}
