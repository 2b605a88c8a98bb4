/**
 * A pump's sink on a Kafka bus: each pump batch is ONE Kafka transaction, so a read_committed
 * consumer sees a batch completely or not at all, and the staging rows are deleted (acked by
 * the pump core) only after the commit.
 *
 * Partitioning: a record goes to partition murmur2(key) mod partitions of its topic (Kafka's own
 * default partitioner, so a Java or librdkafka producer of the same key agrees), while its pump
 * is keyHash(key) mod pumps. The two counts are independent: one key is always shipped by one
 * pump, in staging-id order, into one partition, so per-key order holds for any pair of counts,
 * and the pump count can change without re-partitioning the topic (drain first, see
 * "Reconciliation" for why).
 *
 * Zombie fencing: the transactional.id is fixed per topology, source and pump
 * (`sluice.capture.<topology>.<source>.<pump>`); {@link KafkaPumpSink.recentStagingIds}, run at
 * every (re)start of the pump, creates the producer afresh, and its InitProducerId bumps the
 * epoch: an older producer with the id (a pump thread that was replaced, a killed process's
 * transaction left open) is fenced and its open transaction aborted. The broker answers it only
 * once the previous transaction is complete (its commit markers written).
 *
 * Reconciliation (crash between the commit and the delete; the journal path's case C2): every
 * record carries headers
 *
 * | header                 | value                                                        |
 * |------------------------|--------------------------------------------------------------|
 * | `sluice.pump`          | `<source>/<pump>`                                            |
 * | `sluice.txn`           | this pump's transaction sequence number, decimal, from 1     |
 * | `sluice.txn.records`   | records of this transaction in this partition                |
 * | `sluice.stagingId`     | the change's staging id                                      |
 *
 * and the transaction also commits, for the consumer group named like the transactional.id, the
 * offset of its first record in each partition it wrote (sendOffsets: offsets and records
 * commit together). On start the sink reads the group's committed offsets, reads each such
 * partition from that offset until it has the `sluice.txn.records` records of that transaction
 * (other pumps' records between them are skipped), and returns the staging ids of the newest
 * transaction; the pump core deletes those rows without shipping them again. Since a
 * transaction is atomic, "newest committed transaction" is exactly "the batch that may be
 * unacked". The group's offsets are Kafka's to keep (offsets.retention.minutes, 7 days by
 * default, for a group without members): a pump idle longer starts its numbering afresh, which
 * is harmless, as nothing older can be unacked. Limit: each pump reconciles its own group only,
 * so change `pumps` after a drain (`sluice run` stops cleanly: nothing is left unacked); after a
 * kill the old pumps must run once with the old count.
 */
import {
  BusError, partitionForKey, type BusBackend, type BusProducer, type ConsumedRecord, type ProducerRecord, type TopicPartition,
} from '../bus/index.js';
import type { StagedChange } from './config.js';
import { RecordRefusedError, type PumpSink } from './pump.js';

/** Header names of a captured record on Kafka (see the module comment). */
export const KAFKA_CAPTURE_HEADERS = {
  pump: 'sluice.pump',
  txn: 'sluice.txn',
  txnRecords: 'sluice.txn.records',
  stagingId: 'sluice.stagingId',
} as const;

/** Bounds of the Kafka pump sink. */
export const KAFKA_SINK_DEFAULTS = {
  /**
   * Largest value a pump sends, bytes: under the broker's default message.max.bytes (1048588,
   * which bounds a whole record batch) less room for key, headers and batch overhead. A larger
   * change is refused (RecordRefusedError: retried, then parked) instead of failing forever.
   */
  recordBytesMax: 1_000_000,
  /**
   * Bytes of values per send inside one transaction: kafkajs puts a partition's records of one
   * send into one record batch, which the broker refuses above message.max.bytes.
   */
  sendBytesMax: 512 * 1024,
  /** Longest wait for the records of the last transaction at start, ms; then start() fails (and is retried). */
  reconcileTimeoutMs: 30_000,
} as const;

/** One encoded record of a change: its topic and value (key, headers, timestamp are the sink's). */
export interface KafkaCaptureRecord {
  topic: string;
  value: Uint8Array;
}

/** Options of {@link KafkaPumpSink}. */
export interface KafkaPumpSinkOptions {
  /** A kafka bus (engine/bus createKafkaBus); the sink closes only its own producer. */
  bus: BusBackend;
  /** Capture source name (for headers and messages). */
  source: string;
  pump: number;
  /** Also the consumer group holding the reconciliation offsets. */
  transactionalId: string;
  /** Every topic this pump may write (all partitions are reconciled). */
  topics: string[];
  /** Encodes one change (envelope or JSON) and names its topic. */
  encode(change: StagedChange): KafkaCaptureRecord;
  /** Largest value, bytes; default and cap KAFKA_SINK_DEFAULTS.recordBytesMax. */
  recordBytesMax?: number;
  /** Called after each committed transaction with its record count. */
  onCommitted?(records: number): void;
}

/** The Kafka record key of a staged change: its key text, null for key strategy none (`[]`). */
export function kafkaKeyOf(change: StagedChange): string | null {
  return change.key === '[]' ? null : change.key;
}

/**
 * {@link PumpSink} on Kafka (see the module comment). Call {@link close} when the pump stops.
 * appendBatch throws RecordRefusedError (nothing sent) for a change over recordBytesMax, and a
 * BusError for any broker failure (the transaction is aborted: nothing of the batch is visible).
 */
export class KafkaPumpSink implements PumpSink {
  private producer: BusProducer | null = null;
  /** Sequence number of the next transaction; set by recentStagingIds. */
  private txn = 0;
  private readonly recordBytesMax: number;
  private readonly pumpTag: string;

  constructor(private readonly opts: KafkaPumpSinkOptions) {
    this.recordBytesMax = Math.min(opts.recordBytesMax ?? KAFKA_SINK_DEFAULTS.recordBytesMax, KAFKA_SINK_DEFAULTS.recordBytesMax);
    this.pumpTag = `${opts.source}/${opts.pump}`;
  }

  async appendBatch(changes: StagedChange[]): Promise<void> {
    if (this.producer === null || this.txn === 0) throw new Error(`kafka pump sink ${this.pumpTag}: recentStagingIds() must run before appendBatch()`);
    const records: ProducerRecord[] = [];
    for (const ch of changes) {
      const { topic, value } = this.opts.encode(ch);
      if (value.length > this.recordBytesMax) {
        const many = changes.length > 1 ? ` (in a batch of ${changes.length})` : '';
        throw new RecordRefusedError(`record of ${value.length} bytes exceeds the Kafka record limit ${this.recordBytesMax} of capture source "${this.opts.source}" (target topic "${topic}")${many}`);
      }
      records.push({
        topic, key: kafkaKeyOf(ch), value, timestampMs: ch.timeMs,
        headers: { [KAFKA_CAPTURE_HEADERS.pump]: this.pumpTag, [KAFKA_CAPTURE_HEADERS.stagingId]: ch.stagingId },
      });
    }
    // Partitions are resolved here (the bus would do the same) so that each record can carry
    // the count of its transaction's records in its partition.
    const counts = new Map<string, number>();
    for (const r of records) {
      const n = await this.partitions(r.topic);
      r.partition = partitionOf(r.key, n, this.spread++);
      const k = `${r.topic}\u0000${r.partition}`;
      counts.set(k, (counts.get(k) ?? 0) + 1);
    }
    const txnText = String(this.txn);
    for (const r of records) {
      r.headers![KAFKA_CAPTURE_HEADERS.txn] = txnText;
      r.headers![KAFKA_CAPTURE_HEADERS.txnRecords] = String(counts.get(`${r.topic}\u0000${r.partition}`));
    }
    const t = await this.producer.begin();
    try {
      const first = new Map<string, { topic: string; partition: number; offset: number }>();
      for (let i = 0; i < records.length;) {
        let bytes = 0;
        let j = i;
        while (j < records.length && (j === i || bytes + records[j]!.value!.length <= KAFKA_SINK_DEFAULTS.sendBytesMax)) bytes += records[j++]!.value!.length;
        const meta = await t.send(records.slice(i, j));
        for (const m of meta) {
          const k = `${m.topic}\u0000${m.partition}`;
          const f = first.get(k);
          if (f === undefined || m.offset < f.offset) first.set(k, { topic: m.topic, partition: m.partition, offset: m.offset });
        }
        i = j;
      }
      for (const f of first.values()) {
        if (f.offset < 0) throw new BusError('backend', `kafka pump sink ${this.pumpTag}: no offset for ${f.topic}/${f.partition} in transaction ${this.txn}`);
      }
      await t.sendOffsets(this.opts.transactionalId, [...first.values()]);
      await t.commit();
    } catch (err) {
      await t.abort().catch(() => undefined);
      throw err;
    }
    this.txn++;
    this.opts.onCommitted?.(records.length);
  }

  private readonly partitionCounts = new Map<string, number>();
  /** Round robin of unkeyed changes over the partitions. */
  private spread = 0;

  private async partitions(topic: string): Promise<number> {
    const known = this.partitionCounts.get(topic);
    if (known !== undefined) return known;
    const n = await this.opts.bus.partitionCount(topic);
    if (n === null) throw new BusError('unknown-topic', `kafka pump sink ${this.pumpTag}: topic does not exist, topic=${topic}`);
    this.partitionCounts.set(topic, n);
    return n;
  }

  /**
   * (Re)creates the transactional producer (fencing older ones with the id) and returns the
   * staging ids of this pump's newest committed transaction (see the module comment); `limit`
   * is not used: a transaction's records are counted in their headers.
   * @throws BusError when the broker fails, Error when the transaction's records are not all
   *   readable within KAFKA_SINK_DEFAULTS.reconcileTimeoutMs.
   */
  async recentStagingIds(_limit: number): Promise<Set<string>> {
    const { bus, transactionalId } = this.opts;
    if (this.producer !== null) await this.producer.close().catch(() => undefined);
    this.producer = null;
    this.txn = 0;
    this.partitionCounts.clear();
    this.producer = await bus.producer({ transactionalId });
    const tps: TopicPartition[] = [];
    for (const topic of this.opts.topics) {
      const n = await this.partitions(topic);
      for (let p = 0; p < n; p++) tps.push({ topic, partition: p });
    }
    const committed = await bus.committed(transactionalId, tps);
    const starts = tps.map((tp, i) => ({ ...tp, offset: committed[i] })).filter((x): x is TopicPartition & { offset: number } => x.offset !== null);
    const last = await this.readLastTransactions(starts);
    let newest = 0;
    for (const t of last.values()) newest = Math.max(newest, t.txn);
    const ids = new Set<string>();
    for (const t of last.values()) if (t.txn === newest) for (const id of t.ids) ids.add(id);
    this.txn = newest + 1;
    return ids;
  }

  /**
   * Per partition: from its committed offset, this pump's transaction there (sequence number and
   * staging ids), read until its `sluice.txn.records` records are in hand.
   */
  private async readLastTransactions(starts: (TopicPartition & { offset: number })[]): Promise<Map<string, { txn: number; ids: string[] }>> {
    const out = new Map<string, { txn: number; ids: string[]; want: number }>();
    if (starts.length === 0) return out;
    const consumer = await this.opts.bus.consumer({ clientId: `${this.opts.transactionalId}.reconcile` });
    try {
      await consumer.assign(starts.map(({ topic, partition }) => ({ topic, partition })));
      for (const s of starts) consumer.seek(s, s.offset);
      const open = new Set(starts.map((s) => `${s.topic}\u0000${s.partition}`));
      const deadline = Date.now() + KAFKA_SINK_DEFAULTS.reconcileTimeoutMs;
      while (open.size > 0) {
        if (Date.now() > deadline) {
          throw new Error(`kafka pump sink ${this.pumpTag}: the records of its last transaction in ${[...open].map((k) => k.replace('\u0000', '/')).join(', ')} were not readable within ${KAFKA_SINK_DEFAULTS.reconcileTimeoutMs} ms`);
        }
        for (const r of await consumer.poll({ timeoutMs: 500 })) this.collect(r, out, open, consumer);
      }
    } finally {
      await consumer.close().catch(() => undefined);
    }
    return out;
  }

  private collect(r: ConsumedRecord, out: Map<string, { txn: number; ids: string[]; want: number }>, open: Set<string>, consumer: { pause(tps: TopicPartition[]): void }): void {
    const k = `${r.topic}\u0000${r.partition}`;
    if (!open.has(k) || r.headers[KAFKA_CAPTURE_HEADERS.pump] !== this.pumpTag) return;
    const txn = Number(r.headers[KAFKA_CAPTURE_HEADERS.txn]);
    const want = Number(r.headers[KAFKA_CAPTURE_HEADERS.txnRecords]);
    const id = r.headers[KAFKA_CAPTURE_HEADERS.stagingId];
    if (!(txn >= 1) || !(want >= 1) || id === undefined) {
      throw new Error(`kafka pump sink ${this.pumpTag}: record ${r.topic}/${r.partition} offset ${r.offset} lacks its capture headers`);
    }
    let t = out.get(k);
    // The committed offset is the transaction's first record here: the first of ours sets it.
    if (t === undefined) out.set(k, (t = { txn, ids: [], want }));
    if (txn !== t.txn) return;
    t.ids.push(id);
    if (t.ids.length >= t.want) {
      open.delete(k);
      consumer.pause([{ topic: r.topic, partition: r.partition }]);
    }
  }

  /** Closes the producer (an open transaction is aborted). Idempotent. */
  async close(): Promise<void> {
    const p = this.producer;
    this.producer = null;
    if (p) await p.close().catch(() => undefined);
  }
}

/**
 * Partition of a record: murmur2 of the key mod partitions (engine/bus partitionForKey, Kafka's
 * default partitioner); an unkeyed change (key strategy none) spreads by `spread`.
 */
function partitionOf(key: string | null, partitions: number, spread: number): number {
  if (key === null) return spread % partitions;
  return partitionForKey(key, partitions);
}
