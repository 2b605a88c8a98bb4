/**
 * The journal pump sink ({@link JournalPumpSink}: a capture pump's PumpSink into journal queues,
 * used by actors/cdc-pump.ts) and its crash reconciliation (PumpSink.recentStagingIds on the
 * journal): which staged changes of the last batch the target partitions already hold, read
 * from their ends backwards.
 *
 * The window is the last `limit` staged changes of each partition, not its last `limit` records:
 * an initial load's read events (staging id "") are appended after the claimed changes of the
 * same cycle, and before that cycle's ack (engine/cdc/pump.ts, loadCycle), as many as a chunk has
 * rows of the pump's keys (CDC_DEFAULTS.loadChunkRows). Counted, they pushed the unacked changes
 * out of a window of batchSizeMax * pumps records, so a kill -9 between append and ack appended
 * them again (staging id 572 twice in test/cdc-initial-load-crash, PostgreSQL).
 */
import { Appender, Tailer, type FsyncPolicy } from '../journal/index.js';
import {
  ChangeRecordWriter,
  EnvelopeView,
  decodeChange,
  EVENT_TYPE_CHANGE,
} from '../codec/index.js';
import type { StagedChange } from './config.js';
import { RecordRefusedError, type PumpSink } from './pump.js';

/**
 * Encodes staged change `ch` as its capture record (an EVENT_TYPE_CHANGE envelope, engine/codec
 * ChangeRecordWriter) stamped with `installation`, into `writer`'s reused buffer; returns its
 * size in bytes. The record is `writer.bytes()` until the next build.
 */
export function buildChangeRecord(
  writer: ChangeRecordWriter,
  ch: StagedChange,
  installation: string,
): number {
  return writer.build({
    stagingId: ch.stagingId,
    table: ch.table,
    op: ch.op,
    key: ch.key,
    before: ch.before,
    after: ch.after,
    txid: ch.txid,
    commitTimeMs: ch.timeMs,
    installation,
  });
}

/** One target queue of a {@link JournalPumpSink}. */
export interface JournalPumpTarget {
  /** The queue's partition count: a change goes to partition keyHash mod partitions. */
  partitions: number;
  /** Journal directory of each partition this pump appends (p mod pumps = pump). */
  dirs: Record<number, string>;
  /** engine/journal segment roll size, bytes. */
  segmentBytes: number;
  fsync: FsyncPolicy;
}

/** What a {@link JournalPumpSink} ships, and where. */
export interface JournalPumpSinkOptions {
  /** Capture source name, for messages. */
  source: string;
  /** The pump's actor name and index (of `pumps`), for messages. */
  actor: string;
  pump: number;
  pumps: number;
  /** Target queue name -> its partitions. */
  targets: Record<string, JournalPumpTarget>;
  /** Table name -> target queue name. */
  tableTargets: Record<string, string>;
  /** Largest record, bytes (the source's recordBytesMax): a larger one is refused. */
  recordBytesMax: number;
  /** The queue notifier (engine/journal/notifier.ts) of a partition: its readers wake on each flush. */
  notifierOf?: (queue: string, partition: number) => SharedArrayBuffer | undefined;
  /** Called with the count of changes of each batch appended (written, not yet durable). */
  onAppended?: (changes: number) => void;
}

/**
 * A capture pump's sink into journal queues: each change is encoded once (ChangeRecordWriter,
 * strings straight to UTF-8, the key shared by envelope and Change) into the open batch of its
 * partition (engine/journal Appender claim, one copy, commit); a batch is written in order by
 * appendBatch and made durable by sync(), one fdatasync per partition per batch on libuv's pool
 * (Appender.flushAsync), which the pump awaits before it deletes the rows from staging while it
 * claims the next batch. A refusal (a record over recordBytesMax: RecordRefusedError) or a bad
 * change (a table without a target, a partition of another pump) drops every open batch, so a
 * refused batch appends nothing.
 *
 * Appenders are opened by open() and closed by close() after any failure: an appender whose
 * write or fsync failed (ENOSPC, EIO) still buffers the failed frames and may have left a partial
 * frame in its segment; only a reopen (recovery cuts the torn tail) makes the next append land
 * right. Records carry the installation id that the last recentStagingIds() call was given.
 */
export class JournalPumpSink implements PumpSink {
  /** `${queue}/${partition}` -> its appender, while open. */
  private readonly appenders = new Map<string, Appender>();
  /** fdatasyncs of appended batches not yet awaited by sync(). */
  private syncing: Promise<void>[] = [];
  private readonly writer = new ChangeRecordWriter();
  private installation = '';

  constructor(private readonly opts: JournalPumpSinkOptions) {}

  /** Opens the appender of every target partition not open yet. @throws the journal's errors. */
  open(): void {
    for (const [queue, t] of Object.entries(this.opts.targets)) {
      for (const [p, dir] of Object.entries(t.dirs)) {
        const k = `${queue}/${p}`;
        if (this.appenders.has(k)) continue;
        this.appenders.set(
          k,
          Appender.open({
            dir,
            segmentBytes: t.segmentBytes,
            fsync: t.fsync,
            notifier: this.opts.notifierOf?.(queue, Number(p)),
          }),
        );
      }
    }
  }

  /** Closes every appender (each fsyncs what it wrote); a failed one's close error is ignored. */
  close(): void {
    for (const a of this.appenders.values()) {
      try {
        a.close();
      } catch {
        // a failed appender may fail to close too; its lock and descriptors die with it
      }
    }
    this.appenders.clear();
    // close() fsynced what they had written; their pending syncs concern no open appender.
    this.syncing = [];
  }

  appendBatch(changes: StagedChange[]): void {
    const o = this.opts;
    const open: Appender[] = [];
    try {
      for (const ch of changes) {
        const queue = o.tableTargets[ch.table];
        if (!queue)
          throw new Error(
            `pump ${o.actor}: staged change ${ch.stagingId} is for table "${ch.table}", which has no target in the topology`,
          );
        const target = o.targets[queue]!;
        // The staged key hash (what claim() split the pumps by), so the partition is this pump's.
        const k = `${queue}/${ch.keyHash % target.partitions}`;
        const a = this.appenders.get(k);
        if (!a)
          throw new Error(
            `pump ${o.actor}: claimed a change for ${k}, a partition this pump does not append (pump ${o.pump} of ${o.pumps})`,
          );
        const n = buildChangeRecord(this.writer, ch, this.installation);
        if (n > o.recordBytesMax) {
          const many = changes.length > 1 ? ` (in a batch of ${changes.length})` : '';
          throw new RecordRefusedError(
            `record of ${n} bytes exceeds recordBytesMax ${o.recordBytesMax} of capture source "${o.source}" (target queue "${queue}")${many}`,
          );
        }
        if (!open.includes(a)) {
          a.beginBatch();
          open.push(a);
        }
        // claim() first: it may replace the write buffer claimBuffer returns.
        const at = a.claim(n);
        this.writer.copyTo(a.claimBuffer, at);
        a.commit();
      }
    } catch (err) {
      for (const a of open) {
        a.truncateBatch(0);
        a.endBatch();
      }
      throw err;
    }
    for (const a of open) a.endBatch();
    // Written now (in order); the fdatasyncs run on libuv's pool, awaited by sync().
    for (const a of open) {
      const durable = a.flushAsync();
      // Observed by sync(); never an unhandled rejection meanwhile.
      durable.catch(() => undefined);
      this.syncing.push(durable);
    }
    o.onAppended?.(changes.length);
  }

  /** Resolves once every batch appended so far is durable; rejects with the first failed fdatasync. */
  async sync(): Promise<void> {
    const all = this.syncing.splice(0);
    await Promise.all(all);
  }

  /** See {@link recentStagingIdsInJournal}; also the installation id later records carry. */
  recentStagingIds(limit: number, installationId: string): Set<string> {
    this.installation = installationId;
    const dirs = Object.values(this.opts.targets).flatMap((t) => Object.values(t.dirs));
    return recentStagingIdsInJournal(dirs, limit, installationId);
  }
}

/**
 * Staging ids of those of the last `limit` staged changes of each journal partition in `dirs`
 * that carry installation id `installationId` (none when it is ''). Records that are not change
 * events, and read events of initial loads, are skipped and not counted.
 * @throws Error when `limit` is not an integer >= 1.
 */
export function recentStagingIdsInJournal(
  dirs: readonly string[],
  limit: number,
  installationId: string,
): Set<string> {
  if (!Number.isInteger(limit) || limit < 1)
    throw new Error(`limit must be an integer >= 1, limit=${limit}`);
  const ids = new Set<string>();
  const view = new EnvelopeView();
  for (const dir of dirs) {
    const tailer = Tailer.open({ dir });
    try {
      tailer.moveToEnd();
      let counted = 0;
      while (counted < limit) {
        const rec = tailer.previous();
        if (!rec) break;
        view.wrap(rec.bytes, 0, rec.bytes.length);
        if (view.type !== EVENT_TYPE_CHANGE) continue;
        const ch = decodeChange(view.payload);
        if (ch.stagingId === '') continue;
        counted++;
        // Only this installation's records: a recreated staging table reuses staging ids.
        if (installationId !== '' && ch.installation === installationId) ids.add(ch.stagingId);
      }
    } finally {
      tailer.close();
    }
  }
  return ids;
}
