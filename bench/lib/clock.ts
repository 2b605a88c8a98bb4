/**
 * Monotonic time in µs from process.hrtime (CLOCK_MONOTONIC: one clock for every process of
 * the machine, so a stamp taken in a producer process can be compared in another process).
 * Exact in a float64 (the value stays far below 2^53 µs).
 */
export function hrtimeUs(): number {
  return Number(process.hrtime.bigint() / 1000n);
}
