/**
 * The pump count of a capture source, changed while the topology runs, without breaking the
 * order of one key's changes (issue 11 §3; MOVEX CDC changes its worker count at runtime):
 *  1. check the new count N': an integer in [1, CDC_DEFAULTS.pumpsMax] that divides the
 *     partitions of every journal target of the source;
 *  2. ask the running pumps to stop now (Command.stop): each finishes the cycle in flight
 *     (claim -> append -> ack) and exits, the backlog stays staged; no new claim is taken;
 *  3. wait until every old pump has exited (so its appenders' locks and its staging session, and
 *     on PostgreSQL its advisory lock, are released; one that does not stop within the
 *     supervisor's drainTimeoutMs is terminated, and the new owner of its partitions deletes at
 *     start what it appended but did not ack: engine/cdc/pump.ts step 1);
 *  4. start N' pumps: pump i claims keyHash mod N' = i and appends to partition keyHash mod P.
 * A key's partition (keyHash mod P, P fixed) never changes, and at any time one pump at most
 * appends it, after the previous owner's last append is durable: so per key every change is in
 * one partition, once, in staging-id order, and a consumer reading the partition sees them in
 * order.
 *
 * Into bus topics (a kafka bus, or processor topics of the journal bus: actors/plan-kafka.ts
 * captureIntoBus) a record's partition is murmur2(key) mod P, independent of the pump count, so
 * any count in range is taken (no divisibility), and each batch is one transaction of the
 * pump's transactional.id `sluice.capture.<topology>.<source>.<i>`, reconciled at the pump's
 * start against its own id only (engine/cdc/kafka-sink.ts). A new pump i therefore cannot see
 * what an old pump j != i left behind, which is why step 3 differs there:
 *  3'. once every old pump has exited, each one that did not stop cleanly (terminated after
 *     drainTimeoutMs, or not running: failed, waiting for its restart) is reconciled here, on
 *     the main thread, before any new pump starts: a producer with its transactional.id fences
 *     it (InitProducerId: its open transaction is aborted, or completed if its commit was
 *     already in flight, before the answer), the records of its last committed transaction are
 *     found (KafkaPumpSink.recentStagingIds) and their staged rows deleted (acked). A clean stop
 *     exits only after a cycle's ack, with no transaction open: nothing to reconcile.
 *     If this fails (broker or database down), the old count is started again (its pumps
 *     reconcile themselves as after a crash) and the change fails with status 503.
 * Per key, then, every record of an old pump is committed or aborted before a new pump sends
 * one, and a change is shipped again only if it was neither committed nor acked: each change
 * once, in order, for a read_committed consumer.
 *
 * The count is the running one: the topology file keeps its own, which the next start uses.
 */
import type { Supervisor, StopResult } from '../engine/supervisor/index.js';
import type { Topology } from '../engine/config/index.js';
import { CDC_DEFAULTS } from '../engine/cdc/index.js';
import type { MessagePort } from 'node:worker_threads';
import type { BusBackend } from '../engine/bus/types.js';
import { KafkaPumpSink } from '../engine/cdc/kafka-sink.js';
import { openStaging } from '../engine/cdc/index.js';
import { pumpGroups, type PlanBuffers } from './plan.js';
import { captureIntoBus } from './plan-kafka.js';
import { kafkaConnectionOf, kafkaOptionsOf, pumpTransactionalId } from './kafka-capture.js';

/** Outcome of one change. */
export interface PumpCountChange {
  source: string;
  before: number;
  after: number;
  /** Old pumps that did not stop within drainTimeoutMs and were terminated. */
  terminated: string[];
  /** Time from the stop request until the new pumps were started, ms. */
  switchMs: number;
}

/**
 * A request the topology cannot take (unknown source, bad count), or a change that could not be
 * completed (the old count runs again): the HTTP layer's 400/404/503.
 */
export class PumpCountError extends Error {
  override readonly name = 'PumpCountError';
  /**
   * @param status 404 for an unknown source, 400 for a count that cannot be applied, 503 when
   *   the retired pumps could not be reconciled (step 3') and the old count was restored, 409
   *   when the topology is not running (draining, stopped or failed): nothing changed.
   */
  constructor(
    message: string,
    readonly status: 400 | 404 | 409 | 503,
  ) {
    super(message);
  }
}

/** Changes the pump counts of one running topology's capture sources; see the module comment. */
export class PumpCounts {
  private readonly counts = new Map<string, number>();
  /** Changes run one after the other (two at once would retire each other's pumps). */
  private chain: Promise<unknown> = Promise.resolve();

  /**
   * @param options.connectBus a new connection to the topology's journal bus (as the planner's,
   *   for pumps into processor topics); options.journalBus the bus itself on this thread, for
   *   step 3' (not closed here). Without them a source capturing into processor topics of the
   *   journal bus cannot change its count.
   */
  constructor(
    private readonly topology: Topology,
    private readonly supervisor: Supervisor,
    /** The plan's: the new pumps wake the same readers and add to the same shipped counters. */
    private readonly buffers: PlanBuffers,
    private readonly options: {
      connectBus?: () => MessagePort;
      journalBus?: () => BusBackend | null;
    } = {},
  ) {
    for (const s of topology.capture) this.counts.set(s.name, s.pumps);
  }

  /** The running pump count of `source`, or null when the topology has no such source. */
  current(source: string): number | null {
    return this.counts.get(source) ?? null;
  }

  /**
   * Changes the pump count of `source` to `pumps` (steps 1-4 of the module comment). Resolves
   * once the new pumps are started; a count equal to the running one changes nothing.
   * @throws PumpCountError (404) for an unknown source, (400) for a count out of range or (journal
   *   queues) one that does not divide a target's partitions, (503) when step 3' failed.
   */
  set(source: string, pumps: number): Promise<PumpCountChange> {
    const run = this.chain.then(() => this.apply(source, pumps));
    this.chain = run.catch(() => undefined);
    return run;
  }

  private async apply(name: string, pumps: number): Promise<PumpCountChange> {
    const source = this.topology.capture.find((s) => s.name === name);
    const before = this.counts.get(name);
    if (!source || before === undefined)
      throw new PumpCountError(
        `unknown capture source "${name}" (the topology's are: ${this.topology.capture.map((s) => s.name).join(', ') || 'none'})`,
        404,
      );
    if (!Number.isInteger(pumps) || pumps < 1 || pumps > CDC_DEFAULTS.pumpsMax)
      throw new PumpCountError(
        `pumps must be an integer in [1, ${CDC_DEFAULTS.pumpsMax}], pumps=${pumps}`,
        400,
      );
    const intoBus = captureIntoBus(this.topology, source);
    const journalBus = this.topology.bus.kind === 'journal';
    if (intoBus && journalBus && (!this.options.connectBus || !this.options.journalBus?.()))
      throw new PumpCountError(
        `capture source "${name}": it captures into processor topics of the journal bus, and this topology was started without that bus at hand (start it with startTopology)`,
        400,
      );
    // Into bus topics the partition does not depend on the pump count (module comment).
    for (const t of intoBus ? [] : new Set(source.tables.map((x) => x.target))) {
      const partitions = this.topology.queues.find((q) => q.name === t)?.partitions ?? 1;
      if (partitions % pumps !== 0) {
        const divisors = Array.from({ length: partitions }, (_, i) => i + 1).filter(
          (d) => partitions % d === 0,
        );
        throw new PumpCountError(
          `capture source "${name}": ${pumps} pumps do not divide the ${partitions} partitions of target queue "${t}" (a key keeps its partition; possible counts: ${divisors.join(', ')})`,
          400,
        );
      }
    }
    if (pumps === before)
      return { source: name, before, after: pumps, terminated: [], switchMs: 0 };
    const state = this.supervisor.status();
    if (state !== 'running')
      throw new PumpCountError(
        `capture source "${name}": the topology is ${state}; its pump count cannot change now (${before} pumps)`,
        409,
      );
    const startMs = Date.now();
    const groupsOf = (n: number) =>
      pumpGroups(this.topology, source, this.buffers, n, this.options.connectBus);
    const groups = groupsOf(pumps);
    const retire = Array.from({ length: before }, (_, i) => `pump:${name}/${i}`);
    // Throws before retiring anything (not running, unknown group) or on a fatal failure of the
    // topology while the new pumps start; either way the count stays as it was shown.
    let result: StopResult;
    if (!intoBus) result = await this.supervisor.replaceGroups(retire, groups);
    else {
      result = await this.supervisor.replaceGroups(retire, []);
      const unclean = retire.filter((n) => !result.summaries[n]);
      try {
        await this.reconcile(
          source,
          unclean.map((n) => Number(n.slice(n.lastIndexOf('/') + 1))),
        );
      } catch (err) {
        await this.supervisor.replaceGroups([], groupsOf(before));
        throw new PumpCountError(
          `capture source "${name}": the ${before} -> ${pumps} change failed and ${before} pumps run again: retired pumps ${unclean.join(', ')} could not be reconciled: ${(err as Error).message}`,
          503,
        );
      }
      await this.supervisor.replaceGroups([], groups);
    }
    this.counts.set(name, pumps);
    return {
      source: name,
      before,
      after: pumps,
      terminated: result.terminated,
      switchMs: Date.now() - startMs,
    };
  }

  /**
   * Step 3' for old pumps `pumpIndexes` of `source` (module comment): fences each one's
   * transactional.id and deletes from staging the changes of its last committed transaction.
   * @throws Error (BusError, a database error) when a broker or the database fails.
   */
  private async reconcile(source: Topology['capture'][number], pumpIndexes: number[]) {
    if (pumpIndexes.length === 0) return;
    const b = this.topology.bus;
    let own: BusBackend | null = null;
    if (b.kind === 'kafka') {
      const { createKafkaBus } = await import('../engine/bus/index.js');
      own = createKafkaBus(kafkaOptionsOf(kafkaConnectionOf(b)));
    }
    const bus = own ?? this.options.journalBus?.();
    if (!bus) throw new Error("no connection to the topology's bus");
    const staging = await openStaging(source);
    try {
      const installation = await staging.installationId();
      const topics = [...new Set(source.tables.map((t) => t.target))];
      await Promise.all(
        pumpIndexes.map(async (pump) => {
          const sink = new KafkaPumpSink({
            bus,
            source: source.name,
            pump,
            transactionalId: pumpTransactionalId(this.topology.name, source.name, pump),
            topics,
            encode: () => {
              throw new Error('a reconciling sink sends nothing');
            },
          });
          try {
            const ids = await sink.recentStagingIds(0, installation);
            // As PumpCore.start: no match without an installation id; read events carry none.
            const acked = installation === '' ? [] : [...ids].filter((id) => /^[0-9]+$/.test(id));
            if (acked.length > 0) await staging.ack(acked);
          } finally {
            await sink.close();
          }
        }),
      );
    } finally {
      await staging.close().catch(() => undefined);
      await own?.close().catch(() => undefined);
    }
  }
}
