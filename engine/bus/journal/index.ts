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
 * redone from it on recovery.
 *
 * Transactions: a commit first appends ONE record to the transaction log holding everything the
 * transaction decided: each written partition's batch (its records with their offsets, the
 * partition's end offset) and the group positions (after Kafka's transaction coordinator, which
 * logs the decision before writing markers). That single append, flushed, is the commit point:
 * engine/journal cuts a torn record off on recovery, so a transaction is either in the log whole
 * or not at all. Then the commit hands each partition's batch (the same bytes, encoded once) to
 * the partition's appender and the positions to the group queue's, every record stamped with the
 * transaction's sequence number. Those appenders are not flushed per commit: they write when their
 * buffer passes engine/journal's writeBufferBytes, and at close. Recovery (on open) reads each
 * partition and the group queue, finds the highest transaction sequence each holds, and re-applies
 * every logged transaction above it (redo). So after a crash at any point (kill -9 between the
 * log append and the partition appends, or with any mix of partitions flushed) either the whole
 * transaction (records of every partition and positions) is visible, or none of it.
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
import { EntryWriter, decodeBatch, decodeGroupEntry, decodeTopic, decodeTxn, encodeGroupEntry, encodeTopic, encodeTxn } from './codec.js'

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
 * `after-txn-log` (commit point written, nothing else), `after-first-partition` (the first
 * written partition's queue flushed to its file, the others and the group queue not).
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
    for (const spec of this.topics.values()) {
      for (let p = 0; p < spec.partitions; p++) {
        const dir = this.partitionDir(spec.name, p)
        const state: PartitionState = { appender: this.open(dir), records: [], endOffset: 0, appliedSeq: 0 }
        readAll(dir, `partition ${spec.name}/${p}`, (b, where) => {
          // A copy: record values are views into it, and the tailer reuses its buffer.
          const batch = decodeBatch(b.slice(), where)
          for (const r of batch.records) state.records.push(r)
          if (batch.endOffset > state.endOffset) state.endOffset = batch.endOffset
          if (batch.seq > state.appliedSeq) state.appliedSeq = batch.seq
        })
        this.partitions.set(tpKey(spec.name, p), state)
        if (state.appliedSeq > this.txnSeq) this.txnSeq = state.appliedSeq
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
      e.groups.forEach(applyGroup)
      if (e.seq > groupsSeq) groupsSeq = e.seq
    })
    if (groupsSeq > this.txnSeq) this.txnSeq = groupsSeq
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
        const batch = decodeBatch(part.batch.slice(), `${where} part ${part.topic}/${part.partition}`)
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
    this.commitTransaction(writes, [])
  }

  commitTransaction(writes: PartitionWrite[], groups: GroupWrite[]): void {
    this.checkOpen()
    // Every partition is resolved before the commit point, so a logged entry always redoes.
    const states = writes.map((w) => this.partition(w.topic, w.partition))
    const seq = this.txnSeq + 1
    const { entry, batches } = encodeTxn(this.writer, seq, writes, groups)
    // The commit point: one record, fdatasynced per the policy, atomic on recovery.
    this.txnLog!.append(entry)
    this.txnLog!.flush()
    this.txnSeq = seq
    if (faultAt('after-txn-log')) die()
    // Partitions and the group queue are written without flush: their appenders write when
    // their buffers fill (writeBufferBytes) or at close; a crash loses only what recovery
    // redoes from the log. So a commit costs one write and one fdatasync, not one per queue.
    for (let i = 0; i < states.length; i++) {
      states[i].appender.append(batches[i])
      states[i].appliedSeq = seq
      if (i === 0 && faultAt('after-first-partition')) {
        states[i].appender.flush()
        die()
      }
    }
    // Last: encoding the group entry reuses the writer, whose views `batches` are.
    if (groups.length > 0) this.groupLog!.append(encodeGroupEntry(this.writer, seq, groups))
  }

  commitOffsets(group: GroupWrite): void {
    this.commitTransaction([], [group])
  }

  private checkOpen(): void {
    if (this.closed) throw new Error(`journal bus store is closed, dir=${this.dir}`)
  }

  close(): void {
    if (this.closed) return
    this.closed = true
    for (const s of this.partitions.values()) s.appender.close()
    this.topicLog?.close()
    this.groupLog?.close()
    this.txnLog?.close()
  }
}
