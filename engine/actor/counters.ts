/**
 * Per-actor counters in shared memory: written by the actor (worker side) with plain stores,
 * read by the supervisor at any time without a message round trip.
 *
 * Layout (one Float64Array of {@link COUNTER_SLOTS} slots, 8 bytes each):
 * ```
 *  slot  name          unit / meaning
 *  0     state         ActorState code (see ACTOR_STATES)
 *  1     eventsIn      events taken from inputs (rings, journals, staging tables) while live
 *  2     eventsOut     events appended to output queues
 *  3     batches       input batches processed
 *  4     waits         times the actor parked because it had no work
 *  5     heartbeatMs   Date.now() at the actor's last loop iteration
 *  6     replayed      events replayed so far (restart protocol)
 *  7     replayTotal   events to replay in all (0 when unknown)
 *  8     errors        handled errors (retries, rejected records)
 *  9     downSinceMs   Date.now() when the actor's source or target went down, 0 while up
 * 10     threadId      the actor thread's OS thread id (Linux tid, for its CPU time in
 *                      /proc/<pid>/task/<tid>/stat); 0 where the OS does not tell
 * ```
 * A float64 holds integers exactly up to 2^53, so counters never need BigInt.
 */
import { readlinkSync } from 'node:fs';

export const COUNTER_SLOTS = 16;

/** Slot index of each counter; the one place that owns these offsets. */
export const Counter = {
  state: 0,
  eventsIn: 1,
  eventsOut: 2,
  batches: 3,
  waits: 4,
  heartbeatMs: 5,
  replayed: 6,
  replayTotal: 7,
  errors: 8,
  downSinceMs: 9,
  threadId: 10,
} as const;

/** Lifecycle states, in the order an actor passes through them. */
export const ACTOR_STATES = [
  'new',
  'init',
  'replay',
  'live',
  'drain',
  'stopped',
  'failed',
] as const;
/** One lifecycle state name. */
export type ActorState = (typeof ACTOR_STATES)[number];

/** Allocates the shared counters of one actor. */
export function createCounters(): SharedArrayBuffer {
  return new SharedArrayBuffer(COUNTER_SLOTS * Float64Array.BYTES_PER_ELEMENT);
}

/** Plain-data copy of an actor's counters, as the supervisor reports them. */
export interface CounterSnapshot {
  state: ActorState;
  eventsIn: number;
  eventsOut: number;
  batches: number;
  waits: number;
  heartbeatMs: number;
  replayed: number;
  replayTotal: number;
  errors: number;
  downSinceMs: number;
  /** OS thread id of the actor's worker thread (Linux tid), 0 when unknown. */
  threadId: number;
}

/** Reads every counter of one actor (supervisor side). */
export function readCounters(sab: SharedArrayBuffer): CounterSnapshot {
  const c = new Float64Array(sab);
  return {
    state: ACTOR_STATES[c[Counter.state]] ?? 'new',
    eventsIn: c[Counter.eventsIn],
    eventsOut: c[Counter.eventsOut],
    batches: c[Counter.batches],
    waits: c[Counter.waits],
    heartbeatMs: c[Counter.heartbeatMs],
    replayed: c[Counter.replayed],
    replayTotal: c[Counter.replayTotal],
    errors: c[Counter.errors],
    downSinceMs: c[Counter.downSinceMs],
    threadId: c[Counter.threadId],
  };
}

/** Writes the lifecycle state (actor side). */
export function setState(counters: Float64Array, state: ActorState): void {
  counters[Counter.state] = ACTOR_STATES.indexOf(state);
}

/**
 * The calling thread's OS thread id: Linux's tid from `/proc/thread-self` (a link to
 * `<pid>/task/<tid>`), 0 on systems without it.
 */
export function osThreadId(): number {
  try {
    const m = /task\/(\d+)$/.exec(readlinkSync('/proc/thread-self'));
    return m ? Number(m[1]) : 0;
  } catch {
    return 0;
  }
}
