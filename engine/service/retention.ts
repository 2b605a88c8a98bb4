/**
 * Retention of a topology's own queues (`queues[].retention`, `<dataDir>/queues`): the journal
 * bus's size and age rule (engine/journal retentionCutoff, the same code as bus topics), held by
 * what the queue's readers still need. Runs in the thread that started the topology, next to the
 * writers: it deletes only sealed segments (never the one being appended to), which no appender
 * touches again, so it needs no appender lock.
 *
 * What holds a partition: the lowest index any reader's restart would read now, computed from the
 * files exactly as the service host computes it at a restart (engine/service/host-replay.ts findRestartPositions), so
 * a restart after any pass (and after a crash in one) finds what it needs. Per service:
 *
 * | restart strategy                          | input partition held from        | own output held from                 |
 * |-------------------------------------------|----------------------------------|--------------------------------------|
 * | startFrom LAST_WRITTEN / END, NONE        | its LAST_WRITTEN + 1             | the oldest record naming a LAST_WRITTEN position |
 * | startFrom START, NONE                     | its LAST_WRITTEN + 1 (see below) | as above                             |
 * | inputsReplay INPUTS (or a snapshot)       | newest snapshot's position + 1 (0 without one) | as above, and the snapshot |
 * | inputsReplay OUTPUT                       | newest snapshot's position + 1 (0 without one) | the snapshot (0 without one) |
 * | inputsReplay OUTPUT_REVERSE               | its LAST_WRITTEN + 1             | 0: the whole output (the replay decides where it stops) |
 * | a key-value store (`kvStore`)             | its LAST_WRITTEN + 1             | 0: the whole output                  |
 *
 * LAST_WRITTEN is the position whose effect is durable in the output (the newest processed
 * record's, when the service writes them); an input partition with no durable effect yet holds
 * from 0, so a lagging reader keeps its segments. `startFrom: START` with nothing to rebuild reads
 * every input again from the first record: with retention that is the earliest retained record
 * (it does not hold the queue whole, or retention could never delete anything). With
 * `deleteUncommitted: true` nothing holds: segments go by size and age alone, and a restart that
 * needed a deleted record starts at the earliest retained one (a replay then sees only what is
 * retained).
 *
 * A dead-letter queue, a queue nobody reads, and a queue read only by `sluice tail` have no reader
 * that holds them. Sinks' positions are Kafka offsets: engine/config refuses retention on a queue
 * a sink forwards unless deleteUncommitted.
 */
import {
  Tailer,
  removeOrphanIndexes,
  removeSegmentsBefore,
  retentionCutoff,
} from '../journal/index.js';
import type { RetentionStepHook } from '../journal/index.js';
import { scanOutput } from '../replay/index.js';
import type { Topology, TopologyQueueRetention } from '../config/index.js';
import { computeLastWritten, inputKey } from './last-written.js';

/** Defaults of the retention pass. */
export const QUEUE_RETENTION_DEFAULTS = {
  /** Period of the pass while a topology runs, ms (the journal bus's maintenance period). */
  intervalMs: 60_000,
} as const;

/** One input or output partition of a reader, with its journal directory. */
export interface RetainedPartition {
  queue: string;
  partition: number;
  dir: string;
}

/** A service as retention sees it: what its restart reads. */
export interface RetentionReader {
  service: string;
  /** Input partitions in the service host's order. */
  inputs: RetainedPartition[];
  /** Partition 0 of the output queue. */
  output: RetainedPartition;
  startFrom: 'START' | 'LAST_WRITTEN' | 'END';
  inputsReplay: 'NONE' | 'INPUTS' | 'OUTPUT' | 'OUTPUT_REVERSE';
  /** The host writes processed records (OUTPUT, snapshots, a kvStore, emitDuringReplay). */
  recordsProcessed: boolean;
  /** The definition's snapshot type, if it declares snapshots. */
  snapshotType?: number;
  /** The definition has a key-value store. */
  kvStore: boolean;
}

/** What retention works on: the partitions with a retention setting, and every reader. */
export interface QueueRetentionPlan {
  partitions: Array<RetainedPartition & { retention: TopologyQueueRetention }>;
  readers: RetentionReader[];
}

/** What a service's restart would read now: the first index of each partition it reads. */
export interface RestartNeeds {
  /** inputKey -> first index read (0: from the start). */
  inputs: Record<string, number>;
  /** First output index read; Infinity when the restart reads none of it. */
  output: number;
}

/** What one pass did. */
export interface QueueRetentionReport {
  segmentsDeleted: number;
  /** Offset indexes left by a crash between a segment's two unlinks, removed. */
  orphanIndexesRemoved: number;
  /** `queue/partition` of partitions over their bounds that a reader held. */
  held: string[];
}

/** The service definition facts the plan needs (the module is loaded by the caller). */
export interface ReaderDefinition {
  snapshotType?: number;
  kvStore: boolean;
}

/**
 * The retention plan of a topology: null when no queue sets retention. `definitions` gives each
 * service's snapshot type and key-value store (from its loaded module); `dirOf` the journal
 * directory of a queue partition.
 */
export function queueRetentionPlan(
  topology: Topology,
  definitions: ReadonlyMap<string, ReaderDefinition>,
  dirOf: (queue: string, partition: number) => string,
): QueueRetentionPlan | null {
  const partitions: QueueRetentionPlan['partitions'] = [];
  for (const q of topology.queues) {
    if (!q.retention) continue;
    for (let p = 0; p < q.partitions; p++)
      partitions.push({
        queue: q.name,
        partition: p,
        dir: dirOf(q.name, p),
        retention: q.retention,
      });
  }
  if (partitions.length === 0) return null;
  const partitionsOf = new Map(topology.queues.map((q) => [q.name, q.partitions]));
  const readers = topology.services.map((s): RetentionReader => {
    const def = definitions.get(s.name) ?? { kvStore: false };
    return {
      service: s.name,
      inputs: s.inputs.flatMap((queue) =>
        Array.from({ length: partitionsOf.get(queue) ?? 0 }, (_, partition) => ({
          queue,
          partition,
          dir: dirOf(queue, partition),
        })),
      ),
      output: { queue: s.output, partition: 0, dir: dirOf(s.output, 0) },
      startFrom: s.startFrom,
      inputsReplay: s.inputsReplay,
      recordsProcessed:
        s.inputsReplay === 'OUTPUT' ||
        def.snapshotType !== undefined ||
        def.kvStore ||
        s.emitDuringReplay,
      ...(def.snapshotType !== undefined ? { snapshotType: def.snapshotType } : {}),
      kvStore: def.kvStore,
    };
  });
  return { partitions, readers };
}

function backwards(dir: string): Tailer {
  const t = Tailer.open({ dir, readBufferBytes: 64 * 1024 });
  t.moveToEnd();
  return t;
}

/**
 * What reader `r`'s restart would read now (see the module table), from its output queue's
 * files. @throws Error naming the output for a damaged snapshot marker (as the restart would).
 */
export function restartNeeds(r: RetentionReader): RestartNeeds {
  const where = `service ${r.service}: output ${r.output.queue}`;
  const keys = r.inputs.map((i) => inputKey(i.queue, i.partition));
  let output = Infinity;
  let last: number[] | null = null;
  let snapshot: number[] | null = null;
  if (r.recordsProcessed) {
    const back = backwards(r.output.dir);
    try {
      const scan = scanOutput(back, r.inputs, r.snapshotType, where);
      if (scan.positions) {
        last = scan.positions;
        output = Math.min(output, scan.processedIndex);
      }
      if (scan.snapshot) {
        snapshot = scan.snapshot.positions;
        output = Math.min(output, scan.snapshot.firstIndex);
      }
    } finally {
      back.close();
    }
  }
  if (last === null) {
    const back = backwards(r.output.dir);
    try {
      const lw = computeLastWritten(back, r.inputs);
      last = keys.map((k) => lw.positions[k]);
      for (const k of keys) if (lw.foundAt[k] >= 0) output = Math.min(output, lw.foundAt[k]);
    } finally {
      back.close();
    }
  }
  const durable = snapshot ? last.map((p, n) => Math.max(p, snapshot![n])) : last;
  const replaysInputs = r.inputsReplay === 'INPUTS' || r.inputsReplay === 'OUTPUT' || snapshot;
  if (r.inputsReplay === 'OUTPUT' && !snapshot) output = 0;
  if (r.inputsReplay === 'OUTPUT_REVERSE' || r.kvStore) output = 0;
  const inputs: Record<string, number> = {};
  keys.forEach((k, n) => {
    inputs[k] = replaysInputs && !r.kvStore ? (snapshot ? snapshot[n] + 1 : 0) : durable[n] + 1;
  });
  return { inputs, output };
}

/**
 * The lowest index any reader of each partition of `plan` still needs (Infinity: no reader),
 * keyed by inputKey. Reads each reader's output once.
 */
export function queueHolds(plan: QueueRetentionPlan): Map<string, number> {
  const wanted = new Set(plan.partitions.map((p) => inputKey(p.queue, p.partition)));
  const holds = new Map<string, number>();
  const hold = (key: string, index: number) => {
    if (wanted.has(key)) holds.set(key, Math.min(holds.get(key) ?? Infinity, index));
  };
  for (const r of plan.readers) {
    const outKey = inputKey(r.output.queue, 0);
    const readsHeld = r.inputs.some((i) => wanted.has(inputKey(i.queue, i.partition)));
    if (!readsHeld && !wanted.has(outKey)) continue;
    const needs = restartNeeds(r);
    for (const [k, index] of Object.entries(needs.inputs)) hold(k, index);
    hold(outKey, needs.output);
  }
  return holds;
}

/**
 * One retention pass over `plan` (see the module doc). `onStep` is called after each file
 * removed (crash tests). @throws the file system's error (the directory stays consistent: see
 * engine/journal/retention.ts).
 */
export function applyQueueRetention(
  plan: QueueRetentionPlan,
  nowMs = Date.now(),
  onStep?: RetentionStepHook,
): QueueRetentionReport {
  const report: QueueRetentionReport = { segmentsDeleted: 0, orphanIndexesRemoved: 0, held: [] };
  const needHolds = plan.partitions.some((p) => !p.retention.deleteUncommitted);
  const holds = needHolds ? queueHolds(plan) : new Map<string, number>();
  for (const p of plan.partitions) {
    report.orphanIndexesRemoved += removeOrphanIndexes(p.dir);
    const key = inputKey(p.queue, p.partition);
    const hold = p.retention.deleteUncommitted ? Infinity : (holds.get(key) ?? Infinity);
    let held = false;
    const cut = retentionCutoff(p.dir, Infinity, p.retention, nowMs, (next) => {
      held = next > hold;
      return !held;
    });
    if (held) report.held.push(key);
    if (cut < 0) continue;
    report.segmentsDeleted += removeSegmentsBefore(p.dir, cut, Infinity, onStep).length;
  }
  return report;
}
