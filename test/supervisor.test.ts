import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Supervisor, type RestartEvent } from '../engine/supervisor/index.js';

const crashy = new URL('./fixtures/actors/crashy.js', import.meta.url);

function group(name: string, failStarts: number, mode: 'throw' | 'exit') {
  return {
    name,
    stage: 0,
    start: async (l: {
      launch: (s: { name: string; module: URL; data: unknown }) => { ready(): Promise<unknown> };
    }) => {
      await l.launch({ name: `${name}-actor`, module: crashy, data: { failStarts, mode } }).ready();
    },
  };
}

test('a crashed actor is restarted with exponential backoff and then runs', async () => {
  const sup = new Supervisor({ restartsMax: 5, backoffInitialMs: 20, backoffMaxMs: 1000 });
  const restarts: RestartEvent[] = [];
  sup.on('restart', (e: RestartEvent) => restarts.push(e));
  await sup.start([group('g', 3, 'throw')]);
  while (restarts.length < 3 || sup.counters()['g-actor'].state !== 'live')
    await new Promise((r) => setTimeout(r, 10));
  assert.equal(
    restarts.map((r) => r.delayMs),
    [20, 40, 80],
  );
  assert.match(restarts[0].error, 'crashy failure on start 0');
  const result = await sup.stop();
  assert.equal(result.summaries['g-actor'], { restarts: 3 });
  assert.equal(result.terminated, []);
});

test('process.exit inside a worker counts as a crash and is restarted', async () => {
  const sup = new Supervisor({ restartsMax: 5, backoffInitialMs: 10 });
  const restarts: RestartEvent[] = [];
  sup.on('restart', (e: RestartEvent) => restarts.push(e));
  await sup.start([group('x', 1, 'exit')]);
  while (sup.counters()['x-actor']?.state !== 'live') await new Promise((r) => setTimeout(r, 10));
  assert.is(restarts.length, 1);
  assert.match(restarts[0].error, 'exited with code 3');
  await sup.stop();
});

test('too many restarts within the window stop the topology with a clear error', async () => {
  const sup = new Supervisor({ restartsMax: 2, restartWindowMs: 60_000, backoffInitialMs: 5 });
  await sup.start([group('bad', 100, 'throw')]).catch(() => undefined);
  const err = await sup.done.then(
    () => null,
    (e: Error) => e,
  );
  assert.ok(err, 'done must reject');
  assert.match(err!.message, 'group bad failed 3 times within 60000 ms (restartsMax=2)');
  assert.match(err!.message, 'crashy failure on start 2');
});

test('an actor that fails at every start stays in actors(): failed with its error between restarts', async () => {
  const sup = new Supervisor({ backoffInitialMs: 150, backoffMaxMs: 150 });
  const restarts: RestartEvent[] = [];
  sup.on('restart', (e: RestartEvent) => restarts.push(e));
  void sup.start([group('never', 1_000_000, 'throw')]).catch(() => undefined);
  try {
    const states = new Set<string>();
    let failedError: string | null = null;
    while (restarts.length < 4) {
      const a = sup.actors().find((x) => x.name === 'never-actor');
      // Listed at every sample once first launched, whatever the moment of its restart cycle.
      if (restarts.length > 0)
        assert.ok(a, `never-actor missing from actors() after ${restarts.length} restarts`);
      if (a) {
        states.add(a.counters.state);
        if (a.counters.state === 'failed') failedError = a.lastError;
      }
      await new Promise((r) => setTimeout(r, 5));
    }
    assert.ok(states.has('failed'), `states seen: ${[...states].join(', ')}`);
    assert.match(failedError ?? '', 'crashy failure on start');
    assert.ok(sup.actors().find((x) => x.name === 'never-actor')!.restarts >= 4);
  } finally {
    await sup.stop();
  }
});

test.run();
