/**
 * The readiness line `sluice run` prints when a running topology's health changes (ops/health.ts
 * `healthOf`, the figures of `GET /health/ready`).
 */
import type { Health } from '../ops/index.js';

/**
 * The line to print for a change from `before` to `now`, or null when nothing a reader of the
 * log needs changed: readiness, the status (ok, starting, degraded, ...), or the set of degraded
 * groups. A reason's own wording (counters, "is starting" of single actors) is not a change.
 * `before` null: the first reading, never printed (the start line shows it).
 */
export function healthChange(before: Health | null, now: Health): string | null {
  if (before === null) return null;
  const groups = (h: Health) =>
    h.degraded
      .map((d) => d.group)
      .sort()
      .join(',');
  if (before.ready === now.ready && before.status === now.status && groups(before) === groups(now))
    return null;
  if (now.ready) return `ready (${before.status} before)`;
  return `not ready (${now.status}): ${now.reasons.join('; ')}`;
}
