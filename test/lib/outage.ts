/**
 * Checks shared by the tests that take a dependency away under a running `sluice run` (a Kafka
 * broker killed under a pump or a sink): waiting for a condition, and what the operations API
 * and `sluice status` must say while one actor's outage lasts.
 */
import * as assert from 'uvu/assert';
import { sluice } from './cli.js';

/** Resolves once `cond()` holds; fails naming `what` (and what `detail()` says) after `ms`. */
export async function until(
  what: string,
  cond: () => boolean | Promise<boolean>,
  ms: number,
  detail: () => string = () => '',
): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await cond())) {
    assert.ok(Date.now() < deadline, `${what} within ${ms / 1000} s: ${detail()}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** `text` with every RegExp metacharacter escaped. */
export function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

/** GET /actors' shape as these checks read it. */
export interface ActorsBody {
  actors: {
    name: string;
    counters: { downSinceMs: number };
    outage: { side: string; what: string; error: string } | null;
  }[];
}

/**
 * While actor `actor` (the one actor of its group, as pumps and sinks are) waits out an outage
 * of `what` (side `side`) and nothing else is wrong: GET /health/ready is 503 `degraded` with
 * that actor alone, its error `<what> is down: ...; retrying` and the reason `<actor>: degraded
 * since <time>: <what> is down: ...` (the actor named once); GET /actors shows downSinceMs and
 * its `outage`; `sluice status --once` prints the reason and marks the actor's line `DOWN since
 * <time>`. Returns `sluice status`' output for further checks.
 */
export async function assertOutageReported(
  url: string,
  actor: string,
  what: string,
  side: 'source' | 'target' = 'target',
): Promise<string> {
  const ready = await fetch(`${url}/health/ready`);
  assert.is(ready.status, 503);
  const health = (await ready.json()) as {
    status: string;
    reasons: string[];
    degraded: { actor: string; error: string; since: string }[];
  };
  assert.is(health.status, 'degraded');
  assert.equal(
    health.degraded.map((d) => d.actor),
    [actor],
  );
  const { error, since } = health.degraded[0]!;
  assert.ok(error.startsWith(`${what} is down: `), error);
  assert.ok(error.endsWith('; retrying'), error);
  const reason = `${actor}: degraded since ${since}: ${what} is down: `;
  assert.ok(
    health.reasons.some((r) => r.startsWith(reason)),
    `${reason}... in ${health.reasons.join('\n')}`,
  );
  const actors = (await (await fetch(`${url}/actors`)).json()) as ActorsBody;
  const a = actors.actors.find((x) => x.name === actor)!;
  assert.ok(a.counters.downSinceMs > 0);
  assert.is(a.outage?.side, side);
  assert.is(a.outage?.what, what);
  const status = await sluice(['status', '--http', url, '--once']);
  assert.is(status.code, 0, status.err);
  assert.match(status.out, reason);
  assert.match(
    status.out,
    new RegExp(`^${escapeRegExp(actor)} .* DOWN since ${escapeRegExp(since)}$`, 'm'),
  );
  return status.out;
}
