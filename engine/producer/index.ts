/**
 * Producer: appends events to a topology's queue from an application (or `sluice append`).
 * Each partition of a queue has exactly one appender (the journal takes an exclusive lock), so a
 * queue that a producer feeds must not also be a service output or a capture target that is
 * running; tailers in other processes see the appends by polling.
 *
 * Partitioning: without an explicit partition, an event goes to keyHash(key) mod partitions
 * (FNV-1a 32 over the key's UTF-8, engine/cdc's keyHash), the same rule capture pumps follow, so
 * one key's events stay in one partition, in order.
 */
import path from 'node:path';
import { Appender } from '../journal/index.js';
import { EnvelopeWriter, encodeJson, EVENT_TYPE_JSON, USER_EVENT_TYPE_MIN } from '../codec/index.js';
import { keyHash } from '../cdc/index.js';
import type { Topology } from '../config/index.js';

/** Appends events to one queue; see {@link openQueueAppender}. */
export interface QueueAppender {
  readonly queue: string;
  readonly partitions: number;
  /** Appends a JSON event (type 2); returns [partition, index]. Buffered until flush(). */
  appendJson(key: string, value: unknown, options?: { partition?: number; eventTimeMs?: number }): [number, number];
  /** Appends raw bytes of a user event type (>= 100); returns [partition, index]. */
  appendBytes(type: number, key: string, payload: Uint8Array, options?: { partition?: number; eventTimeMs?: number }): [number, number];
  /** Writes what was appended and fsyncs per the queue's policy; readers see it after this. */
  flush(): void;
  /** Flushes and releases every partition's lock. */
  close(): void;
}

/**
 * Opens an appender over every partition of `queue` in `topology`.
 * @throws Error if the queue is unknown, is written by a service or capture source of the
 *   topology, or a partition is locked by another appender (JournalLockedError).
 */
export function openQueueAppender(topology: Topology, queue: string): QueueAppender {
  const q = topology.queues.find((x) => x.name === queue);
  if (!q) throw new Error(`unknown queue "${queue}" (known: ${topology.queues.map((x) => x.name).join(', ')})`);
  const writer = topology.services.find((s) => s.output === queue)?.name ?? topology.capture.find((c) => c.tables.some((t) => t.target === queue))?.name;
  if (writer) throw new Error(`queue "${queue}" is written by "${writer}" in ${topology.file}; a queue has one writer`);
  const appenders: (Appender | null)[] = Array.from({ length: q.partitions }, () => null);
  const open = (p: number) =>
    (appenders[p] ??= Appender.open({ dir: path.join(topology.dataDir, 'queues', queue, String(p)), segmentBytes: q.segmentBytes, fsync: q.fsync }));
  const envelopes = new EnvelopeWriter();
  const pick = (key: string, partition: number | undefined) => {
    if (partition === undefined) return keyHash(key) % q.partitions;
    if (!Number.isInteger(partition) || partition < 0 || partition >= q.partitions) {
      throw new Error(`queue "${queue}" has partitions 0..${q.partitions - 1}, partition=${partition}`);
    }
    return partition;
  };
  const append = (type: number, key: string, payload: Uint8Array, options: { partition?: number; eventTimeMs?: number }): [number, number] => {
    const p = pick(key, options.partition);
    const index = open(p).append(envelopes.encode({ type, key, eventTimeMs: options.eventTimeMs ?? Date.now(), payload }));
    return [p, index];
  };
  return {
    queue,
    partitions: q.partitions,
    appendJson: (key, value, options = {}) => append(EVENT_TYPE_JSON, key, encodeJson(value), options),
    appendBytes: (type, key, payload, options = {}) => {
      if (!Number.isInteger(type) || type < USER_EVENT_TYPE_MIN) throw new Error(`user event types are integers >= ${USER_EVENT_TYPE_MIN}, type=${type}`);
      return append(type, key, payload, options);
    },
    flush: () => {
      for (const a of appenders) a?.flush();
    },
    close: () => {
      for (const a of appenders) a?.close();
    },
  };
}
