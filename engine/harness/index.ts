/**
 * The benchmark harness users run on their own topology (`sluice bench <topology.yaml>`): it
 * starts the topology on a scratch data directory (never the topology's own), generates input
 * into its source queues (queues some service reads and no service or capture source writes)
 * at a given rate or as fast as possible, samples every actor while it runs, waits until the
 * services have caught up, stops the topology and reports per actor: events/s, lag p50/p99/
 * p99.9 (of the sampled lag), parks, restarts and CPU time.
 *
 * Why not the `benchmark` package: it times a function in one thread over many cycles; here the
 * work runs in several worker threads at once and what matters is their joint rate and lag, so
 * the harness measures wall time and counters itself (see bench/README.md).
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Worker } from 'node:worker_threads';
import * as hdr from 'hdr-histogram-js';
import type { Topology } from '../config/index.js';
import type { ActorInfo } from '../supervisor/index.js';
import type { GeneratorData } from './workload.js';

export { keyChooser, prng, recordMaker, type GeneratorData } from './workload.js';

/** Options of {@link runBench}; defaults in {@link BENCH_DEFAULTS}. */
export interface BenchOptions {
  /** Records per second in all (split evenly over the source queues); 0 = as fast as possible. */
  ratePerSecond: number;
  /** How long input is generated, ms. */
  durationMs: number;
  /** Approximate JSON size of a synthetic record, bytes. */
  recordBytes: number;
  /** Distinct keys. */
  keys: number;
  /** Zipf exponent of the key distribution; 0 = uniform. */
  skew: number;
  seed: number;
  /** A JSON value used as every record's value ("$key", "$seq", "$ts" replaced); null: synthetic. */
  template: unknown;
  /** Source queues to feed; default every source queue of the topology. */
  queues: string[] | null;
  /** Time between two samples of the actors, ms. */
  sampleIntervalMs: number;
  /** Longest wait for the services to catch up after the input ends, ms. */
  catchUpTimeoutMs: number;
  /** Scratch data directory (must not exist or be empty); default a new temporary one, removed after. */
  dataDir: string | null;
  /** Receives the topology's log lines; default: dropped. */
  log: (line: string) => void;
}

/** Defaults of {@link BenchOptions}. */
export const BENCH_DEFAULTS: BenchOptions = {
  ratePerSecond: 0,
  durationMs: 10_000,
  recordBytes: 100,
  keys: 1000,
  skew: 0,
  seed: 1,
  template: null,
  queues: null,
  sampleIntervalMs: 250,
  catchUpTimeoutMs: 60_000,
  dataDir: null,
  log: () => {},
};

/** Percentiles of one actor's sampled lag, ms (0 when never sampled). */
export interface LagPercentiles {
  p50: number;
  p99: number;
  p999: number;
  max: number;
}

/** One row of the report. */
export interface ActorBenchRow {
  actor: string;
  eventsIn: number;
  eventsOut: number;
  /** max(eventsIn, eventsOut) per second of the measured time. */
  eventsPerSecond: number;
  /** Distribution of the actor's largest input lag over the samples (services and readers). */
  lagMs: LagPercentiles;
  /** Largest input lag seen, records. */
  lagRecordsMax: number;
  /** Times the actor parked because it had no work or no room (its `waits` counter). */
  parks: number;
  restarts: number;
  /**
   * CPU time of the actor's thread (user + system, from /proc/self/task/<tid>/stat) from the
   * first sample that saw it until the end, ms; null if unknown (not Linux, or restarted).
   */
  cpuMs: number | null;
}

/** What {@link runBench} returns. */
export interface BenchReport {
  topology: string;
  /** Measured time: from the first generated record until the services caught up, ms. */
  elapsedMs: number;
  /** False when the services had not caught up within catchUpTimeoutMs. */
  caughtUp: boolean;
  input: {
    queues: string[];
    records: number;
    bytes: number;
    /** Time the generators ran, ms (the rest of elapsedMs is the catch-up). */
    generationMs: number;
    /** Records per second of generation time. */
    recordsPerSecond: number;
    generatorCpuMs: number | null;
  };
  actors: ActorBenchRow[];
  machine: { cpus: number; model: string; loadAverage1m: number; node: string };
  options: Omit<BenchOptions, 'log' | 'template'> & { template: boolean };
}

/**
 * Source queues: read by a service, written by no service, no capture source and no timer (a
 * service's `settings.timerQueue`, which the runtime appends to).
 */
export function sourceQueues(t: Topology): string[] {
  const written = new Set<string>([
    ...t.services.flatMap((s) =>
      typeof s.settings.timerQueue === 'string' ? [s.settings.timerQueue] : [],
    ),
    ...t.services.map((s) => s.output),
    ...t.services.map((s) => s.errors.deadLetterQueue),
    ...t.capture.flatMap((c) => c.tables.map((x) => x.target)),
  ]);
  const read = new Set(t.services.flatMap((s) => s.inputs));
  return t.queues.map((q) => q.name).filter((q) => read.has(q) && !written.has(q));
}

let clockTicks = 0;
/** CPU time (user + system) of thread `tid` of this process, ms; null where /proc lacks it. */
function threadCpuMs(tid: number): number | null {
  if (!tid) return null;
  try {
    if (clockTicks === 0) {
      try {
        clockTicks =
          Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
      } catch {
        clockTicks = 100;
      }
    }
    const stat = readFileSync(`/proc/self/task/${tid}/stat`, 'utf8');
    // Fields after the command name (which may hold spaces, in parentheses): utime is the 14th field.
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return ((Number(f[11]) + Number(f[12])) * 1000) / clockTicks;
  } catch {
    return null;
  }
}

/**
 * Runs the benchmark. The topology's services and capture sources run as configured (capture
 * reads whatever the user writes into its database meanwhile); the harness feeds only queues.
 * @throws Error when `options.queues` names a queue that is not a source queue, or the topology
 *   has no source queue to feed; errors of startTopology (modules, capture not installed).
 */
export async function runBench(
  topology: Topology,
  options: Partial<BenchOptions> = {},
): Promise<BenchReport> {
  const o: BenchOptions = { ...BENCH_DEFAULTS, ...options };
  const sources = sourceQueues(topology);
  const queues = o.queues ?? sources;
  for (const q of queues) {
    if (!sources.includes(q))
      throw new Error(
        `bench: queue "${q}" is not a source queue of ${topology.file} (sources: ${sources.join(', ') || 'none'})`,
      );
  }
  if (queues.length === 0)
    throw new Error(
      `bench: ${topology.file} has no source queue to feed (a queue some service reads and no service or capture source writes)`,
    );
  const ownDir = o.dataDir === null;
  const dataDir =
    o.dataDir ?? mkdtempSync(path.join(os.tmpdir(), `sluice-bench-${topology.name}-`));
  const t: Topology = { ...topology, dataDir };
  // Imported here: index.ts imports this module's types through the CLI only.
  const { startTopology } = await import('../../index.js');
  const running = await startTopology(t, { log: o.log });
  const stop = new SharedArrayBuffer(4);
  const histograms = new Map<string, hdr.Histogram>();
  const lagRecordsMax = new Map<string, number>();
  let sampler: NodeJS.Timeout | null = null;
  try {
    // CPU baselines: an actor's thread id is known once its worker has started (a reader may
    // still be starting when startTopology resolves), so each is taken at the first sight of it.
    const cpuBase = new Map<string, { startedMs: number; cpuMs: number }>();
    const baseCpu = (): void => {
      for (const a of running.supervisor.actors()) {
        const b = cpuBase.get(a.name);
        if (b !== undefined && b.startedMs === a.startedMs) continue;
        const cpuMs = threadCpuMs(a.counters.threadId);
        if (cpuMs !== null) cpuBase.set(a.name, { startedMs: a.startedMs, cpuMs });
      }
    };
    const sampleLag = (): boolean => {
      baseCpu();
      let behind = false;
      for (const s of running.ops.sampler.statuses()) {
        if (s.inputs.length === 0) continue;
        let lagMs = 0;
        let lagRecords = 0;
        for (const l of s.inputs) {
          lagMs = Math.max(lagMs, l.lagMs);
          lagRecords = Math.max(lagRecords, l.lagRecords);
        }
        if (lagRecords > 0) behind = true;
        let h = histograms.get(s.name);
        if (!h)
          histograms.set(
            s.name,
            (h = hdr.build({
              lowestDiscernibleValue: 1,
              highestTrackableValue: 3_600_000,
              numberOfSignificantValueDigits: 3,
            })),
          );
        h.recordValue(Math.min(3_600_000, Math.max(1, Math.round(lagMs))));
        lagRecordsMax.set(s.name, Math.max(lagRecordsMax.get(s.name) ?? 0, lagRecords));
      }
      return behind;
    };
    const before = new Map<string, ActorInfo>();
    for (const a of running.supervisor.actors()) before.set(a.name, a);
    baseCpu();
    const startMs = Date.now();
    sampler = setInterval(sampleLag, o.sampleIntervalMs);
    const perQueue = o.ratePerSecond > 0 ? o.ratePerSecond / queues.length : 0;
    const generated = await Promise.all(
      queues.map(
        (queue, i) =>
          new Promise<{ records: number; bytes: number; threadId: number }>((resolve, reject) => {
            const data: GeneratorData = {
              topology: t,
              queue,
              ratePerSecond: perQueue,
              durationMs: o.durationMs,
              recordBytes: o.recordBytes,
              keys: o.keys,
              skew: o.skew,
              seed: o.seed + i,
              template: o.template,
              stop,
            };
            const w = new Worker(new URL('./generator.worker.js', import.meta.url), {
              workerData: data,
            });
            let done: { records: number; bytes: number; threadId: number } | null = null;
            let cpuMs = 0;
            w.on(
              'message',
              (m: { type: string; records: number; bytes: number; threadId: number }) => {
                if (m.type !== 'done') return;
                done = m;
                cpuMs = threadCpuMs(m.threadId) ?? 0;
                (done as { cpuMs?: number }).cpuMs = cpuMs;
              },
            );
            w.on('error', reject);
            w.on('exit', (code) =>
              done
                ? resolve(done)
                : reject(new Error(`bench: the generator of "${queue}" exited with code ${code}`)),
            );
          }),
      ),
    );
    const generationMs = Math.max(1, Date.now() - startMs);
    // Caught up: every input partition handled to its end, seen twice in a row.
    let caughtUp = false;
    const deadline = Date.now() + o.catchUpTimeoutMs;
    let calm = 0;
    while (Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, Math.min(50, o.sampleIntervalMs)));
      if (sampleLag()) calm = 0;
      else if (++calm >= 2) {
        caughtUp = true;
        break;
      }
    }
    const endMs = Date.now();
    clearInterval(sampler);
    sampler = null;
    const elapsedMs = Math.max(1, endMs - startMs);
    const rows: ActorBenchRow[] = running.supervisor.actors().map((a) => {
      const b = before.get(a.name);
      const same = b !== undefined && b.startedMs === a.startedMs;
      const eventsIn = a.counters.eventsIn - (same ? b.counters.eventsIn : 0);
      const eventsOut = a.counters.eventsOut - (same ? b.counters.eventsOut : 0);
      const cpuNow = threadCpuMs(a.counters.threadId);
      const cpuThen = cpuBase.get(a.name);
      const h = histograms.get(a.name);
      return {
        actor: a.name,
        eventsIn,
        eventsOut,
        eventsPerSecond: Math.round((Math.max(eventsIn, eventsOut) * 1000) / elapsedMs),
        lagMs: h
          ? {
              p50: h.getValueAtPercentile(50),
              p99: h.getValueAtPercentile(99),
              p999: h.getValueAtPercentile(99.9),
              max: h.maxValue,
            }
          : { p50: 0, p99: 0, p999: 0, max: 0 },
        lagRecordsMax: lagRecordsMax.get(a.name) ?? 0,
        parks: a.counters.waits - (same ? b.counters.waits : 0),
        restarts: a.restarts,
        cpuMs:
          cpuNow !== null && cpuThen !== undefined && cpuThen.startedMs === a.startedMs
            ? Math.round(cpuNow - cpuThen.cpuMs)
            : null,
      };
    });
    const records = generated.reduce((n, g) => n + g.records, 0);
    const genCpu = generated.map((g) => (g as { cpuMs?: number }).cpuMs ?? 0);
    const { log: _log, template, ...rest } = o;
    return {
      topology: topology.name,
      elapsedMs,
      caughtUp,
      input: {
        queues,
        records,
        bytes: generated.reduce((n, g) => n + g.bytes, 0),
        generationMs,
        recordsPerSecond: Math.round((records * 1000) / generationMs),
        generatorCpuMs: genCpu.every((c) => c > 0)
          ? Math.round(genCpu.reduce((a, c) => a + c, 0))
          : null,
      },
      actors: rows,
      machine: {
        cpus: os.cpus().length,
        model: os.cpus()[0]?.model ?? 'unknown',
        loadAverage1m: os.loadavg()[0]!,
        node: process.version,
      },
      options: { ...rest, template: template !== null },
    };
  } finally {
    if (sampler) clearInterval(sampler);
    Atomics.store(new Int32Array(stop), 0, 1);
    await running.stop();
    for (const h of histograms.values()) h.destroy();
    if (ownDir) rmSync(dataDir, { recursive: true, force: true });
  }
}

/** The report as a fixed-width table, one line per actor, for a terminal. */
export function formatBenchReport(r: BenchReport): string {
  const lines: string[] = [];
  lines.push(
    `${r.topology}: ${r.input.records} records generated into ${r.input.queues.join(', ')} in ${(r.input.generationMs / 1000).toFixed(1)} s (${r.input.recordsPerSecond} records/s); ${r.caughtUp ? `caught up after ${(r.elapsedMs / 1000).toFixed(1)} s` : 'NOT caught up: the services were still behind when the harness stopped waiting'}; events/s below are over those ${(r.elapsedMs / 1000).toFixed(1)} s`,
  );
  lines.push(
    `machine: ${r.machine.cpus} cpus (${r.machine.model}), load ${r.machine.loadAverage1m.toFixed(1)}, node ${r.machine.node}`,
  );
  const head = [
    'actor',
    'events/s',
    'in',
    'out',
    'lag p50',
    'p99',
    'p99.9 ms',
    'lag rec',
    'parks',
    'restarts',
    'cpu ms',
  ];
  const rows = r.actors.map((a) => [
    a.actor,
    String(a.eventsPerSecond),
    String(a.eventsIn),
    String(a.eventsOut),
    String(a.lagMs.p50),
    String(a.lagMs.p99),
    String(a.lagMs.p999),
    String(a.lagRecordsMax),
    String(a.parks),
    String(a.restarts),
    a.cpuMs === null ? '-' : String(a.cpuMs),
  ]);
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i]!.length)));
  const fmt = (cells: string[]) =>
    cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ');
  lines.push(fmt(head));
  for (const row of rows) lines.push(fmt(row));
  if (r.input.generatorCpuMs !== null) lines.push(`generator cpu: ${r.input.generatorCpuMs} ms`);
  return lines.join('\n');
}
