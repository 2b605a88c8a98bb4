/**
 * The rendered-answer cache of GET /metrics and GET /actors (ops/response-cache.ts) on a clock
 * the test moves: one rendering per interval, a new one at the interval's end and after an
 * invalidating sample, one rendering shared by concurrent requests, failures not cached.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { ResponseCache } from '../ops/response-cache.js';

function setup(ttlMs: number) {
  const clock = { now: 1_000_000, sampledAt: 0, renders: 0 };
  const cache = new ResponseCache(
    ttlMs,
    () => clock.sampledAt,
    () => clock.now,
  );
  const render = (nowMs: number) => {
    clock.renders++;
    return Buffer.from(`rendered ${clock.renders} at ${nowMs}`);
  };
  return { clock, cache, render };
}

test('answers within the interval are the same rendering; at the interval a new one is read', async () => {
  const { clock, cache, render } = setup(1000);
  const a = await cache.get(render);
  assert.is(a.asOfMs, 1_000_000);
  assert.is(a.body.toString(), 'rendered 1 at 1000000');
  clock.now += 999;
  const b = await cache.get(render);
  assert.is(b, a, 'one interval less a ms later: the cached answer');
  assert.is(clock.renders, 1);
  clock.now += 1;
  const c = await cache.get(render);
  assert.is(c.body.toString(), 'rendered 2 at 1001000', 'at the interval: read again');
  assert.is(c.asOfMs, 1_001_000);
});

test('a sample after the rendering makes it stale at once (rates are never older than the latest sample)', async () => {
  const { clock, cache, render } = setup(60_000);
  const a = await cache.get(render);
  clock.now += 10;
  assert.is(await cache.get(render), a);
  clock.sampledAt = clock.now;
  clock.now += 1;
  const b = await cache.get(render);
  assert.is.not(b, a);
  assert.is(clock.renders, 2);
  clock.now += 1;
  assert.is(await cache.get(render), b, 'rendered after the sample: fresh again');
});

test('concurrent requests share one rendering in flight, unless a sample came after it started', async () => {
  const { clock, cache } = setup(1000);
  let renders = 0;
  const releases: Array<() => void> = [];
  const slow = (nowMs: number) =>
    new Promise<Buffer>((resolve) => {
      renders++;
      releases.push(() => resolve(Buffer.from(`at ${nowMs}`)));
    });
  const p1 = cache.get(slow);
  const p2 = cache.get(slow);
  assert.is(p1, p2, 'the second request waits for the first rendering');
  assert.is(renders, 1);
  clock.now += 5;
  clock.sampledAt = clock.now - 1;
  const p3 = cache.get(slow);
  assert.is.not(p3, p1, 'a sample since the rendering started: a rendering of its own');
  assert.is(renders, 2);
  for (const r of releases) r();
  assert.is((await p1).asOfMs, 1_000_000);
  assert.is((await p3).asOfMs, 1_000_005);
  assert.is(await cache.get(slow), await p3, 'the newer rendering is the one kept');
});

test('a failed rendering reaches its requests and is not cached', async () => {
  const { cache, render } = setup(1000);
  let fail = true;
  const flaky = (nowMs: number) => {
    if (fail) return Promise.reject(new Error('registry failed'));
    return render(nowMs);
  };
  await cache.get(flaky).then(
    () => assert.unreachable('should reject'),
    (err: Error) => assert.is(err.message, 'registry failed'),
  );
  fail = false;
  assert.is((await cache.get(flaky)).body.toString(), 'rendered 1 at 1000000');
});

test('ttl 0 renders every request; a bad ttl is an error naming the option', async () => {
  const { clock, cache, render } = setup(0);
  await cache.get(render);
  await cache.get(render);
  assert.is(clock.renders, 2);
  assert.throws(() => new ResponseCache(-1), /http\.cacheMs must be an integer >= 0/);
  assert.throws(() => new ResponseCache(1.5), /http\.cacheMs/);
});

test.run();
