/**
 * Two sizes of the long fault tests: `npm test` (and CI) runs the kill -9 loops shorter (the same
 * kinds of fault, fewer repetitions) and leaves out the longest fault cases (the network faults
 * of faults-netem, the 3-node leader kill of kafka-failover-reader); `npm run test:long`
 * (SLUICE_TEST_LONG=1) runs everything at full counts.
 */

/** True under `npm run test:long` (SLUICE_TEST_LONG=1). */
export const LONG = process.env.SLUICE_TEST_LONG === '1';

/** `long` under `npm run test:long`, `short` otherwise (npm test, CI). */
export function longOr<T>(long: T, short: T): T {
  return LONG ? long : short;
}
