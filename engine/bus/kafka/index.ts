/**
 * Kafka bus backend over kafkajs 2.x.
 *
 * Producers: kafkajs producers with acks=all, idempotent by default (kafkajs resends a whole
 * request when one partition of it fails, e.g. NOT_LEADER_OR_FOLLOWER right after a topic was
 * created: without producer ids and sequence numbers the broker would keep both copies of the
 * partitions that had succeeded); transactional ones carry a transactionalId with
 * maxInFlightRequests=1. Every record is sent with an explicit partition computed by
 * {@link PartitionResolver} (murmur2, same as kafkajs' DefaultPartitioner), so partitioning does
 * not depend on the client.
 *
 * Consumers: a pull adapter over kafkajs' push consumer, see ./consumer.ts for why and how.
 *
 * Topics: kafkajs admin.createTopics, or `createTopics` from the options (librdkafka's mock
 * cluster, kept for request-error injection in tests, does not implement CreateTopics).
 */
// Before kafkajs: installs the corrected read_committed filter that kafkajs' consumer binds at load.
import { readCommittedFilterInstalled } from './read-committed.js';
import kafkajs from 'kafkajs';
import type {
  Admin,
  Kafka as KafkaClient,
  KafkaConfig,
  PartitionAssigner,
  Producer,
  Transaction,
} from 'kafkajs';
import { PartitionResolver } from '../partitioner.js';
import {
  BusError,
  type BusBackend,
  type BusConsumer,
  type BusProducer,
  type BusTransaction,
  type ConsumerOptions,
  type GroupMetadata,
  type PartitionPosition,
  type ProducerOptions,
  type ProducerRecord,
  type RecordMetadata,
  type TopicPartition,
  type TopicSpec,
} from '../types.js';
import { KafkaConsumer } from './consumer.js';
import { checkValueSize } from '../memory/slab.js';
import { kafkaErrorType, toBusError } from './errors.js';
import type { KafkaSecurityOptions } from './security.js';

const { Kafka, logLevel } = kafkajs;

/** Options for {@link createKafkaBus}. */
export interface KafkaBusOptions {
  /** Bootstrap servers, 'host:port'. */
  brokers: string[];
  /** Default 'sluice'. */
  clientId?: string;
  /**
   * Replaces kafkajs admin.createTopics (librdkafka's mock cluster has none); must be idempotent
   * for equal partition counts and throw BusError 'bad-input' for different ones.
   */
  createTopics?: (topics: TopicSpec[]) => Promise<void>;
  /**
   * Idempotent plain producers (the broker drops resent duplicates). Default true; false only for
   * librdkafka's mock cluster, which reports controller id 0, so kafkajs cannot initialise an
   * idempotent producer there. Transactional producers are always idempotent.
   */
  idempotent?: boolean;
  /** Longest broker-side wait of one fetch, ms; bounds how late seek/resume take effect. Default 100. */
  fetchMaxWaitMs?: number;
  /** Group heartbeat interval, ms. Default 500 (kafkajs: 3000), so rebalances are noticed quickly. */
  heartbeatIntervalMs?: number;
  /**
   * Longest a consumer keeps its cluster metadata (which node leads which partition), ms (kafkajs
   * `metadataMaxAge`, 300,000 by default). Default 5000: kafkajs fetches a partition only from the
   * node its metadata names as leader and refreshes that metadata only on a fetch error or at this
   * age, so a partition it saw without a leader (its leader killed, no other in-sync replica) is
   * fetched by no fetcher, no fetch fails, and the consumer read nothing of it for 5 minutes after
   * it had a leader again (Java's consumer refreshes at once for a partition without a leader).
   * Costs one Metadata request per consumer per period.
   */
  metadataMaxAgeMs?: number;
  /**
   * Fetch stall bound of an assigned (group-less) consumer, ms; 0 = off. Default 10,000. A
   * partition the caller wants (not paused, nothing buffered) that got no fetched batch for this
   * long while the broker's last stable offset is beyond its position restarts the consumer's
   * kafkajs client on a new private group, from the same positions (consumer.ts, "Fetch
   * stalls"). kafkajs can stop fetching without any error or rejoin after its group's
   * coordinator moved (docs/FAULTS.md, defect 8). Each restart emits a process warning (code
   * SLUICE_KAFKA_FETCH_STALL). Costs one ListOffsets per idle partition per period.
   */
  fetchStallMs?: number;
  /**
   * Longest a group-less consumer's assign() waits for the cluster, ms (metadata, committed and
   * end offsets, the join of its private group); 0 = no bound. Default 30,000. Past it, assign()
   * rejects with BusError 'backend' instead of waiting out kafkajs' request timeout attempt after
   * attempt while a node accepts connections and answers nothing (consumer.ts assign()).
   */
  assignTimeoutMs?: number;
  /** Producers' retry settings. Default {@link KAFKA_PRODUCER_RETRY}. */
  producerRetry?: KafkaRetryOptions;
  /** kafkajs log level name. Default 'NOTHING' (kafkajs logs expected rebalance errors loudly). */
  logLevel?: 'NOTHING' | 'ERROR' | 'WARN' | 'INFO' | 'DEBUG';
  /**
   * Partition assigners a group consumer offers when it joins, in order of preference (kafkajs
   * `partitionAssigners`). Default: kafkajs' round robin.
   */
  partitionAssigners?: PartitionAssigner[];
  /** TLS to the brokers (kafkajs `ssl`; see ./security.ts kafkaSecurityOptions). Absent: plaintext. */
  ssl?: KafkaSecurityOptions['ssl'];
  /** SASL authentication (kafkajs `sasl`). Absent: none. */
  sasl?: KafkaSecurityOptions['sasl'];
}

/**
 * kafkajs retry of producer requests: up to 14 retries, 20 ms doubling to 3.2 s (about 24 s in
 * all: a failed leader's partitions move after the controller's broker session timeout, 9 s by
 * default, plus the election), then the send fails with BusError 'backend'. The first wait is
 * short because the common retry is not a failure: a transaction's first send right after the
 * previous commit gets CONCURRENT_TRANSACTIONS from AddPartitionsToTxn until the coordinator
 * has written the commit markers (a few ms), and kafkajs retries that send with this backoff
 * (the Java producer waits 20 ms there too). At 100 ms it cost a transaction about 60 ms on
 * average (bench/RESULTS.md, "Kafka transactions: the first send's wait").
 */
export const KAFKA_PRODUCER_RETRY: Readonly<KafkaRetryOptions> = {
  retries: 14,
  initialRetryTime: 20,
  maxRetryTime: 3200,
};

/** kafkajs retry settings of a producer (kafkajs `RetryOptions`: counts and ms). */
export interface KafkaRetryOptions {
  /** Retries after the first try. */
  retries: number;
  /** First wait, ms (then doubling, randomized by kafkajs' factor 0.2). */
  initialRetryTime: number;
  /** Longest wait, ms. */
  maxRetryTime: number;
}
/**
 * Coordinator answers after which sendOffsets is retried: the group's coordinator is moving or
 * loading (a new __consumer_offsets partition, a broker restart or failover). kafkajs retries
 * only some of them, and names code 16 NOT_COORDINATOR_FOR_GROUP where it checks for
 * 'NOT_COORDINATOR'.
 */
const RETRIABLE_COORDINATOR_TYPES = new Set([
  'NOT_COORDINATOR_FOR_GROUP',
  'NOT_COORDINATOR',
  'GROUP_COORDINATOR_NOT_AVAILABLE',
  'COORDINATOR_NOT_AVAILABLE',
  'GROUP_LOAD_IN_PROGRESS',
  'COORDINATOR_LOAD_IN_PROGRESS',
  'CONCURRENT_TRANSACTIONS',
]);
/** How long createTopics waits for created topics to show in metadata, ms. */
const CREATE_TOPICS_WAIT_MS = 10_000;
/** How long sendOffsets retries a coordinator that is moving or loading, ms. */
const SEND_OFFSETS_RETRY_MS = 15_000;

/** How long {@link KafkaBus.offsets} retries a transient ListOffsets failure, ms. */
const OFFSETS_RETRY_MS = 10_000;
/** kafkajs error types after which ListOffsets may succeed on fresh metadata (kafkajs itself retries an unknown topic). */
const RETRIABLE_OFFSETS_TYPES = new Set([
  'LEADER_NOT_AVAILABLE',
  'NOT_LEADER_FOR_PARTITION',
  'NOT_LEADER_OR_FOLLOWER',
  'REQUEST_TIMED_OUT',
  'KAFKA_STORAGE_ERROR',
]);
function retriableOffsetsFailure(e: unknown): boolean {
  if (e instanceof BusError) return false;
  // kafkajs' own TypeError when a ListOffsets answer lacks the topic, and our short-answer Error.
  if (
    e instanceof TypeError ||
    (e instanceof Error && e.message.startsWith('ListOffsets answered'))
  )
    return true;
  const type = kafkaErrorType(e);
  return type !== undefined && RETRIABLE_OFFSETS_TYPES.has(type);
}

/** Creates a kafka bus; connects lazily. Throws 'bad-input' on an empty broker list or an entry that is not host:port. */
export function createKafkaBus(opts: KafkaBusOptions): BusBackend {
  if (!opts.brokers?.length)
    throw new BusError('bad-input', 'kafka bus needs at least one broker, brokers=[]');
  opts.brokers.forEach((b, i) => {
    // host:port (a bracketed IPv6 host allowed), port 1..65535, as a Kafka bootstrap.servers entry.
    const m = /^(\[[^\]]+\]|[^:\s]+):(\d+)$/.exec(String(b));
    const port = m ? Number(m[2]) : NaN;
    if (!m || port < 1 || port > 65535)
      throw new BusError(
        'bad-input',
        `kafka broker must be host:port with a port 1-65535, brokers[${i}]=${JSON.stringify(b)}`,
      );
  });
  return new KafkaBus(opts);
}

/**
 * Deletes the records of `tp` before offset `before` (Kafka's DeleteRecords: the partition's
 * log start offset moves to `before`; consumers positioned earlier skip to it). For a queue a
 * user empties by hand, such as a dead-letter topic (`sluice dlq purge`).
 * @throws BusError 'bad-input' if `bus` is not a kafka bus; 'backend' if the broker refuses
 *   (e.g. `before` beyond the high watermark, or a topic with cleanup.policy=compact).
 */
export async function deleteRecordsBefore(
  bus: BusBackend,
  tp: TopicPartition,
  before: number,
): Promise<void> {
  if (!(bus instanceof KafkaBus))
    throw new BusError('bad-input', `deleteRecordsBefore needs a kafka bus, got ${bus.kind}`);
  const admin = await bus.admin();
  try {
    await admin.deleteTopicRecords({
      topic: tp.topic,
      partitions: [{ partition: tp.partition, offset: String(before) }],
    });
  } catch (err) {
    throw new BusError(
      'backend',
      `delete records of topic=${tp.topic} partition=${tp.partition} before offset ${before}: ${(err as Error).message}`,
      { cause: err },
    );
  }
}

/** Internal settings shared with ./consumer.ts. */
export interface KafkaBusInternals {
  readonly kafka: KafkaClient;
  readonly opts: Required<
    Pick<
      KafkaBusOptions,
      | 'fetchMaxWaitMs'
      | 'heartbeatIntervalMs'
      | 'metadataMaxAgeMs'
      | 'clientId'
      | 'fetchStallMs'
      | 'assignTimeoutMs'
    >
  > &
    Pick<KafkaBusOptions, 'partitionAssigners'>;
  /** The bootstrap brokers (host:port), for messages. */
  readonly brokers: readonly string[];
  admin(): Promise<Admin>;
  offsets(tps: TopicPartition[]): Promise<{ start: number; end: number }[]>;
  committed(groupId: string, tps: TopicPartition[]): Promise<(number | null)[]>;
  partitionCount(topic: string): Promise<number | null>;
}

class KafkaBus implements BusBackend, KafkaBusInternals {
  readonly kind = 'kafka';
  readonly kafka: KafkaClient;
  readonly opts: KafkaBusInternals['opts'];
  readonly brokers: readonly string[];
  private adminClient: Promise<Admin> | null = null;
  private readonly producers = new Set<KafkaProducer>();
  private readonly consumers = new Set<KafkaConsumer>();
  private closed = false;

  constructor(private readonly options: KafkaBusOptions) {
    this.opts = {
      clientId: options.clientId ?? 'sluice',
      fetchMaxWaitMs: options.fetchMaxWaitMs ?? 100,
      heartbeatIntervalMs: options.heartbeatIntervalMs ?? 500,
      metadataMaxAgeMs: options.metadataMaxAgeMs ?? 5000,
      fetchStallMs: options.fetchStallMs ?? 10_000,
      assignTimeoutMs: options.assignTimeoutMs ?? 30_000,
      partitionAssigners: options.partitionAssigners,
    };
    this.brokers = [...options.brokers];
    for (const k of ['fetchStallMs', 'assignTimeoutMs'] as const)
      if (!(this.opts[k] >= 0))
        throw new BusError('bad-input', `${k} must be a number of ms >= 0, ${k}=${options[k]}`);
    this.kafka = new Kafka({
      clientId: this.opts.clientId,
      brokers: options.brokers,
      logLevel: logLevel[options.logLevel ?? 'NOTHING'],
      retry: { retries: 5, initialRetryTime: 100 },
      ...(options.ssl !== undefined ? { ssl: options.ssl } : {}),
      ...(options.sasl !== undefined ? { sasl: options.sasl } : {}),
    });
  }

  private checkOpen(): void {
    if (this.closed) throw new BusError('closed', 'kafka bus is closed');
  }

  admin(): Promise<Admin> {
    this.checkOpen();
    if (!this.adminClient) {
      const a = this.kafka.admin();
      this.adminClient = a.connect().then(() => a);
      this.adminClient.catch(() => (this.adminClient = null));
    }
    return this.adminClient;
  }

  async createTopics(topics: TopicSpec[]): Promise<void> {
    this.checkOpen();
    const missing: TopicSpec[] = [];
    for (const t of topics) {
      if (!Number.isInteger(t.partitions) || t.partitions < 1) {
        throw new BusError(
          'bad-input',
          `partitions must be an integer >= 1, topic=${t.name} partitions=${t.partitions}`,
        );
      }
    }
    // An external creator (the mock cluster) checks existence itself: asking the mock's
    // Metadata would auto-create the topic with its default partition count.
    if (this.options.createTopics) {
      try {
        return await this.options.createTopics(topics);
      } catch (e) {
        throw toBusError(e, `creating topics ${topics.map((t) => t.name).join(',')}`);
      }
    }
    for (const t of topics) {
      const n = await this.partitionCount(t.name);
      if (n === null) missing.push(t);
      else if (n !== t.partitions)
        throw new BusError(
          'bad-input',
          `topic exists with ${n} partitions, topic=${t.name} partitions=${t.partitions}`,
        );
    }
    if (missing.length === 0) return;
    try {
      {
        const admin = await this.admin();
        await admin.createTopics({
          waitForLeaders: true,
          topics: missing.map((t) => ({
            topic: t.name,
            numPartitions: t.partitions,
            configEntries: t.compacted ? [{ name: 'cleanup.policy', value: 'compact' }] : [],
          })),
        });
      }
    } catch (e) {
      // kafkajs' wait for the new topics' leaders can meet metadata that does not list them yet
      // (seen on a freshly started Kafka 4 broker): the topics were created; wait for them here.
      const type = kafkaErrorType(e);
      if (
        type !== 'UNKNOWN_TOPIC_OR_PARTITION' &&
        type !== 'LEADER_NOT_AVAILABLE' &&
        type !== 'TOPIC_ALREADY_EXISTS'
      ) {
        throw toBusError(e, `creating topics ${missing.map((t) => t.name).join(',')}`);
      }
      const deadline = Date.now() + CREATE_TOPICS_WAIT_MS;
      for (const t of missing) {
        for (;;) {
          const n = await this.partitionCount(t.name).catch(() => null);
          if (n === t.partitions) break;
          if (n !== null)
            throw new BusError(
              'bad-input',
              `topic exists with ${n} partitions, topic=${t.name} partitions=${t.partitions}`,
            );
          if (Date.now() > deadline)
            throw toBusError(e, `creating topics ${missing.map((x) => x.name).join(',')}`);
          await new Promise((r) => setTimeout(r, 100));
        }
      }
    }
  }

  async partitionCount(topic: string): Promise<number | null> {
    const admin = await this.admin();
    try {
      const { topics } = await admin.fetchTopicMetadata({ topics: [topic] });
      return topics[0]?.partitions.length || null;
    } catch (e) {
      if (kafkaErrorType(e) === 'UNKNOWN_TOPIC_OR_PARTITION') return null;
      throw toBusError(e, `metadata of topic ${topic}`);
    }
  }

  /**
   * Start (log start offset) and end (last stable offset under READ_COMMITTED, kafkajs' default
   * isolation) of each partition, in the order of `tps`. kafkajs' admin.fetchTopicOffsets fails
   * now and then right after a topic was created or a leader moved (its ListOffsets answer lacks
   * the topic: "Cannot destructure property 'partitions'", seen on the mock cluster in CI), and
   * its cached metadata can stay stale: each retry asks through a new admin client, with backoff
   * 100 ms doubling to 1.6 s, for up to {@link OFFSETS_RETRY_MS}. Throws BusError 'bad-input' for a
   * partition the topic does not have, else the last kafkajs failure as a BusError.
   */
  async offsets(tps: TopicPartition[]): Promise<{ start: number; end: number }[]> {
    const byTopic = new Map<string, { partition: number; low: string; high: string }[]>();
    for (const topic of new Set(tps.map((tp) => tp.topic))) {
      const wanted = tps.filter((tp) => tp.topic === topic).map((tp) => tp.partition);
      const deadline = Date.now() + OFFSETS_RETRY_MS;
      for (let attempt = 0, delay = 100; ; attempt++, delay = Math.min(delay * 2, 1600)) {
        let failure: unknown;
        try {
          // Retries ask through an admin client of their own: its metadata is fresh, and the
          // shared client (maybe in use by another call) is left alone.
          const got =
            attempt === 0
              ? await (await this.admin()).fetchTopicOffsets(topic)
              : await this.withFreshAdmin((a) => a.fetchTopicOffsets(topic));
          const missing = wanted.filter((p) => !got.some((x) => x.partition === p));
          // A wanted partition missing from the answer: bad input if the topic lacks it, else transient.
          const count = missing.length ? await this.partitionCount(topic) : null;
          if (missing.length === 0 || (count !== null && missing.some((p) => p >= count))) {
            byTopic.set(topic, got);
            break;
          }
          failure = new Error(
            `ListOffsets answered partitions ${got.map((x) => x.partition).join(',')} of ${count ?? 'unknown'}`,
          );
        } catch (e) {
          failure = e;
        }
        if (Date.now() + delay > deadline || !retriableOffsetsFailure(failure))
          throw toBusError(failure, `offsets of topic ${topic}`);
        await new Promise((r) => setTimeout(r, delay));
      }
    }
    return tps.map((tp) => {
      const p = byTopic.get(tp.topic)!.find((x) => x.partition === tp.partition);
      if (!p)
        throw new BusError(
          'bad-input',
          `no such partition, topic=${tp.topic} partition=${tp.partition}`,
        );
      return { start: Number(p.low), end: Number(p.high) };
    });
  }

  /** Runs `f` with a newly connected admin client (fresh metadata), disconnected afterwards. */
  private async withFreshAdmin<T>(f: (a: Admin) => Promise<T>): Promise<T> {
    this.checkOpen();
    const a = this.kafka.admin();
    await a.connect();
    try {
      return await f(a);
    } finally {
      await a.disconnect().catch(() => undefined);
    }
  }

  async committed(groupId: string, tps: TopicPartition[]): Promise<(number | null)[]> {
    const admin = await this.admin();
    const topics = [...new Set(tps.map((tp) => tp.topic))];
    let res: Awaited<ReturnType<Admin['fetchOffsets']>>;
    try {
      res = await admin.fetchOffsets({ groupId, topics });
    } catch (e) {
      throw toBusError(e, `committed offsets of group ${groupId}`);
    }
    return tps.map((tp) => {
      const o = res
        .find((t) => t.topic === tp.topic)
        ?.partitions.find((p) => p.partition === tp.partition)?.offset;
      return o === undefined || Number(o) < 0 ? null : Number(o);
    });
  }

  async producer(opts: ProducerOptions = {}): Promise<BusProducer> {
    this.checkOpen();
    const transactionalId = opts.transactionalId ?? null;
    const p = this.kafka.producer({
      allowAutoTopicCreation: false,
      idempotent: this.options.idempotent ?? true,
      // kafkajs' idempotent default is to retry forever: a broker that is gone would hang a send.
      retry: { ...(this.options.producerRetry ?? KAFKA_PRODUCER_RETRY) },
      ...(transactionalId !== null ? { transactionalId, maxInFlightRequests: 1 } : {}),
    });
    try {
      await p.connect();
      // kafkajs sends InitProducerId only at the first transaction(); Kafka's Java producer sends
      // it in initTransactions(), before any work. Doing it here makes creating the producer fence
      // older producers with this id at once (the broker bumps the epoch and aborts their open
      // transaction, KIP-98), which is what a new owner of a partition relies on. An abort of a
      // transaction with no partitions sends nothing (kafkajs skips EndTxn).
      if (transactionalId !== null) await (await p.transaction()).abort();
    } catch (e) {
      await p.disconnect().catch(() => undefined);
      throw toBusError(
        e,
        transactionalId !== null
          ? `initialising transactional producer ${transactionalId}`
          : 'connecting producer',
      );
    }
    const producer = new KafkaProducer(this, p, transactionalId, () =>
      this.producers.delete(producer),
    );
    this.producers.add(producer);
    return producer;
  }

  /** See {@link BusBackend.allocValue}: a zero-filled Buffer (from Node's pool when under 4 KiB). */
  allocValue(bytes: number): Uint8Array {
    this.checkOpen();
    checkValueSize(bytes);
    return Buffer.allocUnsafe(bytes).fill(0);
  }

  async consumer(opts: ConsumerOptions = {}): Promise<BusConsumer> {
    this.checkOpen();
    // Fail closed: kafkajs' own filter can hand out records of aborted transactions.
    if (!readCommittedFilterInstalled())
      throw new BusError(
        'backend',
        'kafkajs was loaded before sluice could install its read_committed filter (kafkajs 2.2.4 can return records of aborted transactions, see engine/bus/kafka/read-committed.ts): import sluice before kafkajs',
      );
    const c = new KafkaConsumer(this, opts, () => this.consumers.delete(c));
    this.consumers.add(c);
    return c;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    for (const c of [...this.consumers]) await c.close();
    for (const p of [...this.producers]) await p.close();
    this.closed = true;
    const admin = this.adminClient;
    this.adminClient = null;
    if (admin) await (await admin.catch(() => null))?.disconnect();
  }
}

type Sender = Pick<Producer, 'sendBatch'>;

/** One kafkajs sendBatch; offsets per record = partition base offset + rank within the partition. */
async function sendRecords(
  sender: Sender,
  resolver: PartitionResolver,
  records: ProducerRecord[],
  what: string,
): Promise<RecordMetadata[]> {
  if (records.length === 0) return [];
  const partitions = await resolver.resolve(records);
  const byTopic = new Map<
    string,
    {
      partition: number;
      key: string | null;
      value: Buffer | null;
      headers?: Record<string, string>;
      timestamp?: string;
    }[]
  >();
  const rank = new Array<number>(records.length);
  const perPartition = new Map<string, number>();
  for (let i = 0; i < records.length; i++) {
    const r = records[i];
    let list = byTopic.get(r.topic);
    if (!list) byTopic.set(r.topic, (list = []));
    // kafkajs stamps Date.now() itself when timestamp is absent; parsing a string into its Long
    // costs ~25% of produce throughput, so the field is set only when the caller gave one.
    const m: {
      partition: number;
      key: string | null;
      value: Buffer | null;
      headers?: Record<string, string>;
      timestamp?: string;
    } = {
      partition: partitions[i],
      key: r.key,
      value:
        r.value === null
          ? null
          : Buffer.isBuffer(r.value)
            ? r.value
            : Buffer.from(r.value.buffer, r.value.byteOffset, r.value.byteLength),
    };
    if (r.headers) m.headers = r.headers;
    if (r.timestampMs !== undefined) m.timestamp = String(r.timestampMs);
    list.push(m);
    const k = `${r.topic}:${partitions[i]}`;
    const n = perPartition.get(k) ?? 0;
    rank[i] = n;
    perPartition.set(k, n + 1);
  }
  let meta: Awaited<ReturnType<Producer['sendBatch']>>;
  try {
    meta = await sender.sendBatch({
      acks: -1,
      topicMessages: [...byTopic].map(([topic, messages]) => ({ topic, messages })),
    });
  } catch (e) {
    throw toBusError(e, what);
  }
  const base = new Map<string, number>();
  for (const m of meta) base.set(`${m.topicName}:${m.partition}`, Number(m.baseOffset ?? -1));
  return records.map((r, i) => {
    const b = base.get(`${r.topic}:${partitions[i]}`) ?? -1;
    return { topic: r.topic, partition: partitions[i], offset: b < 0 ? -1 : b + rank[i] };
  });
}

class KafkaProducer implements BusProducer {
  private readonly resolver: PartitionResolver;
  open: KafkaTransaction | null = null;
  private closed = false;

  constructor(
    bus: KafkaBus,
    private readonly p: Producer,
    readonly transactionalId: string | null,
    private readonly onClose: () => void,
  ) {
    this.resolver = new PartitionResolver((t) => bus.partitionCount(t));
  }

  private checkOpen(): void {
    if (this.closed)
      throw new BusError('closed', `producer is closed, transactionalId=${this.transactionalId}`);
  }

  async send(records: ProducerRecord[]): Promise<RecordMetadata[]> {
    this.checkOpen();
    if (this.transactionalId !== null) {
      throw new BusError(
        'txn-state',
        `transactional producer sends inside begin()/commit(), transactionalId=${this.transactionalId}`,
      );
    }
    return sendRecords(this.p, this.resolver, records, 'send');
  }

  async begin(): Promise<BusTransaction> {
    this.checkOpen();
    if (this.transactionalId === null)
      throw new BusError('txn-state', 'begin() needs a producer with a transactionalId');
    if (this.open)
      throw new BusError(
        'txn-state',
        `a transaction is already open, transactionalId=${this.transactionalId}`,
      );
    let t: Transaction;
    try {
      t = await this.p.transaction();
    } catch (e) {
      throw toBusError(e, `begin transaction ${this.transactionalId}`);
    }
    return (this.open = new KafkaTransaction(this, t, this.resolver));
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.open) await this.open.abort().catch(() => undefined);
    this.onClose();
    await this.p.disconnect().catch(() => undefined);
  }
}

class KafkaTransaction implements BusTransaction {
  private status: 'open' | 'committed' | 'aborted' = 'open';

  constructor(
    private readonly producer: KafkaProducer,
    private readonly t: Transaction,
    private readonly resolver: PartitionResolver,
  ) {}

  private checkOpen(): void {
    if (this.status !== 'open')
      throw new BusError(
        'txn-state',
        `transaction is ${this.status}, transactionalId=${this.producer.transactionalId}`,
      );
  }

  async send(records: ProducerRecord[]): Promise<RecordMetadata[]> {
    this.checkOpen();
    return sendRecords(
      this.t,
      this.resolver,
      records,
      `send in transaction ${this.producer.transactionalId}`,
    );
  }

  /** kafkajs TxnOffsetCommit carries the group id only: member/generation fencing (KIP-447) is not sent. */
  async sendOffsets(group: string | GroupMetadata, positions: PartitionPosition[]): Promise<void> {
    this.checkOpen();
    const consumerGroupId = typeof group === 'string' ? group : group.groupId;
    const byTopic = new Map<string, { partition: number; offset: string }[]>();
    for (const p of positions) {
      let list = byTopic.get(p.topic);
      if (!list) byTopic.set(p.topic, (list = []));
      list.push({ partition: p.partition, offset: String(p.offset) });
    }
    const topics = [...byTopic].map(([topic, partitions]) => ({ topic, partitions }));
    const deadline = Date.now() + SEND_OFFSETS_RETRY_MS;
    for (let delay = 100; ; delay = Math.min(delay * 2, 1600)) {
      try {
        await this.t.sendOffsets({ consumerGroupId, topics });
        return;
      } catch (e) {
        const type = kafkaErrorType(e);
        const retriable = type !== undefined && RETRIABLE_COORDINATOR_TYPES.has(type);
        if (!retriable || Date.now() + delay > deadline) {
          throw toBusError(e, `sendOffsets in transaction ${this.producer.transactionalId}`);
        }
      }
      await new Promise((r) => setTimeout(r, delay));
    }
  }

  async commit(): Promise<void> {
    this.checkOpen();
    try {
      await this.t.commit();
      this.status = 'committed';
    } catch (e) {
      await this.abort().catch(() => undefined);
      throw toBusError(e, `commit transaction ${this.producer.transactionalId}`);
    } finally {
      if (this.producer.open === this) this.producer.open = null;
    }
  }

  async abort(): Promise<void> {
    if (this.status !== 'open') return;
    this.status = 'aborted';
    if (this.producer.open === this) this.producer.open = null;
    try {
      if (this.t.isActive()) await this.t.abort();
    } catch (e) {
      throw toBusError(e, `abort transaction ${this.producer.transactionalId}`);
    }
  }
}
