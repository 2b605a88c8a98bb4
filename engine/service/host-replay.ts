/**
 * A service host's restart, after Chronicle Services' restart strategies: where the service
 * resumes (LAST_WRITTEN per input, from the newest processed record or from the outputs'
 * causes; the newest complete snapshot) and how its state is rebuilt. The rebuild is one of a
 * table of small strategy objects, in the manner of engine/ring/idle.ts and ./start-from.ts,
 * chosen by {@link replayStrategyOf}: KV_STORE, OUTPUT, INPUTS, OUTPUT_REVERSE or NONE. Each runs
 * with outputs suppressed (unless emitDuringReplay) and returns what it read; none writes
 * anything durable but what emitDuringReplay emits.
 */
import { Counter } from '../actor/index.js';
import { EVENT_TYPE_CHANGE, EVENT_TYPE_JSON, USER_EVENT_TYPE_MIN } from '../codec/index.js';
import {
  replayProcessed,
  replayRange,
  restoreKvStore,
  scanOutput,
  type OutputScan,
} from '../replay/index.js';
import type { ServiceHostData } from './host-contract.js';
import type { ServiceRuntime } from './host-runtime.js';
import { computeLastWritten, inputKey } from './last-written.js';
import type { PartitionTailer, QueueLogs, QueuePartition } from './queue-logs.js';

/** Where a restarted service resumes, before its state is rebuilt. */
export interface RestartPositions {
  /** Per input ordinal, the last input index whose effect is durable (-1: none). */
  last: number[];
  /** The newest complete snapshot (when the service declares them), else null. */
  found: OutputScan['snapshot'];
  /** Output records read to find them. */
  scanned: number;
}

/**
 * Step 1 of a restart: LAST_WRITTEN from the newest processed record when `recordProcessed`
 * (the service writes them), else from the outputs' causes (./last-written.ts); the newest
 * complete snapshot of `snapshotType`; a snapshot's positions raise LAST_WRITTEN.
 * @throws Error (naming `where`) for inputsReplay OUTPUT on an output with outputs and no
 *   processed record (written with another inputsReplay); a damaged record (engine/replay).
 */
export function findRestartPositions(
  d: ServiceHostData,
  logs: QueueLogs,
  outPart: QueuePartition,
  recordProcessed: boolean,
  snapshotType: number | undefined,
  where: string,
): RestartPositions {
  let scanned = 0;
  let fromProcessed: number[] | null = null;
  let found: OutputScan['snapshot'] = null;
  if (recordProcessed) {
    const back = logs.tailer(outPart);
    back.moveToEnd();
    const scan = scanOutput(back, d.inputs, snapshotType, where);
    back.close();
    scanned += scan.scanned;
    fromProcessed = scan.positions;
    found = scan.snapshot;
  }
  const back = logs.tailer(outPart);
  back.moveToEnd();
  const lw = fromProcessed ? null : computeLastWritten(back, d.inputs);
  back.close();
  if (lw) scanned += lw.scanned;
  const keys = d.inputs.map((i) => inputKey(i.queue, i.partition));
  let last = fromProcessed ?? keys.map((k) => lw!.positions[k]);
  if (d.inputsReplay === 'OUTPUT' && !fromProcessed && last.some((p) => p >= 0)) {
    throw new Error(
      `${where}: inputsReplay OUTPUT needs processed records, but the output has outputs and none (it was written with another inputsReplay; replay it once with INPUTS, or start a new output queue)`,
    );
  }
  if (found) last = last.map((p, n) => Math.max(p, found!.positions[n]));
  return { last, found, scanned };
}

/** What a replay strategy works with. */
export interface ReplayRun {
  data: ServiceHostData;
  rt: ServiceRuntime;
  logs: QueueLogs;
  /** The output partition (the service writes partition 0). */
  outPart: QueuePartition;
  positions: RestartPositions;
  /** Input ordinal -> the last index the snapshot includes (-1 per input without one). */
  base: number[];
  /** The actor's counters (replayTotal, replayed are written). */
  counters: Float64Array;
  /** Called with the count so far every few hundred records (heartbeat, drain check). */
  progress(n: number): void;
  /** "service S: output Q/0", for errors. */
  where: string;
  /** `def.replayOutput` (OUTPUT_REVERSE). */
  replayOutput?: (state: unknown, event: ServiceRuntime['ev']) => boolean;
}

/** What a replay read. */
export interface ReplayResult {
  /** Input records handled (INPUTS, OUTPUT). */
  replayed: number;
  /** Output records applied (OUTPUT_REVERSE, KV_STORE). */
  outputsReplayed: number;
  /** Output records read besides (KV_STORE). */
  scanned: number;
}

/** One way to rebuild a service's state on restart. */
export interface ReplayStrategy {
  readonly name: 'KV_STORE' | 'OUTPUT' | 'INPUTS' | 'OUTPUT_REVERSE' | 'NONE';
  /** Whether the actor shows state `replay` while it runs. */
  readonly replays: boolean;
  run(r: ReplayRun): ReplayResult;
}

/** Tailers of the replays: the output's (no ordinal) or input ordinal n's. */
function replaySource(r: ReplayRun): (n?: number) => PartitionTailer {
  return (n) => r.logs.tailer(n === undefined ? r.outPart : r.data.inputs[n]);
}

/** Inputs still to replay after the snapshot, for the operations API's progress. */
function replayTotal(r: ReplayRun): number {
  return r.positions.last.reduce((a, p, n) => a + p - r.base[n], 0);
}

/** The key-value store's puts and removes from the output alone (engine/replay/kv.ts). */
const KV_STORE: ReplayStrategy = {
  name: 'KV_STORE',
  replays: true,
  run(r) {
    const t = r.logs.tailer(r.outPart);
    try {
      const k = restoreKvStore(r.rt.kv!, t, r.where);
      r.counters[Counter.replayed] = k.applied;
      return { replayed: 0, outputsReplayed: k.applied, scanned: k.scanned };
    } finally {
      t.close();
    }
  },
};

/** The inputs in the order the processed records list them, after the snapshot. */
const OUTPUT: ReplayStrategy = {
  name: 'OUTPUT',
  replays: true,
  run(r) {
    const { data: d, positions, rt } = r;
    r.counters[Counter.replayTotal] = replayTotal(r);
    rt.replaying = true;
    const p = replayProcessed(
      d.output.dir,
      positions.found ? positions.found.markerIndex + 1 : 0,
      d.inputs,
      r.base,
      rt.applyInput,
      r.where,
      r.progress,
      replaySource(r),
    );
    for (let n = 0; n < d.inputs.length; n++) {
      if (p.positions[n] !== positions.last[n])
        throw new Error(
          `${r.where}: OUTPUT replay of ${inputKey(d.inputs[n].queue, d.inputs[n].partition)} ended at ${p.positions[n]}, the newest processed record says ${positions.last[n]}`,
        );
    }
    r.counters[Counter.replayed] = p.replayed;
    rt.flushReplayed();
    rt.replaying = false;
    return { replayed: p.replayed, outputsReplayed: 0, scanned: 0 };
  },
};

/** Each input partition from after the snapshot (or 0) through LAST_WRITTEN, from its log. */
const INPUTS: ReplayStrategy = {
  name: 'INPUTS',
  replays: true,
  run(r) {
    const { data: d, positions, rt } = r;
    r.counters[Counter.replayTotal] = replayTotal(r);
    rt.replaying = true;
    let replayed = 0;
    for (let n = 0; n < d.inputs.length; n++) {
      const before = replayed;
      replayed += replayRange(
        d.inputs,
        n,
        r.base[n] + 1,
        positions.last[n],
        rt.applyInput,
        r.where,
        (k) => r.progress(before + k),
        replaySource(r),
      );
    }
    r.counters[Counter.replayed] = replayed;
    rt.flushReplayed();
    rt.replaying = false;
    return { replayed, outputsReplayed: 0, scanned: 0 };
  },
};

/** The output newest first, to the service's replayOutput until it returns true. */
const OUTPUT_REVERSE: ReplayStrategy = {
  name: 'OUTPUT_REVERSE',
  replays: true,
  run(r) {
    const { data: d, rt } = r;
    const { view, ev } = rt;
    rt.replaying = true;
    let outputsReplayed = 0;
    const back = r.logs.tailer(r.outPart);
    try {
      back.moveToEnd();
      const replayOutput = r.replayOutput!;
      for (let rec = back.previous(); rec; rec = back.previous()) {
        view.wrap(rec.bytes, 0, rec.bytes.length);
        if (
          view.type < USER_EVENT_TYPE_MIN &&
          view.type !== EVENT_TYPE_CHANGE &&
          view.type !== EVENT_TYPE_JSON
        )
          continue;
        ev.type = view.type;
        ev.key = view.key ?? '';
        ev.eventTimeMs = view.eventTimeMs;
        ev.queue = d.output.queue;
        ev.partition = 0;
        ev.index = rec.index;
        ev.payload = view.payload;
        outputsReplayed++;
        if ((outputsReplayed & 0xff) === 0) r.progress(outputsReplayed);
        if (replayOutput(rt.state, ev)) break;
      }
    } finally {
      back.close();
    }
    r.counters[Counter.replayed] = outputsReplayed;
    rt.replaying = false;
    return { replayed: 0, outputsReplayed, scanned: 0 };
  },
};

/** No rebuild: the state is `init`'s. */
const NONE: ReplayStrategy = {
  name: 'NONE',
  replays: false,
  run: () => ({ replayed: 0, outputsReplayed: 0, scanned: 0 }),
};

/** Every replay strategy by name. */
export const REPLAY_STRATEGIES: Readonly<Record<ReplayStrategy['name'], ReplayStrategy>> = {
  KV_STORE,
  OUTPUT,
  INPUTS,
  OUTPUT_REVERSE,
  NONE,
};

/**
 * The rebuild of a restart: a key-value store comes from the output alone (its inputsReplay is
 * NONE, checked by replayProblems); else the configured inputsReplay, where a snapshot without
 * OUTPUT order replays the inputs after it per partition (INPUTS), whatever inputsReplay says.
 */
export function replayStrategyOf(
  inputsReplay: ServiceHostData['inputsReplay'],
  snapshotFound: boolean,
  kvStore: boolean,
): ReplayStrategy {
  if (kvStore) return KV_STORE;
  if (inputsReplay === 'OUTPUT') return OUTPUT;
  if (inputsReplay === 'INPUTS' || snapshotFound) return INPUTS;
  if (inputsReplay === 'OUTPUT_REVERSE') return OUTPUT_REVERSE;
  return NONE;
}
