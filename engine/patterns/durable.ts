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
 *
 * Pipelined one batch deep: while a batch's commit waits for the bus to make it durable (journal:
 * the fdatasync of the transaction log), the next batch is polled and processed. Its transaction
 * begins only after that commit succeeded; if it failed, the prepared batch is dropped with it
 * and both are read again after the rewind (the processor contract already allows a batch to be
 * processed more than once). At most one commit is in flight, so outputs keep batch order.
 */
import { BusError, type BusBackend, type BusConsumer, type BusProducer, type ConsumedRecord, type PartitionPosition, type ProducerRecord, type TopicPartition } from '../bus/index.js'
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

  /** A batch decoded and processed, ready to commit. */
  interface Prepared {
    batch: ConsumedRecord[]
    positions: PartitionPosition[]
    outputs: ProducerRecord[]
  }

  /** Decodes and processes a batch; its positions are the consumer's after the poll that read it. */
  const prepare = async (c: BusConsumer, batch: ConsumedRecord[]): Promise<Prepared> => {
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
    return { batch, positions, outputs: dead.length === 0 ? outputs : [...outputs, ...dead] }
  }

  /** Commits a prepared batch in one transaction; aborts it on any error. */
  const commit = async (c: BusConsumer, p: BusProducer, b: Prepared): Promise<void> => {
    const txn = await p.begin()
    try {
      if (b.outputs.length > 0) await txn.send(b.outputs)
      await txn.sendOffsets(c.groupMetadata() ?? opts.groupId, b.positions)
      await opts.faults?.beforeCommit?.(b.batch)
      await txn.commit()
    } catch (e) {
      await txn.abort().catch(() => {})
      throw e
    }
    stats.batchesCommitted++
    stats.recordsCommitted += b.batch.length
  }

  const run = async (): Promise<void> => {
    consumer = await opts.bus.consumer({ groupId: opts.groupId, pollRecordsMax: opts.batchSizeMax, sessionTimeoutMs: opts.sessionTimeoutMs, autoOffsetReset: 'earliest' })
    producer = await opts.bus.producer({ transactionalId: opts.transactionalId })
    await consumer.subscribe(opts.topics)
    ready.resolve()
    const c = consumer
    const p = producer
    let failures = 0
    /**
     * The commit of the previous batch, still in flight while the next batch is polled and
     * processed (at most one: the next transaction begins only once it succeeded). Resolves to
     * its error, or null.
     */
    let inflight: Promise<unknown> | null = null
    const settle = async (): Promise<unknown> => {
      const f = inflight
      inflight = null
      const e = f === null ? null : await f
      if (f !== null && e === null) failures = 0
      return e
    }
    /** Counts a failed batch, then rewinds every owned partition to its committed position. */
    const failed = async (e: unknown): Promise<void> => {
      if (e instanceof BusError && (e.code === 'fenced' || e.code === 'closed')) throw e
      stats.batchesFailed++
      if (++failures > retriesMax) throw new Error(`durable ${opts.groupId}: ${failures} consecutive failed batches, last: ${(e as Error).message}`, { cause: e })
      await sleep(retryBackoffMs)
      await rewind(c)
    }
    try {
      while (!stopping) {
        const batch = await c.poll({ timeoutMs: PATTERN_DEFAULTS.pollTimeoutMs })
        if (stopping) break
        let prepared: Prepared | null = null
        let error: unknown = null
        if (batch.length > 0) {
          try {
            prepared = await prepare(c, batch)
          } catch (e) {
            error = e
          }
        }
        // A failed previous commit voids this batch too: it was read past uncommitted positions,
        // and the rewind reads it again.
        const previous = await settle()
        if (stopping) break
        if (previous !== null) error = previous
        if (error !== null) {
          await failed(error)
          continue
        }
        if (prepared !== null) inflight = commit(c, p, prepared).then(() => null, (e: unknown) => e)
      }
    } finally {
      await settle()
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
