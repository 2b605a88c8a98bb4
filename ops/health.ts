/**
 * Health of a running topology from its supervisor: live (the process answers), ready (every
 * actor of every group is live), and degraded (a group failed and is not live again yet, a
 * pump's or sink's database or broker does not answer (a pump's reason names which: its capture
 * source, or its target's brokers and topics), or an actor stopped its work on an error
 * it cannot get past, such as a sink at a record over its target's limit: named with the actor,
 * its error and since when). Before the first actor starts, the start's own waits (a broker that
 * does not answer, so a topic the actors need cannot be created yet: actors/start-waits.ts) make
 * it degraded too, each named with what needs it and since when.
 *
 * A reason names the group, and the actor when it is not the group's only one: `sink:ship/0:
 * degraded since <time>: Kafka ... is down: ...; retrying`, `service:pass: degraded since <time>:
 * reader:in/0>pass failed: ...`.
 */
import type { ActorInfo, Supervisor } from '../engine/supervisor/index.js';
import type { StartWaits } from '../actors/start-waits.js';

/**
 * An actor whose thread runs on but that stopped its work on an error it cannot get past (a
 * sink at a record over sinks[].to.recordBytesMax, actors/sink.ts): it set its state to
 * `failed`, sent the error (its lastError) and downSinceMs. It is not restarted: the same
 * record would stop it again.
 */
function halted(a: ActorInfo): boolean {
  return a.counters.state === 'failed' && a.counters.downSinceMs > 0 && a.lastError !== null;
}

/** Overall state. `starting`: not every actor is live yet, nothing failed. */
export type HealthStatus = 'ok' | 'starting' | 'degraded' | 'draining' | 'stopped' | 'failed';

/** A group that failed and is being restarted, or whose source or target is down. */
export interface Degraded {
  group: string;
  actor: string;
  error: string;
  /** ISO time of the first failure since the group was last live. */
  since: string;
  restarts: number;
}

/** A wait of the start before its first actor (actors/start-waits.ts), as GET /health gives it. */
export interface Waiting {
  /** What does not answer: `Kafka 127.0.0.1:9092 topic ledger (target of sink "ship")`. */
  what: string;
  /** What the start waits to do: `create topic ledger`. */
  action: string;
  /** The last failed attempt's message. */
  error: string;
  /** ISO time of the first failed attempt. */
  since: string;
}

/** What GET /health and GET /health/ready return. */
export interface Health {
  status: HealthStatus;
  ready: boolean;
  /** Why it is not ready, one line each (empty when ready). */
  reasons: string[];
  degraded: Degraded[];
  /** What the start waits for before its first actor starts (empty once they are launched). */
  waiting: Waiting[];
}

/**
 * Reads the health of a topology now.
 * @param waits the waits of its start (startTopology's), if any.
 */
export function healthOf(supervisor: Supervisor, waits: StartWaits | null = null): Health {
  const state = supervisor.status();
  if (state === 'failed') {
    const message = supervisor.failure()?.message ?? 'failed';
    return {
      status: 'failed',
      ready: false,
      reasons: [`topology stopped: ${message}`],
      degraded: [],
      waiting: [],
    };
  }
  if (state === 'draining' || state === 'stopped') {
    return {
      status: state,
      ready: false,
      reasons: [`topology is ${state}`],
      degraded: [],
      waiting: [],
    };
  }
  const groups = supervisor.health();
  const actors = supervisor.actors();
  const degraded: Degraded[] = [];
  const reasons: string[] = [];
  for (const g of groups) {
    if (g.failure) {
      const since = new Date(g.failure.sinceMs).toISOString();
      degraded.push({
        group: g.name,
        actor: g.failure.actor,
        error: g.failure.error,
        since,
        restarts: g.restarts,
      });
      const who = actorOf(g.failure.actor, g.name, ' ');
      reasons.push(`${g.name}: degraded since ${since}: ${who}failed: ${g.failure.error}`);
    } else if (!g.live) {
      const mine = actors.filter((a) => a.group === g.name);
      const notLive = mine.filter((a) => a.counters.state !== 'live' && !halted(a));
      // A halted actor is a degraded reason below, not a start still under way.
      if (notLive.length > 0 || !mine.some(halted)) {
        reasons.push(
          notLive.length > 0
            ? `${g.name}: ${notLive.map((a) => `${a.name} is ${a.counters.state}`).join(', ')}`
            : `${g.name}: starting`,
        );
      }
    }
  }
  // A pump or sink whose database or broker does not answer stays live (it waits the outage out
  // and retries) but the topology is degraded until it answers again. Pumps and sinks say which
  // (their `outage`: the capture source or the sink's journal queue, or the target's brokers and
  // topics).
  for (const a of actors) {
    const down = a.counters.downSinceMs;
    if (!down || degraded.some((d) => d.group === a.group)) continue;
    const since = new Date(down).toISOString();
    const error = halted(a)
      ? `stopped: ${a.lastError}`
      : a.outage !== null
        ? `${a.outage.what} is down: ${a.outage.error}; retrying`
        : 'its database or broker does not answer; retrying';
    degraded.push({
      group: a.group,
      actor: a.name,
      error,
      since,
      restarts: groups.find((g) => g.name === a.group)?.restarts ?? 0,
    });
    reasons.push(`${a.group}: degraded since ${since}: ${actorOf(a.name, a.group, ': ')}${error}`);
  }
  // No actor runs yet to report what the start waits for: the start says it itself.
  const waiting: Waiting[] = (waits?.list() ?? []).map((w) => ({
    what: w.what,
    action: w.action,
    error: w.error,
    since: new Date(w.sinceMs).toISOString(),
  }));
  for (const w of waiting) {
    reasons.push(
      `start: degraded since ${w.since}: ${w.what} is down: ${w.error}; ` +
        `waiting to ${w.action} before the actors start`,
    );
  }
  if (state === 'idle' || groups.length === 0) reasons.push('topology is starting');
  const status: HealthStatus =
    degraded.length > 0 || waiting.length > 0 ? 'degraded' : reasons.length > 0 ? 'starting' : 'ok';
  return { status, ready: reasons.length === 0, reasons, degraded, waiting };
}

/**
 * `<actor><separator>` ahead of what a reason says of the actor, or nothing when the actor is
 * named as its group (a pump, a sink, a service's host): the reason starts with that name.
 */
function actorOf(actor: string, group: string, separator: string): string {
  return actor === group ? '' : `${actor}${separator}`;
}
