/**
 * Journal bus backend: the embedded, durable default. Topics, records and group positions live in
 * engine/journal durable queues under one directory:
 *
 * ```
 * <dir>/topics/                  topic specs, one record per createTopics entry
 * <dir>/t/<topic>/<partition>/   one durable queue per partition: one batch record per write
 * <dir>/txn/                     transaction log: one record per commit (the write-ahead log)
 * <dir>/checkpoint               what the truncated log no longer holds (./checkpoint.ts)
 * ```
 * (topic names are percent-encoded; binary layouts in ./codec.ts).
 *
 * Every write (transactional or not, and consumer commits) goes through the transaction log, the
 * only queue fsynced per the `fsync` policy (one write and one fdatasync per commit); partitions
 * are written without fsync, redone from the log on recovery and synced at checkpoints. A
 * transaction commit's fdatasync runs on libuv's thread pool (Appender.flushAsync): the entry is
 * written before commitTransaction returns, so commits stay in call order, and the commit is
 * confirmed (and becomes visible) when the sync finishes, in seq order; meanwhile the caller
 * prepares its next batch. Sends and consumer commits sync on the calling thread.
 *
 * Transactions: a commit first appends ONE record to the transaction log holding everything the
 * transaction decided: each written partition's batch (its records with their offsets, the
 * partition's end and stable offsets) and the group positions (after Kafka's transaction
 * coordinator, which logs the decision before writing markers). That single append, flushed, is
 * the commit point: engine/journal cuts a torn record off on recovery, so a transaction is either
 * in the log whole or not at all. Then the commit hands each partition's batch (the same bytes,
 * encoded once) to the partition's appender, stamped with the transaction's sequence number.
 * Those appenders write when their buffer passes engine/journal's writeBufferBytes, and at close.
 * So a partition file may get a batch before the log entry naming it is on disk; the log decides:
 * a batch counts iff its seq is at most the log's (or the checkpoint's) highest and not in a range
 * a recovery found lost. Recovery (on open) reads each partition backwards from its tail to its
 * newest batch that counts, redoes every logged transaction above it, records the seqs above the
 * log's highest that some partition holds as a lost range (as Kafka readers stop at the last
 * stable offset; later seqs are numbered above them), and checkpoints. So after a crash at any
 * point (kill -9 between the log append and the partition appends, with any mix of partitions
 * flushed, inside a checkpoint, or a power loss that kept a partition's batch but not its log
 * entry) either the whole transaction (records of every partition and positions) is visible, or
 * none of it.
 *
 * Checkpoints (every `checkpointBytes` of log and at open): sync the partitions written since the
 * last one, replace the checkpoint file (durable seq, lost ranges, committed group positions,
 * partition end offsets) atomically, then delete the log segments before the durable seq's entry.
 * The log thus stays about `checkpointBytes` long whatever the history.
 *
 * Why not write each record only once, to its partition, with a small commit record in the log
 * (Kafka's control records)? Then the commit record may reach the disk only after every written
 * partition's records did: one fdatasync per written partition before the log's, where this
 * layout pays one fdatasync per commit for a second memcpy of the records.
 *
 * Reads, groups, fencing: the in-process model of engine/bus/memory (read_committed visibility,
 * last stable offset, range assignor, membership within one process) over a bounded hot window
 * per partition (`hotRecordsMax`, `hotBytesMax`); older records are read back from the segment
 * files (./cold.ts), so memory does not grow with the history. Records of transactions open or
 * aborted at a crash leave gaps in the offsets, which consumers skip as they skip markers. Offsets
 * survive restarts. Retention and compaction per topic: ./maintenance.ts. Limits: one open bus
 * per directory (every queue's appender lock, across processes and worker threads); consumer
 * groups are members of this process only.
 */
import fs from 'node:fs';
import path from 'node:path';
import { Appender, Tailer, removeRewriteLeftovers, type FsyncPolicy } from '../../journal/index.js';
import { fsyncDir } from '../../journal/segment.js';
import { tpKey } from '../partitioner.js';
import { createStoredBus } from '../memory/index.js';
import type { HotWindowLimits } from '../memory/log.js';
import { BusError, type BusBackend, type TopicSpec } from '../types.js';
import type { BusStore, GroupWrite, PartitionWrite, RestoredBus } from '../store.js';
import {
  EntryWriter,
  decodeBatchHeader,
  decodeGroupEntry,
  decodeTopic,
  decodeTxn,
  decodeTxnSeq,
  encodeTopic,
  encodeTxn,
} from './codec.js';
import { JournalColdPartition, READ_BUFFER_BYTES, type PartitionFiles } from './cold.js';
import { readCheckpoint, writeCheckpoint, type Checkpoint, type SeqRange } from './checkpoint.js';
import {
  applyRetention,
  compactPartition,
  emptyReport,
  type MaintainedPartition,
  type MaintenanceReport,
} from './maintenance.js';

export type { MaintenanceReport } from './maintenance.js';
export { COMPACTION_DEFAULTS } from './maintenance.js';

/** The journal bus: a {@link BusBackend} plus its maintenance run. */
export interface JournalBus extends BusBackend {
  /**
   * Runs retention and compaction now on every topic that configures them (the bus also runs
   * them every `maintenanceIntervalMs`). `nowMs` is the clock for ages (default Date.now()).
   * Throws BusError 'closed' after close(), 'backend' for an I/O error (the files stay
   * consistent: every segment is old or new).
   */
  maintain(nowMs?: number): MaintenanceReport;
}

/** Options of {@link createJournalBus}. */
export interface JournalBusOptions {
  /** Directory holding the bus; created if missing. One appender per queue: one open bus per directory. */
  dir: string;
  /** engine/journal fsync policy of the transaction log. Default 'batch': one fdatasync per commit/send. */
  fsync?: FsyncPolicy;
  /** Segment roll size of each queue, bytes. Default: engine/journal's (64 MiB). */
  segmentBytes?: number;
  /** Most offsets of one partition held in memory. Default {@link JOURNAL_BUS_DEFAULTS}. */
  hotRecordsMax?: number;
  /** Most key and value bytes of one partition held in memory. Default {@link JOURNAL_BUS_DEFAULTS}. */
  hotBytesMax?: number;
  /**
   * Transaction-log bytes written between checkpoints: a checkpoint makes the partitions durable,
   * records the group positions, and deletes the log's segments it covers. Default
   * {@link JOURNAL_BUS_DEFAULTS}.
   */
  checkpointBytes?: number;
  /** Period of the retention and compaction run, ms; 0 = only on maintain(). Default {@link JOURNAL_BUS_DEFAULTS}. */
  maintenanceIntervalMs?: number;
}

/** Defaults of {@link JournalBusOptions}. */
export const JOURNAL_BUS_DEFAULTS = {
  hotRecordsMax: 131_072,
  hotBytesMax: 32 * 1024 * 1024,
  checkpointBytes: 64 * 1024 * 1024,
  maintenanceIntervalMs: 60_000,
} as const;

/**
 * Opens (or creates) a journal bus at `opts.dir`, recovering it first (see the module doc).
 * Throws JournalLockedError when another process, or another worker thread of this process, has
 * it open (the message names the lock file in the directory); JournalCorruptionError (file and
 * offset) on damage other than a torn tail; Error naming the queue and record for an entry that
 * does not decode (e.g. a directory written by another layout); Error naming the option for a
 * bad option.
 */
export function createJournalBus(opts: JournalBusOptions): Promise<JournalBus> {
  let store: JournalStore;
  try {
    store = new JournalStore(opts);
  } catch (e) {
    return Promise.reject(e);
  }
  try {
    const restored = store.recover();
    const bus = createStoredBus('journal', store, restored);
    const maintain = (nowMs?: number): MaintenanceReport => {
      bus.allocValue(0); // throws BusError 'closed' after close()
      try {
        return store.maintain(nowMs);
      } catch (e) {
        throw new BusError(
          'backend',
          `journal bus maintenance failed, dir=${opts.dir}: ${(e as Error).message}`,
          { cause: e },
        );
      }
    };
    store.startMaintenance();
    return Promise.resolve(Object.assign(bus, { maintain }));
  } catch (e) {
    store.close();
    return Promise.reject(e);
  }
}

/**
 * Fault points for crash tests, SLUICE_BUS_FAULT=<point> kills the process there:
 * `after-txn-log` (the commit point written and synced, partition queues not written),
 * `after-first-partition` (also the first written partition's queue flushed to its file, the
 * others not), `partitions-before-txn-log` (every written partition's batch flushed to its file,
 * the transaction-log entry never written: the state a power loss can leave, as partition queues
 * are not fsynced before the log), `after-checkpoint-file` (a checkpoint written, the log
 * segments it covers not deleted yet), `compaction-segment-written` (the first rewritten segment's
 * new files written, nothing renamed), `compaction-index-removed` (also its old index removed),
 * `compaction-after-first-segment` (the first segment replaced, the second's new files written).
 */
function faultAt(point: string): boolean {
  return process.env.SLUICE_BUS_FAULT === point;
}

function die(): never {
  process.kill(process.pid, 'SIGKILL');
  throw new Error('unreachable: SIGKILL to self returned');
}

/** Calls `each` with every record of the queue at `dir` and a name for errors (`<queue> record <i>`). */
function readAll(
  dir: string,
  queue: string,
  each: (bytes: Uint8Array, where: string) => void,
): void {
  const t = Tailer.open({ dir });
  try {
    for (let r = t.next(); r !== null; r = t.next()) each(r.bytes, `${queue} record ${r.index}`);
  } finally {
    t.close();
  }
}

function positiveInteger(name: string, v: number | undefined, dflt: number): number {
  if (v === undefined) return dflt;
  if (!Number.isSafeInteger(v) || v < 1)
    throw new Error(`journal bus option ${name} must be an integer >= 1, ${name}=${String(v)}`);
  return v;
}

class PartitionState implements PartitionFiles, MaintainedPartition {
  /** End offset after the last write handed to the appender (markers included). */
  end = 0;
  /** Highest transaction sequence applied to this partition (in its queue or its appender's buffer). */
  appliedSeq = 0;
  /** Written since the last checkpoint. */
  dirty = false;
  /** The appender's nextIndex at the last checkpoint: sync() from there. */
  syncedIndex = 0;
  generation = 0;
  readonly cold: JournalColdPartition;

  constructor(
    readonly topic: string,
    readonly partition: number,
    readonly dir: string,
    readonly appender: Appender,
    private readonly store: JournalStore,
  ) {
    this.syncedIndex = appender.nextIndex;
    this.cold = new JournalColdPartition(this);
  }

  nextIndex(): number {
    return this.appender.nextIndex;
  }

  flush(): void {
    this.appender.flush();
  }

  isValid(seq: number): boolean {
    return this.store.isValid(seq);
  }

  endOffset(): number {
    return this.end;
  }

  activeSegmentFirstIndex(): number {
    return this.appender.activeSegmentFirstIndex;
  }

  dropSegmentsBefore(index: number): number[] {
    return this.appender.dropSegmentsBefore(index);
  }

  isSettled(seq: number): boolean {
    return this.store.isValid(seq) && seq <= this.store.settledSeq;
  }

  holdOffset(): number | null {
    return this.store.holdOffset(this.topic, this.partition);
  }

  filesChanged(): void {
    this.generation++;
  }
}

/** A commit written to the log whose fdatasync has not finished. */
interface Syncing {
  seq: number;
  /** Queue index of the commit's log entry. */
  logIndex: number;
  groups: GroupWrite[];
  first: PartitionState | null;
  resolve: () => void;
  reject: (e: Error) => void;
}

class JournalStore implements BusStore {
  readonly hotWindow: HotWindowLimits;
  private readonly dir: string;
  private readonly fsync: FsyncPolicy | undefined;
  private readonly segmentBytes: number | undefined;
  private readonly checkpointBytes: number;
  private readonly maintenanceIntervalMs: number;
  private maintenanceTimer: NodeJS.Timeout | null = null;
  /** The last failure of a timed maintenance run (the bus goes on; maintain() throws it). */
  maintenanceError: Error | null = null;
  private readonly topics = new Map<string, TopicSpec>();
  private readonly partitions = new Map<string, PartitionState>();
  /** Scratch every entry is encoded into (the appenders copy it). */
  private readonly writer = new EntryWriter();
  private topicLog: Appender | null = null;
  private txnLog: Appender | null = null;
  private txnSeq = 0;
  private readonly syncing: Syncing[] = [];
  /** Highest seq known durable in the log, and the queue index after its entry. */
  private durableSeq = 0;
  private durableLogNext = 0;
  /** Committed group positions of durable transactions: groupId -> tpKey -> offset. */
  private readonly committed = new Map<string, Map<string, number>>();
  /** Seqs of partition batches that never counted (their log entries were lost). */
  private skipped: SeqRange[] = [];
  /** Batches with a seq above this do not count (while recovering; after a failure). */
  private validMax = Infinity;
  private logBytesSinceCheckpoint = 0;
  /** The first failed log write or sync: the store refuses every later write. */
  private failure: Error | null = null;
  private closed = false;

  constructor(opts: JournalBusOptions) {
    if (typeof opts?.dir !== 'string' || opts.dir === '')
      throw new Error(`dir must be a non-empty string, dir=${String(opts?.dir)}`);
    this.dir = opts.dir;
    this.fsync = opts.fsync;
    this.segmentBytes = opts.segmentBytes;
    this.hotWindow = {
      recordsMax: Math.max(
        2,
        positiveInteger('hotRecordsMax', opts.hotRecordsMax, JOURNAL_BUS_DEFAULTS.hotRecordsMax),
      ),
      bytesMax: positiveInteger('hotBytesMax', opts.hotBytesMax, JOURNAL_BUS_DEFAULTS.hotBytesMax),
    };
    this.checkpointBytes = positiveInteger(
      'checkpointBytes',
      opts.checkpointBytes,
      JOURNAL_BUS_DEFAULTS.checkpointBytes,
    );
    const interval = opts.maintenanceIntervalMs ?? JOURNAL_BUS_DEFAULTS.maintenanceIntervalMs;
    if (!Number.isSafeInteger(interval) || interval < 0)
      throw new Error(
        `journal bus option maintenanceIntervalMs must be an integer >= 0, maintenanceIntervalMs=${String(interval)}`,
      );
    this.maintenanceIntervalMs = interval;
  }

  /** Highest seq whose transaction is durable in the log. */
  get settledSeq(): number {
    return this.durableSeq;
  }

  /** Lowest committed position on the partition over the groups that committed there, or null. */
  holdOffset(topic: string, partition: number): number | null {
    const k = tpKey(topic, partition);
    let min: number | null = null;
    for (const m of this.committed.values()) {
      const o = m.get(k);
      if (o !== undefined && (min === null || o < min)) min = o;
    }
    return min;
  }

  /** Starts the timed maintenance run (when any topic may need it). */
  startMaintenance(): void {
    if (this.maintenanceIntervalMs === 0) return;
    this.maintenanceTimer = setInterval(() => {
      if (this.closed || this.failure) return;
      try {
        this.maintain();
      } catch (e) {
        this.maintenanceError = e instanceof Error ? e : new Error(String(e));
      }
    }, this.maintenanceIntervalMs);
    this.maintenanceTimer.unref();
  }

  /** Retention and compaction of every topic that configures them (./maintenance.ts). */
  maintain(nowMs = Date.now()): MaintenanceReport {
    this.checkOpen();
    const report = emptyReport();
    const fault = process.env.SLUICE_BUS_FAULT ?? '';
    const onStep = fault.startsWith('compaction-')
      ? (done: number, step: string): void => {
          if (fault === 'compaction-segment-written' && done === 0 && step === 'written') die();
          if (fault === 'compaction-index-removed' && done === 0 && step === 'index-removed') die();
          if (fault === 'compaction-after-first-segment' && done === 1 && step === 'written') die();
        }
      : undefined;
    for (const spec of this.topics.values()) {
      if (!spec.retention && !spec.compacted) continue;
      for (let p = 0; p < spec.partitions; p++) {
        const state = this.partition(spec.name, p);
        if (spec.compacted) compactPartition(state, spec.compaction ?? {}, nowMs, report, onStep);
        if (spec.retention) applyRetention(state, spec.retention, nowMs, report);
      }
    }
    return report;
  }

  /**
   * Only the transaction log (and the rare topic log) fsync per the policy: partitions are redone
   * from the transaction log on recovery and synced at checkpoints, so one fdatasync per commit.
   */
  private open(dir: string, durable = false): Appender {
    return Appender.open({
      dir,
      fsync: durable ? this.fsync : 'none',
      ...(this.segmentBytes === undefined ? {} : { segmentBytes: this.segmentBytes }),
    });
  }

  private partitionDir(topic: string, partition: number): string {
    return path.join(this.dir, 't', encodeURIComponent(topic), String(partition));
  }

  private openPartition(spec: TopicSpec, p: number): PartitionState {
    const dir = this.partitionDir(spec.name, p);
    // A compaction that crashed before renaming its new segment: the old one is whole.
    removeRewriteLeftovers(dir);
    const state = new PartitionState(spec.name, p, dir, this.open(dir), this);
    this.partitions.set(tpKey(spec.name, p), state);
    return state;
  }

  /** Whether a partition batch or group entry of transaction `seq` counts. */
  isValid(seq: number): boolean {
    if (seq > this.validMax) return false;
    for (const r of this.skipped) if (seq >= r.from && seq <= r.to) return false;
    return true;
  }

  /**
   * Opens every queue and makes them agree with the transaction log: finds what each partition
   * holds from its tail, redoes logged transactions a partition misses, then checkpoints. Reads
   * the log (bounded by the checkpoints) and each partition's tail, never a whole partition.
   */
  recover(): RestoredBus {
    fs.mkdirSync(this.dir, { recursive: true });
    this.topicLog = this.open(path.join(this.dir, 'topics'), true);
    readAll(path.join(this.dir, 'topics'), 'topics', (b, where) => {
      const spec = decodeTopic(b, where);
      this.topics.set(spec.name, spec);
    });
    const checkpointFile = path.join(this.dir, 'checkpoint');
    const ck: Checkpoint | null = readCheckpoint(checkpointFile);
    // The log decides what is committed: a partition batch counts only if its transaction is in
    // the log (or was, before a checkpoint truncated it). Seqs are given out one by one and the
    // log loses at most a suffix in a crash, so "in the log" is "at most the highest seq logged
    // and not in a range a recovery found missing". A directory written before checkpoints
    // existed has its whole log: its gaps are the missing ranges.
    this.txnLog = this.open(path.join(this.dir, 'txn'), true);
    let logMax = ck?.seq ?? 0;
    const logged: number[] = [];
    readAll(path.join(this.dir, 'txn'), 'txn', (b, where) => {
      const seq = decodeTxnSeq(b, where);
      if (seq > logMax) logMax = seq;
      if (!ck) logged.push(seq);
    });
    this.skipped = ck ? ck.skipped.map((r) => ({ ...r })) : gapsOf(logged);
    this.validMax = logMax;
    let maxSeen = logMax;
    let skipped = 0;
    for (const spec of this.topics.values()) {
      for (let p = 0; p < spec.partitions; p++) {
        const state = this.openPartition(spec, p);
        // From the tail back to the newest batch that counts: batches after it never will.
        const t = Tailer.open({ dir: state.dir, from: 'end', readBufferBytes: READ_BUFFER_BYTES });
        try {
          for (let r = t.previous(); r !== null; r = t.previous()) {
            const h = decodeBatchHeader(r.bytes, `partition ${spec.name}/${p} record ${r.index}`);
            if (h.seq > maxSeen) maxSeen = h.seq;
            if (this.isValid(h.seq)) {
              state.appliedSeq = h.seq;
              state.end = h.endOffset;
              break;
            }
            skipped++;
          }
        } finally {
          t.close();
        }
        if (state.appliedSeq === 0) state.end = ck?.ends.get(tpKey(spec.name, p)) ?? 0;
      }
    }
    if (ck) {
      for (const [g, m] of ck.committed) this.committed.set(g, new Map(m));
    }
    let groupsSeq = ck?.seq ?? 0;
    const legacyGroups = path.join(this.dir, 'groups');
    if (!ck && fs.existsSync(legacyGroups)) {
      // The group queue of the layout before checkpoints: positions now live in the checkpoint.
      readAll(legacyGroups, 'groups', (b, where) => {
        const e = decodeGroupEntry(b, where);
        if (e.seq > maxSeen) maxSeen = e.seq;
        if (!this.isValid(e.seq)) {
          skipped++;
          return;
        }
        e.groups.forEach((g) => this.applyGroup(g));
        if (e.seq > groupsSeq) groupsSeq = e.seq;
      });
    }
    this.skippedEntries = skipped;
    // Seqs above the log's that some queue holds never count; later seqs are numbered above them.
    if (maxSeen > logMax) this.skipped.push({ from: logMax + 1, to: maxSeen });
    this.txnSeq = maxSeen;
    readAll(path.join(this.dir, 'txn'), 'txn', (b, where) => {
      const txn = decodeTxn(b, where);
      for (const part of txn.parts) {
        const state = this.partitions.get(tpKey(part.topic, part.partition));
        if (!state)
          throw new Error(
            `transaction-log entry names an unknown partition, ${where} seq=${txn.seq} topic=${part.topic} partition=${part.partition}`,
          );
        if (state.appliedSeq >= txn.seq) continue;
        // Redo: the queue gets the batch the commit would have appended.
        state.appender.append(part.batch);
        state.end = decodeBatchHeader(
          part.batch,
          `${where} part ${part.topic}/${part.partition}`,
        ).endOffset;
        state.appliedSeq = txn.seq;
        state.dirty = true;
      }
      if (txn.seq > groupsSeq) txn.groups.forEach((g) => this.applyGroup(g));
    });
    this.validMax = Infinity;
    this.durableSeq = this.txnSeq;
    this.durableLogNext = this.txnLog.nextIndex;
    // Also a first checkpoint of a directory of the older layout, after which its group queue
    // goes. Every segment is synced: the previous process may have sealed some unsynced since its
    // last checkpoint, and the log entries that could redo them are about to be deleted.
    for (const s of this.partitions.values()) {
      s.dirty = true;
      s.syncedIndex = 0;
    }
    this.checkpoint();
    if (fs.existsSync(legacyGroups)) fs.rmSync(legacyGroups, { recursive: true, force: true });
    const committed = new Map<string, Map<string, number>>();
    for (const [g, m] of this.committed) committed.set(g, new Map(m));
    return {
      topics: [...this.topics.values()].map((spec) => ({
        spec,
        partitions: Array.from({ length: spec.partitions }, (_, p) => {
          const s = this.partitions.get(tpKey(spec.name, p))!;
          return { endOffset: s.end, cold: s.cold };
        }),
      })),
      committed,
    };
  }

  /** Partition batches and group entries recovery skipped: their seq is not in the log. For tests. */
  skippedEntries = 0;

  private applyGroup(g: GroupWrite): void {
    let m = this.committed.get(g.groupId);
    if (!m) this.committed.set(g.groupId, (m = new Map()));
    for (const p of g.positions) m.set(tpKey(p.topic, p.partition), p.offset);
  }

  /**
   * Makes everything the log holds up to `durableSeq` durable without the log, then lets go of
   * the log segments before it: 1. every partition written since the last checkpoint is synced
   * (engine/journal sync: its segments written since then, whatever the fsync policy); 2. the
   * checkpoint file (seq, missing seq ranges, group positions, partition end offsets) replaces
   * the previous one atomically (write, fsync, rename, fsync the directory); 3. the log segments
   * whose entries all precede `durableLogNext` are deleted. A crash between any two steps leaves
   * a directory that recovers to the same state: the log still holds what the checkpoint does
   * not cover.
   */
  private checkpoint(): void {
    for (const s of this.partitions.values()) {
      if (!s.dirty) continue;
      s.appender.sync(s.syncedIndex);
      s.syncedIndex = s.appender.nextIndex;
      s.dirty = false;
    }
    const ends = new Map<string, number>();
    for (const [k, s] of this.partitions) ends.set(k, s.end);
    writeCheckpoint(path.join(this.dir, 'checkpoint'), {
      seq: this.durableSeq,
      skipped: this.skipped,
      committed: this.committed,
      ends,
    });
    if (faultAt('after-checkpoint-file')) die();
    this.txnLog!.dropSegmentsBefore(this.durableLogNext);
    this.logBytesSinceCheckpoint = 0;
  }

  private partition(topic: string, partition: number): PartitionState {
    const s = this.partitions.get(tpKey(topic, partition));
    if (!s) throw new Error(`no journal for partition, topic=${topic} partition=${partition}`);
    return s;
  }

  coldPartition(topic: string, partition: number): JournalColdPartition {
    return this.partition(topic, partition).cold;
  }

  createTopic(spec: TopicSpec): void {
    this.checkOpen();
    checkTopicOptions(spec);
    for (let p = 0; p < spec.partitions; p++) this.openPartition(spec, p);
    // The spec is written after the partition queues exist, so a recovered spec always has them.
    this.topicLog!.append(encodeTopic(spec));
    this.topicLog!.flush();
    fsyncDir(path.resolve(this.dir));
    this.topics.set(spec.name, spec);
  }

  appendRecords(writes: PartitionWrite[]): void {
    // Logged like a transaction: the transaction log is the write-ahead log of every write.
    this.write(writes, []);
    this.syncNow([]);
  }

  commitOffsets(group: GroupWrite): void {
    this.write([], [group]);
    this.syncNow([group]);
  }

  /**
   * Writes the commit point now; the promise resolves once the log's fdatasync (on the thread
   * pool) has it, so the caller can prepare its next batch meanwhile (one sync in flight while
   * the CPU works: the pipelining the durable pattern uses).
   */
  commitTransaction(writes: PartitionWrite[], groups: GroupWrite[]): Promise<void> {
    const first = this.write(writes, groups);
    const seq = this.txnSeq;
    const logIndex = this.txnLog!.nextIndex - 1;
    let synced: Promise<void>;
    try {
      synced = this.txnLog!.flushAsync();
    } catch (e) {
      throw this.fail(e);
    }
    const done = new Promise<void>((resolve, reject) =>
      this.syncing.push({ seq, logIndex, groups, first, resolve, reject }),
    );
    synced.then(
      () => this.durable(seq, logIndex + 1),
      (e: unknown) => this.fail(e),
    );
    return done;
  }

  /**
   * Appends a transaction's log entry (buffered), then its partition batches to their queues'
   * appenders, which write them to their files only when their buffers fill. The entry is synced
   * by the caller. Returns the first written partition (for the fault points).
   */
  private write(writes: PartitionWrite[], groups: GroupWrite[]): PartitionState | null {
    this.checkOpen();
    // Every partition is resolved before anything is written, so a logged entry always redoes.
    const states = writes.map((w) => this.partition(w.topic, w.partition));
    const seq = this.txnSeq + 1;
    const { entry, batches } = encodeTxn(this.writer, seq, writes, groups);
    if (faultAt('partitions-before-txn-log')) {
      states.forEach((st, i) => {
        st.appender.append(batches[i]);
        st.appender.flush();
      });
      die();
    }
    try {
      this.txnLog!.append(entry);
    } catch (e) {
      throw this.fail(e);
    }
    this.txnSeq = seq;
    this.logBytesSinceCheckpoint += entry.length;
    for (let i = 0; i < states.length; i++) {
      const st = states[i];
      st.appender.append(batches[i]);
      st.appliedSeq = seq;
      st.end = writes[i].endOffset;
      st.dirty = true;
    }
    return states[0] ?? null;
  }

  /** Writes and fdatasyncs the log on this thread (the synchronous calls); `groups` are the call's own. */
  private syncNow(groups: GroupWrite[]): void {
    try {
      this.txnLog!.flush();
    } catch (e) {
      throw this.fail(e);
    }
    this.durable(this.txnSeq, this.txnLog!.nextIndex, groups);
  }

  /**
   * The log is durable up to `seq` (its entries before queue index `logNext`): confirms the
   * commits it covers, in seq order, then applies `ownGroups` (a synchronous call's, whose seq
   * is `seq`), then checkpoints if the log has grown by `checkpointBytes` since the last one.
   */
  private durable(seq: number, logNext: number, ownGroups: GroupWrite[] = []): void {
    if (this.failure) return;
    if (seq > this.durableSeq) {
      this.durableSeq = seq;
      this.durableLogNext = logNext;
    }
    while (this.syncing.length > 0 && this.syncing[0].seq <= this.durableSeq) {
      const c = this.syncing.shift()!;
      if (faultAt('after-txn-log')) die();
      if (c.first && faultAt('after-first-partition')) {
        c.first.appender.flush();
        die();
      }
      c.groups.forEach((g) => this.applyGroup(g));
      c.resolve();
    }
    ownGroups.forEach((g) => this.applyGroup(g));
    if (this.logBytesSinceCheckpoint >= this.checkpointBytes && !this.closed) {
      try {
        this.checkpoint();
      } catch (e) {
        this.fail(e);
      }
    }
  }

  /** Records the first failure and rejects every commit waiting for a sync; returns the error to throw. */
  private fail(e: unknown): Error {
    const err = e instanceof Error ? e : new Error(String(e));
    if (!this.failure) {
      this.failure = err;
      // What the log may not hold must not be read back from the partition files.
      this.validMax = this.durableSeq;
    }
    for (const c of this.syncing.splice(0)) c.reject(err);
    return err;
  }

  private checkOpen(): void {
    if (this.closed) throw new Error(`journal bus store is closed, dir=${this.dir}`);
    if (this.failure)
      throw new Error(
        `journal bus store failed earlier and takes no more writes (reopen the bus), dir=${this.dir}: ${this.failure.message}`,
        { cause: this.failure },
      );
  }

  /** Syncs the log first (confirming commits still syncing), then closes every queue. */
  close(): void {
    if (this.closed) return;
    // Closed first: the confirmations below run no checkpoint on closing queues.
    this.closed = true;
    if (this.maintenanceTimer) clearInterval(this.maintenanceTimer);
    try {
      this.txnLog?.close();
      if (!this.failure && this.txnLog) this.durable(this.txnSeq, this.txnLog.nextIndex);
    } catch (e) {
      this.fail(e);
    }
    for (const s of this.partitions.values()) {
      s.cold.close();
      s.appender.close();
    }
    this.topicLog?.close();
  }
}

/** The seqs in [1, max] missing from `seqs` (a whole log, ascending), as ranges. */
function gapsOf(seqs: number[]): SeqRange[] {
  const out: SeqRange[] = [];
  let expect = 1;
  for (const seq of seqs) {
    if (seq > expect) out.push({ from: expect, to: seq - 1 });
    if (seq >= expect) expect = seq + 1;
  }
  return out;
}

function optionalNumber(topic: string, field: string, v: unknown, min: number): void {
  if (v === undefined) return;
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min) {
    throw new BusError(
      'bad-input',
      `topic option ${field} must be an integer >= ${min}, topic=${topic} ${field}=${String(v)}`,
    );
  }
}

/** Throws BusError 'bad-input' naming the topic and field for a bad retention or compaction option. */
function checkTopicOptions(spec: TopicSpec): void {
  const r = spec.retention;
  if (r !== undefined) {
    if (typeof r !== 'object' || r === null)
      throw new BusError(
        'bad-input',
        `topic option retention must be an object, topic=${spec.name}`,
      );
    optionalNumber(spec.name, 'retention.bytesMax', r.bytesMax, 0);
    optionalNumber(spec.name, 'retention.ageMsMax', r.ageMsMax, 0);
    if (r.deleteUncommitted !== undefined && typeof r.deleteUncommitted !== 'boolean') {
      throw new BusError(
        'bad-input',
        `topic option retention.deleteUncommitted must be a boolean, topic=${spec.name}`,
      );
    }
  }
  const c = spec.compaction;
  if (c !== undefined) {
    if (!spec.compacted)
      throw new BusError(
        'bad-input',
        `topic option compaction needs compacted: true, topic=${spec.name}`,
      );
    optionalNumber(spec.name, 'compaction.tombstoneRetentionMs', c.tombstoneRetentionMs, 0);
    optionalNumber(spec.name, 'compaction.keysMax', c.keysMax, 1);
  }
}
