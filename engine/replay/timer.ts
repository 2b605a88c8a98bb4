/**
 * Periodic update (timer) events: appended by the timer actor (actors/timer.ts) to a queue of
 * their own that the service reads as an input, so a replay sees them at the same place among
 * the other inputs. Envelope type {@link EVENT_TYPE_TIMER} (reserved range 3..99), key `timer`,
 * payload JSON `{ tick, intervalMs }` (tick = the record's index in the timer queue).
 */
import { EnvelopeWriter, encodeJson } from '../codec/index.js';

/** Envelope type of a periodic update event. */
export const EVENT_TYPE_TIMER = 9;

/** Every bound of timers, with its default. */
export const TIMER_DEFAULTS = {
  /** Smallest interval between two timer events, ms. */
  intervalMsMin: 1,
} as const;

/** Encodes one timer event. */
export function encodeTimer(
  writer: EnvelopeWriter,
  tick: number,
  intervalMs: number,
  nowMs: number,
): Uint8Array {
  return writer.encode({
    type: EVENT_TYPE_TIMER,
    key: 'timer',
    eventTimeMs: nowMs,
    payload: encodeJson({ tick, intervalMs }),
  });
}
