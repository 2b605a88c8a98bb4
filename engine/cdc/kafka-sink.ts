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
 * | `sluice.txn`           | this pump's transaction number: rising, max(last + 1, now ms) |
 * | `sluice.txn.records`   | records of this transaction in this partition                |
 * | `sluice.txn.total`     | records of this transaction in all                           |
 * | `sluice.stagingId`     | the change's staging id                                      |
 * | `sluice.installation`  | installation id of the capture (engine/cdc/staging.ts); absent |
 * |                        | when none is installed                                        |
 *
 * and the transaction also commits, for the consumer group named like the transactional.id, the
 * offset of its first record in each partition it wrote (sendOffsets: offsets and records
 * commit together). On start, after the fencing InitProducerId, the sink reads the group's
 * committed offsets and reads each such partition from there to its end (the last stable
 * offset), keeping this pump's records (other pumps' records between them are skipped). The
 * newest transaction number found is the pump's last committed transaction; if its records
 * are not all found (the counts in the headers), partitions without a committed offset are read
 * from their start too. Its staging ids are returned when its records carry the current
 * installation id (a transaction of an earlier installation, whose staging ids the recreated
 * staging table reuses, or of a version without the header, returns none), and the pump core
 * deletes those rows without shipping them again. Since a transaction is atomic, "newest
 * committed transaction" is exactly "the batch that may be unacked": the pump acks each
 * appendBatch before its next one, also when it splits a refused batch into halves, each a
 * transaction (engine/cdc/pump.ts point 3; acked only at the cycle's end, a crash re-shipped all
 * halves but the last). Reading to the end rather than stopping at the
 * committed transaction's records keeps this right even when the offsets are read before the
 * broker applied the last commit's offsets (kafkajs cannot ask OffsetFetch for stable offsets);
 * its cost is what other pumps wrote to a partition since this pump last wrote there.
 * The group's offsets are Kafka's to keep (offsets.retention.minutes, 7 days by default, for a
 * group without members): a pump idle longer has nothing unacked, and its numbers keep rising
 * (they start from the clock). Limit: each pump reconciles its own group only, so change
 * `pumps` in the topology file after a drain (`sluice run` stops cleanly: nothing is left
 * unacked); after a kill the old count must run once. A change at runtime
 * (actors/pump-count.ts) reconciles the retired pumps that did not stop cleanly itself, with
 * this class, before the new ones start.
 */
// Not from ../bus/index.js, which loads every backend (kafkajs): engine/config imports engine/cdc,
// and loading a topology must stay light.
import {
  BusError,
  type BusBackend,
  type BusProducer,
  type ConsumedRecord,
  type ProducerRecord,
  type TopicPartition,
} from '../bus/types.js';
import { partitionForKey } from '../bus/partitioner.js';
import type { StagedChange } from './config.js';
import { RecordRefusedError, type PumpSink } from './pump.js';

/** Header names of a captured record on Kafka (see the module comment). */
export const KAFKA_CAPTURE_HEADERS = {
  pump: 'sluice.pump',
  txn: 'sluice.txn',
  txnRecords: 'sluice.txn.records',
  txnTotal: 'sluice.txn.total',
  stagingId: 'sluice.stagingId',
  installation: 'sluice.installation',
} as const;

/** Bounds of the Kafka pump sink. */
export const KAFKA_SINK_DEFAULTS = {
  /**
   * Largest value a pump sends, bytes, unless a kafka bus's bus.recordBytesMax says otherwise
   * (this is its default): under the broker's default message.max.bytes (1048588, which bounds
   * a whole record batch) less room for key, headers and batch overhead. A larger change is
   * refused (RecordRefusedError: retried, then parked) instead of failing forever.
   */
  recordBytesMax: 1_000_000,
  /**
   * Bytes of values per send inside one transaction: kafkajs puts a partition's records of one
   * send into one record batch, which the broker refuses above message.max.bytes.
   */
  sendBytesMax: 512 * 1024,
  /**
   * Longest wait for the records of the last transaction at start, ms; then start() fails (and
   * is retried). Above kafkajs' transaction timeout (60 s), after which the broker aborts a
   * transaction left open by a dead producer whose pump does not come back.
   */
  reconcileTimeoutMs: 90_000,
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
  /**
   * Encodes one change (envelope or JSON, stamped with `installation`, the id given to the last
   * recentStagingIds) and names its topic.
   */
  encode(change: StagedChange, installation: string): KafkaCaptureRecord;
  /**
   * Largest value, bytes: the smaller of the capture source's recordBytesMax and the bus's
   * (a kafka bus's bus.recordBytesMax); default KAFKA_SINK_DEFAULTS.recordBytesMax.
   */
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
  /** Installation id of the staging this pump ships from; set by recentStagingIds. */
  private installation = '';
  private readonly recordBytesMax: number;
  private readonly pumpTag: string;

  constructor(private readonly opts: KafkaPumpSinkOptions) {
    this.recordBytesMax = opts.recordBytesMax ?? KAFKA_SINK_DEFAULTS.recordBytesMax;
    this.pumpTag = `${opts.source}/${opts.pump}`;
  }

  async appendBatch(changes: StagedChange[]): Promise<void> {
    if (this.producer === null || this.txn === 0)
      throw new Error(
        `kafka pump sink ${this.pumpTag}: recentStagingIds() must run before appendBatch()`,
      );
    const records: ProducerRecord[] = [];
    for (const ch of changes) {
      const { topic, value } = this.opts.encode(ch, this.installation);
      if (value.length > this.recordBytesMax) {
        const many = changes.length > 1 ? ` (in a batch of ${changes.length})` : '';
        throw new RecordRefusedError(
          `record of ${value.length} bytes exceeds the Kafka record limit ${this.recordBytesMax} of capture source "${this.opts.source}" (target topic "${topic}")${many}`,
        );
      }
      records.push({
        topic,
        key: kafkaKeyOf(ch),
        value,
        timestampMs: ch.timeMs,
        headers: {
          [KAFKA_CAPTURE_HEADERS.pump]: this.pumpTag,
          [KAFKA_CAPTURE_HEADERS.stagingId]: ch.stagingId,
          ...(this.installation === ''
            ? {}
            : { [KAFKA_CAPTURE_HEADERS.installation]: this.installation }),
        },
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
      r.headers![KAFKA_CAPTURE_HEADERS.txnRecords] = String(
        counts.get(`${r.topic}\u0000${r.partition}`),
      );
      r.headers![KAFKA_CAPTURE_HEADERS.txnTotal] = String(records.length);
    }
    const t = await this.producer.begin();
    try {
      const first = new Map<string, { topic: string; partition: number; offset: number }>();
      for (let i = 0; i < records.length;) {
        let bytes = 0;
        let j = i;
        while (
          j < records.length &&
          (j === i || bytes + records[j]!.value!.length <= KAFKA_SINK_DEFAULTS.sendBytesMax)
        )
          bytes += records[j++]!.value!.length;
        const meta = await t.send(records.slice(i, j));
        for (const m of meta) {
          const k = `${m.topic}\u0000${m.partition}`;
          const f = first.get(k);
          if (f === undefined || m.offset < f.offset)
            first.set(k, { topic: m.topic, partition: m.partition, offset: m.offset });
        }
        i = j;
      }
      for (const f of first.values()) {
        if (f.offset < 0)
          throw new BusError(
            'backend',
            `kafka pump sink ${this.pumpTag}: no offset for ${f.topic}/${f.partition} in transaction ${this.txn}`,
          );
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
    if (n === null)
      throw new BusError(
        'unknown-topic',
        `kafka pump sink ${this.pumpTag}: topic does not exist, topic=${topic}`,
      );
    this.partitionCounts.set(topic, n);
    return n;
  }

  /**
   * (Re)creates the transactional producer (fencing older ones with the id) and returns the
   * staging ids of this pump's newest committed transaction when its records carry
   * `installationId` (see the module comment), else none; `limit` is not used: a transaction's
   * records are counted in their headers. Later records carry `installationId`.
   * @throws BusError when the broker fails, Error when the transaction's records are not all
   *   readable within KAFKA_SINK_DEFAULTS.reconcileTimeoutMs.
   */
  async recentStagingIds(_limit: number, installationId: string): Promise<Set<string>> {
    const { bus, transactionalId } = this.opts;
    this.installation = installationId;
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
    // The committed offset's record is committed, but readable only once the last stable offset
    // passes it: another pump's transaction left open by the same crash holds it back until that
    // pump's restart fences it (or the broker's transaction timeout aborts it).
    let ends = await bus.offsets(tps);
    const deadline = Date.now() + KAFKA_SINK_DEFAULTS.reconcileTimeoutMs;
    while (tps.some((_, i) => committed[i] !== null && ends[i]!.end <= committed[i]!)) {
      if (Date.now() > deadline) {
        const held = tps
          .filter((_, i) => committed[i] !== null && ends[i]!.end <= committed[i]!)
          .map((tp) => `${tp.topic}/${tp.partition}`);
        throw new Error(
          `kafka pump sink ${this.pumpTag}: ${held.join(', ')} held below this pump's last transaction by an open transaction for ${KAFKA_SINK_DEFAULTS.reconcileTimeoutMs} ms; retrying`,
        );
      }
      await new Promise((r) => setTimeout(r, 100));
      ends = await bus.offsets(tps);
    }
    // Scan from each committed offset to the partition's end (not just the committed
    // transaction's records there): a later transaction of this pump is then found even if the
    // group's offsets were read before the broker applied that transaction's commit.
    const scan = tps.map((tp, i) => ({
      ...tp,
      from: committed[i]!,
      start: ends[i]!.start,
      end: ends[i]!.end,
    }));
    const mine = await this.scanOwnRecords(
      scan.filter((x) => x.from !== null && x.from < x.end).map((x) => ({ ...x, from: x.from! })),
    );
    let newest = this.newest(mine);
    if (newest !== null && !this.complete(mine, newest)) {
      // The newest transaction also wrote partitions never committed for before (a first write
      // whose offsets are not applied yet): read those from their start.
      const rest = scan.filter((x) => x.from === null).map((x) => ({ ...x, from: x.start }));
      for (const [k, v] of await this.scanOwnRecords(rest.filter((x) => x.from < x.end)))
        mine.set(k, v);
      newest = this.newest(mine);
      if (newest !== null && !this.complete(mine, newest)) {
        throw new Error(
          `kafka pump sink ${this.pumpTag}: transaction ${newest} is incomplete in the topics (records missing); retrying`,
        );
      }
    }
    const ids = new Set<string>();
    for (const list of mine.values())
      for (const r of list)
        if (r.txn === newest && installationId !== '' && r.installation === installationId)
          ids.add(r.id);
    // Sequence numbers rise across restarts even if the offsets were ever lost (retention).
    this.txn = Math.max((newest ?? 0) + 1, Date.now());
    return ids;
  }

  /** The highest transaction number among `mine`, or null. */
  private newest(mine: Map<string, OwnRecord[]>): number | null {
    let n: number | null = null;
    for (const list of mine.values()) for (const r of list) if (n === null || r.txn > n) n = r.txn;
    return n;
  }

  /** Whether every record of transaction `txn` is in `mine` (its per-partition and total counts). */
  private complete(mine: Map<string, OwnRecord[]>, txn: number): boolean {
    let found = 0;
    let total = 0;
    for (const list of mine.values()) {
      const of = list.filter((r) => r.txn === txn);
      if (of.length === 0) continue;
      if (of.length !== of[0]!.inPartition) return false;
      found += of.length;
      total = of[0]!.total;
    }
    return found === total;
  }

  /**
   * This pump's records in each partition from `from` to `end` (end: the last stable offset
   * when the scan began), by `topic\0partition`.
   * @throws Error when the partitions are not read to their ends within reconcileTimeoutMs.
   */
  private async scanOwnRecords(
    parts: (TopicPartition & { from: number; end: number })[],
  ): Promise<Map<string, OwnRecord[]>> {
    const out = new Map<string, OwnRecord[]>();
    if (parts.length === 0) return out;
    const consumer = await this.opts.bus.consumer({
      clientId: `${this.opts.transactionalId}.reconcile`,
    });
    try {
      await consumer.assign(parts.map(({ topic, partition }) => ({ topic, partition })));
      for (const s of parts) consumer.seek(s, s.from);
      const open = new Map(parts.map((s) => [`${s.topic}\u0000${s.partition}`, s]));
      const deadline = Date.now() + KAFKA_SINK_DEFAULTS.reconcileTimeoutMs;
      while (open.size > 0) {
        if (Date.now() > deadline) {
          throw new Error(
            `kafka pump sink ${this.pumpTag}: could not read ${[...open.keys()].map((k) => k.replace('\u0000', '/')).join(', ')} to its end within ${KAFKA_SINK_DEFAULTS.reconcileTimeoutMs} ms`,
          );
        }
        for (const r of await consumer.poll({ timeoutMs: 200 })) {
          const k = `${r.topic}\u0000${r.partition}`;
          if (
            r.offset >= open.get(k)!.end ||
            r.headers[KAFKA_CAPTURE_HEADERS.pump] !== this.pumpTag
          )
            continue;
          const own = ownRecord(r);
          let list = out.get(k);
          if (!list) out.set(k, (list = []));
          list.push(own);
        }
        for (const [k, s] of open) {
          if (consumer.position(s) >= s.end) {
            open.delete(k);
            consumer.pause([s]);
          }
        }
      }
    } finally {
      await consumer.close().catch(() => undefined);
    }
    return out;
  }

  /** Closes the producer (an open transaction is aborted). Idempotent. */
  async close(): Promise<void> {
    const p = this.producer;
    this.producer = null;
    if (p) await p.close().catch(() => undefined);
  }
}

/** What the reconciliation keeps of one of the pump's own records. */
interface OwnRecord {
  txn: number;
  id: string;
  /** Records of its transaction in its partition, and in all. */
  inPartition: number;
  total: number;
  /** Its `sluice.installation` header, '' when absent. */
  installation: string;
}

function ownRecord(r: ConsumedRecord): OwnRecord {
  const txn = Number(r.headers[KAFKA_CAPTURE_HEADERS.txn]);
  const inPartition = Number(r.headers[KAFKA_CAPTURE_HEADERS.txnRecords]);
  const total = Number(r.headers[KAFKA_CAPTURE_HEADERS.txnTotal]);
  const id = r.headers[KAFKA_CAPTURE_HEADERS.stagingId];
  if (!(txn >= 1) || !(inPartition >= 1) || !(total >= inPartition) || id === undefined) {
    throw new Error(
      `record ${r.topic}/${r.partition} offset ${r.offset} of capture pump ${r.headers[KAFKA_CAPTURE_HEADERS.pump]} lacks its capture headers`,
    );
  }
  const installation = r.headers[KAFKA_CAPTURE_HEADERS.installation] ?? '';
  return { txn, id, inPartition, total, installation };
}

/**
 * Partition of a record: murmur2 of the key mod partitions (engine/bus partitionForKey, Kafka's
 * default partitioner); an unkeyed change (key strategy none) spreads by `spread`.
 */
function partitionOf(key: string | null, partitions: number, spread: number): number {
  if (key === null) return spread % partitions;
  return partitionForKey(key, partitions);
}
