/**
 * Journal bus backend: the embedded, durable default. Topics, records and group positions live in
 * engine/journal durable queues under one directory:
 *
 * ```
 * <dir>/topics/                  topic specs, one record per createTopics entry
 * <dir>/t/<topic>/<partition>/   one durable queue per partition: the partition's records
 * <dir>/groups/                  committed group positions, in commit order
 * <dir>/txn/                     transaction log: one record per committed transaction
 * ```
 * (topic names are percent-encoded; record layouts in ./codec.ts).
 *
 * Every write (transactional or not, and consumer commits) goes through the transaction log, which
 * is the write-ahead log of the bus and the only queue fsynced per the `fsync` policy (one
 * fdatasync per commit); partitions and the group queue are written without fsync and redone from
 * it on recovery.
 *
 * Transactions: a commit first appends ONE record to the transaction log holding everything the
 * transaction decided: each partition's records with their offsets and the partition's end
 * offset, and the group positions (after Kafka's transaction coordinator, which logs the decision
 * before writing markers). That single append, flushed, is the commit point: engine/journal cuts
 * a torn record off on recovery, so a transaction is either in the log whole or not at all. Then
 * the commit writes each partition's records as one atomic `appendBatch` and the positions to the
 * group queue, every record stamped with the transaction's sequence number. Recovery (on open)
 * reads each partition and the group queue, finds the highest transaction sequence each holds,
 * and re-applies every logged transaction above it (redo). So after a crash at any point (kill -9
 * between the log append and the partition appends included) either the whole transaction
 * (records of every partition and positions) is visible, or none of it.
 *
 * Reads, groups, fencing: the in-process model of engine/bus/memory (read_committed visibility,
 * last stable offset, range assignor, membership within one process), rebuilt from the queues on
 * open; records of transactions open or aborted at a crash leave gaps in the offsets, which
 * consumers skip as they skip markers. Offsets survive restarts (each partition write records the
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
import {
  decodeList,
  decodeRecord,
  decodeUnit,
  encodeList,
  encodeRecord,
  encodeUnit,
  type GroupHeader,
  type TxnHeader,
} from './codec.js'

/** Options of {@link createJournalBus}. */
export interface JournalBusOptions {
  /** Directory holding the bus; created if missing. One process at a time. */
  dir: string
  /** engine/journal fsync policy of every queue. Default 'batch': fdatasync at each commit/send. */
  fsync?: FsyncPolicy
  /** Segment roll size of each queue, bytes. Default: engine/journal's (64 MiB). */
  segmentBytes?: number
}

/**
 * Opens (or creates) a journal bus at `opts.dir`, recovering it first (see the module doc).
 * Throws JournalLockedError when another process has it open, JournalCorruptionError (file and
 * offset) on damage other than a torn tail.
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

/** Fault points for crash tests: SLUICE_BUS_FAULT=after-txn-log|after-first-partition kills the process there. */
function faultAt(point: string): void {
  if (process.env.SLUICE_BUS_FAULT === point) process.kill(process.pid, 'SIGKILL')
}

function readAll(dir: string, each: (bytes: Uint8Array) => void): void {
  const t = Tailer.open({ dir })
  try {
    for (let r = t.next(); r !== null; r = t.next()) each(r.bytes)
  } finally {
    t.close()
  }
}

interface PartitionState {
  appender: Appender
  records: StoredRecord[]
  endOffset: number
  /** Highest transaction sequence applied to this partition. */
  appliedSeq: number
}

class JournalStore implements BusStore {
  private readonly dir: string
  private readonly fsync: FsyncPolicy | undefined
  private readonly segmentBytes: number | undefined
  private readonly topics = new Map<string, TopicSpec>()
  private readonly partitions = new Map<string, PartitionState>()
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
   * group queue are rebuilt from the transaction log on recovery, so one fdatasync per commit.
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
    readAll(path.join(this.dir, 'topics'), (b) => {
      const spec = decodeUnit<TopicSpec>(b).header
      this.topics.set(spec.name, spec)
    })
    for (const spec of this.topics.values()) {
      for (let p = 0; p < spec.partitions; p++) {
        const dir = this.partitionDir(spec.name, p)
        const state: PartitionState = { appender: this.open(dir), records: [], endOffset: 0, appliedSeq: 0 }
        readAll(dir, (b) => {
          const { header, record } = decodeRecord(b)
          state.records.push({ offset: header.o, record })
          if (header.e > state.endOffset) state.endOffset = header.e
          if (header.s > state.appliedSeq) state.appliedSeq = header.s
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
    readAll(path.join(this.dir, 'groups'), (b) => {
      const h = decodeUnit<GroupHeader>(b).header
      applyGroup({ groupId: h.g, positions: h.p.map(([topic, partition, offset]) => ({ topic, partition, offset })) })
      if (h.s > groupsSeq) groupsSeq = h.s
    })
    this.txnLog = this.open(path.join(this.dir, 'txn'), true)
    readAll(path.join(this.dir, 'txn'), (b) => {
      const { header, body } = decodeUnit<TxnHeader>(b)
      this.txnSeq = header.s
      const items = decodeList(body)
      let at = 0
      for (const part of header.parts) {
        const frames = items.slice(at, at + part.n)
        at += part.n
        const state = this.partitions.get(tpKey(part.t, part.p))
        if (!state) throw new Error(`transaction log entry ${header.s} names an unknown partition, topic=${part.t} partition=${part.p}`)
        if (state.appliedSeq >= header.s) continue
        state.appender.appendBatch(frames)
        state.appender.flush()
        for (const f of frames) state.records.push({ offset: decodeRecord(f).header.o, record: decodeRecord(f).record })
        state.endOffset = Math.max(state.endOffset, part.e)
        state.appliedSeq = header.s
      }
      if (header.s > groupsSeq && header.groups.length > 0) {
        this.appendGroups(header.groups, header.s)
        header.groups.forEach(applyGroup)
      }
    })
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
    this.topicLog!.append(encodeUnit({ ...spec }, null))
    this.topicLog!.flush()
    this.topics.set(spec.name, spec)
  }

  appendRecords(writes: PartitionWrite[]): void {
    // Logged like a transaction: the transaction log is the write-ahead log of every write.
    this.commitTransaction(writes, [])
  }

  commitTransaction(writes: PartitionWrite[], groups: GroupWrite[]): void {
    this.checkOpen()
    const seq = this.txnSeq + 1
    const frames = writes.map((w) => w.records.map((r) => encodeRecord(r, w.endOffset, seq)))
    const header: TxnHeader = { s: seq, parts: writes.map((w, i) => ({ t: w.topic, p: w.partition, n: frames[i].length, e: w.endOffset })), groups }
    // The commit point: one record, atomic on recovery.
    this.txnLog!.append(encodeUnit(header, encodeList(frames.flat())))
    this.txnLog!.flush()
    this.txnSeq = seq
    faultAt('after-txn-log')
    writes.forEach((w, i) => {
      const a = this.partition(w.topic, w.partition).appender
      a.appendBatch(frames[i])
      a.flush()
      if (i === 0) faultAt('after-first-partition')
    })
    if (groups.length > 0) {
      this.appendGroups(groups, seq)
      this.groupLog!.flush()
    }
  }

  commitOffsets(group: GroupWrite): void {
    this.commitTransaction([], [group])
  }

  private appendGroups(groups: GroupWrite[], seq: number): void {
    this.groupLog!.appendBatch(
      groups.map((g) => encodeUnit({ s: seq, g: g.groupId, p: g.positions.map((p) => [p.topic, p.partition, p.offset]) } satisfies GroupHeader, null)),
    )
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
