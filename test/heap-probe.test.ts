/**
 * The debug memory probe (engine/actor/heap-probe.ts): off without SLUICE_DEBUG_HEAP_DIR; on, one
 * sample line per interval and one heap snapshot per `snapshot-<tag>` request file, each served
 * once.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import {
  heapProbe,
  HEAP_PROBE_DIR_ENV,
  HEAP_PROBE_INTERVAL_ENV,
  type HeapSample,
} from '../engine/actor/heap-probe.js';

test('off (null) when the directory variable is unset', () => {
  assert.is(heapProbe('a', {}), null);
});

test('samples at most once per interval and serves each snapshot request once', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'heap-probe-'));
  try {
    const probe = heapProbe('service:a/b', {
      [HEAP_PROBE_DIR_ENV]: dir,
      [HEAP_PROBE_INTERVAL_ENV]: '60000',
    })!;
    probe();
    probe(); // within the interval: nothing
    const lines = fs.readFileSync(path.join(dir, 'heap.jsonl'), 'utf8').trim().split('\n');
    assert.is(lines.length, 1);
    const s = JSON.parse(lines[0]!) as HeapSample;
    assert.is(s.name, 'service:a/b');
    for (const k of ['heapUsed', 'heapTotal', 'external', 'rss', 'newSpace', 'oldSpace'] as const)
      assert.ok(s[k] > 0, `${k} = ${s[k]}`);
    assert.ok(s.heapUsed <= s.heapTotal);

    const fast = heapProbe('t', { [HEAP_PROBE_DIR_ENV]: dir, [HEAP_PROBE_INTERVAL_ENV]: '1' })!;
    fs.writeFileSync(path.join(dir, 'snapshot-x'), '');
    const snap = path.join(dir, `t-x.heapsnapshot`);
    const wait = (ms: number) => {
      const until = Date.now() + ms;
      while (Date.now() < until);
    };
    fast();
    assert.ok(fs.existsSync(snap), 'snapshot written');
    fs.rmSync(snap);
    wait(2);
    fast(); // the same tag again: not served twice
    assert.not.ok(fs.existsSync(snap));
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('a request older than the thread (before a restart) is not served', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'heap-probe-'));
  try {
    const old = path.join(dir, 'snapshot-m05');
    fs.writeFileSync(old, '');
    const past = new Date(Date.now() - 60_000);
    fs.utimesSync(old, past, past);
    const probe = heapProbe('restarted', { [HEAP_PROBE_DIR_ENV]: dir })!;
    probe();
    assert.ok(fs.existsSync(path.join(dir, 'heap.jsonl')), 'sampled');
    assert.not.ok(fs.existsSync(path.join(dir, 'restarted-m05.heapsnapshot')));
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
