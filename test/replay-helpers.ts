/**
 * Shared by the replay tests: seeded random numbers, input generation for the lww-product
 * service, and a verifier that rebuilds the reference state sequence from a service's output.
 */
import fs from 'node:fs';
import path from 'node:path';
import { Appender, Tailer } from '../engine/journal/index.js';
import {
  EnvelopeView,
  EnvelopeWriter,
  EVENT_TYPE_JSON,
  decodeJson,
  encodeJson,
  queueId,
} from '../engine/codec/index.js';
import { EVENT_TYPE_PROCESSED, decodeProcessed, type ReplayInput } from '../engine/replay/index.js';
import { step, digest } from './fixtures/services/lww-product.js';
import type { PartitionTailer } from '../engine/service/index.js';
import type { TestBackend } from './lib/backends.js';

/** Deterministic pseudo-random numbers in [0, 1) (mulberry32), so a failure can be replayed. */
export function rng(seed: number): () => number {
  return () => {
    seed |= 0;
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** One input record of the lww-product service. */
export interface LwwInput {
  key: string;
  v: number;
}

/** Input values by `${queue}/${partition}`, index = position in the array. */
export type InputValues = Map<string, LwwInput[]>;

/** `count` random inputs for one partition, recorded in `values` under `k`, as envelopes. */
function lwwBatch(
  k: string,
  count: number,
  random: () => number,
  values: InputValues,
): Uint8Array[] {
  const writer = new EnvelopeWriter();
  const list = values.get(k) ?? [];
  const batch: Uint8Array[] = [];
  for (let n = 0; n < count; n++) {
    const input = { key: `k${Math.floor(random() * 7)}`, v: 1 + Math.floor(random() * 999_999) };
    list.push(input);
    batch.push(
      writer.encode({
        type: EVENT_TYPE_JSON,
        key: input.key,
        eventTimeMs: Date.now(),
        payload: encodeJson({ v: input.v }),
      }),
    );
  }
  values.set(k, list);
  return batch;
}

/** Appends `count` random inputs to each partition; returns them appended to `values`. */
export function appendLwwInputs(
  dataDir: string,
  inputs: readonly ReplayInput[],
  count: number,
  random: () => number,
  values: InputValues,
): void {
  for (const i of inputs) {
    const a = Appender.open({ dir: path.join(dataDir, 'queues', i.queue, String(i.partition)) });
    a.appendBatch(lwwBatch(`${i.queue}/${i.partition}`, count, random, values));
    a.close();
  }
}

/** {@link appendLwwInputs} on either bus (test/lib/backends.ts). */
export async function appendLwwInputsTo(
  backend: TestBackend,
  dataDir: string,
  inputs: readonly ReplayInput[],
  count: number,
  random: () => number,
  values: InputValues,
): Promise<void> {
  for (const i of inputs) {
    await backend.append(
      dataDir,
      i.queue,
      i.partition,
      lwwBatch(`${i.queue}/${i.partition}`, count, random, values),
    );
  }
}

/** What {@link verifyLwwOutput} found. */
export interface LwwVerdict {
  /** digests[c] = reference digest after c inputs (digests[0] = the empty state). */
  digests: string[];
  /** Per input key, the last index processed (per processed records, or per outputs). */
  positions: Record<string, number>;
  outputs: number;
}

/**
 * Reads a lww-product service's output forwards and checks it against the reference:
 * - `order: 'processed'`: the interleaving comes from the processed records; every run starts
 *   where the previous one of its partition ended (no input lost or repeated), and each output
 *   belongs to an input of its batch that emits, after the previous output (none duplicated);
 * - `order: 'outputs'` (emitAll services): the interleaving is the outputs' causes in order,
 *   each partition's causes 0, 1, 2, ... (none lost or duplicated).
 * Every output's digest must equal the reference state after its input. `output` is the output
 * queue's journal directory, or a tailer at its start (either bus; closed here).
 * @throws Error (assertion message with `label`) on the first difference.
 */
export function verifyLwwOutput(
  output: string | PartitionTailer,
  inputs: readonly ReplayInput[],
  values: InputValues,
  order: 'processed' | 'outputs',
  emitAll: boolean,
  label: string,
): LwwVerdict {
  const state = { count: 0, acc: 1, last: new Map<string, number>() };
  const digests = [digest(state)];
  const next = new Map(inputs.map((i) => [`${i.queue}/${i.partition}`, 0]));
  const byId = new Map(
    inputs.map((i) => [`${queueId(i.queue)}/${i.partition}`, `${i.queue}/${i.partition}`]),
  );
  /** `${key}#${index}` -> count after that input, for inputs of the current batch. */
  const seqOf = new Map<string, number>();
  let pending: { key: string; index: number; digest: string; at: number }[] = [];
  let lastOutputSeq = 0;
  let outputs = 0;
  let emitting = 0;
  const fail = (m: string): never => {
    throw new Error(`${label}: ${m}`);
  };
  const apply = (k: string, index: number) => {
    const exp = next.get(k)!;
    if (index !== exp)
      fail(`${k}: input ${index} processed where ${exp} was due (lost or repeated)`);
    const input = values.get(k)?.[index];
    if (!input) fail(`${k}: input ${index} processed but never written`);
    step(state, input!.key, input!.v);
    digests.push(digest(state));
    next.set(k, index + 1);
    if (emitAll || input!.v % 3 !== 0) emitting++;
    seqOf.set(`${k}#${index}`, state.count);
  };
  const check = (o: { key: string; index: number; digest: string; at: number }) => {
    const seq = seqOf.get(`${o.key}#${o.index}`);
    if (seq === undefined)
      fail(`output #${o.at} names input ${o.key}#${o.index}, not processed in its batch`);
    if (seq! <= lastOutputSeq)
      fail(
        `output #${o.at} for ${o.key}#${o.index} is not after the previous output (a duplicate)`,
      );
    const input = values.get(o.key)![o.index];
    if (!emitAll && input.v % 3 === 0)
      fail(`output #${o.at} for ${o.key}#${o.index} whose input emits nothing`);
    if (o.digest !== digests[seq!])
      fail(
        `output #${o.at} for ${o.key}#${o.index}: state ${o.digest}, reference ${digests[seq!]}`,
      );
    lastOutputSeq = seq!;
    outputs++;
  };
  const t = typeof output === 'string' ? Tailer.open({ dir: output }) : output;
  const view = new EnvelopeView();
  try {
    for (let rec = t.next(); rec; rec = t.next()) {
      view.wrap(rec.bytes, 0, rec.bytes.length);
      if (view.type === EVENT_TYPE_PROCESSED) {
        if (order !== 'processed') continue;
        const { runs } = decodeProcessed(view.payload, inputs, `output#${rec.index}`);
        seqOf.clear();
        for (const r of runs) {
          const k = `${inputs[r.input].queue}/${inputs[r.input].partition}`;
          for (let n = 0; n < r.count; n++) apply(k, r.first + n);
        }
        for (const o of pending) check(o);
        pending = [];
        continue;
      }
      if (view.type !== EVENT_TYPE_JSON) continue;
      const key = byId.get(`${view.causeQueue}/${view.causePartition}`);
      if (!key)
        fail(
          `output #${rec.index} has cause ${view.causeQueue}/${view.causePartition}, not an input`,
        );
      const o = {
        key: key!,
        index: view.causeIndex,
        digest: (decodeJson(view.payload) as { digest: string }).digest,
        at: rec.index,
      };
      if (order === 'processed') pending.push(o);
      else {
        seqOf.clear();
        apply(o.key, o.index);
        check(o);
      }
    }
  } finally {
    t.close();
  }
  if (pending.length > 0)
    fail(`${pending.length} outputs after the last processed record (not atomic with it)`);
  if (outputs !== emitting) fail(`${outputs} outputs for ${emitting} emitting inputs`);
  const positions: Record<string, number> = {};
  for (const [k, n] of next) positions[k] = n - 1;
  return { digests, positions, outputs };
}

/** Lines of a service's liveFile: the state each start rebuilt. */
export function readLiveFile(file: string): { count: number; digest: string }[] {
  if (!fs.existsSync(file)) return [];
  return fs
    .readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l.length > 0)
    .map((l) => JSON.parse(l) as { count: number; digest: string });
}
