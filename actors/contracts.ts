/**
 * What crosses the boundary between the planner (main thread) and each ready-made actor
 * (worker): start data types and the names of the shared buffers. Worker entry files import
 * these; the planner imports only this file, never a worker entry (importing one would run it).
 */
import type { CaptureSource } from '../engine/cdc/index.js';
import type { TopologyProcessor } from '../engine/config/index.js';
import type { ActorBus } from '../engine/service/index.js';
import type { KafkaConnectionData } from './kafka-capture.js';

/** Start data of a queue reader. */
export interface QueueReaderData {
  queue: string;
  partition: number;
  /** Journal directory of the partition. */
  dir: string;
  /** First index to read (LAST_WRITTEN + 1 of the consuming service). */
  from: number;
  /** Records written to the ring between two doorbell rings. */
  batchSizeMax: number;
  /** Where the partition lives: the embedded journal (`dir`) or a Kafka topic named `queue`. */
  bus: ActorBus;
}

/**
 * Shared buffer names a queue reader expects. `position` ({@link createReaderPosition}): a
 * Float64Array [index of the last record written to the ring, the tailer's index when it last
 * found nothing more to read], NaN until known, read by the operations layer: on Kafka an index
 * after a batch's records is not the end (commit markers take offsets), and only the reader's
 * tailer knows where the readable records end.
 */
export const READER_SHARED = {
  ring: 'ring',
  doorbell: 'doorbell',
  notifier: 'notifier',
  position: 'position',
} as const;

/** Allocates a queue reader's `position` buffer (see {@link READER_SHARED}; both NaN). */
export function createReaderPosition(): SharedArrayBuffer {
  const sab = new SharedArrayBuffer(2 * Float64Array.BYTES_PER_ELEMENT);
  new Float64Array(sab).fill(NaN);
  return sab;
}

// The service host's start data, shared buffers, ready info and summary live with its logic
// (engine/service/host-contract.ts); re-exported here with the other actors' contracts.
export {
  HOST_SHARED,
  createPositions,
  type HostInput,
  type ServiceHostData,
  type ServiceReadyInfo,
  type ServiceSummary,
} from '../engine/service/host-contract.js';

/** Start data of a pump. */
export interface PumpData {
  source: CaptureSource;
  pump: number;
  /**
   * Target queue name -> its partition count, the journal directories of the partitions this
   * pump appends (p with p mod source.pumps = pump; a change goes to keyHash mod partitions),
   * and its journal settings.
   */
  targets: Record<
    string,
    {
      partitions: number;
      dirs: Record<number, string>;
      segmentBytes: number;
      fsync: 'none' | 'batch' | 'record';
    }
  >;
  /** Table name -> target queue name. */
  tableTargets: Record<string, string>;
  /** On a kafka bus: where the target topics are (then `targets` is empty). */
  kafka?: PumpKafkaData;
}

/**
 * A pump that ships into topics of the topology's bus in transactions (engine/cdc/kafka-sink.ts):
 * on a kafka bus, the capture targets; on the journal bus, targets that are processor topics
 * (the bus is reached through the port PUMP_PORTS.bus, served by the thread that opened it).
 */
export interface PumpKafkaData {
  /** The Kafka cluster; absent on the journal bus (then the bus is the port PUMP_PORTS.bus). */
  connection?: KafkaConnectionData;
  /** Fixed per topology, source and pump; also the consumer group of its reconciliation offsets. */
  transactionalId: string;
  /** Table name -> value format of its records. */
  formats: Record<string, 'envelope' | 'json'>;
  /**
   * Largest value the bus takes, bytes: a kafka bus's bus.recordBytesMax; on the journal bus
   * KAFKA_SINK_DEFAULTS.recordBytesMax.
   */
  busRecordBytesMax: number;
}

/** Start data of a sink actor (actors/sink.ts): one partition of a journal queue to a Kafka topic. */
export interface SinkData {
  sink: string;
  queue: string;
  partition: number;
  /** Journal directory of the partition. */
  dir: string;
  connection: KafkaConnectionData;
  topic: string;
  /** transactional.id and the consumer group whose offset for partition 0 of `topic` is the next index to forward. */
  transactionalId: string;
  format: 'envelope' | 'json';
  batchSizeMax: number;
  pollIntervalMs: number;
  /** The target's Kafka record limit (sinks[].to.recordBytesMax): the largest value sent, bytes. */
  recordBytesMax: number;
  /** The capture source writing `queue`, for the source block of JSON change values; null if none. */
  captureSource: CaptureSource | null;
}

/**
 * Shared buffer names a sink actor expects. `position` ({@link createSinkPosition}): a
 * Float64Array [the next index of its journal partition to ship, as its last committed Kafka
 * transaction recorded], NaN until the sink has read it; read by the operations layer for the
 * sink's lag (the partition's end minus it: the records not shipped yet).
 */
export const SINK_SHARED = { position: 'position' } as const;

/** Allocates a sink's `position` buffer (see {@link SINK_SHARED}; NaN). */
export function createSinkPosition(): SharedArrayBuffer {
  const sab = new SharedArrayBuffer(Float64Array.BYTES_PER_ELEMENT);
  new Float64Array(sab).fill(NaN);
  return sab;
}

/**
 * Shared buffer names: `notifier:<queue>` for each target queue's partition `pump`, and
 * `shipped`, the source's per-table shipped counters ({@link createShippedCounters}).
 */
export const PUMP_SHARED = {
  notifier: (queue: string, partition: number) => `notifier:${queue}/${partition}`,
  shipped: 'shipped',
} as const;

/**
 * Allocates the per-table shipped counters of a capture source with `tables` tables: per table,
 * the changes its pumps appended durably to the table's target topic (PumpOptions.onDurable),
 * whatever the bus (journal queues, processor topics, Kafka topics). One BigInt64 slot per
 * table, in the source's `tables` order:
 *
 *   byte 0          8          16                 8*(T-1)      8*T
 *        +----------+----------+------- ... ------+------------+
 *        | tables[0]| tables[1]|                  | tables[T-1]|
 *        +----------+----------+------- ... ------+------------+
 *
 * One buffer per source for the whole run of a topology: the planner creates it and gives it to
 * every pump group of the source, the groups of a runtime change of the pump count included
 * (actors/pump-count.ts), and the supervisor launches a restarted pump with its group's same
 * buffers. So a slot only grows (from 0 at the plan, before any pump starts): neither a pump
 * restart nor a change of the count resets it or counts a change twice. Several pumps of the
 * source add at once: {@link addShipped} (Atomics.add, once per table per batch); readers
 * (ops/stats.ts) use {@link readShipped}.
 * @throws Error when `tables` is not an integer >= 0.
 */
export function createShippedCounters(tables: number): SharedArrayBuffer {
  if (!Number.isInteger(tables) || tables < 0)
    throw new Error(`tables must be an integer >= 0, tables=${tables}`);
  return new SharedArrayBuffer(tables * BigInt64Array.BYTES_PER_ELEMENT);
}

/** Adds `changes` (an integer >= 0) to slot `table` (an index into the source's tables). */
export function addShipped(sab: SharedArrayBuffer, table: number, changes: number): void {
  Atomics.add(new BigInt64Array(sab), table, BigInt(changes));
}

/** The counts of every slot, in the source's `tables` order. */
export function readShipped(sab: SharedArrayBuffer): number[] {
  const slots = new BigInt64Array(sab);
  return Array.from({ length: slots.length }, (_, i) => Number(Atomics.load(slots, i)));
}

/** Port names of a pump actor: its connection to the topology's journal bus (PumpKafkaData without connection). */
export const PUMP_PORTS = { bus: 'bus' } as const;

/** Start data of a timer actor (periodic update events for a service). */
export interface TimerData {
  /** Service the timer serves (for logs). */
  service: string;
  queue: string;
  /** Journal directory of the timer queue's partition 0. */
  dir: string;
  segmentBytes: number;
  fsync: 'none' | 'batch' | 'record';
  intervalMs: number;
  bus: ActorBus;
}

/** Shared buffer names a timer actor expects. */
export const TIMER_SHARED = { notifier: 'notifier' } as const;

// The processor actor's start data, port names, summary and pool-thread messages live with its
// logic (engine/processors/contract.ts); re-exported here with the other actors' contracts.
export {
  PROCESSOR_PORTS,
  type ProcessorData,
  type ProcessorSummary,
  type PoolWorkerData,
  type PoolTask,
  type PoolResult,
} from '../engine/processors/contract.js';
