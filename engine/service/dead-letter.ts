/**
 * Dead letters: events a service's handler kept failing on, parked in a durable queue so that
 * processing goes on (the pattern is Enterprise Integration Patterns' Dead Letter Channel).
 *
 * A dead-letter record is an envelope of type EVENT_TYPE_JSON (a service can read the queue like
 * any other input), key = the event's key, cause = the event's source position, payload =
 * {@link DeadLetter} as JSON, with the original envelope bytes in `event` (base64).
 *
 * Exactly-once with the service's output: the host appends (and flushes) the dead-letter record
 * first, then a marker of type {@link EVENT_TYPE_DEAD_LETTERED} stamped with the same cause goes
 * into the output with the batch's other outputs, atomically. LAST_WRITTEN (from causes or from
 * processed records) therefore counts a dead-lettered input as processed. A crash between the
 * two appends makes the restarted service process the input again; it fails again, and the host
 * skips the dead-letter append because the queue already holds a record at or after that
 * position ({@link deadLetteredPositions}), so the queue holds each dead letter once.
 */
import fs from 'node:fs';
import path from 'node:path';
import {
  EnvelopeView,
  EnvelopeWriter,
  decodeJson,
  encodeJson,
  queueId,
  EVENT_TYPE_JSON,
} from '../codec/index.js';
import { Appender, Tailer } from '../journal/index.js';
import { keyHash } from '../cdc/key-hash.js';
import type { Topology } from '../config/index.js';
import { computeLastWritten, type InputPartition } from './last-written.js';
import { actorBusOf, KafkaAppender, KafkaTailer } from './queue-logs.js';
import { SyncKafka } from './kafka-sync.js';

/**
 * Output marker of a dead-lettered input (no payload; the cause is the input). In Sluice's
 * reserved range 3..99, so services reading the output skip it.
 */
export const EVENT_TYPE_DEAD_LETTERED = 10;

/** The JSON payload of one dead-letter record. */
export interface DeadLetter {
  /** Service whose handler failed. */
  service: string;
  /** The last attempt's error message. */
  error: string;
  /** Attempts made (1 + retries). */
  attempts: number;
  /** Source position of the event. */
  queue: string;
  partition: number;
  index: number;
  /** The event's key ('' when it had none), type id and event time (ms since the epoch). */
  key: string;
  type: number;
  eventTimeMs: number;
  /** When it was dead-lettered, ms since the epoch. */
  failedAtMs: number;
  /** The original envelope, base64: what `replay` appends again. */
  event: string;
}

/**
 * A replay request that cannot be done as asked: an index not in the dead-letter queue, a dead
 * letter without its event, or an unknown target queue (the operations API answers 400).
 */
export class DeadLetterReplayError extends Error {
  override name = 'DeadLetterReplayError';
}

/** Encodes a dead-letter record for `d` (source position = its cause). */
export function encodeDeadLetter(writer: EnvelopeWriter, d: DeadLetter): Uint8Array {
  return writer.encode({
    type: EVENT_TYPE_JSON,
    key: d.key,
    eventTimeMs: d.failedAtMs,
    causeQueue: queueId(d.queue),
    causePartition: d.partition,
    causeIndex: d.index,
    payload: encodeJson(d),
  });
}

/**
 * Per input partition (inputKey), the newest source index the dead-letter queue in `dir` holds
 * (-1: none), read backwards from its end. The queue must exist (open its appender first).
 * `open` gives the backwards reader (default: a journal Tailer over `dir`; on Kafka the queue
 * logs' tailer of the dead-letter topic).
 */
export function deadLetteredPositions(
  dir: string,
  inputs: InputPartition[],
  open: () => {
    moveToEnd(): void;
    previous(): { index: number; bytes: Uint8Array } | null;
    close(): void;
  } = () => Tailer.open({ dir }),
): Record<string, number> {
  const back = open();
  try {
    back.moveToEnd();
    return computeLastWritten(back, inputs).positions;
  } finally {
    back.close();
  }
}

/** One record of a dead-letter queue as {@link readDeadLetters} returns it. */
export interface DeadLetterEntry extends DeadLetter {
  /** Index of the record in the dead-letter queue. */
  dlqIndex: number;
  /** Original envelope bytes (decoded `event`). */
  bytes: Uint8Array;
}

/**
 * Reads every record of the dead-letter queue partition in `dir`, oldest first. `open` gives
 * the reader at the partition's start (default a journal Tailer over `dir`; on Kafka the queue
 * logs' tailer of the dead-letter topic, `dir` then only names it in errors).
 * @throws Error naming the directory and index of a record that is not a dead letter.
 */
export function readDeadLetters(
  dir: string,
  open: () => { next(): { index: number; bytes: Uint8Array } | null; close(): void } = () =>
    Tailer.open({ dir }),
): DeadLetterEntry[] {
  const t = open();
  const out: DeadLetterEntry[] = [];
  const view = new EnvelopeView();
  try {
    for (let rec = t.next(); rec; rec = t.next()) out.push(decodeDeadLetter(view, dir, rec));
  } finally {
    t.close();
  }
  return out;
}

/**
 * One dead-letter record decoded; `where` names its queue in the error.
 * @throws Error naming `where` and the index of a record that is not a dead letter.
 */
export function decodeDeadLetter(
  view: EnvelopeView,
  where: string,
  rec: { index: number; bytes: Uint8Array },
): DeadLetterEntry {
  view.wrap(rec.bytes, 0, rec.bytes.length);
  const d = view.type === EVENT_TYPE_JSON ? (decodeJson(view.payload) as DeadLetter) : null;
  if (!d || typeof d.event !== 'string' || typeof d.queue !== 'string') {
    throw new Error(`${where}: record ${rec.index} is not a dead letter (type ${view.type})`);
  }
  const bytes = new Uint8Array(Buffer.from(d.event, 'base64'));
  return { ...d, dlqIndex: rec.index, bytes };
}

/** Directory of a topology queue's partition (as actors/plan's partitionDir). */
function dirOf(topology: Topology, queue: string, partition: number): string {
  return path.join(topology.dataDir, 'queues', queue, String(partition));
}

/**
 * The service whose dead-letter queue `queue` is.
 * @throws Error naming the topology's dead-letter queues when `queue` is none of them.
 */
export function deadLetterOwner(topology: Topology, queue: string): string {
  const writers = topology.services.filter((s) => s.errors.onFailure === 'dead-letter');
  const owner = writers.find((s) => s.errors.deadLetterQueue === queue);
  if (owner) return owner.name;
  const known = writers.map((s) => s.errors.deadLetterQueue).join(', ') || 'none';
  throw new Error(
    `queue "${queue}" is not a dead-letter queue in ${topology.file} ` +
      `(dead-letter queues: ${known})`,
  );
}

/**
 * Every dead letter in dead-letter queue `queue` of `topology`, oldest first ([] before the
 * first one, or on a kafka bus before the topic exists). On a kafka bus the topic is read
 * read_committed with a blocking client (this thread waits for the broker).
 * @throws Error if `queue` is not a service's dead-letter queue, or (kafka) naming the brokers
 *   and the topology file when the broker cannot be read.
 */
export function listDeadLetters(topology: Topology, queue: string): DeadLetterEntry[] {
  deadLetterOwner(topology, queue);
  if (topology.bus.kind === 'kafka') return withKafka(topology, (k) => kafkaDeadLetters(k, queue));
  const dir = dirOf(topology, queue, 0);
  return fs.existsSync(dir) ? readDeadLetters(dir) : [];
}

/**
 * Runs `f` with a blocking client (SyncKafka) of the topology's kafka bus, closed afterwards.
 * For the CLI: each call blocks its thread until the broker answers.
 */
function withKafka<T>(topology: Topology, f: (k: SyncKafka) => T): T {
  const bus = actorBusOf(topology);
  if (bus.kind !== 'kafka') throw new Error('withKafka: not a kafka bus');
  const k = new SyncKafka(bus.connection);
  try {
    return f(k);
  } catch (err) {
    throw new Error(
      `kafka bus ${bus.connection.brokers.join(', ')} (${topology.file}): ${(err as Error).message}`,
      { cause: err },
    );
  } finally {
    k.close();
  }
}

/** First and last stable offset of partition 0 of a dead-letter topic; null if it does not exist. */
function kafkaDlqOffsets(k: SyncKafka, queue: string): { start: number; end: number } | null {
  try {
    return k.offsets(queue, 0);
  } catch (err) {
    // The topology creates its topics when it starts: before that there is no dead letter.
    if (/UNKNOWN_TOPIC_OR_PARTITION/.test((err as Error).message)) return null;
    throw err;
  }
}

/** The dead letters of a dead-letter topic, read_committed, oldest first. */
function kafkaDeadLetters(k: SyncKafka, queue: string): DeadLetterEntry[] {
  const offsets = kafkaDlqOffsets(k, queue);
  if (offsets === null) return [];
  const tailer = new KafkaTailer(k, queue, 0);
  tailer.moveToIndex(offsets.start);
  return readDeadLetters(`kafka topic ${queue} partition 0`, () => tailer);
}

/** Where {@link replayDeadLetterQueue} appended one dead letter's event. */
export interface ReplayedDeadLetter {
  dlqIndex: number;
  queue: string;
  partition: number;
  index: number;
}

/**
 * Appends the original events of dead-letter queue `queue` (all, or the dead-letter indexes in
 * `options.indexes`) again: to their source queue partition, or to `options.to` (partition by
 * key hash, as producers do). The dead letters stay; purge them once replayed. On a kafka bus
 * the events go out through a plain idempotent producer, one send per target partition, and
 * `index` is -1 (the broker assigns the offsets).
 * @throws Error if `queue` is not a dead-letter queue, an index is not in it, or a target is
 *   written by a service or capture source (a queue has one writer) or locked by an appender.
 */
export function replayDeadLetterQueue(
  topology: Topology,
  queue: string,
  options: { to?: string; indexes?: number[] } = {},
): ReplayedDeadLetter[] {
  const byTarget = replayTargets(topology, queue, listDeadLetters(topology, queue), options);
  const out: ReplayedDeadLetter[] = [];
  if (topology.bus.kind === 'kafka') {
    withKafka(topology, (k) => {
      for (const g of byTarget.values()) {
        // A plain idempotent producer, as openQueueAppender's: the broker assigns the offsets.
        const a = new KafkaAppender(k, g.queue, g.partition, '');
        a.appendBatch(g.entries.map((e) => e.bytes));
        a.flush();
        for (const e of g.entries)
          out.push({ dlqIndex: e.dlqIndex, queue: g.queue, partition: g.partition, index: -1 });
      }
    });
    return out.sort((a, b) => a.dlqIndex - b.dlqIndex);
  }
  for (const g of byTarget.values()) {
    const q = topology.queues.find((x) => x.name === g.queue)!;
    const dir = dirOf(topology, g.queue, g.partition);
    const target = { dir, segmentBytes: q.segmentBytes, fsync: q.fsync };
    const indexes = replayDeadLetters(g.entries, target);
    g.entries.forEach((e, n) => {
      out.push({ dlqIndex: e.dlqIndex, queue: g.queue, partition: g.partition, index: indexes[n] });
    });
  }
  return out.sort((a, b) => a.dlqIndex - b.dlqIndex);
}

/** The dead letters of one target partition of a replay, in dead-letter order. */
export interface ReplayTarget {
  queue: string;
  partition: number;
  entries: DeadLetterEntry[];
}

/**
 * Where a replay of `all` (the dead letters of `queue`) appends each: its source partition, or
 * `options.to` partitioned by key hash; `options.indexes` picks some. Checks everything before
 * anything is appended.
 * @throws DeadLetterReplayError for an index not in the queue, a dead letter without its event or
 *   an unknown target queue; Error for a target written by a service (its output or dead-letter
 *   queue) or capture source (one writer per queue).
 */
export function replayTargets(
  topology: Topology,
  queue: string,
  all: DeadLetterEntry[],
  options: { to?: string; indexes?: number[] } = {},
): Map<string, ReplayTarget> {
  let entries = all;
  if (options.indexes) {
    const want = new Set(options.indexes);
    const missing = options.indexes.filter((n) => !entries.some((e) => e.dlqIndex === n));
    if (missing.length > 0) {
      // Indexes need not be contiguous (Kafka offsets skip transaction markers): name them.
      const have = entries.map((e) => e.dlqIndex);
      const shown = have.length > 20 ? `${have.slice(0, 20).join(', ')}, ...` : have.join(', ');
      throw new DeadLetterReplayError(
        `dead-letter queue "${queue}" has no index ${missing.join(', ')} ` +
          `(it has ${entries.length} record${entries.length === 1 ? '' : 's'}${have.length > 0 ? `, indexes ${shown}` : ''})`,
      );
    }
    entries = entries.filter((e) => want.has(e.dlqIndex));
  }
  const byTarget = new Map<string, ReplayTarget>();
  for (const e of entries) {
    if (e.bytes.length === 0) {
      throw new DeadLetterReplayError(
        `dead letter ${e.dlqIndex} of "${queue}" has no event (${e.error}); ` +
          `it is still at ${e.queue}/${e.partition} index ${e.index}`,
      );
    }
    const target = options.to ?? e.queue;
    const q = topology.queues.find((x) => x.name === target);
    if (!q) {
      throw new DeadLetterReplayError(
        `unknown queue "${target}" in ${topology.file} (dead letter ${e.dlqIndex})`,
      );
    }
    const writer =
      topology.services.find(
        (s) =>
          s.output === target ||
          (s.errors.onFailure === 'dead-letter' && s.errors.deadLetterQueue === target),
      )?.name ?? topology.capture.find((c) => c.tables.some((t) => t.target === target))?.name;
    if (writer) {
      throw new Error(
        `queue "${target}" is written by "${writer}" in ${topology.file}; ` +
          (options.to === undefined
            ? 'a queue has one writer (replay to another queue with --to)'
            : 'a queue has one writer (replay to a queue no service or capture source writes)'),
      );
    }
    const partition = options.to === undefined ? e.partition : keyHash(e.key) % q.partitions;
    const k = `${target}/${partition}`;
    const group = byTarget.get(k) ?? { queue: target, partition, entries: [] };
    group.entries.push(e);
    byTarget.set(k, group);
  }
  return byTarget;
}

/**
 * Removes every record of dead-letter queue `queue` (its journal directory); returns how many
 * it held. Run it with the topology stopped: it takes the queue's appender lock first. On a
 * kafka bus: Kafka DeleteRecords up to the end offset read first (the topic stays; a dead
 * letter appended meanwhile is kept); nothing there can check that the topology is stopped.
 * @throws Error if `queue` is not a dead-letter queue; JournalLockedError if the service that
 *   writes it is running.
 */
export function purgeDeadLetters(topology: Topology, queue: string): number {
  deadLetterOwner(topology, queue);
  if (topology.bus.kind === 'kafka') {
    return withKafka(topology, (k) => {
      const offsets = kafkaDlqOffsets(k, queue);
      if (offsets === null) return 0;
      // Up to the end read here, so a dead letter appended meanwhile is kept.
      const n = readDeadLetters(`kafka topic ${queue} partition 0`, () => {
        const t = new KafkaTailer(k, queue, 0);
        t.moveToIndex(offsets.start);
        return t;
      }).filter((d) => d.dlqIndex < offsets.end).length;
      if (offsets.end > offsets.start) k.deleteRecords(queue, 0, offsets.end);
      return n;
    });
  }
  const dir = dirOf(topology, queue, 0);
  if (!fs.existsSync(dir)) return 0;
  const q = topology.queues.find((x) => x.name === queue)!;
  const appender = Appender.open({ dir, segmentBytes: q.segmentBytes, fsync: q.fsync });
  const n = appender.nextIndex;
  appender.close();
  fs.rmSync(dir, { recursive: true, force: true });
  return n;
}

/** Journal settings of a queue partition to append to. */
export interface QueueTarget {
  dir: string;
  segmentBytes: number;
  fsync: 'none' | 'batch' | 'record';
}

/**
 * Appends the original events of `entries` to `target` (one atomic batch) and returns the
 * indexes they got. The target's appender lock must be free (the topology stopped).
 */
export function replayDeadLetters(
  entries: readonly DeadLetterEntry[],
  target: QueueTarget,
): number[] {
  const appender = Appender.open(target);
  try {
    const first = appender.appendBatch(entries.map((e) => e.bytes));
    appender.flush();
    return entries.map((_, n) => first + n);
  } finally {
    appender.close();
  }
}
