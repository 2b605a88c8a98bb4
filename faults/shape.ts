/**
 * What every shape of the fault suite shares: its context (seed, budget, ledger), the fault
 * kinds every topology takes (kill -9 of the process, a worker thread ending or throwing, the
 * data directory full or read only), and the recovery checks after each.
 */
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { TopologyProcess, Tmpfs, Ledger, FAULT_BOUNDS, between, pick } from './harness.js';
import type { NetScope } from './network.js';

/** Given to a shape's run. */
export interface ShapeContext {
  ledger: Ledger;
  random: () => number;
  /** Faults this shape should inject. */
  faults: number;
  /** Date.now() after which the shape stops injecting and finishes. */
  deadlineMs: number;
  /** A fresh directory of the shape's own. */
  dir: string;
  /** A free port for the topology's operations API. */
  httpPort: number;
  /** `mount -t tmpfs` works here (disk-full and read-only faults). */
  tmpfs: boolean;
  /** Network faults work here (faults/network.ts NetScope.available). */
  net: boolean;
  /** Pause before each fault, [min, max] ms (default [200, 2000]; the soak: minutes). */
  gapMs?: [number, number];
}

/** A topology shape with its workload, its faults and its checks. */
export interface Shape {
  name: string;
  /** Runs the shape: setup, workload, faults with checks after each, final checks, cleanup. */
  run(ctx: ShapeContext): Promise<void>;
}

/** What a shape's fault loop needs to inject the common faults. */
export interface FaultTarget {
  shape: string;
  ctx: ShapeContext;
  proc: TopologyProcess;
  /** Mounted on the topology's data directory when ctx.tmpfs. */
  disk: Tmpfs | null;
  /** Invariant checks to run after a fault; returns violations (one line each). */
  check(): Promise<string[]> | string[];
  /** Actor name prefixes a worker fault may hit (default: every actor). */
  actorPrefixes?: string[];
  /**
   * The topology process's network scope, for shapes whose topology talks to a server
   * (PostgreSQL, Kafka); null or absent: no network faults.
   */
  net?: NetScope | null;
  /** What the network faults cut the topology off from, for the ledger ("PostgreSQL"). */
  netPeer?: string;
}

/** Names of the common faults. */
export type CommonFault =
  | 'kill9'
  | 'worker-exit'
  | 'worker-throw'
  | 'disk-full'
  | 'read-only'
  | 'net-partition'
  | 'net-loss';

/** The common faults available to `t` (disk faults only with a tmpfs, network ones with a scope). */
export function commonFaults(t: FaultTarget): CommonFault[] {
  const out: CommonFault[] = ['kill9', 'kill9', 'worker-exit', 'worker-exit', 'worker-throw'];
  // 'read-only' is not among them: Linux refuses `mount -o remount,ro` (EBUSY) while a process
  // holds a file open for writing, which a running topology always does (docs/FAULTS.md).
  if (t.disk) out.push('disk-full');
  if (t.net) out.push('net-partition', 'net-loss');
  return out;
}

function violations(t: FaultTarget, problems: string[]): void {
  for (const p of problems) t.ctx.ledger.violation(t.shape, p);
}

/** Checks the process did not exit by itself since the last call, then the invariants. */
export async function checkAll(t: FaultTarget): Promise<void> {
  violations(t, t.proc.unexpectedExits.splice(0));
  violations(t, await t.check());
}

/** Waits until the topology is healthy again; a violation when it is not within the bound. */
export async function recover(t: FaultTarget, what: string): Promise<number | null> {
  const t0 = Date.now();
  const ms = await t.proc.waitHealthy(FAULT_BOUNDS.recoveryMs);
  if (ms === null) {
    const h = await t.proc.health();
    t.ctx.ledger.violation(
      t.shape,
      `${what}: not healthy within ${FAULT_BOUNDS.recoveryMs} ms (health: ${JSON.stringify(h)})`,
    );
    return null;
  }
  // A pump rides out an outage without failing its group (health stays ok): it must say it is
  // up again too.
  if (!(await t.proc.waitSourcesUp(FAULT_BOUNDS.recoveryMs))) {
    t.ctx.ledger.violation(
      t.shape,
      `${what}: a capture source not up again within ${FAULT_BOUNDS.recoveryMs} ms`,
    );
    return null;
  }
  return Date.now() - t0;
}

/**
 * Injects one common fault and waits for the recovery; records it in the ledger and runs the
 * checks. Returns false when the fault could not be injected (nothing recorded).
 */
export async function injectCommon(
  t: FaultTarget,
  fault: CommonFault,
  t0: number,
): Promise<boolean> {
  const { ctx, proc } = t;
  const r = ctx.random;
  const at = Date.now() - t0;
  switch (fault) {
    case 'kill9': {
      await proc.kill9();
      // The checks while nothing runs: what is on disk after a kill -9.
      await checkAll(t);
      await sleep(between(r, 0, 500));
      proc.start();
      const ms = await recover(t, 'restart after kill -9');
      ctx.ledger.fault({
        shape: t.shape,
        fault,
        atMs: at,
        detail: `SIGKILL of sluice run (start #${proc.starts})`,
        recoveredMs: ms,
      });
      break;
    }
    case 'worker-exit':
    case 'worker-throw': {
      const actors = await proc.actors();
      const candidates = (actors ?? []).filter(
        (a) => !t.actorPrefixes || t.actorPrefixes.some((p) => a.name.startsWith(p)),
      );
      if (candidates.length === 0) return false;
      const actor = pick(r, candidates);
      const before = actor.restarts;
      const mode = fault === 'worker-exit' ? 'exit' : 'throw';
      const taken = await proc.workerFault(actor.name, mode);
      if (!taken) {
        ctx.ledger.violation(
          t.shape,
          `worker fault for ${actor.name} not taken within 10 s (no heartbeat: the actor is stuck)`,
        );
        return false;
      }
      // The group restarts: its restart count goes up, then it is healthy again.
      const t1 = Date.now();
      let restarted = false;
      while (Date.now() - t1 < FAULT_BOUNDS.recoveryMs) {
        const now = (await proc.actors())?.find((a) => a.group === actor.group);
        if (now && now.restarts > before) {
          restarted = true;
          break;
        }
        await sleep(50);
      }
      if (!restarted)
        ctx.ledger.violation(
          t.shape,
          `${actor.name} took a ${mode} fault but its group ${actor.group} did not restart within ${FAULT_BOUNDS.recoveryMs} ms`,
        );
      const ms = await recover(t, `restart of ${actor.group} after ${actor.name} ${mode}`);
      ctx.ledger.fault({
        shape: t.shape,
        fault,
        atMs: at,
        detail: `${actor.name} ${mode === 'exit' ? 'process.exit() in its thread' : 'threw'}`,
        recoveredMs: ms,
      });
      break;
    }
    case 'disk-full':
    case 'read-only': {
      const disk = t.disk;
      if (!disk) return false;
      const holdMs = between(r, 300, 6000);
      let detail: string;
      if (fault === 'disk-full') {
        const bytes = disk.fill();
        await sleep(holdMs);
        disk.free();
        // Under 1 MiB of filler: the topology's own data fills the tmpfs, and it stays full after
        // the fault; every later recovery would fail for the harness's sizing, not the engine.
        if (bytes < 1048576)
          t.ctx.ledger.violation(
            t.shape,
            `harness: ${disk.dir} (tmpfs of ${disk.sizeBytes / 1048576} MiB) is full of the topology's own data; give the shape a larger tmpfs`,
          );
        detail = `${path.basename(disk.dir)} full (${(bytes / 1048576).toFixed(0)} MiB filler) for ${holdMs} ms`;
      } else {
        disk.readOnly();
        await sleep(holdMs);
        disk.readWrite();
        detail = `${path.basename(disk.dir)} read only for ${holdMs} ms`;
      }
      violations(t, proc.unexpectedExits.splice(0));
      const ms = await recover(t, `after ${detail}`);
      ctx.ledger.fault({ shape: t.shape, fault, atMs: at, detail, recoveredMs: ms });
      break;
    }
    case 'net-partition':
    case 'net-loss': {
      const net = t.net;
      if (!net) return false;
      // A partition of a few seconds (requests wait it out on TCP retransmits), or of up to half
      // a minute (past kafkajs' 30 s request timeout and a group's session timeout).
      const holdMs = r() < 0.75 ? between(r, 1000, 8000) : between(r, 15_000, 35_000);
      let detail: string;
      if (fault === 'net-partition') {
        net.partition();
        detail = `every packet between sluice run and ${t.netPeer ?? 'its servers'} dropped for ${holdMs} ms`;
      } else {
        const percent = between(r, 10, 40);
        net.loss(percent);
        detail = `${percent}% of the packets between sluice run and ${t.netPeer ?? 'its servers'} dropped for ${holdMs} ms`;
      }
      try {
        await sleep(holdMs);
        // Cut off from its servers, the supervisor waits: it must not exit.
        violations(t, proc.unexpectedExits.splice(0));
      } finally {
        net.heal();
      }
      const ms = await recover(t, `after ${detail}`);
      ctx.ledger.fault({ shape: t.shape, fault, atMs: at, detail, recoveredMs: ms });
      break;
    }
  }
  await checkAll(t);
  return true;
}

/**
 * The fault loop: until ctx.faults faults are injected or the deadline passes, waits a random
 * moment (`gapMs`), picks a fault from `kinds` and injects it with `inject` (which returns
 * false when it could not). Returns the number injected.
 */
export async function faultLoop(
  ctx: ShapeContext,
  kinds: string[],
  inject: (kind: string) => Promise<boolean>,
  gapMs: [number, number] = ctx.gapMs ?? [200, 2000],
): Promise<number> {
  let n = 0;
  let misses = 0;
  while (n < ctx.faults && Date.now() < ctx.deadlineMs && misses < 50) {
    await sleep(between(ctx.random, gapMs[0], gapMs[1]));
    if (await inject(pick(ctx.random, kinds))) n++;
    else misses++;
  }
  return n;
}
