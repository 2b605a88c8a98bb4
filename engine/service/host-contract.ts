/**
 * What crosses the boundary between the planner (main thread) and the service host actor
 * (worker, actors/service-host.ts, whose logic is engine/service/host.ts): its start data, the
 * names of its shared buffers, its `ready` info and its `stopped` summary. No side effects on
 * import.
 */
import type { ActorBus } from './queue-logs.js';

/** One input partition as the host sees it. */
export interface HostInput {
  queue: string;
  partition: number;
  dir: string;
}

/** Start data of a service host. */
export interface ServiceHostData {
  service: string;
  /** Compiled JavaScript module file of the service. */
  moduleFile: string;
  /** Where its queues live; on Kafka every queue is the topic of the same name. */
  bus: ActorBus;
  /**
   * Kafka: transactional.id of the output's producer (`sluice.<topology>.<service>`; the
   * dead-letter producer appends `.dlq`). A restarted service fences its predecessor with it.
   */
  transactionalId: string;
  settings: Record<string, unknown>;
  inputs: HostInput[];
  output: { queue: string; dir: string; segmentBytes: number; fsync: 'none' | 'batch' | 'record' };
  startFrom: 'START' | 'LAST_WRITTEN' | 'END';
  inputsReplay: 'NONE' | 'INPUTS' | 'OUTPUT' | 'OUTPUT_REVERSE';
  /** Input records handled per ring read (one atomic output append per round). */
  batchSizeMax: number;
  /** Append what handlers emit during an input replay (INPUTS, OUTPUT) instead of dropping it. */
  emitDuringReplay: boolean;
  /** Handler failures: retries, then dead-letter or stop (topology `services[].errors`). */
  errors: { retriesMax: number; retryBackoffMs: number; onFailure: 'dead-letter' | 'stop' };
  /** Largest input record handled, bytes (topology rings.recordBytesMax). */
  recordBytesMax: number;
  /** The dead-letter queue's partition 0; null with onFailure stop. */
  deadLetter: {
    queue: string;
    dir: string;
    segmentBytes: number;
    fsync: 'none' | 'batch' | 'record';
  } | null;
}

/**
 * Shared buffer names: `ring:<queue>/<partition>` per input, `doorbell`,
 * `notifier:<queue>/<partition>`, and `positions`: a Float64Array with one slot per input (in
 * ServiceHostData.inputs order) holding the index of the last input record whose effect the
 * service has (-1: none; NaN: not known yet, from the launch until the host has found its
 * LAST_WRITTEN positions), written by the host with plain stores and read by the operations layer
 * for consumer lag.
 */
export const HOST_SHARED = {
  ring: (key: string) => `ring:${key}`,
  notifier: (key: string) => `notifier:${key}`,
  doorbell: 'doorbell',
  positions: 'positions',
} as const;

/** Allocates a service host's `positions` buffer for `inputs` input partitions (all NaN). */
export function createPositions(inputs: number): SharedArrayBuffer {
  const sab = new SharedArrayBuffer(Math.max(1, inputs) * Float64Array.BYTES_PER_ELEMENT);
  new Float64Array(sab).fill(NaN);
  return sab;
}

/** `ready` info: where the readers must start, per input key. */
export interface ServiceReadyInfo {
  /** inputKey -> first index the reader delivers. */
  from: Record<string, number>;
  lastWritten: Record<string, number>;
  replayed: number;
  scannedOutputs: number;
  /** Output index of the snapshot end marker the state was restored from; -1: none. */
  snapshotIndex: number;
  /** Output events handed to replayOutput (OUTPUT_REVERSE); 0 otherwise. */
  outputsReplayed: number;
  /** Milliseconds from the host's start to ready (scan + restore + replay). */
  restartMs: number;
}

/** `stopped` summary. */
export interface ServiceSummary {
  service: string;
  eventsIn: number;
  eventsOut: number;
  replayed: number;
  /** Inputs parked in the dead-letter queue while live. */
  deadLettered: number;
  lagMs: { count: number; p50: number; p99: number; max: number };
}
