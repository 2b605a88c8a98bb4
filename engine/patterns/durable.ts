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
 * Pipelined, with group commit: while a transaction's commit waits for the bus to make it durable
 * (journal: the fdatasync of the transaction log, on the thread pool), the next batches are
 * polled and processed, and committed together in the next transaction (at most
 * `commitRecordsMax` input records), so one sync covers what the CPU prepared during the last
 * one (after the group commit of database write-ahead logs). That transaction begins only after
 * the previous commit succeeded; if it failed, the prepared batches are dropped with it and read
 * again after the rewind (the processor contract already allows a batch to be processed more
 * than once). At most one commit is in flight, so outputs keep batch order.
 */
import { BusError, type BusBackend, type BusConsumer, type BusProducer, type ConsumedRecord, type PartitionPosition, type ProducerRecord, type RebalanceListener } from '../bus/index.js'
import { bytesCodec, type Codec } from './codec.js'
import { decodeRecord, deferred, settleLoop, PATTERN_DEFAULTS, sleep, type PatternRecord, type Subscription } from './subscription.js'

/** The application side of a durable subscription. */
export interface DurableProcessor<V> {
  /**
   * Processes one batch (records of several partitions, in offset order per partition) and
   * returns the outputs to commit with it. May be called again with the same records after a
   * failure, and for the next batch before the previous one's commit is confirmed: it must not
   * have effects outside its return value. Throwing fails the batch (retried).
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
  /** Most records per batch (one poll, one onNext call). Default: the bus's pollRecordsMax. */
  batchSizeMax?: number
  /**
   * Most input records per transaction, >= 1: batches polled while the previous commit syncs are
   * committed together, up to this. Default {@link PATTERN_DEFAULTS.commitRecordsMax}.
   */
  commitRecordsMax?: number
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
  /**
   * Told the outcome of every onNext call's outputs, in onNext order: once per transaction when
   * it commits or fails, and once per group of processed batches dropped without a transaction
   * (the previous commit failed, or a later batch of the group failed to decode or process; they
   * are read and processed again after the rewind). `batches` counts the onNext calls covered,
   * `records` their input records. Batches still prepared when the subscription stops are
   * reported as not committed. For logs and tests that must tell committed outputs from
   * aborted ones on a bus whose readers cannot (a broker without abort markers).
   */
  onOutcome?(outcome: DurableOutcome): void
  /** Test hooks: called after the transaction's sends, before its commit. */
  faults?: { beforeCommit?(records: ConsumedRecord[]): void | Promise<void> }
}

/** What happened to the outputs of `batches` consecutive onNext calls (see `onOutcome`). */
export interface DurableOutcome {
  committed: boolean
  /** onNext calls covered, >= 1. */
  batches: number
  /** Input records of those calls. */
  records: number
  /** Why they were not committed (absent when committed). */
  error?: unknown
}

/** Counters of a durable subscription. */
export interface DurableStats {
  /** Transactions committed (each holds one or more polled batches). */
  batchesCommitted: number
  recordsCommitted: number
  batchesFailed: number
}

/**
 * The consumer's position in each partition `batch` read from (after the poll that read it), in
 * order of first appearance. A poll returns runs of records per partition, so the partition is
 * looked up only where it changes: no key built or hashed per record.
 */
function batchPositions(c: BusConsumer, batch: readonly ConsumedRecord[]): PartitionPosition[] {
  const positions: PartitionPosition[] = []
  let topic: string | null = null
  let partition = -1
  for (let i = 0; i < batch.length; i++) {
    const r = batch[i]
    if (r.partition === partition && r.topic === topic) continue
    topic = r.topic
    partition = r.partition
    if (positions.some((p) => p.partition === r.partition && p.topic === r.topic)) continue
    positions.push({ topic: r.topic, partition: r.partition, offset: c.position({ topic: r.topic, partition: r.partition }) })
  }
  return positions
}

/**
 * Starts a durable subscription. Returns at once; `ready` resolves once it is a group member.
 * `done` rejects after `retriesMax` consecutive failed batches, or on 'fenced' / 'closed'.
 */
export function startDurable<V>(opts: DurableOptions<V>): Subscription & { readonly stats: DurableStats } {
  if (opts.topics.length === 0) throw new Error('topics must name at least one topic, topics=[]')
  const retriesMax = opts.retriesMax ?? PATTERN_DEFAULTS.retriesMax
  const commitRecordsMax = opts.commitRecordsMax ?? PATTERN_DEFAULTS.commitRecordsMax
  if (!(Number.isInteger(commitRecordsMax) && commitRecordsMax >= 1)) throw new Error(`commitRecordsMax must be an integer >= 1, commitRecordsMax=${commitRecordsMax}`)
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

  /** onNext calls (and their input records) since the last reported outcome. */
  const calls = { batches: 0, records: 0 }
  /** Reports the outcome of the onNext calls counted since the last report, if any. */
  const report = (covered: { batches: number; records: number }, error: unknown): void => {
    if (covered.batches === 0 || opts.onOutcome === undefined) return
    opts.onOutcome(error === null ? { committed: true, ...covered } : { committed: false, ...covered, error })
  }
  const take = (): { batches: number; records: number } => {
    const t = { ...calls }
    calls.batches = 0
    calls.records = 0
    return t
  }

  /** Decodes and processes a batch; its positions are the consumer's after the poll that read it. */
  const prepare = async (c: BusConsumer, batch: ConsumedRecord[]): Promise<Prepared> => {
    const positions = batchPositions(c, batch)
    // bytesCodec decodes a value to itself, so a decoded record would be a field-by-field copy of
    // the consumed one: hand the consumed records over as they are (read-only to the processor,
    // as every input), in an array of their own.
    if (opts.codec === (bytesCodec as Codec<unknown>)) {
      const good = batch.slice() as unknown as PatternRecord<V>[]
      if (good.length > 0) {
        calls.batches++
        calls.records += good.length
      }
      return { batch, positions, outputs: good.length > 0 ? await opts.processor.onNext(good) : [] }
    }
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
    if (good.length > 0) {
      calls.batches++
      calls.records += good.length
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

  /** One transaction's worth of prepared batches as one (positions: the last of each partition). */
  const merge = (group: Prepared[]): Prepared => {
    if (group.length === 1) return group[0]
    const positions = new Map<string, PartitionPosition>()
    const batch: ConsumedRecord[] = []
    const outputs: ProducerRecord[] = []
    for (const g of group) {
      for (const p of g.positions) positions.set(`${p.topic}:${p.partition}`, p)
      // Loops, not flatMap: a group holds thousands of records and this runs once per commit.
      for (let i = 0; i < g.batch.length; i++) batch.push(g.batch[i])
      for (let i = 0; i < g.outputs.length; i++) outputs.push(g.outputs[i])
    }
    return { batch, positions: [...positions.values()], outputs }
  }

  const run = async (): Promise<void> => {
    consumer = await opts.bus.consumer({ groupId: opts.groupId, pollRecordsMax: opts.batchSizeMax, sessionTimeoutMs: opts.sessionTimeoutMs, autoOffsetReset: 'earliest' })
    producer = await opts.bus.producer({ transactionalId: opts.transactionalId })
    await consumer.subscribe(opts.topics, opts.listener)
    ready.resolve()
    const c = consumer
    const p = producer
    let failures = 0
    /**
     * The commit of the previous transaction, still in flight while the next batches are polled
     * and processed (at most one: the next transaction begins only once it succeeded). Resolves
     * to its error, or null; `inflightDone` turns true when it settles.
     */
    let inflight: Promise<unknown> | null = null
    let inflightDone = true
    let inflightCovers = { batches: 0, records: 0 }
    const settle = async (): Promise<unknown> => {
      const f = inflight
      inflight = null
      const e = f === null ? null : await f
      if (f !== null) report(inflightCovers, e)
      if (f !== null && e === null) failures = 0
      return e
    }
    /** Counts a failed transaction, then rewinds every owned partition to its committed position. */
    const failed = async (e: unknown): Promise<void> => {
      if (e instanceof BusError && (e.code === 'fenced' || e.code === 'closed')) throw e
      stats.batchesFailed++
      if (++failures > retriesMax) throw new Error(`durable ${opts.groupId}: ${failures} consecutive failed batches, last: ${(e as Error).message}`, { cause: e })
      await sleep(retryBackoffMs)
      await rewind(c)
    }
    try {
      while (!stopping) {
        const group: Prepared[] = []
        let records = 0
        let error: unknown = null
        const first = await c.poll({ timeoutMs: PATTERN_DEFAULTS.pollTimeoutMs, recordsMax: commitRecordsMax })
        if (stopping) break
        if (first.length > 0) {
          try {
            group.push(await prepare(c, first))
            records += first.length
          } catch (e) {
            error = e
          }
          // Group commit: while the previous commit syncs, read and process what is already
          // there. A macrotask turn per round lets the sync's completion in, so the group grows
          // to what the CPU prepares in one sync (bounded by commitRecordsMax), not past it.
          while (error === null && !inflightDone && records < commitRecordsMax && !stopping) {
            await new Promise<void>((r) => setImmediate(r))
            if (inflightDone) break
            const more = await c.poll({ timeoutMs: 0, recordsMax: commitRecordsMax - records })
            if (more.length === 0) break
            try {
              group.push(await prepare(c, more))
              records += more.length
            } catch (e) {
              error = e
            }
          }
        }
        // A failed previous commit voids these batches too: they were read past uncommitted
        // positions, and the rewind reads them again.
        const previous = await settle()
        if (stopping) break
        if (previous !== null) error = previous
        if (error !== null) {
          report(take(), error)
          await failed(error)
          continue
        }
        if (group.length > 0) {
          inflightDone = false
          inflightCovers = take()
          inflight = commit(c, p, merge(group)).then(
            () => ((inflightDone = true), null),
            (e: unknown) => ((inflightDone = true), e),
          )
        }
      }
    } finally {
      await settle()
      report(take(), new Error('not committed: the subscription stopped'))
    }
  }

  return { stats, ...settleLoop(run(), closeAll, ready, done, () => { stopping = true }) }
}
