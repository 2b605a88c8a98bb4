/**
 * LAST_WRITTEN: per input partition, the index of the last input whose effect is durable in the
 * service's output queue. Every output carries its cause (input queue id, partition, index), so
 * reading the output queue backwards from its end until each input partition has been seen (or
 * the start is reached) gives the positions. Chronicle Services calls this restart strategy
 * LAST_WRITTEN; it is exact because outputs of one input batch are appended atomically.
 *
 * Cost: reads backwards only as far as the oldest input partition's last output; an input that
 * never produced output makes it read the whole output queue (bounded by snapshots, issue 3).
 */
import { EnvelopeView, queueId } from '../codec/index.js';

/** One input partition of a service. */
export interface InputPartition {
  queue: string;
  partition: number;
}

/** `${queue}/${partition}`: the key of an input partition in position maps. */
export function inputKey(queue: string, partition: number): string {
  return `${queue}/${partition}`;
}

/** A backwards reader over the output queue: returns record bytes newest first, null at the start. */
export interface BackwardReader {
  previous(): { index: number; bytes: Uint8Array } | null;
}

/**
 * Computes LAST_WRITTEN for each input partition.
 * @returns map inputKey -> last input index recorded (-1: nothing recorded, start from 0),
 *          map inputKey -> output index of the record it was read from (-1: none), and how
 *          many output records were read.
 */
export function computeLastWritten(
  output: BackwardReader,
  inputs: InputPartition[],
): { positions: Record<string, number>; foundAt: Record<string, number>; scanned: number } {
  const positions: Record<string, number> = {};
  const foundAt: Record<string, number> = {};
  const byId = new Map<string, string>();
  for (const i of inputs) {
    positions[inputKey(i.queue, i.partition)] = -1;
    foundAt[inputKey(i.queue, i.partition)] = -1;
    byId.set(`${queueId(i.queue)}/${i.partition}`, inputKey(i.queue, i.partition));
  }
  let missing = inputs.length;
  let scanned = 0;
  const view = new EnvelopeView();
  while (missing > 0) {
    const rec = output.previous();
    if (!rec) break;
    scanned++;
    view.wrap(rec.bytes, 0, rec.bytes.length);
    // Sluice's own records (replay metadata, snapshots) have no cause.
    if (!view.hasCause) continue;
    const key = byId.get(`${view.causeQueue}/${view.causePartition}`);
    if (key === undefined) continue;
    if (positions[key] === -1) {
      positions[key] = view.causeIndex;
      foundAt[key] = rec.index;
      missing--;
    }
  }
  return { positions, foundAt, scanned };
}
