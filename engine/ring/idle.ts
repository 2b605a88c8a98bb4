/**
 * Idle strategies: what a ring side does when it found no work (consumer: no record; producer: no
 * space). Small interchangeable policy objects after Agrona's IdleStrategy family
 * (BusySpinIdleStrategy, NoOpIdleStrategy, SleepingIdleStrategy, BackoffIdleStrategy), with one
 * addition: a ring side passes a Parker so that parking blocks on the ring's own position counter
 * (Atomics.wait) and is woken by the other side's Atomics.notify, instead of sleeping blind.
 *
 * A strategy instance keeps per-thread state (BackoffIdleStrategy counts): give each ring side
 * its own instance.
 */
import { RING_DEFAULTS } from './defaults.js';

/**
 * Blocks the calling thread until the other ring side makes progress or `timeoutMs` passes.
 * Implemented by RingProducer (waits for space: parks on the head) and RingConsumer (waits for
 * data: parks on the tail). Each sets its "waiting" bit on that counter only if the counter is
 * still the value it saw, then Atomics.wait on it; the other side notifies only when it finds
 * the bit set. See layout.ts.
 */
export interface Parker {
  /** Blocks up to `timeoutMs` (ms, > 0, fractional allowed). Returns early when woken. */
  park(timeoutMs: number): void;
}

/**
 * What to do after a unit of polling. `workCount` is the work done by that poll (records read or
 * written); > 0 resets the strategy's escalation. `parker`, when given, is what a parking
 * strategy blocks on; without one a parking strategy sleeps for its timeout.
 */
export interface IdleStrategy {
  /** Called after each poll; idles (spin, nothing, or park) when `workCount` is 0. */
  idle(workCount: number, parker?: Parker): void;
  /** Forget escalation state (called when work resumes). */
  reset(): void;
}

/** Sleeps the calling thread for `ms` without a waker (Atomics.wait on a private word). */
function sleepMs(ms: number): void {
  Atomics.wait(sleepWord, 0, 0, ms);
}
const sleepWord = new Int32Array(new SharedArrayBuffer(4));

/**
 * Returns at once, so the caller re-polls in a tight loop: lowest latency, one core at 100%.
 * After Agrona BusySpinIdleStrategy (JavaScript has no spin-wait hint to issue).
 */
export class BusySpinIdleStrategy implements IdleStrategy {
  idle(_workCount: number, _parker?: Parker): void {}
  reset(): void {}
}

/**
 * Does nothing: the "yield" slot of Agrona's family. JavaScript has no sched_yield(), so this is
 * the same loop as busy-spin; it exists so configurations written for Agrona map one-to-one.
 * After Agrona NoOpIdleStrategy.
 */
export class NoOpIdleStrategy implements IdleStrategy {
  idle(_workCount: number, _parker?: Parker): void {}
  reset(): void {}
}

/**
 * Parks on every idle call for up to `parkMs` (default RING_DEFAULTS.parkMsMax): near-zero CPU
 * when idle, wake-up latency of a futex wake (tens of microseconds). After Agrona
 * SleepingIdleStrategy, but woken by the other ring side. Throws Error if `parkMs` is not > 0.
 */
export class ParkingIdleStrategy implements IdleStrategy {
  readonly parkMs: number;

  constructor(parkMs: number = RING_DEFAULTS.parkMsMax) {
    checkPositiveMs('parkMs', parkMs);
    this.parkMs = parkMs;
  }

  idle(workCount: number, parker?: Parker): void {
    if (workCount > 0) return;
    if (parker !== undefined) parker.park(this.parkMs);
    else sleepMs(this.parkMs);
  }

  reset(): void {}
}

/** Options of BackoffIdleStrategy; defaults in RING_DEFAULTS. */
export interface BackoffOptions {
  /** Idle calls that only spin before parking (>= 0). */
  spinsMax?: number;
  /** First park timeout, ms (> 0). */
  parkMsMin?: number;
  /** Longest park timeout, ms (>= parkMsMin). */
  parkMsMax?: number;
}

/**
 * Spins for `spinsMax` idle calls, then parks with a timeout doubling from `parkMsMin` to
 * `parkMsMax`. Low latency under load, little CPU when idle. After Agrona BackoffIdleStrategy
 * (spin, then park; its yield phase has no JavaScript equivalent). Throws Error on bad options.
 */
export class BackoffIdleStrategy implements IdleStrategy {
  readonly spinsMax: number;
  readonly parkMsMin: number;
  readonly parkMsMax: number;
  private spins = 0;
  private parkMs: number;

  constructor(options: BackoffOptions = {}) {
    const spinsMax = options.spinsMax ?? RING_DEFAULTS.spinsMax;
    const parkMsMin = options.parkMsMin ?? RING_DEFAULTS.parkMsMin;
    const parkMsMax = options.parkMsMax ?? RING_DEFAULTS.parkMsMax;
    if (!Number.isInteger(spinsMax) || spinsMax < 0) {
      throw new Error(`backoff spinsMax must be an integer >= 0, spinsMax=${spinsMax}`);
    }
    checkPositiveMs('parkMsMin', parkMsMin);
    checkPositiveMs('parkMsMax', parkMsMax);
    if (parkMsMax < parkMsMin) {
      throw new Error(
        `backoff parkMsMax must be >= parkMsMin, parkMsMin=${parkMsMin} ` +
          `parkMsMax=${parkMsMax}`,
      );
    }
    this.spinsMax = spinsMax;
    this.parkMsMin = parkMsMin;
    this.parkMsMax = parkMsMax;
    this.parkMs = parkMsMin;
  }

  idle(workCount: number, parker?: Parker): void {
    if (workCount > 0) {
      this.reset();
      return;
    }
    if (this.spins < this.spinsMax) {
      this.spins++;
      return;
    }
    const parkMs = this.parkMs;
    if (parker !== undefined) parker.park(parkMs);
    else sleepMs(parkMs);
    this.parkMs = Math.min(parkMs * 2, this.parkMsMax);
  }

  reset(): void {
    this.spins = 0;
    this.parkMs = this.parkMsMin;
  }
}

/** An idle strategy chosen by configuration; see createIdleStrategy. */
export type IdleStrategyConfig =
  | { kind: 'busy-spin' }
  | { kind: 'no-op' }
  | { kind: 'park'; parkMs?: number }
  | ({ kind: 'backoff' } & BackoffOptions);

/**
 * A fresh idle strategy for `config` (one per ring side). Throws Error naming the bad field for an
 * unknown kind or bad option.
 */
export function createIdleStrategy(config: IdleStrategyConfig): IdleStrategy {
  switch (config.kind) {
    case 'busy-spin':
      return new BusySpinIdleStrategy();
    case 'no-op':
      return new NoOpIdleStrategy();
    case 'park':
      return new ParkingIdleStrategy(config.parkMs);
    case 'backoff':
      return new BackoffIdleStrategy(config);
    default: {
      const kind = (config as { kind: unknown }).kind;
      throw new Error(
        `idle strategy kind must be one of busy-spin, no-op, park, backoff, ` +
          `kind=${String(kind)}`,
      );
    }
  }
}

function checkPositiveMs(name: string, ms: number): void {
  if (!(ms > 0) || !Number.isFinite(ms)) {
    throw new Error(`idle ${name} must be a finite number > 0, ${name}=${ms}`);
  }
}
