/**
 * The bus API: topics of fixed partition counts, records, transactional producers and pull-style
 * consumers with positions and group membership. Every backend (memory, journal, kafka)
 * implements {@link BusBackend}; message patterns are written once against these interfaces.
 *
 * Shape after the Kafka Java client (KafkaProducer / KafkaConsumer: poll loop, positions, seek,
 * rebalance listener called from inside poll) and Corda 5's messaging layer (CordaProducer /
 * CordaConsumer under its durable, state-and-event, pub/sub, compacted and RPC subscriptions),
 * made Promise-based because kafkajs is.
 *
 * Offsets ("positions") are JavaScript numbers, exact up to 2^53. A position is the offset of the
 * NEXT record to read. Offsets are increasing but NOT contiguous: transaction markers and aborted
 * records occupy offsets that consumers never see (as in Kafka), so code must never compute
 * "offset + count".
 */

/** A record as stored on the bus. `value === null` is a tombstone (deletion in compacted topics). */
export interface BusRecord {
  /** Partitioning and per-key ordering key; null = no key (round-robin partition). */
  key: string | null;
  value: Uint8Array | null;
  /** UTF-8 string headers (kafka header bytes are decoded as UTF-8). */
  headers: Record<string, string>;
  /** Producer-side creation time, ms since the Unix epoch. */
  timestampMs: number;
}

/** A record to send. Partition, when absent, is {@link partitionForKey} of the key (murmur2). */
export interface ProducerRecord {
  topic: string;
  key: string | null;
  value: Uint8Array | null;
  headers?: Record<string, string>;
  /** Default: `Date.now()` at send. */
  timestampMs?: number;
  /** Explicit partition in [0, partitions); overrides the key's partition. */
  partition?: number;
}

/** A record returned by {@link BusConsumer.poll}. */
export interface ConsumedRecord extends BusRecord {
  topic: string;
  partition: number;
  offset: number;
}

/** Where a sent record landed. `offset` is -1 where the backend cannot tell before commit. */
export interface RecordMetadata {
  topic: string;
  partition: number;
  offset: number;
}

export interface TopicPartition {
  topic: string;
  partition: number;
}

/** A partition's position: the offset of the next record to read (or the committed one). */
export interface PartitionPosition extends TopicPartition {
  offset: number;
}

/** A topic to create. */
export interface TopicSpec {
  name: string;
  /** Fixed partition count, >= 1. */
  partitions: number;
  /** Log-compacted topic (kafka: cleanup.policy=compact). Memory keeps every record. */
  compacted?: boolean;
  /**
   * Journal backend: deletes a partition's oldest segments whole by size and age (memory and
   * kafka backends keep every record; kafka's own retention is the broker's topic config).
   */
  retention?: RetentionOptions;
  /** Journal backend, compacted topics: how compaction treats tombstones and its key map. */
  compaction?: CompactionOptions;
}

/**
 * Retention of one topic on the journal bus (after Kafka's retention.bytes / retention.ms),
 * applied per partition to sealed segments, oldest first, at each maintenance run. The segment
 * being appended to is never deleted.
 */
export interface RetentionOptions {
  /** Delete the oldest segments while the partition's files take more bytes than this. */
  bytesMax?: number;
  /** Delete segments sealed longer ago than this, ms (a segment's age is the time it was sealed). */
  ageMsMax?: number;
  /**
   * Default false: a segment is kept while it holds records at or above the committed position
   * of any consumer group that committed on the partition. True: delete by size and age alone.
   */
  deleteUncommitted?: boolean;
}

/** Compaction of one compacted topic on the journal bus (after Kafka's log cleaner). */
export interface CompactionOptions {
  /**
   * A tombstone (null value) that is its key's latest record is kept this long after its
   * timestampMs, ms, so readers see the deletion (Kafka's delete.retention.ms). Default 24 h.
   */
  tombstoneRetentionMs?: number;
  /** Most distinct keys per partition compaction tracks; a partition with more is left as is. Default 1,000,000. */
  keysMax?: number;
}

/**
 * Group membership of a consumer, for {@link BusTransaction.sendOffsets} fencing (after Kafka's
 * `ConsumerGroupMetadata`, KIP-447).
 */
export interface GroupMetadata {
  groupId: string;
  memberId: string;
  generationId: number;
}

/**
 * Called from inside {@link BusConsumer.poll}, never concurrently with the caller's processing
 * (as in Kafka's ConsumerRebalanceListener). `revoked` runs before another member can receive the
 * partitions (memory) or as soon as the rebalance is known (kafka, see engine/bus/kafka); commits
 * for revoked partitions made after it returns fail with BusError code 'not-assigned'.
 * `assigned` runs once the positions of the new partitions are set (committed offset, else
 * `autoOffsetReset`); it may seek.
 */
export interface RebalanceListener {
  assigned?(partitions: TopicPartition[]): void | Promise<void>;
  revoked?(partitions: TopicPartition[]): void | Promise<void>;
}

/** Options for {@link BusBackend.producer}. */
export interface ProducerOptions {
  /**
   * Enables {@link BusProducer.begin}. Creating a producer with this id fences older ones with the
   * same id (kafka: InitProducerId is sent by producer(), not at the first begin(); memory,
   * journal: the epoch is bumped): their open transaction is aborted and their later
   * send/sendOffsets/commit throw 'fenced' (on brokers that fence; librdkafka's mock does not).
   */
  transactionalId?: string;
  /** Name in logs and broker metrics. */
  clientId?: string;
}

/** Options for {@link BusBackend.consumer}. */
export interface ConsumerOptions {
  /** Consumer group: required for subscribe(), commit() and committed(). */
  groupId?: string;
  /** Start position of a partition with no committed offset. Default 'earliest'. */
  autoOffsetReset?: 'earliest' | 'latest';
  /** Most records one poll() returns. Default {@link BUS_DEFAULTS.pollRecordsMax}. */
  pollRecordsMax?: number;
  /** Group liveness (kafka session.timeout.ms). Default {@link BUS_DEFAULTS.sessionTimeoutMs}. */
  sessionTimeoutMs?: number;
  clientId?: string;
}

/** Options for {@link BusConsumer.poll}. */
export interface PollOptions {
  /** Longest wait for the first record, ms. Default {@link BUS_DEFAULTS.pollTimeoutMs}. 0 = no wait. */
  timeoutMs?: number;
  /** Bound on returned records; capped by the consumer's `pollRecordsMax`. */
  recordsMax?: number;
}

/**
 * A producer. Non-transactional producers use send(); transactional ones (transactionalId set)
 * use begin() and send inside the transaction (send() outside one throws 'txn-state').
 */
export interface BusProducer {
  readonly transactionalId: string | null;
  /**
   * Sends and waits for the backend's acknowledgement; records are visible to consumers on
   * return. Per partition, records keep their array order. Throws BusError 'unknown-topic',
   * 'bad-input' (partition out of range), 'txn-state' on a transactional producer, 'closed'.
   */
  send(records: ProducerRecord[]): Promise<RecordMetadata[]>;
  /**
   * Starts a transaction; one may be open at a time per producer ('txn-state' otherwise).
   * Throws 'fenced' when a newer producer with the same transactionalId exists.
   */
  begin(): Promise<BusTransaction>;
  /** Aborts an open transaction and releases the producer. Idempotent. */
  close(): Promise<void>;
}

/**
 * A transaction: its records and consumed positions become visible together at commit() (to
 * read_committed consumers), or never (abort()). Records keep their offsets from send time, so a
 * committed transaction's records sit where they were sent, and consumers do not read past the
 * first record of a still-open transaction (Kafka's last stable offset).
 */
export interface BusTransaction {
  send(records: ProducerRecord[]): Promise<RecordMetadata[]>;
  /**
   * Commits `positions` (next offsets to read) for the group at the transaction's commit
   * (Kafka sendOffsetsToTransaction). With GroupMetadata, the memory backend fences: commit()
   * throws 'not-assigned' if that member no longer owns a partition (kafkajs sends the group id only).
   */
  sendOffsets(group: string | GroupMetadata, positions: PartitionPosition[]): Promise<void>;
  /** Makes everything visible atomically. Throws 'fenced', 'not-assigned' (then nothing is visible). */
  commit(): Promise<void>;
  /** Discards everything sent in the transaction. No-op once committed or aborted. */
  abort(): Promise<void>;
}

/**
 * A pull-style consumer: either manually assigned partitions (assign) or a member of a group
 * (subscribe), never both at once. Reads committed data only (read_committed).
 */
export interface BusConsumer {
  readonly groupId: string | null;
  /**
   * Joins the group (groupId required, else 'bad-input') for `topics`; partitions arrive through
   * `listener.assigned` inside later poll() calls. Replaces a previous subscription.
   */
  subscribe(topics: string[], listener?: RebalanceListener): Promise<void>;
  /** Manual assignment without group membership; replaces the previous one. Positions start at
   * the group's committed offset when groupId is set, else at `autoOffsetReset`. */
  assign(partitions: TopicPartition[]): Promise<void>;
  /** Partitions currently owned (after assigned/revoked callbacks have run). */
  assignment(): TopicPartition[];
  /** Next offset poll() returns for an owned partition; throws 'not-assigned' otherwise. */
  position(tp: TopicPartition): number;
  /** Sets the next offset to read; drops records fetched ahead. Throws 'not-assigned'. */
  seek(tp: TopicPartition, offset: number): void;
  seekToBeginning(tps: TopicPartition[]): Promise<void>;
  /** To the end of the committed data (last stable offset). */
  seekToEnd(tps: TopicPartition[]): Promise<void>;
  /** Stops/starts returning records of these partitions; positions are kept. */
  pause(tps: TopicPartition[]): void;
  resume(tps: TopicPartition[]): void;
  /**
   * Runs pending rebalance callbacks, then returns up to `recordsMax` committed records, in offset
   * order per partition, waiting up to `timeoutMs` for the first one. Advances positions past
   * the returned records (and past invisible markers/aborted records that follow them).
   */
  poll(opts?: PollOptions): Promise<ConsumedRecord[]>;
  /**
   * Commits positions for the group (default: current positions of all owned partitions).
   * Throws 'bad-input' without groupId, 'not-assigned' for a partition not owned.
   */
  commit(positions?: PartitionPosition[]): Promise<void>;
  /** The group's committed offsets (null = none). */
  committed(tps: TopicPartition[]): Promise<(number | null)[]>;
  /** Membership for fenced transactional offset commits; null when not subscribed. */
  groupMetadata(): GroupMetadata | null;
  /**
   * Backends with a network connection (kafka): calls `listener` each time the consumer loses its
   * connection to the cluster (a fetch failed after the client's retries; kafkajs: about 3 s
   * after a broker went away) with a BusError 'backend' naming the cause. The consumer keeps
   * reconnecting by itself; positions are kept. Returns a function that removes the listener.
   * Absent on embedded backends, which have no connection to lose.
   */
  onConnectionLost?(listener: (error: BusError) => void): () => void;
  /** Leaves the group (its partitions go to other members) and releases resources. Idempotent. */
  close(): Promise<void>;
}

/**
 * A bus backend. Implementations: engine/bus/memory, engine/bus/journal, engine/bus/kafka.
 * Backends receive records with the partition still unresolved; they use
 * {@link PartitionResolver} so that every backend partitions identically.
 */
export interface BusBackend {
  /** 'memory' | 'kafka' | 'journal'. */
  readonly kind: string;
  /**
   * Creates topics; an existing topic with the same partition count is left as is.
   * Throws 'bad-input' when it exists with another partition count or partitions < 1.
   */
  createTopics(topics: TopicSpec[]): Promise<void>;
  /** Partition count, or null when the topic does not exist. */
  partitionCount(topic: string): Promise<number | null>;
  /**
   * Per partition: `start` = first offset still stored, `end` = last stable offset (offset after the
   * last committed record, or of the first record of an open transaction). Throws 'unknown-topic'.
   */
  offsets(tps: TopicPartition[]): Promise<{ start: number; end: number }[]>;
  /** The group's committed offsets for tps (null = none). */
  committed(groupId: string, tps: TopicPartition[]): Promise<(number | null)[]>;
  producer(opts?: ProducerOptions): Promise<BusProducer>;
  consumer(opts?: ConsumerOptions): Promise<BusConsumer>;
  /**
   * A zero-filled value buffer of `bytes` (integer, 0 to 2^30) for a record the caller is about
   * to send on this bus: a processor that builds its output values writes them here instead of
   * allocating a Uint8Array per record. Memory and journal: up to 4 KiB a view of the bus's
   * 64 KiB value slab (no ArrayBuffer per record), larger values a buffer of their own; either
   * way the send stores it without copying it, so the caller must not write to it once it has
   * been sent. Kafka: a Buffer (from Node's pool under 4 KiB). Throws RangeError for a bad size,
   * BusError 'closed' after close().
   */
  allocValue(bytes: number): Uint8Array;
  /** Closes every producer and consumer made by this backend. Idempotent. */
  close(): Promise<void>;
}

/** Why a bus call failed; `code` is stable, `message` names what and where. */
export type BusErrorCode =
  | 'bad-input' // programmer error: invalid argument
  | 'unknown-topic' // the topic does not exist
  | 'not-assigned' // partition not owned by this consumer (revoked, or never assigned)
  | 'fenced' // a newer producer with the same transactionalId exists
  | 'txn-state' // transaction call out of order (e.g. send after commit)
  | 'closed' // used after close()
  | 'backend'; // the backend failed (kafka error, I/O); `cause` holds the original

/** The one error type of the bus API. */
export class BusError extends Error {
  constructor(
    readonly code: BusErrorCode,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'BusError';
  }
}

/** Every default bound of the bus, in one place. */
export const BUS_DEFAULTS = {
  /** Most records per poll(), as Kafka's max.poll.records. */
  pollRecordsMax: 500,
  /** Longest poll() wait, ms. */
  pollTimeoutMs: 1000,
  /** Kafka group session timeout, ms (kafkajs default 30000 makes failover slow). */
  sessionTimeoutMs: 10_000,
  /** Records a kafka consumer buffers ahead of poll() before pausing fetches. */
  fetchBufferRecordsMax: 10_000,
} as const;
