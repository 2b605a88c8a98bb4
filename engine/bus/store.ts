/**
 * Internal seam between the in-process bus model (engine/bus/memory) and a durable store
 * (engine/bus/journal). The memory backend runs without a store; the journal backend runs the
 * same model with a {@link BusStore} that persists every decided write before it becomes visible,
 * and a {@link RestoredBus} that rebuilds the model on open. Not part of the public bus API.
 */
import type { BusRecord, TopicSpec } from './types.js';
import type { ColdPartition, HotWindowLimits } from './memory/log.js';

/** A record at its offset in one partition. */
export interface StoredRecord {
  offset: number;
  record: BusRecord;
}

/**
 * Records written to one partition, and the partition's end offset after them (markers included).
 * Two parallel arrays (`records[i]` is at `offsets[i]`) rather than one {@link StoredRecord} per
 * record: a transaction's writes live until its commit is durable, and a send builds one per record.
 */
export interface PartitionWrite {
  topic: string;
  partition: number;
  records: BusRecord[];
  /** Offset of each record, ascending; same length as `records`. */
  offsets: number[];
  /** Offset the next append gets after this write: keeps offsets stable across restarts. */
  endOffset: number;
  /**
   * No record written to this partition by a later call has a lower offset: the partition's last
   * stable offset at this write, not counting the write's own transaction.
   */
  stableOffset: number;
}

/** Committed group positions (next offsets to read). */
export interface GroupWrite {
  groupId: string;
  positions: { topic: string; partition: number; offset: number }[];
}

/**
 * Durable side of a bus. Every call but commitTransaction is synchronous and durable (per the
 * store's fsync policy) on return; a throw means nothing of the call is visible after recovery
 * except for {@link BusStore.appendRecords}, which is atomic per partition only (as a Kafka
 * produce). Calls are ordered as made: a call's writes follow every earlier call's.
 */
export interface BusStore {
  /** Bounds of the records each partition holds in memory (the rest is read from `cold`). */
  readonly hotWindow: HotWindowLimits;
  createTopic(spec: TopicSpec): void;
  /** Where the records of a partition of a created topic are read back once out of memory. */
  coldPartition(topic: string, partition: number): ColdPartition;
  /** Non-transactional records. */
  appendRecords(writes: PartitionWrite[]): void;
  /**
   * A transaction's records and group positions: all or nothing across partitions and groups.
   * Ordered at the call (a later call's writes follow it); the promise resolves once it is
   * durable, so the caller may prepare more work meanwhile. A throw: nothing written. A
   * rejection: written but not known durable (visible after recovery or not).
   */
  commitTransaction(writes: PartitionWrite[], groups: GroupWrite[]): Promise<void>;
  /** Consumer commit() outside a transaction. */
  commitOffsets(group: GroupWrite): void;
  close(): void;
}

/** The durable state a bus starts from. */
export interface RestoredBus {
  /** Per partition: its end offset (markers included) and where its records are read from. */
  topics: { spec: TopicSpec; partitions: { endOffset: number; cold: ColdPartition }[] }[];
  /** groupId -> tpKey(topic, partition) -> committed offset. */
  committed: Map<string, Map<string, number>>;
}
