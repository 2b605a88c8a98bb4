/**
 * Pump core: moves staged rows of one key partition to a sink, claim -> append -> ack, and
 * reconciles after a crash so that a batch appended but not acked is not appended again.
 *
 * After MOVEX CDC's pump: triggers write a staging table, pumps ship and delete. Independent of
 * the journal: the sink is any durable append target that can list the staging ids it holds last.
 *
 * Exactly-once hand-off (cases C2, C3):
 *  1. start(): ids = sink.recentStagingIds(recentIdsMax); ack(ids). Rows the sink already holds
 *     but staging still has (crash between append and ack) are deleted without being appended
 *     again. Staging ids are never reused, so acking an id the sink holds is always right.
 *  2. each cycle: claim(pump, pumps, batchSizeMax) -> sink.appendBatch(rows) (durable when it
 *     returns) -> ack(ids). A failed ack is retried before the next claim, so a batch is never
 *     appended twice by a live pump either.
 * recentIdsMax must cover the last batch of this pump in the sink: default batchSizeMax * pumps
 * (room for a sink shared by all pumps of a source).
 */
import type { StagedChange } from './config.js';
import type { StagingClient } from './staging.js';

/**
 * Durable append target of a pump.
 * - appendBatch: appends `changes` in order; durable when it returns (or its promise resolves);
 *   throws on failure, in which case nothing is acked and the same rows are claimed again.
 * - recentStagingIds: staging ids of the last `limit` records the sink holds (any order).
 */
export interface PumpSink {
  appendBatch(changes: StagedChange[]): void | Promise<void>;
  recentStagingIds(limit: number): Set<string>;
}

/** Fault points a pump honours (tests of crash recovery). `after-append`: SIGKILL itself after append, before ack. */
export type PumpFault = 'after-append' | 'before-append';

/** Environment variable read for the fault point when PumpOptions.fault is not given. */
export const PUMP_FAULT_ENV = 'SLUICE_FAULT';

/**
 * Options of {@link PumpCore}.
 * - pump, pumps: this pump's index i in [0, pumps) and the count N; it owns keyHash(key) % N == i.
 * - batchSizeMax: rows per cycle, >= 1.
 * - recentIdsMax: how many recent sink records start() checks; default batchSizeMax * pumps.
 * - fault: injected crash point; default process.env.SLUICE_FAULT, none when unset.
 */
export interface PumpOptions {
  staging: StagingClient;
  sink: PumpSink;
  pump: number;
  pumps: number;
  batchSizeMax: number;
  recentIdsMax?: number;
  fault?: PumpFault | null;
}

/** Counters of one pump, cumulative since construction. */
export interface PumpStats {
  /** Rows appended to the sink and acked. */
  shipped: number;
  /** Rows found still staged at start() although the sink held them (crash recovery). */
  reconciled: number;
  /** Cycles run (including empty ones). */
  cycles: number;
}

/**
 * One pump: start() once, then runCycle() repeatedly (or run() for a polling loop).
 * Not reentrant: await each call before the next. Errors from the staging client or the sink
 * propagate; the pump can be retried with runCycle() (a pending ack is retried first).
 */
export class PumpCore {
  readonly stats: PumpStats = { shipped: 0, reconciled: 0, cycles: 0 };
  private readonly opts: Required<Omit<PumpOptions, 'fault'>> & { fault: PumpFault | null };
  private pendingAck: string[] | null = null;
  private started = false;

  constructor(options: PumpOptions) {
    const { pump, pumps, batchSizeMax } = options;
    if (!Number.isInteger(pumps) || pumps < 1) throw new Error(`pumps must be an integer >= 1, pumps=${pumps}`);
    if (!Number.isInteger(pump) || pump < 0 || pump >= pumps) throw new Error(`pump must be in [0, pumps), pump=${pump}, pumps=${pumps}`);
    if (!Number.isInteger(batchSizeMax) || batchSizeMax < 1) throw new Error(`batchSizeMax must be an integer >= 1, batchSizeMax=${batchSizeMax}`);
    const recentIdsMax = options.recentIdsMax ?? batchSizeMax * pumps;
    if (!Number.isInteger(recentIdsMax) || recentIdsMax < batchSizeMax) {
      throw new Error(`recentIdsMax must be an integer >= batchSizeMax, recentIdsMax=${recentIdsMax}, batchSizeMax=${batchSizeMax}`);
    }
    const fault = options.fault !== undefined ? options.fault : parseFault(process.env[PUMP_FAULT_ENV]);
    this.opts = { ...options, recentIdsMax, fault };
  }

  /**
   * Crash reconciliation: acks every staged row whose id the sink already holds among its last
   * recentIdsMax records. Returns how many staged rows that removed. Call once before cycles.
   */
  async start(): Promise<number> {
    const recent = this.opts.sink.recentStagingIds(this.opts.recentIdsMax);
    const n = recent.size > 0 ? await this.opts.staging.ack([...recent]) : 0;
    this.stats.reconciled += n;
    this.started = true;
    return n;
  }

  /** One claim -> appendBatch -> ack. Returns the number of rows shipped (0 when none staged). */
  async runCycle(): Promise<number> {
    if (!this.started) throw new Error('PumpCore.start() must complete before runCycle()');
    const { staging, sink, pump, pumps, batchSizeMax, fault } = this.opts;
    this.stats.cycles++;
    if (this.pendingAck !== null) {
      await staging.ack(this.pendingAck);
      this.pendingAck = null;
    }
    const rows = await staging.claim(pump, pumps, batchSizeMax);
    if (rows.length === 0) return 0;
    if (fault === 'before-append') process.kill(process.pid, 'SIGKILL');
    await sink.appendBatch(rows);
    if (fault === 'after-append') process.kill(process.pid, 'SIGKILL');
    this.pendingAck = rows.map((r) => r.stagingId);
    await staging.ack(this.pendingAck);
    this.pendingAck = null;
    this.stats.shipped += rows.length;
    return rows.length;
  }

  /**
   * Runs start() (if not yet run) then cycles until `signal` aborts; after a cycle that shipped
   * less than a full batch it waits pollIntervalMs (woken early by abort). Resolves with the stats.
   */
  async run(signal: AbortSignal, pollIntervalMs: number): Promise<PumpStats> {
    if (!Number.isFinite(pollIntervalMs) || pollIntervalMs < 0) throw new Error(`pollIntervalMs must be >= 0, pollIntervalMs=${pollIntervalMs}`);
    if (!this.started) await this.start();
    while (!signal.aborted) {
      const n = await this.runCycle();
      if (n < this.opts.batchSizeMax) await sleep(pollIntervalMs, signal);
    }
    return this.stats;
  }
}

/** Other modules share SLUICE_FAULT with their own fault names, so unknown values mean "no pump fault". */
function parseFault(value: string | undefined): PumpFault | null {
  return value === 'after-append' || value === 'before-append' ? value : null;
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
  });
}
