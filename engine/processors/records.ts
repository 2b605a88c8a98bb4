/**
 * How a stateless processor's handler is run over a batch of records and what happens to a
 * record it throws on: one module for the inline path (./patterns.ts, in the processor's
 * thread) and the pool path (actors/pool-worker.ts, in a piscina thread), so both follow the
 * same rules.
 *
 * Rules (durable):
 * 1. The handler gets the batch in one `onNext(records)` call; its outputs are the batch's.
 * 2. If it throws and the processor has no `deadLetterTopic`, the error fails the batch: the
 *    durable pattern aborts it, rewinds and retries it (`retriesMax`), then the actor fails
 *    and the supervisor restarts it (today's inline behaviour, unchanged).
 * 3. If it throws and the processor has a `deadLetterTopic`, the batch is isolated: the handler
 *    is called once per record (`onNext([record])`), in input order. A record that throws is
 *    retried alone `retriesMax` times, `retryBackoffMs` apart; if it still throws it goes to
 *    the dead-letter topic (value re-encoded with the processor's codec, the input's headers
 *    plus `error`, `source` = `topic:partition:offset` and `attempts`), in the same transaction
 *    as the batch's other outputs and consumed positions. Per-key policy: later records of the
 *    same key are processed (they do not wait for the dead-lettered one).
 *
 * Outputs keep input order: the outputs of a batch, or of its records one after another. A
 * handler whose batch output is not the concatenation of its per-record outputs (an aggregate
 * over the batch) sees a different output for an isolated batch; isolation exists for stateless
 * per-record transforms.
 *
 * Output size: an output record whose value is over the bus's record limit (on Kafka
 * bus.recordBytesMax) is a failure of the handler call that returned it (rules 2 and 3: the
 * batch fails, or the record is isolated, retried and dead-lettered), instead of a transaction
 * the broker refuses with MESSAGE_TOO_LARGE at every retry and restart. A dead letter whose
 * value would be over the limit is written without it (value null), its `error` saying so.
 *
 * Pubsub (at most once, no outputs): each record is one `onNext(record)` call; a throw is
 * reported to `onError` and the record skipped, inline or pooled.
 */
import { checkRecordBytes, recordPlace, type ProducerRecord } from '../bus/index.js';
import type { PatternRecord } from '../patterns/index.js';

/**
 * A run of consecutive input records of one batch: either their outputs together (`outputs`),
 * or the failure of one record (`error`, the message of what it threw). A batch's segments
 * cover its records in input order.
 */
export type RecordSegment =
  | { count: number; outputs: ProducerRecord[]; error?: undefined }
  | { count: 1; error: string; outputs?: undefined };

/** A durable handler's batch call. */
export type DurableOnNext = (
  records: PatternRecord<unknown>[],
) => ProducerRecord[] | Promise<ProducerRecord[]>;

/** The record limit of a processor's bus: the largest output value, bytes, on which bus. */
export interface OutputLimit {
  bytesMax: number;
  bus: 'kafka' | 'journal';
}

/**
 * onNext's return value, if it is an array of records that fit `limit`; else an Error naming the
 * processor and the batch, or a RecordTooLargeError naming the processor and the record.
 */
function outputsOf(
  name: string,
  out: unknown,
  records: PatternRecord<unknown>[],
  limit: OutputLimit,
): ProducerRecord[] {
  if (Array.isArray(out)) {
    for (const r of out as ProducerRecord[]) {
      const bytes = r?.value?.length ?? 0;
      if (bytes > limit.bytesMax)
        checkRecordBytes(bytes, limit.bytesMax, limit.bus, `processor ${name}, ${recordPlace(r)}`);
    }
    return out as ProducerRecord[];
  }
  const first = records[0]!;
  throw new Error(
    `processor ${name}: durable onNext must return an array of output records (may be empty), got ${out === null ? 'null' : typeof out} for the batch of ${records.length} records from ${first.topic}/${first.partition} at offset ${first.offset}`,
  );
}

/** The message of a thrown value, for a dead-letter header. */
export function errorText(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

/**
 * Runs a durable handler over `records` (rules 1-3 above, before the retries). Without
 * `isolate` a throw (or an output over `limit`) propagates; with it the batch is run again
 * record by record and each failure becomes an `error` segment.
 */
export async function durableSegments(
  name: string,
  onNext: DurableOnNext,
  records: PatternRecord<unknown>[],
  isolate: boolean,
  limit: OutputLimit,
): Promise<RecordSegment[]> {
  if (records.length === 0) return [];
  try {
    const outputs = outputsOf(name, await onNext(records), records, limit);
    return [{ count: records.length, outputs }];
  } catch (e) {
    if (!isolate) throw e;
    if (records.length === 1) return [{ count: 1, error: errorText(e) }];
  }
  const segments: RecordSegment[] = [];
  for (const r of records) {
    try {
      segments.push({ count: 1, outputs: outputsOf(name, await onNext([r]), [r], limit) });
    } catch (e) {
      segments.push({ count: 1, error: errorText(e) });
    }
  }
  return segments;
}

/** Runs a pubsub handler over `records`; each record that throws is one failure, by index. */
export async function pubsubFailures(
  onNext: (record: PatternRecord<unknown>) => unknown,
  records: PatternRecord<unknown>[],
): Promise<{ index: number; error: string }[]> {
  const failed: { index: number; error: string }[] = [];
  for (let i = 0; i < records.length; i++) {
    try {
      await onNext(records[i]!);
    } catch (e) {
      failed.push({ index: i, error: errorText(e) });
    }
  }
  return failed;
}

/** The retry and dead-letter rules of one processor (rule 3). */
export interface RecordErrorRules {
  /** The processor's name, for messages. */
  processor: string;
  /** Where a record goes after its last attempt; absent: segments never hold errors. */
  deadLetterTopic?: string;
  /** Retries of a failed record, integer >= 0. */
  retriesMax: number;
  /** Wait before each retry, ms. */
  retryBackoffMs: number;
  /** The processor's codec, to write a record's value to the dead-letter topic. */
  encode(value: unknown): Uint8Array;
  /** The bus's record limit; a dead letter over it is written without its value. */
  limit: OutputLimit;
}

/**
 * The outputs of a batch from its segments, in input order: an `error` segment's record is
 * retried alone through `retryOne` (which throws when the record still fails) up to
 * `retriesMax` times; its outputs take its place, or its dead-letter record does.
 * @throws Error when a segment holds an error and `rules.deadLetterTopic` is absent (a caller's
 *   bug: without a dead-letter topic batches are not isolated).
 */
export async function resolveSegments(
  records: PatternRecord<unknown>[],
  segments: RecordSegment[],
  retryOne: (record: PatternRecord<unknown>) => Promise<ProducerRecord[]>,
  rules: RecordErrorRules,
): Promise<{ outputs: ProducerRecord[]; deadLettered: number }> {
  const outputs: ProducerRecord[] = [];
  let deadLettered = 0;
  let at = 0;
  for (const s of segments) {
    if (s.error === undefined) {
      for (let i = 0; i < s.outputs.length; i++) outputs.push(s.outputs[i]!);
      at += s.count;
      continue;
    }
    const r = records[at++]!;
    if (rules.deadLetterTopic === undefined)
      throw new Error(`processor ${rules.processor}: a record failed without a deadLetterTopic`);
    let error = s.error;
    let attempts = 1;
    let retried: ProducerRecord[] | null = null;
    while (retried === null && attempts <= rules.retriesMax) {
      await new Promise((res) => setTimeout(res, rules.retryBackoffMs));
      attempts++;
      try {
        retried = await retryOne(r);
      } catch (e) {
        error = errorText(e);
      }
    }
    if (retried !== null) {
      for (let i = 0; i < retried.length; i++) outputs.push(retried[i]!);
      continue;
    }
    deadLettered++;
    let value = r.value === null ? null : rules.encode(r.value);
    if (value !== null && value.length > rules.limit.bytesMax) {
      // An input can be larger than the limit (a producer of its own, up to the broker's).
      error +=
        ` (the record's ${value.length} bytes are not kept: the dead letter would be over the ` +
        `${rules.limit.bus} record limit of ${rules.limit.bytesMax} bytes)`;
      value = null;
    }
    outputs.push({
      topic: rules.deadLetterTopic,
      key: r.key,
      value,
      headers: {
        ...r.headers,
        error,
        source: `${r.topic}:${r.partition}:${r.offset}`,
        attempts: String(attempts),
      },
    });
  }
  if (at !== records.length)
    throw new Error(
      `processor ${rules.processor}: segments cover ${at} of the batch's ${records.length} records`,
    );
  return { outputs, deadLettered };
}
