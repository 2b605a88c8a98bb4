/**
 * The benchmark harness (engine/harness, `sluice bench`): on a real topology in worker threads it
 * feeds the source queues, waits until the service has caught up, and reports per actor; every
 * generated record is handled exactly once (counters), the topology's own data directory is never
 * touched, and bad requests are refused with what was wrong. No timing is asserted.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { parseTopology } from '../engine/config/index.js';
import { keyChooser, runBench, sourceQueues } from '../engine/harness/index.js';
import { sluice } from './lib/cli.js';

const passThrough = new URL('./fixtures/services/thrower.js', import.meta.url).pathname;
let dir = '';
let file = '';
test.before.each(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-bench-harness-'));
  file = path.join(dir, 'topology.yaml');
  fs.writeFileSync(
    file,
    [
      'name: bench-test',
      'dataDir: ./own-data',
      'queues:',
      '  - { name: in, partitions: 2 }',
      '  - { name: out }',
      'services:',
      '  - name: pass',
      `    module: ${passThrough}`,
      '    inputs: [in]',
      '    output: out',
      '',
    ].join('\n'),
  );
});
test.after.each(() => fs.rmSync(dir, { recursive: true, force: true }));

test('source queues: read by a service, written by nothing in the topology (outputs, dead letters, timers excluded)', () => {
  const t = parseTopology(fs.readFileSync(file, 'utf8'), file);
  assert.equal(sourceQueues(t), ['in']);
});

test('a rate-limited run: every generated record is read and handled once, the report has every actor, the own dataDir is untouched', async () => {
  const t = parseTopology(fs.readFileSync(file, 'utf8'), file);
  const r = await runBench(t, {
    ratePerSecond: 2000,
    durationMs: 1000,
    keys: 10,
    skew: 1.1,
    sampleIntervalMs: 100,
  });
  assert.ok(r.caughtUp);
  assert.ok(r.input.records > 0);
  assert.ok(
    r.input.records <= 2000 + 1024,
    `at most the rate's worth plus one batch, got ${r.input.records}`,
  );
  const row = (name: string) => r.actors.find((a) => a.actor === name);
  assert.equal(r.actors.map((a) => a.actor).sort(), [
    'reader:in/0>pass',
    'reader:in/1>pass',
    'service:pass',
  ]);
  assert.is(row('service:pass')!.eventsIn, r.input.records);
  assert.is(row('service:pass')!.eventsOut, r.input.records);
  assert.is(row('reader:in/0>pass')!.eventsIn + row('reader:in/1>pass')!.eventsIn, r.input.records);
  for (const a of r.actors) {
    assert.is(a.restarts, 0);
    assert.ok(a.cpuMs === null || a.cpuMs >= 0);
    assert.ok(
      a.lagMs.p50 <= a.lagMs.p99 && a.lagMs.p99 <= a.lagMs.p999 && a.lagMs.p999 <= a.lagMs.max,
    );
  }
  if (process.platform === 'linux')
    assert.ok(
      r.actors.every((a) => a.cpuMs !== null),
      'thread CPU time on Linux',
    );
  assert.not.ok(
    fs.existsSync(path.join(dir, 'own-data')),
    "the topology's own dataDir was created",
  );
});

test('sluice bench --json on the CLI: the report parses and accounts for every record; a queue that is not a source is refused', async () => {
  const r = await sluice(
    ['bench', file, '--duration-s', '1', '--rate', '1000', '--json'],
    '',
    120_000,
  );
  assert.is(r.code, 0, r.err);
  const report = JSON.parse(r.out) as {
    caughtUp: boolean;
    input: { records: number };
    actors: Array<{ actor: string; eventsOut: number }>;
  };
  assert.ok(report.caughtUp);
  assert.is(report.actors.find((a) => a.actor === 'service:pass')!.eventsOut, report.input.records);
  const bad = await sluice(['bench', file, '--duration-s', '1', '--queue', 'out']);
  assert.is(bad.code, 2);
  assert.match(bad.err, `queue "out" is not a source queue of ${file} (sources: in)`);
});

test('keys: uniform and Zipf draws stay in range and are deterministic for a seed; skew favours the first keys', () => {
  const a = keyChooser(100, 1.2, 7);
  const b = keyChooser(100, 1.2, 7);
  const counts = new Map<string, number>();
  for (let i = 0; i < 10_000; i++) {
    const k = a();
    assert.is(k, b());
    counts.set(k, (counts.get(k) ?? 0) + 1);
  }
  assert.ok([...counts.keys()].every((k) => /^k\d+$/.test(k) && Number(k.slice(1)) < 100));
  assert.ok((counts.get('k0') ?? 0) > (counts.get('k50') ?? 0) * 10);
  assert.throws(() => keyChooser(0, 0, 1), /keys must be an integer/);
});

test.run();
