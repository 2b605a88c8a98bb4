/**
 * Pump core: moves staged rows of one key partition to a sink, claim -> append -> ack, and
 * reconciles after a crash so that a batch appended but not acked is not appended again.
 *
 * After MOVEX CDC's pump: triggers write a staging table, pumps ship and delete. Independent of
 * the journal: the sink is any durable append target that can list the staging ids it holds last.
 *
 * Exactly-once hand-off (cases C2, C3):
 *  1. start(): ids = sink.recentStagingIds(recentIdsMax, installationId); ack(ids). Rows the
 *     sink already holds but staging still has (crash between append and ack) are deleted
 *     without being appended again. Staging ids are never reused within one installation (a
 *     staging table created again starts at 1: engine/cdc/staging.ts "Installation id"), and the
 *     sink returns only ids of records stamped with the current installation id, so acking an id
 *     it returns is always right. Without an installation id (capture installed by an older
 *     version) nothing is acked: a batch appended just before the crash is appended again.
 *  2. each cycle: claim(pump, pumps, batchSizeMax) -> sink.appendBatch(rows) (durable when it
 *     returns) -> ack(ids). A failed ack is retried before the next claim, so a batch is never
 *     appended twice by a live pump either.
 * recentIdsMax must cover the last batch of this pump in the sink: default batchSizeMax * pumps
 * (room for a sink shared by all pumps of a source).
 *
 * Refused changes (cases C4, C10; after MOVEX CDC's divide and conquer and error table):
 *  3. a sink that refuses a batch for its content throws RecordRefusedError. The pump splits the
 *     batch in halves and appends each (recursively) until the refused changes are single; the
 *     rest is appended in staging-id order. Any other error is an outage: the cycle throws and
 *     nothing is split (shipped halves are acked first). With a sink without sync() each append
 *     is durable when it returns, and the halves appended so far are acked before the next
 *     append (Shipment), so a split batch, too, leaves at most its last append unacked: a sink
 *     that reconciles against its last append only (Kafka: its newest transaction, each half one
 *     transaction) finds everything a crash left unacked. Acked only at the cycle's end, a kill -9
 *     after the last half re-shipped every earlier one (test/cdc-split-crash). Widening the
 *     reconciliation instead would need the Kafka sink to find several transactions per pump,
 *     whose offsets the reconciliation group no longer holds (each commit overwrites them in
 *     the partitions it writes), and a way to tell which of them are still unacked; the
 *     extra acks cost one staging round trip per further append, and only batches that split pay.
 *     A sink with sync() reconciles a window of staged changes that covers the whole batch
 *     (engine/cdc/journal-sink.ts), so its halves are acked with the batch, after one sync().
 *  4. a single refused change is tried errors.retriesImmediate more times at once; still refused,
 *     its round count `attempts` is incremented in staging with next_attempt_ms =
 *     now + min(retryDelayMs * 2^(attempts-1), retryDelayMaxMs), and its key is held: no later
 *     change of that key is claimed until the retry is due (claim's excludeKeys), so one key's
 *     changes keep their order while other keys flow.
 *  5. after errors.attemptsMax rounds the change is parked in the error table with the refusal
 *     text. With errors.holdKeyWhenParked (default) its key stays held until the change is
 *     requeued (back into staging under its own id, so still ahead of its key's later changes)
 *     or purged; the pump re-reads the parked keys every CDC_DEFAULTS.parkedRefreshMs.
 *  6. pump 0 deletes parked changes older than errors.retentionMs (holding period).
 *
 * Pipelined claim: with a sink that has sync() and a staging client whose claim skips given ids
 * (StagingClient.claimSkipsIds), a cycle appends its batch, then claims the next batch while the
 * sink makes the first durable, skipping the ids just appended (still staged until the ack), and
 * acks once sync() resolves. The invariant is unchanged: a row is deleted only after its append
 * is durable; at most one batch is appended and not acked (recentIdsMax still covers it); the
 * next batch is appended after the previous one, so each key keeps its order. A failed sync acks
 * nothing (the restart's reconciliation finds what reached the sink). The claimed batch is kept
 * for the next cycle, or dropped (still staged) when that cycle runs an initial-load chunk; an
 * empty one is not kept, so a cycle that returns 0 claimed after everything committed before it
 * began (the drain of a stopping topology relies on that).
 *
 * Initial loads (engine/cdc/initial-load.ts): while a table's load is requested, a cycle claims
 * in the same read snapshot as it selects the table's next chunk, ships the claimed changes,
 * then the chunk's rows of this pump's keys as read events (not those of held keys), acks, and
 * stores the chunk's cursor with the rows it skipped (held keys; refused by the target). With a
 * sink without sync() the changes are acked before the read events are appended: such a sink may
 * reconcile against its last batch only (Kafka).
 */
import { CDC_DEFAULTS, resolveErrorPolicy } from './config.js';
import type { CaptureErrorPolicy, StagedChange } from './config.js';
import type { StagingClient } from './staging.js';
import { PumpLoader } from './initial-load.js';
import type { LoadTask } from './initial-load.js';

/**
 * The changes one cycle appended, in staging-id order. Without sink.sync() the first `acked`
 * of them are acked and passed to onDurable already (before a later append: point 3); with
 * sync() `acked` stays 0 and the cycle acks them all after its sync.
 */
interface Shipment {
  rows: StagedChange[];
  acked: number;
}

/**
 * Thrown by a PumpSink whose target refuses the batch for its content (a record over the size
 * limit, a schema violation): the pump divides the batch to find the refused changes. Nothing of
 * the batch may have been appended when it is thrown.
 */
export class RecordRefusedError extends Error {
  override readonly name = 'RecordRefusedError';
}

/**
 * Durable append target of a pump.
 * - appendBatch: appends `changes` in order; durable when it returns (or its promise resolves);
 *   throws on failure, in which case nothing is acked and the same rows are claimed again.
 * - recentStagingIds: staging ids of those of the last `limit` records the sink holds (any
 *   order) that carry installation id `installationId`; a record of another installation or
 *   without one must not be returned. A sink that knows its last appendBatch exactly (Kafka:
 *   engine/cdc/kafka-sink.ts) may return that append's only when it has no sync(): the pump then
 *   acks every append before the next one, a refused batch's halves included (module comment,
 *   point 3). Called once at each start, before any appendBatch: every record the sink appends
 *   afterwards carries `installationId` (the Change's `installation`, JSON
 *   `source.installation`, Kafka header `sluice.installation`); '' means none is installed
 *   (records carry none, and the pump ignores what this returns).
 */
export interface PumpSink {
  appendBatch(changes: StagedChange[]): void | Promise<void>;
  recentStagingIds(limit: number, installationId: string): Set<string> | Promise<Set<string>>;
  /**
   * Optional. A sink with sync() may let appendBatch return once the records are written in
   * order (a later append lands after them) but before they are durable; sync() resolves once
   * everything appended so far is durable, and rejects if that failed (then nothing appended
   * since the last resolved sync may be assumed durable). The pump awaits it before deleting
   * the rows from staging, and claims its next batch meanwhile ("Pipelined claim" above).
   */
  sync?(): Promise<void>;
}

/**
 * Tells an outage of a pump's target from one of its source by where the call failed: the
 * errors thrown by the calls of a sink wrapped with {@link SinkFailures.watch} are remembered (by
 * identity, the error passes through unchanged), so `isTarget(err)` is true for an error of the
 * target (the Kafka brokers, the bus, the journal) and false for one of the staging client (the
 * capture source's database), whatever its text says. A thrown value that is not an object is
 * thrown as an Error of its text, so it can be remembered too.
 */
export class SinkFailures {
  private readonly seen = new WeakSet<object>();

  /** `sink` with each failure of appendBatch, recentStagingIds and sync remembered. */
  watch(sink: PumpSink): PumpSink {
    const fail = (err: unknown): never => {
      throw this.mark(err);
    };
    // Each call's own kind (a value or a promise) is kept: the journal sink appends synchronously.
    const guarded = <A extends unknown[], R>(call: (...a: A) => R) =>
      ((...a: A): R => {
        let r: R;
        try {
          r = call(...a);
        } catch (err) {
          return fail(err);
        }
        return r instanceof Promise ? (r.catch(fail) as R) : r;
      }) as (...a: A) => R;
    const watched: PumpSink = {
      appendBatch: guarded(sink.appendBatch.bind(sink)),
      recentStagingIds: guarded(sink.recentStagingIds.bind(sink)),
    };
    if (sink.sync !== undefined) watched.sync = guarded(sink.sync.bind(sink));
    return watched;
  }

  /**
   * Remembers `err` as a failure of the target (an error of the actor's own target code outside
   * the sink's calls: opening the journal appenders). @returns the error to throw.
   */
  mark(err: unknown): Error {
    const e = err instanceof Error ? err : new Error(String(err));
    this.seen.add(e);
    return e;
  }

  /** True when `err` was thrown by a watched sink's call (or marked). */
  isTarget(err: unknown): boolean {
    return typeof err === 'object' && err !== null && this.seen.has(err);
  }
}

/**
 * Fault points a pump honours (tests of crash recovery). `after-append`: SIGKILL itself after
 * append, before ack. `hang-after-append`: after the first append that shipped rows, never ack
 * and never return (the pump's thread stays busy until it is terminated: a pump retired at
 * runtime with a batch appended but not acked, actors/pump-count.ts).
 */
export type PumpFault = 'after-append' | 'before-append' | 'hang-after-append';

/** Environment variable read for the fault point when PumpOptions.fault is not given. */
export const PUMP_FAULT_ENV = 'SLUICE_FAULT';

/**
 * Options of {@link PumpCore}.
 * - pump, pumps: this pump's index i in [0, pumps) and the count N; it owns keyHash(key) % N == i.
 * - batchSizeMax: rows per cycle, >= 1.
 * - recentIdsMax: how many recent sink records start() checks; default batchSizeMax * pumps.
 * - fault: injected crash point; default process.env.SLUICE_FAULT, none when unset.
 * - errors: refusal policy; default staging.source's, resolved (CDC_DEFAULTS.errors).
 * - clock: ms since the epoch; default Date.now (tests move time).
 * - loadChunkRows: table rows per initial-load chunk; default CDC_DEFAULTS.loadChunkRows.
 * - onDurable: called with the staged changes of each batch once their append is durable (the
 *   sink's appendBatch returned, and with sync() once it resolved), before they are acked (a
 *   refused batch split without sync(): once per group of halves acked together, point 3); the
 *   per-table shipped figures of the statistics (ops/stats.ts) come from it. Each change is
 *   passed once by the pump that appended it: a change found in the sink by start()'s
 *   reconciliation is not passed again (its appender passed it, unless that pump's thread was
 *   ended between the append becoming durable and the call: killed, terminated), and read
 *   events of initial loads are not passed (they are not staged changes). Must not throw.
 */
export interface PumpOptions {
  staging: StagingClient;
  sink: PumpSink;
  pump: number;
  pumps: number;
  batchSizeMax: number;
  recentIdsMax?: number;
  fault?: PumpFault | null;
  errors?: CaptureErrorPolicy;
  clock?: () => number;
  loadChunkRows?: number;
  onDurable?: (changes: readonly StagedChange[]) => void;
}

/** Counters of one pump, cumulative since construction. */
export interface PumpStats {
  /** Rows appended to the sink and acked. */
  shipped: number;
  /** Rows found still staged at start() although the sink held them (crash recovery). */
  reconciled: number;
  /** Cycles run (including empty ones). */
  cycles: number;
  /** Batches the sink refused (each split or retried). */
  refusals: number;
  /** Delayed retries scheduled (a refused change's round failed). */
  retriesDelayed: number;
  /** Changes moved to the error table. */
  parked: number;
  /** Parked changes deleted after errors.retentionMs. */
  expired: number;
  /** Read events of initial loads appended. */
  loaded: number;
  /** Rows of initial loads the target refused (skipped, not parked: the row has no staging id). */
  readsRefused: number;
}

/**
 * One pump: start() once, then runCycle() repeatedly (or run() for a polling loop).
 * Not reentrant: await each call before the next. Errors from the staging client or the sink
 * propagate; the pump can be retried with runCycle() (a pending ack is retried first).
 */
export class PumpCore {
  readonly stats: PumpStats = {
    shipped: 0,
    reconciled: 0,
    cycles: 0,
    refusals: 0,
    retriesDelayed: 0,
    parked: 0,
    expired: 0,
    loaded: 0,
    readsRefused: 0,
  };
  private readonly opts: Required<Omit<PumpOptions, 'fault' | 'loadChunkRows' | 'onDurable'>> & {
    fault: PumpFault | null;
    onDurable: (changes: readonly StagedChange[]) => void;
  };
  private readonly loader: PumpLoader | null;
  private pendingAck: string[] | null = null;
  /** The next batch, claimed while the previous one was synced (pipelined claim), or null. */
  private prefetched: StagedChange[] | null = null;
  private started = false;
  /** Key -> next_attempt_ms of its refused head change. */
  private retrying = new Map<string, number>();
  /** Keys with a parked change (only kept when errors.holdKeyWhenParked). */
  private parked = new Set<string>();
  private parkedReadMs = 0;
  private retentionCheckedMs = 0;
  private installation = '';

  constructor(options: PumpOptions) {
    const { pump, pumps, batchSizeMax } = options;
    if (!Number.isInteger(pumps) || pumps < 1)
      throw new Error(`pumps must be an integer >= 1, pumps=${pumps}`);
    if (!Number.isInteger(pump) || pump < 0 || pump >= pumps)
      throw new Error(`pump must be in [0, pumps), pump=${pump}, pumps=${pumps}`);
    if (!Number.isInteger(batchSizeMax) || batchSizeMax < 1)
      throw new Error(`batchSizeMax must be an integer >= 1, batchSizeMax=${batchSizeMax}`);
    const recentIdsMax = options.recentIdsMax ?? batchSizeMax * pumps;
    if (!Number.isInteger(recentIdsMax) || recentIdsMax < batchSizeMax) {
      throw new Error(
        `recentIdsMax must be an integer >= batchSizeMax, recentIdsMax=${recentIdsMax}, batchSizeMax=${batchSizeMax}`,
      );
    }
    const fault =
      options.fault !== undefined ? options.fault : parseFault(process.env[PUMP_FAULT_ENV]);
    const errors = options.errors ?? resolveErrorPolicy(options.staging.source);
    this.opts = {
      ...options,
      recentIdsMax,
      fault,
      errors,
      clock: options.clock ?? Date.now,
      onDurable: options.onDurable ?? (() => undefined),
    };
    this.loader =
      options.staging.load === undefined
        ? null
        : new PumpLoader(
            options.staging,
            pump,
            pumps,
            options.loadChunkRows ?? CDC_DEFAULTS.loadChunkRows,
            this.opts.clock,
          );
  }

  /** The installation id start() read from staging ('' before start or when none is installed). */
  get installationId(): string {
    return this.installation;
  }

  /** Keys this pump holds back now: refused changes waiting for a retry, and parked keys. */
  heldKeys(): { retrying: ReadonlyMap<string, number>; parked: ReadonlySet<string> } {
    return { retrying: this.retrying, parked: this.parked };
  }

  /**
   * Crash reconciliation: acks every staged row whose id the sink already holds among its last
   * recentIdsMax records of the current installation. Returns how many staged rows that removed.
   * Call once before cycles.
   */
  async start(): Promise<number> {
    const installation = await this.opts.staging.installationId();
    this.installation = installation;
    // Called even without an installation id: a sink (re)opens its target here (Kafka: fences).
    const inSink = await this.opts.sink.recentStagingIds(this.opts.recentIdsMax, installation);
    // Without an installation id a record's staging id may be another installation's: no match.
    // Read events of initial loads carry no staging id ("").
    const recent = installation === '' ? [] : [...inSink].filter((id) => /^[0-9]+$/.test(id));
    const n = recent.length > 0 ? await this.opts.staging.ack(recent) : 0;
    this.stats.reconciled += n;
    const held = await this.opts.staging.heldKeys(this.opts.pump, this.opts.pumps);
    this.retrying = held.retrying;
    // Unkeyed retries are tracked per staging id in memory only: after a restart they are due.
    this.retrying.delete(NO_KEY);
    this.parked = this.opts.errors.holdKeyWhenParked ? held.parked : new Set();
    this.parkedReadMs = this.opts.clock();
    this.started = true;
    return n;
  }

  /**
   * One claim -> appendBatch (divided on refusal) -> ack. Returns the number of rows shipped
   * (0 when none staged or all refused).
   */
  async runCycle(): Promise<number> {
    if (!this.started) throw new Error('PumpCore.start() must complete before runCycle()');
    const { staging, sink, pump, pumps, batchSizeMax, fault } = this.opts;
    this.stats.cycles++;
    if (this.pendingAck !== null) {
      await staging.ack(this.pendingAck);
      this.pendingAck = null;
    }
    await this.housekeeping();
    const prefetched = this.prefetched;
    this.prefetched = null;
    if (this.loader !== null) {
      const task = await this.loader.current();
      if (task !== null) return this.loadCycle(this.loader, task);
    }
    const now = this.opts.clock();
    // Unkeyed changes (key strategy none) waiting for a retry are claimed but not shipped yet.
    const rows = (
      prefetched ?? (await staging.claim(pump, pumps, batchSizeMax, this.excluded()))
    ).filter((r) => r.key !== NO_KEY || !((this.retrying.get(orderKey(r)) ?? 0) > now));
    if (rows.length === 0) return 0;
    if (fault === 'before-append') process.kill(process.pid, 'SIGKILL');
    const shipment: Shipment = { rows: [], acked: 0 };
    const sync = sink.sync?.bind(sink);
    try {
      await this.ship(rows, new Set(), shipment);
    } catch (err) {
      await this.keepAckAfterOutage(shipment);
      throw err;
    }
    // Not acked yet: everything with sync(), else what the last append shipped (point 3).
    const shipped = shipment.rows.slice(shipment.acked);
    const ids = shipped.map((r) => r.stagingId);
    if (sync !== undefined && ids.length > 0) {
      const durable = sync();
      // Not awaited yet: a rejection is handled below.
      durable.catch(() => undefined);
      if (staging.claimSkipsIds === true) {
        try {
          const next = await staging.claim(pump, pumps, batchSizeMax, this.excluded(), ids);
          // An empty claim is not kept: it predates the sync, and the next cycle's 0 must mean
          // "nothing staged when that cycle began" (a drain stops on it).
          this.prefetched = next.length > 0 ? next : null;
        } catch (err) {
          // An outage: settle the sync first (its failure, if any, must not go unobserved).
          // Once durable the batch is acked next (or by a restart's reconciliation) and counted
          // now; sync() is not called again (a second call would not see the first's failure).
          const synced = await durable.then(
            () => true,
            () => false,
          );
          if (synced) {
            this.pendingAck = ids;
            this.opts.onDurable(shipped);
          }
          throw err;
        }
      }
      // A failed sync acks nothing: the restart reconciles against what reached the sink.
      await durable;
      this.pendingAck = ids;
    }
    if (ids.length > 0) this.opts.onDurable(shipped);
    const appended = shipment.rows.length;
    if (fault === 'after-append' && appended > 0) process.kill(process.pid, 'SIGKILL');
    if (fault === 'hang-after-append' && appended > 0) await new Promise(() => undefined);
    await staging.ack(ids);
    this.pendingAck = null;
    this.stats.shipped += ids.length;
    return appended;
  }

  /**
   * After an outage error while shipping: the changes appended before it and not acked yet (of
   * `shipment`) must be acked, never appended again, so their staging ids become the pending
   * ack, and they are durable (onDurable); with a sink that syncs separately, only once synced (a
   * failed sync acks nothing: the sink refuses until reopened, and the restart's reconciliation
   * finds what reached it). When none are left (an ack between appends failed: its ids are the
   * pending ack already) the pending ack is kept. Never throws.
   */
  private async keepAckAfterOutage(shipment: Shipment): Promise<void> {
    const sync = this.opts.sink.sync?.bind(this.opts.sink);
    const shipped = shipment.rows.slice(shipment.acked);
    if (shipped.length === 0) return;
    if (sync !== undefined) {
      const synced = await sync().then(
        () => true,
        () => false,
      );
      if (!synced) return;
    }
    this.pendingAck = shipped.map((r) => r.stagingId);
    this.opts.onDurable(shipped);
  }

  /**
   * Point 3, before each append of a cycle to a sink without sync(): acks the changes the
   * cycle's earlier appends shipped and that are not acked yet (durable: each append was when it
   * returned), passing them to onDurable first. A failed ack stays the pending ack (retried
   * before the next claim) and throws, so nothing more is appended. With sync() it does nothing.
   */
  private async ackBeforeAppend(shipment: Shipment): Promise<void> {
    if (this.opts.sink.sync !== undefined || shipment.acked === shipment.rows.length) return;
    const fresh = shipment.rows.slice(shipment.acked);
    shipment.acked = shipment.rows.length;
    const ids = fresh.map((r) => r.stagingId);
    this.opts.onDurable(fresh);
    this.pendingAck = ids;
    await this.opts.staging.ack(ids);
    this.pendingAck = null;
    this.stats.shipped += ids.length;
  }

  /**
   * A cycle with an initial load (steps in initial-load.ts): claim and chunk in one snapshot,
   * ship the changes, then the chunk's read events, ack, store the cursor. Returns the number of
   * changes and read events shipped.
   */
  private async loadCycle(loader: PumpLoader, task: LoadTask): Promise<number> {
    const { staging, pump, pumps, batchSizeMax, fault } = this.opts;
    const excluded = this.excluded();
    const read = await loader.read(
      task,
      () => staging.claim(pump, pumps, batchSizeMax, excluded),
      batchSizeMax,
    );
    const now = this.opts.clock();
    const rows = read.claimed.filter(
      (r) => r.key !== NO_KEY || !((this.retrying.get(orderKey(r)) ?? 0) > now),
    );
    const blocked = new Set<string>();
    const shipment: Shipment = { rows: [], acked: 0 };
    const sync = this.opts.sink.sync?.bind(this.opts.sink);
    if (rows.length > 0) {
      if (fault === 'before-append') process.kill(process.pid, 'SIGKILL');
      try {
        await this.ship(rows, blocked, shipment);
      } catch (err) {
        await this.keepAckAfterOutage(shipment);
        throw err;
      }
      // Without sync(): what the last append shipped (the earlier ones are acked: point 3).
      const unacked = shipment.rows.slice(shipment.acked);
      if (sync === undefined && unacked.length > 0) {
        this.pendingAck = unacked.map((r) => r.stagingId);
        this.opts.onDurable(unacked);
        // Acked before the read events are appended: a sink without sync() may reconcile
        // against its last batch only (Kafka: the newest transaction), which the read events
        // would be; a crash before the ack then shipped the changes again.
        await staging.ack(this.pendingAck);
        this.pendingAck = null;
        this.stats.shipped += unacked.length;
      }
    }
    // With sync() nothing is acked yet (shipment.acked is 0).
    const shipped = shipment.rows;
    const ids = sync === undefined ? [] : shipped.map((r) => r.stagingId);
    const changes = shipped.length;
    let emitted = 0;
    const skipped = { held: 0, refused: 0 };
    if (read.reads !== null) {
      // A held key's refused change is still ahead of its read: it brings the row's image itself.
      const reads = read.reads.filter((r) => !excluded.has(r.key) && !blocked.has(r.key));
      skipped.held = read.reads.length - reads.length;
      const refusedBefore = this.stats.readsRefused;
      try {
        emitted = await this.shipReads(reads);
        skipped.refused = this.stats.readsRefused - refusedBefore;
      } catch (err) {
        // An outage: the changes appended before it are acked and counted once synced (without
        // sync() that happened above).
        if (sync !== undefined) await this.keepAckAfterOutage(shipment);
        throw err;
      }
    }
    // Everything of this cycle durable before its ack and cursor (no pipelining here).
    if (sync !== undefined && ids.length + emitted > 0) {
      await sync();
      this.pendingAck = ids;
      if (ids.length > 0) this.opts.onDurable(shipped);
    }
    if (fault === 'after-append' && changes + emitted > 0) process.kill(process.pid, 'SIGKILL');
    await staging.ack(ids);
    this.pendingAck = null;
    this.stats.shipped += ids.length;
    if (read.reads !== null) await loader.save(read, emitted, skipped);
    this.stats.loaded += emitted;
    return changes + emitted;
  }

  /** Appends read events, halving on refusal; a single refused row is skipped and counted. */
  private async shipReads(reads: StagedChange[]): Promise<number> {
    if (reads.length === 0) return 0;
    try {
      await this.opts.sink.appendBatch(reads);
      return reads.length;
    } catch (err) {
      if (!(err instanceof RecordRefusedError)) throw err;
      this.stats.refusals++;
      if (reads.length === 1) {
        this.stats.readsRefused++;
        return 0;
      }
      const mid = reads.length >>> 1;
      return (await this.shipReads(reads.slice(0, mid))) + (await this.shipReads(reads.slice(mid)));
    }
  }

  /** Keys not to claim now: retries not yet due, and parked keys. */
  private excluded(): Set<string> {
    const now = this.opts.clock();
    const out = new Set(this.parked);
    for (const [key, due] of this.retrying) if (due > now) out.add(key);
    return out;
  }

  /** Re-reads parked keys (a requeue or purge elsewhere releases them); runs the retention. */
  private async housekeeping(): Promise<void> {
    const { staging, pump, pumps, errors, clock } = this.opts;
    const now = clock();
    if (errors.holdKeyWhenParked && now - this.parkedReadMs >= CDC_DEFAULTS.parkedRefreshMs) {
      this.parked = (await staging.heldKeys(pump, pumps)).parked;
      this.parkedReadMs = now;
    }
    if (pump === 0 && now - this.retentionCheckedMs >= CDC_DEFAULTS.retentionCheckMs) {
      this.retentionCheckedMs = now;
      this.stats.expired += await staging.purge({ parkedBeforeMs: now - errors.retentionMs });
    }
  }

  /**
   * Steps 3-5: appends `rows` minus the keys in `blocked`, dividing on refusal. Changes appended
   * go to `shipped.rows` in order (without sync(), those of earlier appends are acked before each
   * append: ackBeforeAppend); a refused change's key joins `blocked`, so its later changes in this
   * batch stay staged behind it.
   */
  private async ship(rows: StagedChange[], blocked: Set<string>, shipped: Shipment): Promise<void> {
    const open = blocked.size === 0 ? rows : rows.filter((r) => !blocked.has(orderKey(r)));
    if (open.length === 0) return;
    await this.ackBeforeAppend(shipped);
    try {
      await this.opts.sink.appendBatch(open);
    } catch (err) {
      if (!(err instanceof RecordRefusedError)) throw err;
      this.stats.refusals++;
      if (open.length === 1) return this.refuseOne(open[0]!, err, blocked, shipped);
      const mid = open.length >>> 1;
      await this.ship(open.slice(0, mid), blocked, shipped);
      await this.ship(open.slice(mid), blocked, shipped);
      return;
    }
    for (const r of open) {
      shipped.rows.push(r);
      this.retrying.delete(orderKey(r));
    }
  }

  /** Steps 4-5 for one refused change. */
  private async refuseOne(
    row: StagedChange,
    first: RecordRefusedError,
    blocked: Set<string>,
    shipped: Shipment,
  ): Promise<void> {
    const { staging, sink, errors, clock } = this.opts;
    let error: Error = first;
    for (let i = 0; i < errors.retriesImmediate; i++) {
      await this.ackBeforeAppend(shipped);
      try {
        await sink.appendBatch([row]);
        shipped.rows.push(row);
        this.retrying.delete(orderKey(row));
        return;
      } catch (err) {
        if (!(err instanceof RecordRefusedError)) throw err;
        error = err;
      }
    }
    blocked.add(orderKey(row));
    const attempts = row.attempts + 1;
    const now = clock();
    if (attempts >= errors.attemptsMax) {
      const reason = `refused ${attempts} time${attempts === 1 ? '' : 's'} (${1 + errors.retriesImmediate} tries each): ${error.message}`;
      await staging.park(row.stagingId, attempts, reason, now);
      this.stats.parked++;
      this.retrying.delete(orderKey(row));
      if (errors.holdKeyWhenParked && row.key !== NO_KEY) this.parked.add(row.key);
      return;
    }
    const delayMs = Math.min(errors.retryDelayMs * 2 ** (attempts - 1), errors.retryDelayMaxMs);
    await staging.recordFailure(row.stagingId, attempts, now + delayMs, error.message);
    this.stats.retriesDelayed++;
    this.retrying.set(orderKey(row), now + delayMs);
  }

  /**
   * Runs start() (if not yet run) then cycles until `signal` aborts; after a cycle that shipped
   * less than a full batch it waits pollIntervalMs (woken early by abort). Resolves with the stats.
   */
  async run(signal: AbortSignal, pollIntervalMs: number): Promise<PumpStats> {
    if (!Number.isFinite(pollIntervalMs) || pollIntervalMs < 0)
      throw new Error(`pollIntervalMs must be >= 0, pollIntervalMs=${pollIntervalMs}`);
    if (!this.started) await this.start();
    while (!signal.aborted) {
      const n = await this.runCycle();
      if (n < this.opts.batchSizeMax) await sleep(pollIntervalMs, signal);
    }
    return this.stats;
  }
}

/** The staging key of key strategy none: unkeyed changes keep no order between them. */
const NO_KEY = '[]';

/** What holds back later changes: the key, or for an unkeyed change only itself. */
function orderKey(r: StagedChange): string {
  return r.key === NO_KEY ? `#${r.stagingId}` : r.key;
}

/** Other modules share SLUICE_FAULT with their own fault names, so unknown values mean "no pump fault". */
function parseFault(value: string | undefined): PumpFault | null {
  return value === 'after-append' || value === 'before-append' || value === 'hang-after-append'
    ? value
    : null;
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
