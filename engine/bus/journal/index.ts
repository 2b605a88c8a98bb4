/**
 * Journal bus backend: the embedded, durable default. Topics, records and group positions live in
 * engine/journal durable queues under one directory:
 *
 * ```
 * <dir>/topics/                  topic specs, one record per createTopics entry
 * <dir>/t/<topic>/<partition>/   one durable queue per partition: one batch record per write
 * <dir>/groups/                  committed group positions, one record per commit
 * <dir>/txn/                     transaction log: one record per committed transaction
 * ```
 * (topic names are percent-encoded; binary layouts in ./codec.ts).
 *
 * Every write (transactional or not, and consumer commits) goes through the transaction log, which
 * is the write-ahead log of the bus and the only queue fsynced per the `fsync` policy (one write
 * and one fdatasync per commit); partitions and the group queue are written without fsync and
 * redone from it on recovery. A transaction commit's fdatasync runs on libuv's thread pool
 * (Appender.flushAsync): the entry is written before commitTransaction returns, so commits stay
 * in call order, and the commit is confirmed (and becomes visible) when the sync finishes, in seq
 * order; meanwhile the caller prepares its next batch. Sends and consumer commits sync on the
 * calling thread.
 *
 * Transactions: a commit first appends ONE record to the transaction log holding everything the
 * transaction decided: each written partition's batch (its records with their offsets, the
 * partition's end offset) and the group positions (after Kafka's transaction coordinator, which
 * logs the decision before writing markers). That single append, flushed, is the commit point:
 * engine/journal cuts a torn record off on recovery, so a transaction is either in the log whole
 * or not at all. Then the commit hands each partition's batch (the same bytes, encoded once) to
 * the partition's appender and the positions to the group queue's, every record stamped with the
 * transaction's sequence number. Those appenders are not flushed per commit: they write when their
 * buffer passes engine/journal's writeBufferBytes, and at close (after the log is synced). So a
 * partition file may get a batch before the log entry naming it is on disk; the log decides:
 * recovery (on open) first collects the seqs the log holds, skips partition batches and group
 * entries whose seq it lacks (as Kafka readers stop at the last stable offset; later seqs are
 * numbered above the skipped ones, so they never become valid), finds the highest seq each
 * partition and the group queue hold, and re-applies every logged transaction above it (redo).
 * So after a crash at any point (kill -9 between the log append and the partition appends, with
 * any mix of partitions flushed, or a power loss that kept a partition's batch but not its log
 * entry) either the whole transaction (records of every partition and positions) is visible, or
 * none of it.
 *
 * Why not write each record only once, to its partition, with a small commit record in the log
 * (Kafka's control records)? Then the commit record may reach the disk only after every written
 * partition's records did: one fdatasync per written partition before the log's, where this
 * layout pays one fdatasync per commit for a second memcpy of the records.
 *
 * Reads, groups, fencing: the in-process model of engine/bus/memory (read_committed visibility,
 * last stable offset, range assignor, membership within one process), rebuilt from the queues on
 * open; records of transactions open or aborted at a crash leave gaps in the offsets, which
 * consumers skip as they skip markers. Offsets survive restarts (each partition batch records the
 * partition's end offset, markers included). Limits: the whole bus is held in memory after open
 * (the queues are read once, at open); one process opens a directory at a time (the journal's
 * appender lock); the transaction log is never truncated.
 */
import fs from 'node:fs'
import path from 'node:path'
import { Appender, Tailer, type FsyncPolicy } from '../../journal/index.js'
import { tpKey } from '../partitioner.js'
import { createStoredBus } from '../memory/index.js'
import type { BusBackend, TopicSpec } from '../types.js'
import type { BusStore, GroupWrite, PartitionWrite, RestoredBus, StoredRecord } from '../store.js'
import { EntryWriter, decodeBatch, decodeGroupEntry, decodeTopic, decodeTxn, decodeTxnSeq, encodeGroupEntry, encodeTopic, encodeTxn } from './codec.js'

/** Options of {@link createJournalBus}. */
export interface JournalBusOptions {
  /** Directory holding the bus; created if missing. One process at a time. */
  dir: string
  /** engine/journal fsync policy of the transaction log. Default 'batch': one fdatasync per commit/send. */
  fsync?: FsyncPolicy
  /** Segment roll size of each queue, bytes. Default: engine/journal's (64 MiB). */
  segmentBytes?: number
}

/**
 * Opens (or creates) a journal bus at `opts.dir`, recovering it first (see the module doc).
 * Throws JournalLockedError when another process has it open, JournalCorruptionError (file and
 * offset) on damage other than a torn tail, Error naming the queue and record for an entry that
 * does not decode (e.g. a directory written by another layout).
 */
export function createJournalBus(opts: JournalBusOptions): Promise<BusBackend> {
  const store = new JournalStore(opts)
  try {
    const restored = store.recover()
    return Promise.resolve(createStoredBus('journal', store, restored))
  } catch (e) {
    store.close()
    return Promise.reject(e)
  }
}

/**
 * Fault points for crash tests, SLUICE_BUS_FAULT=<point> kills the process there:
 * `after-txn-log` (the commit point written and synced, partition and group queues not written),
 * `after-first-partition` (also the first written partition's queue flushed to its file, the
 * others and the group queue not), `partitions-before-txn-log` (every written partition's batch
 * flushed to its file, the transaction-log entry never written: the state a power loss can leave,
 * as partition queues are not fsynced before the log).
 */
function faultAt(point: string): boolean {
  return process.env.SLUICE_BUS_FAULT === point
}

function die(): never {
  process.kill(process.pid, 'SIGKILL')
  throw new Error('unreachable: SIGKILL to self returned')
}

/** Calls `each` with every record of the queue at `dir` and a name for errors (`<queue> record <i>`). */
function readAll(dir: string, queue: string, each: (bytes: Uint8Array, where: string) => void): void {
  const t = Tailer.open({ dir })
  try {
    for (let r = t.next(), i = 0; r !== null; r = t.next(), i++) each(r.bytes, `${queue} record ${i}`)
  } finally {
    t.close()
  }
}

/** A copy of `b`, also when it is a Buffer (whose slice() is a view, not a copy). */
function copyOf(b: Uint8Array): Uint8Array {
  return Uint8Array.prototype.slice.call(b)
}

interface PartitionState {
  appender: Appender
  records: StoredRecord[]
  endOffset: number
  /** Highest transaction sequence applied to this partition (in its queue or its appender's buffer). */
  appliedSeq: number
}

class JournalStore implements BusStore {
  private readonly dir: string
  private readonly fsync: FsyncPolicy | undefined
  private readonly segmentBytes: number | undefined
  private readonly topics = new Map<string, TopicSpec>()
  private readonly partitions = new Map<string, PartitionState>()
  /** Scratch every entry is encoded into (the appenders copy it). */
  private readonly writer = new EntryWriter()
  private topicLog: Appender | null = null
  private groupLog: Appender | null = null
  private txnLog: Appender | null = null
  private txnSeq = 0
  /** Commits written to the log whose fdatasync has not finished, in seq order. */
  private readonly syncing: { seq: number; first: PartitionState | null; resolve: () => void; reject: (e: Error) => void }[] = []
  /** Highest seq known durable in the log. */
  private durableSeq = 0
  /** The first failed log write or sync: the store refuses every later write. */
  private failure: Error | null = null
  private closed = false

  constructor(opts: JournalBusOptions) {
    if (typeof opts?.dir !== 'string' || opts.dir === '') throw new Error(`dir must be a non-empty string, dir=${String(opts?.dir)}`)
    this.dir = opts.dir
    this.fsync = opts.fsync
    this.segmentBytes = opts.segmentBytes
  }

  /**
   * Only the transaction log (and the rare topic log) fsync per the policy: partitions and the
   * group queue are redone from the transaction log on recovery, so one fdatasync per commit.
   */
  private open(dir: string, durable = false): Appender {
    return Appender.open({ dir, fsync: durable ? this.fsync : 'none', ...(this.segmentBytes === undefined ? {} : { segmentBytes: this.segmentBytes }) })
  }

  private partitionDir(topic: string, partition: number): string {
    return path.join(this.dir, 't', encodeURIComponent(topic), String(partition))
  }

  /** Opens every queue, reads it, redoes logged transactions the partitions or groups miss. */
  recover(): RestoredBus {
    fs.mkdirSync(this.dir, { recursive: true })
    this.topicLog = this.open(path.join(this.dir, 'topics'), true)
    readAll(path.join(this.dir, 'topics'), 'topics', (b, where) => {
      const spec = decodeTopic(b, where)
      this.topics.set(spec.name, spec)
    })
    // The log decides what is committed: a partition batch or group entry counts only if the
    // log holds its seq. Queues are not synced before the log, so after a power loss one may
    // hold a batch whose log entry never reached the disk (Kafka's last stable offset plays this
    // role there). Such a batch is skipped, and later seqs are numbered above it so it never
    // becomes valid.
    const logged = new Set<number>()
    readAll(path.join(this.dir, 'txn'), 'txn', (b, where) => logged.add(decodeTxnSeq(b, where)))
    let skipped = 0
    for (const spec of this.topics.values()) {
      for (let p = 0; p < spec.partitions; p++) {
        const dir = this.partitionDir(spec.name, p)
        const state: PartitionState = { appender: this.open(dir), records: [], endOffset: 0, appliedSeq: 0 }
        readAll(dir, `partition ${spec.name}/${p}`, (b, where) => {
          // A copy: record values are views into it, and the tailer reuses its buffer.
          const batch = decodeBatch(copyOf(b), where)
          if (batch.seq > this.txnSeq) this.txnSeq = batch.seq
          if (!logged.has(batch.seq)) {
            skipped++
            return
          }
          for (const r of batch.records) state.records.push(r)
          if (batch.endOffset > state.endOffset) state.endOffset = batch.endOffset
          if (batch.seq > state.appliedSeq) state.appliedSeq = batch.seq
        })
        this.partitions.set(tpKey(spec.name, p), state)
      }
    }
    const committed = new Map<string, Map<string, number>>()
    const applyGroup = (g: GroupWrite): void => {
      let m = committed.get(g.groupId)
      if (!m) committed.set(g.groupId, (m = new Map()))
      for (const p of g.positions) m.set(tpKey(p.topic, p.partition), p.offset)
    }
    let groupsSeq = 0
    this.groupLog = this.open(path.join(this.dir, 'groups'))
    readAll(path.join(this.dir, 'groups'), 'groups', (b, where) => {
      const e = decodeGroupEntry(b, where)
      if (e.seq > this.txnSeq) this.txnSeq = e.seq
      if (!logged.has(e.seq)) {
        skipped++
        return
      }
      e.groups.forEach(applyGroup)
      if (e.seq > groupsSeq) groupsSeq = e.seq
    })
    this.skippedEntries = skipped
    this.txnLog = this.open(path.join(this.dir, 'txn'), true)
    readAll(path.join(this.dir, 'txn'), 'txn', (b, where) => {
      const txn = decodeTxn(b, where)
      if (txn.seq > this.txnSeq) this.txnSeq = txn.seq
      for (const part of txn.parts) {
        const state = this.partitions.get(tpKey(part.topic, part.partition))
        if (!state) throw new Error(`transaction-log entry names an unknown partition, ${where} seq=${txn.seq} topic=${part.topic} partition=${part.partition}`)
        if (state.appliedSeq >= txn.seq) continue
        // Redo: the queue gets the batch the commit would have appended.
        state.appender.append(part.batch)
        const batch = decodeBatch(copyOf(part.batch), `${where} part ${part.topic}/${part.partition}`)
        for (const r of batch.records) state.records.push(r)
        if (batch.endOffset > state.endOffset) state.endOffset = batch.endOffset
        state.appliedSeq = txn.seq
      }
      if (txn.seq > groupsSeq && txn.groups.length > 0) {
        this.groupLog!.append(encodeGroupEntry(this.writer, txn.seq, txn.groups))
        txn.groups.forEach(applyGroup)
        groupsSeq = txn.seq
      }
    })
    for (const s of this.partitions.values()) s.appender.flush()
    this.groupLog.flush()
    this.durableSeq = this.txnSeq
    return {
      topics: [...this.topics.values()].map((spec) => ({
        spec,
        partitions: Array.from({ length: spec.partitions }, (_, p) => {
          const s = this.partitions.get(tpKey(spec.name, p))!
          return { records: s.records.splice(0), endOffset: s.endOffset }
        }),
      })),
      committed,
    }
  }

  /** Partition batches and group entries recovery skipped: their seq is not in the log. For tests. */
  skippedEntries = 0

  private partition(topic: string, partition: number): PartitionState {
    const s = this.partitions.get(tpKey(topic, partition))
    if (!s) throw new Error(`no journal for partition, topic=${topic} partition=${partition}`)
    return s
  }

  createTopic(spec: TopicSpec): void {
    this.checkOpen()
    for (let p = 0; p < spec.partitions; p++) {
      this.partitions.set(tpKey(spec.name, p), { appender: this.open(this.partitionDir(spec.name, p)), records: [], endOffset: 0, appliedSeq: 0 })
    }
    // The spec is written after the partition queues exist, so a recovered spec always has them.
    this.topicLog!.append(encodeTopic(spec))
    this.topicLog!.flush()
    this.topics.set(spec.name, spec)
  }

  appendRecords(writes: PartitionWrite[]): void {
    // Logged like a transaction: the transaction log is the write-ahead log of every write.
    this.write(writes, [])
    this.syncNow()
  }

  commitOffsets(group: GroupWrite): void {
    this.write([], [group])
    this.syncNow()
  }

  /**
   * Writes the commit point now; the promise resolves once the log's fdatasync (on the thread
   * pool) has it, so the caller can prepare its next batch meanwhile (one sync in flight while
   * the CPU works: the pipelining the durable pattern uses).
   */
  commitTransaction(writes: PartitionWrite[], groups: GroupWrite[]): Promise<void> {
    const first = this.write(writes, groups)
    const seq = this.txnSeq
    let synced: Promise<void>
    try {
      synced = this.txnLog!.flushAsync()
    } catch (e) {
      throw this.fail(e)
    }
    const done = new Promise<void>((resolve, reject) => this.syncing.push({ seq, first, resolve, reject }))
    synced.then(
      () => this.durable(seq),
      (e: unknown) => this.fail(e),
    )
    return done
  }

  /**
   * Appends a transaction's log entry (buffered), then its partition batches and group entry to
   * their queues' appenders, which write them to their files only when their buffers fill. The
   * entry is synced by the caller. Returns the first written partition (for the fault points).
   */
  private write(writes: PartitionWrite[], groups: GroupWrite[]): PartitionState | null {
    this.checkOpen()
    // Every partition is resolved before anything is written, so a logged entry always redoes.
    const states = writes.map((w) => this.partition(w.topic, w.partition))
    const seq = this.txnSeq + 1
    const { entry, batches } = encodeTxn(this.writer, seq, writes, groups)
    if (faultAt('partitions-before-txn-log')) {
      states.forEach((st, i) => {
        st.appender.append(batches[i])
        st.appender.flush()
      })
      die()
    }
    try {
      this.txnLog!.append(entry)
    } catch (e) {
      throw this.fail(e)
    }
    this.txnSeq = seq
    for (let i = 0; i < states.length; i++) {
      states[i].appender.append(batches[i])
      states[i].appliedSeq = seq
    }
    // Last: encoding the group entry reuses the writer, whose views `batches` are.
    if (groups.length > 0) this.groupLog!.append(encodeGroupEntry(this.writer, seq, groups))
    return states[0] ?? null
  }

  /** Writes and fdatasyncs the log on this thread (the synchronous calls). */
  private syncNow(): void {
    try {
      this.txnLog!.flush()
    } catch (e) {
      throw this.fail(e)
    }
    this.durable(this.txnSeq)
  }

  /** The log is durable up to `seq`: confirms the commits it covers, in seq order. */
  private durable(seq: number): void {
    if (this.failure) return
    if (seq > this.durableSeq) this.durableSeq = seq
    while (this.syncing.length > 0 && this.syncing[0].seq <= this.durableSeq) {
      const c = this.syncing.shift()!
      if (faultAt('after-txn-log')) die()
      if (c.first && faultAt('after-first-partition')) {
        c.first.appender.flush()
        die()
      }
      c.resolve()
    }
  }

  /** Records the first failure and rejects every commit waiting for a sync; returns the error to throw. */
  private fail(e: unknown): Error {
    const err = e instanceof Error ? e : new Error(String(e))
    if (!this.failure) this.failure = err
    for (const c of this.syncing.splice(0)) c.reject(err)
    return err
  }

  private checkOpen(): void {
    if (this.closed) throw new Error(`journal bus store is closed, dir=${this.dir}`)
    if (this.failure) throw new Error(`journal bus store failed earlier and takes no more writes (reopen the bus), dir=${this.dir}: ${this.failure.message}`, { cause: this.failure })
  }

  /** Syncs the log first (confirming commits still syncing), then closes every queue. */
  close(): void {
    if (this.closed) return
    this.closed = true
    try {
      this.txnLog?.close()
      if (!this.failure) this.durable(this.txnSeq)
    } catch (e) {
      this.fail(e)
    }
    for (const s of this.partitions.values()) s.appender.close()
    this.topicLog?.close()
    this.groupLog?.close()
  }
}
