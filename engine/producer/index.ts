/**
 * Producer: appends events to a topology's queue from an application (or `sluice append`).
 * Each partition of a queue has exactly one appender (the journal takes an exclusive lock), so a
 * queue that a producer feeds must not also be a service output or a capture target that is
 * running. Wake-ups: in the thread that runs the topology (startTopology), a producer's
 * appenders signal the topology's notifiers at every flush (linkProducerNotifiers registers
 * them); a producer in another process is seen through an inotify watch on the partition
 * directory, whose events the topology's main thread turns into the same signal. On a kafka bus
 * the queue is the topic of that name, written by a plain idempotent producer (see
 * openQueueAppender); the topology's readers see it by polling the broker.
 *
 * Partitioning: without an explicit partition, an event goes to keyHash(key) mod partitions
 * (FNV-1a 32 over the key's UTF-8, engine/cdc's keyHash), the same rule capture pumps follow, so
 * one key's events stay in one partition, in order.
 *
 * Input checks (bad input is refused, never changed): a key is a string of well-formed UTF-16 (a
 * lone surrogate would be written as U+FFFD, making distinct keys equal), a JSON value is at most
 * JSON_DEPTH_MAX levels deep and has a JSON form, and a record (the envelope: key, payload and
 * header) fits the queue's record limit: for a queue a service of the topology reads,
 * rings.recordBytesMax (a record over a ring's eighth reaches the service by reference to the
 * journal; one over rings.recordBytesMax would be dead-lettered), else the journal's
 * RECORD_BYTES_MAX (on Kafka the topology's bus.recordBytesMax).
 */
import path from 'node:path';
import {
  Appender,
  RECORD_BYTES_MAX,
  registerQueueNotifier,
  watchQueueAppends,
} from '../journal/index.js';
import {
  EnvelopeWriter,
  encodeJson,
  EVENT_TYPE_JSON,
  USER_EVENT_TYPE_MIN,
} from '../codec/index.js';
import { keyHash } from '../cdc/index.js';
import { actorBusOf, KafkaAppender } from '../service/index.js';
import { isBrokerAway, SyncKafka } from '../service/kafka-sync.js';
import type { Topology } from '../config/index.js';

/** Deepest nesting of arrays and objects in a JSON event value. */
export const JSON_DEPTH_MAX = 64;

/** Bad input refused by a QueueAppender (a key, a value, a record size); nothing was appended. */
export class RecordInputError extends Error {
  override readonly name = 'RecordInputError';
}

/**
 * The Kafka brokers did not answer the lookup that opens a queue appender on a kafka bus (the
 * topic's partition count), because they are away (connection refused or lost, request timeout):
 * nothing was appended, and QueueAppender.connect() may be called again to wait them out. The
 * message names the queue, the topology file, the brokers and kafkajs' error.
 */
export class BrokerAwayError extends Error {
  override readonly name = 'BrokerAwayError';
}

/** Appends events to one queue; see {@link openQueueAppender}. */
export interface QueueAppender {
  readonly queue: string;
  readonly partitions: number;
  /**
   * Largest record, bytes (envelope: header, key and payload), this queue takes: see the module
   * comment.
   */
  readonly recordBytesMax: number;
  /**
   * Appends a JSON event (type 2); returns [partition, index] (index -1 on a kafka bus: the
   * broker assigns the offset at flush). Buffered until flush().
   * @throws RecordInputError if `key` is not a well-formed string, `value` has no JSON form or
   *   is nested deeper than JSON_DEPTH_MAX, or the record exceeds recordBytesMax.
   */
  appendJson(
    key: string,
    value: unknown,
    options?: { partition?: number; eventTimeMs?: number },
  ): [number, number];
  /**
   * Appends raw bytes of a user event type (>= 100); returns [partition, index] as appendJson.
   * @throws RecordInputError for a key as appendJson, a payload that is not a Uint8Array, or a
   *   record over recordBytesMax.
   */
  appendBytes(
    type: number,
    key: string,
    payload: Uint8Array,
    options?: { partition?: number; eventTimeMs?: number },
  ): [number, number];
  /**
   * Opens the queue's bus connection now rather than at the first append (a no-op on the
   * journal bus, or once connected): on a kafka bus it starts the client and reads the topic's
   * partition count. After a failure nothing is open, and it may be called again.
   * @throws BrokerAwayError when the brokers do not answer; Error when they answer but the
   *   topic does not exist or has another partition count than the topology declares, or the
   *   lookup fails otherwise (authentication, TLS).
   */
  connect(): void;
  /**
   * Writes what was appended and fsyncs per the queue's policy (kafka: sends it and waits for the
   * broker's acknowledgement); readers see it after this.
   */
  flush(): void;
  /**
   * Flushes and releases every partition's lock. `flush: false` (after a flush that failed)
   * drops what was not flushed instead of trying again.
   */
  close(options?: { flush?: boolean }): void;
}

/** One partition's writer behind a QueueAppender (journal appender or Kafka producer). */
interface PartitionWriter {
  /** Writes the envelope `envelopes` holds (`length` bytes); returns its index (-1: not known). */
  write(envelopes: EnvelopeWriter, length: number): number;
  flush(): void;
  close(): void;
}

/**
 * Opens an appender over every partition of `queue` in `topology`, on the topology's bus:
 * - journal: the partitions' journals under `<dataDir>/queues/<queue>/<p>`; each append returns
 *   the record's index;
 * - kafka: the topic `queue` through one plain idempotent producer (no transaction: each
 *   flush() sends what was appended and waits for the broker's acknowledgement, so offsets stay
 *   contiguous and a resent batch is not duplicated); appends return index -1 (the broker
 *   assigns the offset at flush), and the topic must exist (the topology creates its topics when
 *   it starts). Records must also fit the topology's bus.recordBytesMax (under the broker's
 *   message.max.bytes).
 * @throws Error if the queue is unknown, is written by a service (its output or dead-letter
 *   queue) or capture source of the topology, a partition is locked by another appender
 *   (JournalLockedError), or (kafka, at the first append) the topic does not exist, has another
 *   partition count, or the broker does not answer.
 */
export function openQueueAppender(topology: Topology, queue: string): QueueAppender {
  const q = topology.queues.find((x) => x.name === queue);
  if (!q)
    throw new Error(
      `unknown queue "${queue}" (known: ${topology.queues.map((x) => x.name).join(', ')})`,
    );
  const writer =
    topology.services.find((s) => s.output === queue)?.name ??
    topology.services.find(
      (s) => s.errors.onFailure === 'dead-letter' && s.errors.deadLetterQueue === queue,
    )?.name ??
    topology.capture.find((c) => c.tables.some((t) => t.target === queue))?.name;
  if (writer)
    throw new Error(
      `queue "${queue}" is written by "${writer}" in ${topology.file}; a queue has one writer`,
    );
  const kafka = topology.bus.kind === 'kafka' ? kafkaWriters(topology, queue, q.partitions) : null;
  const writers: (PartitionWriter | null)[] = Array.from({ length: q.partitions }, () => null);
  const open = (p: number): PartitionWriter => {
    const w = writers[p];
    if (w) return w;
    if (kafka) return (writers[p] = kafka.open(p));
    const a = Appender.open({
      dir: path.join(topology.dataDir, 'queues', queue, String(p)),
      segmentBytes: q.segmentBytes,
      fsync: q.fsync,
    });
    return (writers[p] = {
      // Encode once: the envelope is built in the writer's builder and copied straight into
      // the appender's write buffer (claim/commit), not into a record of its own first.
      write: (envelopes, length) => {
        const off = a.claim(length); // first: a large claim can replace claimBuffer
        envelopes.copyTo(a.claimBuffer, off);
        return a.commit();
      },
      flush: () => a.flush(),
      close: () => a.close(),
    });
  };
  const envelopes = new EnvelopeWriter();
  const readByService = topology.services.some((s) => s.inputs.includes(queue));
  const busLimit = topology.bus.kind === 'kafka' ? topology.bus.recordBytesMax : RECORD_BYTES_MAX;
  // A queue reader hands a record over a ring's share by reference (the service reads it from
  // the journal), up to rings.recordBytesMax; over that it would be dead-lettered, so refuse it.
  const recordBytesMax = readByService
    ? Math.min(topology.rings.recordBytesMax, busLimit)
    : busLimit;
  const pick = (key: string, partition: number | undefined) => {
    if (partition === undefined) return keyHash(key) % q.partitions;
    if (!Number.isInteger(partition) || partition < 0 || partition >= q.partitions) {
      throw new Error(
        `queue "${queue}" has partitions 0..${q.partitions - 1}, partition=${partition}`,
      );
    }
    return partition;
  };
  const append = (
    type: number,
    key: string,
    payload: Uint8Array,
    options: { partition?: number; eventTimeMs?: number },
  ): [number, number] => {
    checkKey(key);
    const p = pick(key, options.partition);
    const length = envelopes.build({
      type,
      key,
      eventTimeMs: options.eventTimeMs ?? Date.now(),
      payload,
    });
    if (length > recordBytesMax) {
      const why =
        readByService && recordBytesMax === topology.rings.recordBytesMax
          ? `rings.recordBytesMax: a service reads "${queue}"`
          : kafka
            ? "the Kafka record limit, bus.recordBytesMax (under the broker's message.max.bytes)"
            : 'the journal record limit';
      throw new RecordInputError(
        `record of ${length} bytes exceeds the ${recordBytesMax}-byte limit of queue "${queue}" (${why})`,
      );
    }
    return [p, open(p).write(envelopes, length)];
  };
  return {
    queue,
    partitions: q.partitions,
    recordBytesMax,
    connect: () => kafka?.connect(),
    appendJson: (key, value, options = {}) =>
      append(EVENT_TYPE_JSON, key, jsonPayload(value), options),
    appendBytes: (type, key, payload, options = {}) => {
      if (!Number.isInteger(type) || type < USER_EVENT_TYPE_MIN)
        throw new Error(`user event types are integers >= ${USER_EVENT_TYPE_MIN}, type=${type}`);
      if (!(payload instanceof Uint8Array))
        throw new RecordInputError(`payload must be a Uint8Array, got ${describe(payload)}`);
      return append(type, key, payload, options);
    },
    flush: () => {
      for (const w of writers) w?.flush();
    },
    close: (options = {}) => {
      try {
        if (options.flush !== false) for (const w of writers) w?.flush();
      } finally {
        for (const w of writers) w?.close();
        kafka?.close();
      }
    },
  };
}

/**
 * The Kafka side of openQueueAppender: one blocking client (engine/service SyncKafka) and, per
 * partition, a KafkaAppender without a transactional id (plain idempotent sends at flush).
 * connect() (or else the first append) reads the topic's partition count, so a missing topic, a
 * topic with another count than the topology declares (keys would land in other partitions than
 * the topology's own writers put them), or a broker that does not answer fails there with the
 * topic named.
 */
function kafkaWriters(
  topology: Topology,
  queue: string,
  partitions: number,
): { connect(): void; open(p: number): PartitionWriter; close(): void } {
  const bus = actorBusOf(topology);
  if (bus.kind !== 'kafka') throw new Error('kafkaWriters: not a kafka bus');
  const where = `${topology.file}: bus kind kafka, brokers ${bus.connection.brokers.join(', ')}`;
  let client: SyncKafka | null = null;
  const connect = (): SyncKafka => {
    if (client === null) {
      // A new client each time: one whose lookup failed is closed, not reused.
      const c = new SyncKafka(bus.connection);
      let count: number | null;
      try {
        count = c.partitionCount(queue);
      } catch (e) {
        c.close();
        const message = `queue "${queue}": the Kafka brokers do not answer (${where}): ${(e as Error).message}`;
        throw isBrokerAway(e) ? new BrokerAwayError(message) : new Error(message);
      }
      // Keys are partitioned by the declared count: another count would split a key's events.
      if (count !== partitions) {
        c.close();
        throw new Error(
          count === null
            ? `queue "${queue}": Kafka topic "${queue}" does not exist (${where}); the topology creates its topics when it starts (sluice run), or create it with ${partitions} partition${partitions === 1 ? '' : 's'}`
            : `queue "${queue}" has ${partitions} partition${partitions === 1 ? '' : 's'} in ${topology.file} but Kafka topic "${queue}" has ${count} (${where}); appending by the file's count would move keys to other partitions`,
        );
      }
      client = c;
    }
    return client;
  };
  return {
    connect: () => void connect(),
    open(p) {
      const a = new KafkaAppender(connect(), queue, p, '');
      return {
        write: (envelopes, length) => {
          const bytes = new Uint8Array(length);
          envelopes.copyTo(bytes, 0);
          a.appendBatch([bytes]);
          return -1;
        },
        flush: () => a.flush(),
        close: () => a.close(),
      };
    },
    close: () => client?.close(),
  };
}

function describe(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  return typeof v === 'object' ? 'an object' : typeof v;
}

/**
 * A key is a string that survives UTF-8 exactly: other types would be stringified
 * ("[object Object]" for every object, so distinct keys collide) and a lone surrogate would be
 * written as U+FFFD (so "\ud800" and "\udc00" would collide).
 */
const LONE_SURROGATE = /\p{Cs}/u;

function checkKey(key: unknown): void {
  if (typeof key !== 'string')
    throw new RecordInputError(`key must be a string, got ${describe(key)}`);
  if (LONE_SURROGATE.test(key))
    throw new RecordInputError('key is not well-formed Unicode (it has a lone surrogate)');
}

/** Depth of nested arrays and objects in `value`, iteratively; stops counting past `max`. */
function jsonDepth(value: unknown, max: number): number {
  let deepest = 0;
  const stack: Array<[unknown, number]> = [[value, 0]];
  while (stack.length > 0) {
    const [v, d] = stack.pop()!;
    if (v === null || typeof v !== 'object') continue;
    if (d + 1 > deepest) deepest = d + 1;
    if (deepest > max) return deepest;
    for (const child of Array.isArray(v) ? v : Object.values(v)) stack.push([child, d + 1]);
  }
  return deepest;
}

function jsonPayload(value: unknown): Uint8Array {
  if (jsonDepth(value, JSON_DEPTH_MAX) > JSON_DEPTH_MAX) {
    throw new RecordInputError(
      `value is nested more than ${JSON_DEPTH_MAX} levels deep (arrays and objects), or is cyclic`,
    );
  }
  try {
    return encodeJson(value);
  } catch (e) {
    throw new RecordInputError(`value has no JSON form: ${(e as Error).message}`);
  }
}

/**
 * Wires producers to a running topology's readers (startTopology calls it with the plan's
 * notifiers, `inputKey(queue, partition)` -> notifier): registers every partition's notifier
 * for its directory in this thread, so appenders of openQueueAppender opened here signal it; and
 * for each queue a service reads that no service or capture source of the topology writes (so
 * only producers do, maybe in other processes), watches the partition directories
 * (watchQueueAppends). Returns a function that undoes both.
 */
export function linkProducerNotifiers(
  topology: Topology,
  notifiers: ReadonlyMap<string, SharedArrayBuffer>,
): () => void {
  const undo: (() => void)[] = [];
  const written = new Set<string>([
    ...topology.services.map((s) => s.output),
    ...topology.capture.flatMap((c) => c.tables.map((t) => t.target)),
  ]);
  const read = new Set(topology.services.flatMap((s) => s.inputs));
  try {
    for (const q of topology.queues) {
      for (let p = 0; p < q.partitions; p++) {
        const notifier = notifiers.get(`${q.name}/${p}`);
        if (!notifier) continue;
        const dir = path.join(topology.dataDir, 'queues', q.name, String(p));
        undo.push(registerQueueNotifier(dir, notifier));
        if (read.has(q.name) && !written.has(q.name)) undo.push(watchQueueAppends(dir, notifier));
      }
    }
  } catch (e) {
    for (const u of undo) u();
    throw e;
  }
  return () => {
    for (const u of undo.splice(0)) u();
  };
}
