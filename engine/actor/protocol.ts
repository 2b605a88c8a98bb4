/**
 * Typed messages across the supervisor/actor thread boundary (the piscina habit: the two
 * sides live in different files and agree on these types only).
 *
 * Hot-path data never travels here: rings, counters, control cells and queue notifiers are
 * SharedArrayBuffers handed over once in {@link ActorWorkerData}.
 */
import type { MessagePort } from 'node:worker_threads';

/** What every actor worker receives as `workerData`. */
export interface ActorWorkerData<D = unknown> {
  /** Unique actor name, e.g. `service:branch-balances` or `pump:bank-db/1`. */
  name: string;
  /** Actor-specific start data (plain, structured-clone-able). */
  data: D;
  /** Counters (see counters.ts). */
  counters: SharedArrayBuffer;
  /** Control cells (see control.ts). */
  control: SharedArrayBuffer;
  /** Rings and doorbells this actor uses, by the names its spec gave them. */
  shared: Record<string, SharedArrayBuffer>;
  /** MessagePorts transferred to this actor, by name (e.g. `bus`: its bus connection). */
  ports: Record<string, MessagePort>;
  /** How many times this actor's group was restarted before this start (0 on first start). */
  restarts: number;
}

/**
 * What an actor that waits out an outage (its downSinceMs counter set) cannot reach: `side`
 * `source` for a pump's capture source database, `target` for where it ships (the Kafka brokers
 * and topics, the bus, the journal queues), told apart by which call failed, never by the error's
 * text; `what` names it as the actor's log line does (`capture source "app"`, `Kafka
 * 127.0.0.1:9092 topic app.orders (target of capture source "app")`); `error` is the failure's own
 * message.
 */
export interface Outage {
  side: 'source' | 'target';
  what: string;
  error: string;
}

/** Actor -> supervisor. */
export type ActorMessage =
  /** Init done; `info` is actor-specific (a service host sends its LAST_WRITTEN positions). */
  | { type: 'ready'; info: unknown }
  /** The actor processes live input from now on. */
  | { type: 'live' }
  /** The actor finished draining; `summary` is actor-specific plain data. */
  | { type: 'stopped'; summary: unknown }
  /**
   * A failure the actor reports before it exits (the supervisor restarts the group on the exit),
   * or, with its state set to `failed` and downSinceMs set, one it stays halted on without
   * exiting (a sink at a record over its target's limit; ops/health.ts reports it degraded).
   */
  | { type: 'failed'; message: string; stack?: string }
  /**
   * What the actor's outage is about, sent when it goes down and when what fails changes (a
   * source back up, its target still down); null once it is up again (downSinceMs 0).
   */
  | { type: 'outage'; outage: Outage | null }
  /** A log line at `level` (LOG_LEVELS numbers), sent only when the actor's level allows it. */
  | { type: 'log'; level: number; msg: string; fields?: Record<string, unknown> };
