/**
 * What crosses the boundary between the planner (main thread) and a processor actor (worker,
 * actors/processor.ts, whose logic is ./host.ts), and between a processor and its pool threads
 * (actors/pool-worker.ts): start data, port names, the `stopped` summary, pool tasks and their
 * answers. No side effects on import.
 */
import type { TopologyProcessor } from '../config/index.js';
import type { KafkaConnection } from '../service/kafka-sync.js';

/** Start data of a processor actor (a message pattern of engine/patterns on the topology's bus). */
export interface ProcessorData {
  /** Topology name (part of transactional ids). */
  topology: string;
  /** The processor's entry, defaults applied (engine/config TopologyProcessor). */
  processor: TopologyProcessor;
  /**
   * `journal`: the topology's journal bus, served by the thread that opened it, reached through
   * the port PROCESSOR_PORTS.bus; `kafka`: the actor connects to the brokers itself, with the
   * bus's TLS and SASL settings (files and passwords are read in the worker).
   */
  bus:
    | { kind: 'journal' }
    | ({
        kind: 'kafka';
        /** The topology's bus.recordBytesMax: the largest output value, bytes. */
        recordBytesMax: number;
      } & KafkaConnection);
}

/** MessagePort names a processor actor expects. */
export const PROCESSOR_PORTS = { bus: 'bus' } as const;

/** `stopped` summary of a processor actor. */
export interface ProcessorSummary {
  processor: string;
  pattern: string;
  /** Input records committed (durable, state-and-event) or handled (pubsub, compacted, rpc). */
  eventsIn: number;
  /** Output records committed (durable), returned (state-and-event) or responses sent (rpc). */
  eventsOut: number;
  /** Failed batches or handler errors. */
  errors: number;
}

/**
 * piscina `workerData` of a processor's pool threads (actors/pool-worker.ts): what the handler
 * factory's ProcessorContext is built from.
 */
export interface PoolWorkerData {
  name: string;
  /** Only the stateless patterns take a pool. */
  pattern: 'durable' | 'pubsub';
  /** Absolute path of the compiled handler module (the processor's `module`). */
  module: string;
  inputs: string[];
  outputs: string[];
  settings: Record<string, unknown>;
  /** The record limit of the processor's bus (./records.ts OutputLimit). */
  limit: import('./records.js').OutputLimit;
}

/** One pool task: a batch of consecutive records of one poll (durable), or of a key group (pubsub). */
export interface PoolTask {
  /** Decoded records; byte values are copies owning their buffers (transferred, not cloned). */
  records: import('../patterns/index.js').PatternRecord<unknown>[];
  /** durable: isolate a failing batch record by record (the processor has a deadLetterTopic). */
  isolate: boolean;
}

/**
 * A pool task's answer. durable: the batch's segments (./records.ts); a batch that
 * throws without `isolate` rejects the task instead. pubsub: the records that threw, by index.
 */
export type PoolResult =
  | { segments: import('./records.js').RecordSegment[] }
  | { failed: { index: number; error: string }[] };
