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
import { EnvelopeView, EnvelopeWriter, decodeJson, encodeJson, queueId, EVENT_TYPE_JSON } from '../codec/index.js';
import { Appender, Tailer } from '../journal/index.js';
import { computeLastWritten, type InputPartition } from './last-written.js';

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
 */
export function deadLetteredPositions(dir: string, inputs: InputPartition[]): Record<string, number> {
  const back = Tailer.open({ dir });
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
 * Reads every record of the dead-letter queue partition in `dir`, oldest first.
 * @throws Error naming the directory and index of a record that is not a dead letter.
 */
export function readDeadLetters(dir: string): DeadLetterEntry[] {
  const t = Tailer.open({ dir });
  const view = new EnvelopeView();
  const out: DeadLetterEntry[] = [];
  try {
    for (let rec = t.next(); rec; rec = t.next()) {
      view.wrap(rec.bytes, 0, rec.bytes.length);
      const d = view.type === EVENT_TYPE_JSON ? (decodeJson(view.payload) as DeadLetter) : null;
      if (!d || typeof d.event !== 'string' || typeof d.queue !== 'string') {
        throw new Error(`${dir}: record ${rec.index} is not a dead letter (type ${view.type})`);
      }
      out.push({ ...d, dlqIndex: rec.index, bytes: new Uint8Array(Buffer.from(d.event, 'base64')) });
    }
  } finally {
    t.close();
  }
  return out;
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
export function replayDeadLetters(entries: readonly DeadLetterEntry[], target: QueueTarget): number[] {
  const appender = Appender.open(target);
  try {
    const first = appender.appendBatch(entries.map((e) => e.bytes));
    appender.flush();
    return entries.map((_, n) => first + n);
  } finally {
    appender.close();
  }
}
