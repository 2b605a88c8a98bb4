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
 * order. On a kafka bus the change is refused (each pump's transactional id and reconciliation
 * are tied to its index; not yet done).
 *
 * The count is the running one: the topology file keeps its own, which the next start uses.
 */
import type { Supervisor, StopResult } from '../engine/supervisor/index.js';
import type { Topology } from '../engine/config/index.js';
import { CDC_DEFAULTS } from '../engine/cdc/index.js';
import { pumpGroups } from './plan.js';
import { captureIntoBus } from './plan-kafka.js';

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

/** A request the topology cannot take (unknown source, bad count): the HTTP layer's 400/404. */
export class PumpCountError extends Error {
  override readonly name = 'PumpCountError';
  /** @param status 404 for an unknown source, 400 for a count that cannot be applied. */
  constructor(
    message: string,
    readonly status: 400 | 404,
  ) {
    super(message);
  }
}

/** Changes the pump counts of one running topology's capture sources; see the module comment. */
export class PumpCounts {
  private readonly counts = new Map<string, number>();
  /** Changes run one after the other (two at once would retire each other's pumps). */
  private chain: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly topology: Topology,
    private readonly supervisor: Supervisor,
    private readonly notifiers: Map<string, SharedArrayBuffer>,
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
   * @throws PumpCountError (404) for an unknown source, (400) for a count out of range, one that
   *   does not divide a target's partitions, or a kafka bus.
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
    if (captureIntoBus(this.topology, source))
      throw new PumpCountError(
        `capture source "${name}": it captures into processor topics of the bus, whose pump count cannot change at runtime yet (change pumps in the topology file and restart)`,
        400,
      );
    if (this.topology.bus.kind !== 'journal')
      throw new PumpCountError(
        `capture source "${name}": the pump count cannot change at runtime on a kafka bus yet (change pumps in the topology file and restart)`,
        400,
      );
    for (const t of new Set(source.tables.map((x) => x.target))) {
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
    const startMs = Date.now();
    const groups = pumpGroups(this.topology, source, this.notifiers, pumps);
    const retire = Array.from({ length: before }, (_, i) => `pump:${name}/${i}`);
    // Throws before retiring anything (not running, unknown group) or on a fatal failure of the
    // topology while the new pumps start; either way the count stays as it was shown.
    const result: StopResult = await this.supervisor.replaceGroups(retire, groups);
    this.counts.set(name, pumps);
    return {
      source: name,
      before,
      after: pumps,
      terminated: result.terminated,
      switchMs: Date.now() - startMs,
    };
  }
}
