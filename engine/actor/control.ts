/**
 * Control cells shared between the supervisor and one actor, and the doorbell a consumer
 * parks on while it waits for any of several producers.
 *
 * Why shared memory and not postMessage: actors run synchronous loops that park with
 * Atomics.wait, so their event loop does not turn while they work; a flag in a
 * SharedArrayBuffer is seen on the next loop iteration, and a notify wakes a parked actor.
 *
 * Control layout (Int32Array of 4):
 * ```
 *  0  command   0 = run, 1 = drain (finish what is in flight, then stop), 2 = stop now
 *  1  logLevel  lowest level the actor sends (LOG_LEVELS numbers; written by the supervisor)
 * ```
 * Doorbell layout (Int32Array of 2):
 * ```
 *  0  rings     bumped by a producer after it published a batch
 *  1  waiting   1 while the consumer is parked (producers notify only then)
 * ```
 */
export const Command = { run: 0, drain: 1, stop: 2 } as const;

/** Log levels by name, with pino's numbers (silent: above every level). */
export const LOG_LEVELS = {
  trace: 10,
  debug: 20,
  info: 30,
  warn: 40,
  error: 50,
  fatal: 60,
  silent: 100,
} as const;
/** One log level name. */
export type LogLevelName = keyof typeof LOG_LEVELS;
/** Level of an actor nobody set one for: info. */
export const LOG_LEVEL_DEFAULT: number = LOG_LEVELS.info;

/** The level name of a number, or the number as text when it is none of LOG_LEVELS. */
export function logLevelName(level: number): string {
  const hit = Object.entries(LOG_LEVELS).find(([, n]) => n === level);
  return hit ? hit[0] : String(level);
}

const LOG_LEVEL_CELL = 1;

/** Allocates one actor's control cells. */
export function createControl(): SharedArrayBuffer {
  return new SharedArrayBuffer(4 * Int32Array.BYTES_PER_ELEMENT);
}

/** Actor-side and supervisor-side view of the control cells. */
export class Control {
  private readonly cells: Int32Array;
  constructor(sab: SharedArrayBuffer) {
    this.cells = new Int32Array(sab);
  }
  /** Current command (Command.run | drain | stop). */
  command(): number {
    return Atomics.load(this.cells, 0);
  }
  /** Lowest log level the actor sends (LOG_LEVELS numbers). */
  logLevel(): number {
    return Atomics.load(this.cells, LOG_LEVEL_CELL);
  }
  /** Supervisor side: sets the actor's log level (LOG_LEVELS numbers; silent = 100). */
  setLogLevel(level: number): void {
    Atomics.store(
      this.cells,
      LOG_LEVEL_CELL,
      Math.min(LOG_LEVELS.silent, Math.max(0, Math.round(level))),
    );
  }
  /** Supervisor side: asks the actor to drain, or to stop now. Never lowers a command. */
  request(command: number): void {
    if (command > Atomics.load(this.cells, 0)) Atomics.store(this.cells, 0, command);
    Atomics.notify(this.cells, 0);
  }
}

/** Allocates a doorbell. */
export function createDoorbell(): SharedArrayBuffer {
  return new SharedArrayBuffer(2 * Int32Array.BYTES_PER_ELEMENT);
}

/**
 * Many producers, one consumer: producers ring after publishing a batch; the consumer reads
 * the bell's value, checks all its inputs, and parks only if the value has not moved since
 * (so a ring between the check and the park is never lost).
 */
export class Doorbell {
  private readonly cells: Int32Array;
  constructor(sab: SharedArrayBuffer) {
    this.cells = new Int32Array(sab);
  }
  /** Producer side: one Atomics.add per batch; a notify syscall only when the consumer is parked. */
  ring(): void {
    Atomics.add(this.cells, 0, 1);
    if (Atomics.load(this.cells, 1) !== 0) Atomics.notify(this.cells, 0);
  }
  /** Consumer side: the value to pass to {@link park}, read before checking the inputs. */
  value(): number {
    return Atomics.load(this.cells, 0);
  }
  /** Consumer side: parks until a ring after `seen`, or `timeoutMs` (ms) passes. */
  park(seen: number, timeoutMs: number): void {
    Atomics.store(this.cells, 1, 1);
    Atomics.wait(this.cells, 0, seen, timeoutMs);
    Atomics.store(this.cells, 1, 0);
  }
}
