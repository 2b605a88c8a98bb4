/**
 * Where an actor's queue partitions live: the seam between the ready-made actors (service host,
 * queue reader, timer) and the topology's bus. Both backends give the same two objects:
 *
 * - a {@link PartitionTailer}: reads one partition forwards and backwards by index (the journal's
 *   queue index; Kafka's offset), as engine/journal's Tailer does;
 * - a {@link PartitionAppender}: the single writer of one partition; appendBatch + flush make a
 *   batch durable atomically (journal: one atomic append and the queue's fsync policy; Kafka:
 *   one transaction of the partition's transactional producer, committed at flush).
 *
 * Kafka differences the callers rely on, and that hold on the journal too: indexes increase
 * but are not contiguous (transaction markers occupy offsets no reader sees), so a caller never
 * computes "index + count"; `index` after next() is the position of the next record.
 *
 * Kafka exactness: opening an appender sends InitProducerId for its transactional id, which
 * fences every older producer with that id (a zombie of a restarted service, in any process)
 * and aborts its open transaction before the open returns, so a scan of the partition that
 * follows sees only committed batches.
 */
import { Appender, Tailer } from '../journal/index.js';
import type { Topology } from '../config/index.js';
import {
  SyncKafka,
  SyncKafkaError,
  type KafkaConnection,
  type KafkaLogRecord,
} from './kafka-sync.js';

/** One queue partition: its name, number and (journal) directory. */
export interface QueuePartition {
  queue: string;
  partition: number;
  /** Journal directory of the partition (unused on Kafka, where the topic is the queue's name). */
  dir: string;
}

/** A record read by a {@link PartitionTailer}; `bytes` is valid until the next call on the tailer. */
export interface PartitionRecord {
  index: number;
  bytes: Uint8Array;
}

/** Reads one queue partition (the subset of engine/journal's Tailer the actors use). */
export interface PartitionTailer {
  /** Index of the next record next() returns (after moveToEnd: the end). */
  readonly index: number;
  /** Moves to `index`; false (nothing moved) if it is beyond the end. */
  moveToIndex(index: number): boolean;
  moveToEnd(): void;
  next(): PartitionRecord | null;
  previous(): PartitionRecord | null;
  /** Waits up to timeoutMs for a record after the end; true if one may be there. */
  waitForAppend(timeoutMs: number): boolean;
  close(): void;
}

/** The single writer of one queue partition (the subset of engine/journal's Appender the actors use). */
export interface PartitionAppender {
  /** Index the next appended record gets (Kafka: the partition's last stable offset). */
  readonly nextIndex: number;
  append(bytes: Uint8Array): void;
  /** Queues `batch` for the next flush; the arrays must stay unchanged until then. */
  appendBatch(batch: readonly Uint8Array[]): void;
  /**
   * Makes everything appended since the last flush durable, atomically on Kafka. `mayDefer`
   * (Kafka): the batch may stay in the open transaction until it is commitIntervalMs old (see
   * {@link KAFKA_APPENDER_DEFAULTS}); call flush() again before idling so it is not held back.
   */
  flush(mayDefer?: boolean): void;
  /** Kafka: records whose flush was deferred (still in the open transaction). */
  readonly deferred?: boolean;
  close(): void;
}

/** An appender's journal settings and, on Kafka, its producer's transactional id. */
export interface AppenderSpec extends QueuePartition {
  segmentBytes: number;
  fsync: 'none' | 'batch' | 'record';
  /**
   * Kafka: the transactional.id of the partition's producer (one per writer, stable across
   * restarts); '' for a plain idempotent producer (no transactions, no fencing; offsets stay
   * contiguous), for writers whose batches need no atomicity, such as the timer's ticks.
   */
  transactionalId: string;
}

/**
 * The bus of a topology as an actor needs it (crosses to workers in start data); on Kafka with
 * the largest record value it takes, bytes (topology bus.recordBytesMax).
 */
export type ActorBus =
  { kind: 'journal' } | { kind: 'kafka'; connection: KafkaConnection; recordBytesMax: number };

/** The topology's bus as its actors receive it in their start data (and as the CLI opens it). */
export function actorBusOf(topology: Topology): ActorBus {
  const b = topology.bus;
  if (b.kind === 'journal') return { kind: 'journal' };
  return {
    kind: 'kafka',
    connection: {
      brokers: b.brokers,
      clientId: b.clientId,
      ...(b.tls ? { tls: b.tls } : {}),
      ...(b.sasl ? { sasl: b.sasl } : {}),
    },
    recordBytesMax: b.recordBytesMax,
  };
}

/** Opens tailers and appenders on one bus; close() releases what it opened (Kafka: its client). */
export interface QueueLogs {
  readonly kind: 'journal' | 'kafka';
  tailer(p: QueuePartition, notifier?: SharedArrayBuffer): PartitionTailer;
  appender(spec: AppenderSpec, notifier?: SharedArrayBuffer): PartitionAppender;
  close(): void;
}

/**
 * The queue logs of `bus`. Kafka: one blocking client (a helper worker, see ./kafka-sync.ts) for
 * everything opened here; `onWait` runs while a call waits on the broker (an actor heartbeat).
 */
export function openQueueLogs(
  bus: { kind: 'journal' } | { kind: 'kafka'; connection: KafkaConnection },
  onWait?: () => void,
): QueueLogs {
  if (bus.kind === 'journal') {
    return {
      kind: 'journal',
      tailer: (p, notifier) => Tailer.open({ dir: p.dir, notifier }),
      appender: (s, notifier) =>
        Appender.open({ dir: s.dir, segmentBytes: s.segmentBytes, fsync: s.fsync, notifier }),
      close: () => undefined,
    };
  }
  let client: SyncKafka | null = null;
  const kafka = (): SyncKafka => (client ??= new SyncKafka(bus.connection, onWait));
  return {
    kind: 'kafka',
    tailer: (p) => new KafkaTailer(kafka(), p.queue, p.partition),
    appender: (s) => new KafkaAppender(kafka(), s.queue, s.partition, s.transactionalId),
    close: () => client?.close(),
  };
}

/** Defaults of {@link KafkaAppender}. */
export const KAFKA_APPENDER_DEFAULTS = {
  /**
   * Longest a deferred flush keeps batches in one open transaction, ms (Kafka Streams'
   * commit.interval.ms under exactly-once). One transaction costs several broker round trips
   * (AddPartitionsToTxn, Produce, EndTxn, and a retry while the previous one's markers are
   * written), so a transaction per input batch would bound a service to a few dozen batches a
   * second.
   */
  commitIntervalMs: 100,
  /** Bytes a deferred flush holds at most before it commits. */
  deferredBytesMax: 8 * 1024 * 1024,
} as const;

/** Records fetched per forward read. */
const READ_RECORDS_MAX = 2000;
/** Offsets per backward window at first, and at most (it doubles while windows come back empty). */
const BACK_WINDOW_MIN = 256;
const BACK_WINDOW_MAX = 65_536;

/**
 * A {@link PartitionTailer} over a Kafka topic partition (read_committed). Forwards it reads ahead
 * in batches; backwards it fetches offset windows ending at its position, newest window first
 * (Kafka has no backwards read: a window [lo, hi) is read forwards and walked from its end).
 */
export class KafkaTailer implements PartitionTailer {
  private pos = 0;
  private ahead: KafkaLogRecord[] = [];
  private aheadAt = 0;
  /** Position after the last record of `ahead`. */
  private aheadEnd = 0;
  private behind: KafkaLogRecord[] = [];
  /** Records of `behind` before this one are still to be returned by previous(). */
  private behindAt = 0;

  constructor(
    private readonly kafka: SyncKafka,
    readonly topic: string,
    readonly partition: number,
  ) {}

  get index(): number {
    return this.pos;
  }

  private drop(): void {
    this.ahead = [];
    this.aheadAt = 0;
    this.behind = [];
    this.behindAt = 0;
  }

  moveToIndex(index: number): boolean {
    const { start, end } = this.kafka.offsets(this.topic, this.partition);
    if (index > end) return false;
    this.drop();
    this.pos = Math.max(index, start);
    return true;
  }

  moveToEnd(): void {
    this.drop();
    this.pos = this.kafka.offsets(this.topic, this.partition).end;
  }

  private fill(waitMs: number): boolean {
    this.behind = [];
    this.behindAt = 0;
    const { records, position } = this.kafka.read(
      this.topic,
      this.partition,
      this.pos,
      READ_RECORDS_MAX,
      waitMs,
    );
    this.ahead = records;
    this.aheadAt = 0;
    this.aheadEnd = position;
    if (records.length === 0) this.pos = Math.max(this.pos, position);
    return records.length > 0;
  }

  next(): PartitionRecord | null {
    if (this.aheadAt >= this.ahead.length && !this.fill(0)) return null;
    const r = this.ahead[this.aheadAt++];
    this.pos = this.aheadAt === this.ahead.length ? this.aheadEnd : r.index + 1;
    return r;
  }

  previous(): PartitionRecord | null {
    this.ahead = [];
    this.aheadAt = 0;
    if (this.behindAt > 0 && this.behind[this.behindAt - 1].index < this.pos) {
      const r = this.behind[--this.behindAt];
      this.pos = r.index;
      return r;
    }
    const start = this.kafka.offsets(this.topic, this.partition).start;
    for (
      let width = BACK_WINDOW_MIN;
      this.pos > start;
      width = Math.min(width * 2, BACK_WINDOW_MAX)
    ) {
      const lo = Math.max(start, this.pos - width);
      this.behind = this.kafka.range(this.topic, this.partition, lo, this.pos);
      this.behindAt = this.behind.length;
      if (this.behindAt > 0) {
        const r = this.behind[--this.behindAt];
        this.pos = r.index;
        return r;
      }
      this.pos = lo;
    }
    return null;
  }

  waitForAppend(timeoutMs: number): boolean {
    if (this.aheadAt < this.ahead.length) return true;
    return this.fill(timeoutMs);
  }

  close(): void {
    this.drop();
  }
}

/**
 * A {@link PartitionAppender} over a Kafka topic partition: a transactional producer (opened, and
 * so fencing its predecessors, in the constructor); each flush() is one committed transaction.
 * What was appended but not flushed when the actor dies is never visible (its transaction is
 * aborted by the next open, or never began). Without a transactional id each flush() is a plain
 * idempotent send; a failed one keeps the records the broker did not acknowledge pending.
 */
export class KafkaAppender implements PartitionAppender {
  private pending: Uint8Array[] = [];
  private pendingBytes = 0;
  /** Date.now() of the first flush(true) that was deferred; 0: none. */
  private deferredSinceMs = 0;

  constructor(
    private readonly kafka: SyncKafka,
    readonly topic: string,
    readonly partition: number,
    readonly transactionalId: string,
  ) {
    if (transactionalId !== '') kafka.openProducer(transactionalId);
  }

  get nextIndex(): number {
    return this.kafka.offsets(this.topic, this.partition).end;
  }

  get deferred(): boolean {
    return this.deferredSinceMs !== 0;
  }

  append(bytes: Uint8Array): void {
    this.pending.push(bytes.slice());
    this.pendingBytes += bytes.length;
  }

  appendBatch(batch: readonly Uint8Array[]): void {
    for (const b of batch) {
      this.pending.push(b);
      this.pendingBytes += b.length;
    }
  }

  flush(mayDefer = false): void {
    if (this.pending.length === 0) return;
    if (mayDefer && this.pendingBytes < KAFKA_APPENDER_DEFAULTS.deferredBytesMax) {
      const now = Date.now();
      if (this.deferredSinceMs === 0) this.deferredSinceMs = now;
      if (now - this.deferredSinceMs < KAFKA_APPENDER_DEFAULTS.commitIntervalMs) return;
    }
    const batch = this.pending;
    this.pending = [];
    this.pendingBytes = 0;
    this.deferredSinceMs = 0;
    if (this.transactionalId !== '') {
      this.kafka.commit(this.transactionalId, this.topic, this.partition, batch);
      return;
    }
    try {
      this.kafka.send(this.topic, this.partition, batch);
    } catch (e) {
      // The records the broker did not acknowledge stay pending, so the next flush resends them
      // first, as they were (see isBrokerAwaySend); close() drops them.
      const sent = e instanceof SyncKafkaError ? e.sent : undefined;
      if (sent) {
        this.pending = batch.slice(sent.records);
        for (const b of this.pending) this.pendingBytes += b.length;
      }
      throw e;
    }
  }

  /** Drops what was not flushed: it was never committed, as after a crash. */
  close(): void {
    this.pending = [];
    this.pendingBytes = 0;
    this.deferredSinceMs = 0;
  }
}
