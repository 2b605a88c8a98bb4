/**
 * The record limit a writer checks before it sends a record to a bus: on Kafka the topology's
 * bus.recordBytesMax (or a sink's to.recordBytesMax), set under the broker's message.max.bytes;
 * on the journal its RECORD_BYTES_MAX. Why before the send: the broker refuses a record batch
 * over message.max.bytes with MESSAGE_TOO_LARGE, which fails the whole transaction, and the
 * same batch fails again at every retry and restart. Refused here, the one record is an error
 * of its writer (a service's or processor's handler error, a sink's stop), handled like the
 * writer's other failed records, and the records around it go on.
 *
 * The limit bounds a record's value, as in every writer of the bus (captured changes, `sluice
 * append`): the key, headers and batch overhead live in the room between it and the broker's.
 */
import type { ProducerRecord } from './types.js';

/** A record refused for its size before it was sent; nothing of it reached the bus. */
export class RecordTooLargeError extends Error {
  override readonly name = 'RecordTooLargeError';
}

/** Longest key shown in a message, characters (a key can be as long as a value). */
const KEY_SHOWN_MAX = 64;

/** Where a record goes, for a message: `topic "t", partition 2` or `topic "t", key "k"`. */
export function recordPlace(r: Pick<ProducerRecord, 'topic' | 'key' | 'partition'>): string {
  if (r.partition !== undefined) return `topic "${r.topic}", partition ${r.partition}`;
  if (r.key === null) return `topic "${r.topic}", no key`;
  const key = r.key.length > KEY_SHOWN_MAX ? `${r.key.slice(0, KEY_SHOWN_MAX)}...` : r.key;
  return `topic "${r.topic}", key ${JSON.stringify(key)}`;
}

/**
 * Checks one output record's size against its bus's limit.
 * @param where where the record goes (an output queue, {@link recordPlace}).
 * @throws RecordTooLargeError naming the size, the bus, the limit and `where`.
 */
export function checkRecordBytes(
  bytes: number,
  limit: number,
  bus: 'kafka' | 'journal',
  where: string,
): void {
  if (bytes <= limit) return;
  throw new RecordTooLargeError(
    `output record of ${bytes} bytes exceeds the ${bus} record limit of ${limit} bytes (${where})`,
  );
}
