/**
 * Fault injection for crash tests: makes the appender die by SIGKILL at a chosen point, leaving
 * on disk exactly what a real crash at that point leaves. Read once per `Appender.open` from the
 * environment variable `SLUICE_JOURNAL_FAULT=<point>@<n>`, where `n` counts occurrences of the
 * point (1-based) within that appender:
 *
 * - `torn-write@n`: the n-th data write of buffered frames writes only the first half of its
 *   bytes, then the process kills itself (case Q1: a record cut off by a crash).
 * - `torn-segment-header@n`: the n-th segment creation writes the header body but not the
 *   complete marker, then the process kills itself (case Q3).
 *
 * Unset (the normal case) costs one null check per write.
 */
export const FAULT_ENV = 'SLUICE_JOURNAL_FAULT';

export type FaultPoint = 'torn-write' | 'torn-segment-header';

export interface FaultPlan {
  point: FaultPoint;
  occurrence: number;
}

/** Parses `SLUICE_JOURNAL_FAULT`; throws on a malformed value so a test cannot silently run without its fault. */
export function readFaultPlan(env: NodeJS.ProcessEnv = process.env): FaultPlan | null {
  const raw = env[FAULT_ENV];
  if (raw === undefined || raw === '') return null;
  const m = /^(torn-write|torn-segment-header)@([1-9]\d*)$/.exec(raw);
  if (!m)
    throw new Error(
      `${FAULT_ENV} must be "torn-write@<n>" or "torn-segment-header@<n>", ${FAULT_ENV}=${JSON.stringify(raw)}`,
    );
  return { point: m[1] as FaultPoint, occurrence: Number(m[2]) };
}

/** Counts occurrences of fault points for one appender. */
export class FaultInjector {
  private readonly counts = new Map<FaultPoint, number>();
  constructor(private readonly plan: FaultPlan | null) {}

  /** True when this occurrence of `point` is the planned one. */
  hit(point: FaultPoint): boolean {
    if (this.plan === null || this.plan.point !== point) return false;
    const n = (this.counts.get(point) ?? 0) + 1;
    this.counts.set(point, n);
    return n === this.plan.occurrence;
  }
}

/** Dies now, as `kill -9` would kill it: no exit handlers, no flush. */
export function crashNow(): never {
  process.kill(process.pid, 'SIGKILL');
  // SIGKILL to oneself is delivered before kill(2) returns; this only documents that.
  for (;;) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1000);
}
