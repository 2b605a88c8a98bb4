/**
 * Forward replays that rebuild a service's state before it goes live, straight from the
 * journals (no rings): the inputs in the recorded interleaving (inputsReplay OUTPUT), or each
 * input partition over an index range (inputsReplay INPUTS, and after a snapshot).
 */
import { Tailer } from '../journal/index.js';
import { EnvelopeView } from '../codec/index.js';
import { EVENT_TYPE_PROCESSED, decodeProcessed, type ReplayInput } from './processed.js';

/** An input partition with its journal directory. */
export interface ReplayInputDir extends ReplayInput {
  dir: string;
}

/** A forward reader of one partition (a journal Tailer, or a Kafka one: engine/service QueueTailer). */
export interface ReplayTailer {
  readonly index: number;
  moveToIndex(index: number): boolean;
  next(): { index: number; bytes: Uint8Array } | null;
  close(): void;
}

/**
 * Opens the tailers a replay reads: the output queue's (`input` undefined) or input ordinal
 * `input`'s. Default {@link journalReplaySource}.
 */
export type ReplaySource = (input?: number) => ReplayTailer;

/** Tailers over the journal directories of the output and of `inputs`. */
export function journalReplaySource(
  outputDir: string,
  inputs: readonly ReplayInputDir[],
): ReplaySource {
  return (input) => Tailer.open({ dir: input === undefined ? outputDir : inputs[input].dir });
}

/**
 * `progress` is called every 256 records (and after each processed run): often enough that a
 * drain's check in it stops a replay whose handler takes milliseconds per record within a
 * fraction of a second, rare enough to cost nothing at millions of records per second.
 */
const PROGRESS_EVERY_MASK = 0xff;

/** Receives one replayed input record; `bytes` is valid only during the call. */
export type ReplayApply = (input: number, index: number, bytes: Uint8Array) => void;

/**
 * Replays inputs in the order the processed records of the output queue list them, starting at
 * output index `fromOutput` (0, or after a snapshot's end marker) and running to the output's
 * end. Runs must move forwards: a run that starts at or before an index already replayed is a
 * repeat and fails; a forward gap is allowed (startFrom END skips inputs).
 * @param start per input ordinal, the last index already in the state (-1: none).
 * @returns per input ordinal, the last index replayed (or `start`), and the number replayed.
 * @throws Error naming the output record if a run repeats inputs or an input ends early.
 */
export function replayProcessed(
  outputDir: string,
  fromOutput: number,
  inputs: readonly ReplayInputDir[],
  start: readonly number[],
  apply: ReplayApply,
  where: string,
  progress?: (replayed: number) => void,
  open: ReplaySource = journalReplaySource(outputDir, inputs),
): { positions: number[]; replayed: number } {
  const positions = start.slice();
  const tailers: (ReplayTailer | null)[] = inputs.map(() => null);
  const out = open();
  const view = new EnvelopeView();
  let replayed = 0;
  try {
    if (!out.moveToIndex(fromOutput))
      throw new Error(
        `${where}: replay from output index ${fromOutput} is beyond the end (${out.index})`,
      );
    for (let rec = out.next(); rec; rec = out.next()) {
      view.wrap(rec.bytes, 0, rec.bytes.length);
      if (view.type !== EVENT_TYPE_PROCESSED) continue;
      const at = `${where}#${rec.index}`;
      // decode copies what it needs: the tailer's bytes are reused by the input reads below
      const { runs } = decodeProcessed(view.payload, inputs, at);
      for (const run of runs) {
        const input = inputs[run.input];
        if (run.first <= positions[run.input]) {
          throw new Error(
            `${at}: run ${input.queue}/${input.partition} ${run.first}..${run.first + run.count - 1} repeats inputs already replayed (through ${positions[run.input]})`,
          );
        }
        let t = tailers[run.input];
        if (!t) t = tailers[run.input] = open(run.input);
        if (t.index !== run.first && !t.moveToIndex(run.first)) {
          throw new Error(
            `${at}: input ${input.queue}/${input.partition} ends at ${t.index}, the run starts at ${run.first}`,
          );
        }
        for (let n = 0; n < run.count; n++) {
          const r = t.next();
          if (!r)
            throw new Error(
              `${at}: input ${input.queue}/${input.partition} ends at ${t.index}, the run ends at ${run.first + run.count - 1}`,
            );
          apply(run.input, r.index, r.bytes);
          if (progress && (n & PROGRESS_EVERY_MASK) === PROGRESS_EVERY_MASK)
            progress(replayed + n + 1);
        }
        positions[run.input] = run.first + run.count - 1;
        replayed += run.count;
        if (progress) progress(replayed);
      }
    }
  } finally {
    out.close();
    for (const t of tailers) t?.close();
  }
  return { positions, replayed };
}

/**
 * Replays input `input` (ordinal) from index `first` through `last` (inclusive).
 * @returns the number replayed.
 * @throws Error if the input ends before `last`.
 */
export function replayRange(
  inputs: readonly ReplayInputDir[],
  input: number,
  first: number,
  last: number,
  apply: ReplayApply,
  where: string,
  progress?: (n: number) => void,
  open: ReplaySource = (n) => Tailer.open({ dir: inputs[n!].dir }),
): number {
  if (last < first) return 0;
  const i = inputs[input];
  const t = open(input);
  let n = 0;
  try {
    if (!t.moveToIndex(first))
      throw new Error(
        `${where}: input ${i.queue}/${i.partition} ends at ${t.index} but replay starts at ${first}`,
      );
    while (t.index <= last) {
      const rec = t.next();
      if (!rec)
        throw new Error(
          `${where}: input ${i.queue}/${i.partition} ends at ${t.index} but replay runs through ${last}`,
        );
      apply(input, rec.index, rec.bytes);
      n++;
      if (progress && (n & PROGRESS_EVERY_MASK) === 0) progress(n);
    }
  } finally {
    t.close();
  }
  return n;
}
