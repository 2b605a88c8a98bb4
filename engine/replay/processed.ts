/**
 * The processed record: replay metadata a service host appends to its output queue, in the same
 * atomic batch as the outputs, for every batch in which it processed at least one input. It
 * lists the runs of (input partition, index range) in the order they were processed, and the
 * position of every input partition after the batch. Reading the newest one gives LAST_WRITTEN
 * exactly (inputs that produced no output included); reading them all forwards gives the exact
 * interleaving for inputsReplay OUTPUT. After Chronicle Services' OUTPUT replay, which rebuilds
 * state from inputs in the order recorded in the output's metadata.
 *
 * Envelope: type {@link EVENT_TYPE_PROCESSED} (reserved range 3..99), no key, no cause, payload:
 * ```
 *  0               4               8                              16
 *  +---------------+---------------+------------------------------+
 *  | inputCount    | runCount      |                                 header, uint32 LE
 *  +---------------+---------------+------------------------------+
 *  | queueId       | partition     | last (float64: -1 = none)    |  x inputCount
 *  +---------------+---------------+------------------------------+
 *  | input ordinal | count         | first (float64)              |  x runCount
 *  +---------------+---------------+------------------------------+
 * ```
 * `input ordinal` indexes the position table of the same record. A run covers input indexes
 * first .. first+count-1 of one partition. Cost: 16 bytes per input partition + 16 per run; a
 * batch reads each ring once, so runs per batch <= input partitions.
 */
import { queueId } from '../codec/index.js';

/** Envelope type of a processed record (reserved Sluice range 3..99). */
export const EVENT_TYPE_PROCESSED = 3;

const HEADER_BYTES = 8;
const ENTRY_BYTES = 16;

/** One input partition as replay metadata names it. */
export interface ReplayInput {
  queue: string;
  partition: number;
}

/** A decoded processed record, mapped onto the caller's input list. */
export interface ProcessedRecord {
  /** Per caller input ordinal: last processed index after the batch (-1: none yet). */
  positions: number[];
  /** Runs in processing order: caller input ordinal, first index, count. */
  runs: { input: number; first: number; count: number }[];
}

/**
 * Accumulates the runs of one batch on the host's hot path (`note` per input record, no
 * allocation while a run continues) and encodes the processed record.
 */
export class ProcessedRecorder {
  private readonly ids: number[];
  private readonly partitions: number[];
  /** Last processed index per input ordinal. */
  readonly positions: number[];
  private runInput: number[] = [];
  private runFirst: number[] = [];
  private runCount: number[] = [];
  private last = -1;

  /**
   * @param inputs the service's input partitions, in host order (ordinals).
   * @param positions last processed index per input (-1: none); copied.
   * @param gaps true when an input's indexes may skip (Kafka offsets: transaction markers and
   *   aborted records take offsets no reader sees): a forward jump then starts a new run.
   * @throws Error if the lengths differ.
   */
  constructor(
    inputs: readonly ReplayInput[],
    positions: readonly number[],
    private readonly gaps = false,
  ) {
    if (inputs.length !== positions.length)
      throw new Error(
        `positions.length must equal inputs.length, ${positions.length} != ${inputs.length}`,
      );
    this.ids = inputs.map((i) => queueId(i.queue));
    this.partitions = inputs.map((i) => i.partition);
    this.positions = positions.slice();
  }

  /** Number of runs noted since the last `take`. */
  get runs(): number {
    return this.runInput.length;
  }

  /**
   * Notes that input `input` (ordinal) record `index` was processed.
   * @throws Error if `index` is not the next index of that input (a gap or a repeat; with
   *   `gaps`, only a repeat).
   */
  note(input: number, index: number): void {
    const expected = this.positions[input] + 1;
    if (index !== expected && !(this.gaps && index > expected)) {
      throw new Error(
        `processed input ${input} index ${index}, expected ${expected} (a gap or a repeat)`,
      );
    }
    this.positions[input] = index;
    const n = this.runInput.length;
    if (n > 0 && this.last === input && index === expected) {
      this.runCount[n - 1]++;
      return;
    }
    this.runInput.push(input);
    this.runFirst.push(index);
    this.runCount.push(1);
    this.last = input;
  }

  /** Encodes the processed record payload of the runs noted so far and starts a new batch. */
  take(): Uint8Array {
    const inputs = this.ids.length;
    const runs = this.runInput.length;
    const bytes = new Uint8Array(HEADER_BYTES + ENTRY_BYTES * (inputs + runs));
    const v = new DataView(bytes.buffer);
    v.setUint32(0, inputs, true);
    v.setUint32(4, runs, true);
    let o = HEADER_BYTES;
    for (let i = 0; i < inputs; i++, o += ENTRY_BYTES) {
      v.setUint32(o, this.ids[i], true);
      v.setUint32(o + 4, this.partitions[i], true);
      v.setFloat64(o + 8, this.positions[i], true);
    }
    for (let r = 0; r < runs; r++, o += ENTRY_BYTES) {
      v.setUint32(o, this.runInput[r], true);
      v.setUint32(o + 4, this.runCount[r], true);
      v.setFloat64(o + 8, this.runFirst[r], true);
    }
    this.runInput.length = 0;
    this.runFirst.length = 0;
    this.runCount.length = 0;
    this.last = -1;
    return bytes;
  }
}

/**
 * Decodes a processed record payload and maps its inputs onto `inputs` (by queue id and
 * partition). Inputs the record does not name get position -1.
 * @throws Error if the payload is malformed, or a run names an input partition that is not in
 *         `inputs` (the service's inputs changed since it was written; `where` names the record).
 */
export function decodeProcessed(
  payload: Uint8Array,
  inputs: readonly ReplayInput[],
  where: string,
): ProcessedRecord {
  if (payload.length < HEADER_BYTES)
    throw new Error(
      `${where}: processed record of ${payload.length} bytes, header needs ${HEADER_BYTES}`,
    );
  const v = new DataView(payload.buffer, payload.byteOffset, payload.byteLength);
  const inputCount = v.getUint32(0, true);
  const runCount = v.getUint32(4, true);
  const want = HEADER_BYTES + ENTRY_BYTES * (inputCount + runCount);
  if (payload.length !== want)
    throw new Error(
      `${where}: processed record of ${payload.length} bytes, its counts need ${want}`,
    );
  const ordinal = new Map<string, number>();
  inputs.forEach((i, n) => ordinal.set(`${queueId(i.queue)}/${i.partition}`, n));
  const positions = inputs.map(() => -1);
  const map: number[] = [];
  let o = HEADER_BYTES;
  for (let i = 0; i < inputCount; i++, o += ENTRY_BYTES) {
    const id = v.getUint32(o, true);
    const partition = v.getUint32(o + 4, true);
    const n = ordinal.get(`${id}/${partition}`);
    map.push(n ?? -1);
    if (n !== undefined) positions[n] = v.getFloat64(o + 8, true);
  }
  const runs: ProcessedRecord['runs'] = [];
  for (let r = 0; r < runCount; r++, o += ENTRY_BYTES) {
    const at = v.getUint32(o, true);
    const count = v.getUint32(o + 4, true);
    const first = v.getFloat64(o + 8, true);
    if (at >= inputCount) throw new Error(`${where}: run ${r} names input ${at} of ${inputCount}`);
    const input = map[at];
    if (input < 0)
      throw new Error(
        `${where}: run ${r} is of an input partition (queue id ${v.getUint32(HEADER_BYTES + at * ENTRY_BYTES, true)}) that is no longer an input of the service`,
      );
    runs.push({ input, first, count });
  }
  return { positions, runs };
}
