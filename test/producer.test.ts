/**
 * Producers wake a running topology's readers (issue 12): an appender opened without a notifier
 * on a queue partition a topology registered signals that notifier at every flush (same
 * thread, openQueueAppender), and an append by another process reaches it through the
 * inotify watch on the partition directory. Asserted on the notifier's publish count, never on
 * time.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { loadTopology, openQueueAppender, partitionDir, startTopology } from '../index.js';
import {
  Appender,
  Tailer,
  createQueueNotifier,
  registerQueueNotifier,
  registeredQueueNotifier,
  watchQueueAppends,
} from '../engine/journal/index.js';
import { decodeEnvelope } from '../engine/codec/index.js';

const echo = new URL('./fixtures/services/bench-echo.js', import.meta.url).pathname;
const journalIndex = new URL('../engine/journal/index.js', import.meta.url).href;

let dir = '';
test.before.each(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'perf_sluice-producer-'));
});
test.after.each(() => {
  fs.rmSync(dir, { recursive: true, force: true });
});

/** publishSeq of a notifier (engine/journal/notifier.ts: Int32 slot 0). */
const publishes = (n: SharedArrayBuffer) => Atomics.load(new Int32Array(n), 0);

test('an appender opened without a notifier on a registered directory publishes on the registered notifier at every flush', () => {
  const q = path.join(dir, 'q');
  const notifier = createQueueNotifier();
  const unregister = registerQueueNotifier(q, notifier);
  assert.is(
    registeredQueueNotifier(path.join(dir, '.', 'q')),
    notifier,
    'looked up by resolved path',
  );
  const a = Appender.open({ dir: q });
  const afterOpen = publishes(notifier);
  a.append(new Uint8Array([1]));
  a.flush();
  assert.is(publishes(notifier), afterOpen + 1);
  a.append(new Uint8Array([2]));
  a.flush();
  assert.is(publishes(notifier), afterOpen + 2);
  a.close();
  unregister();
  assert.is(registeredQueueNotifier(q), undefined);
  const b = Appender.open({ dir: q });
  b.append(new Uint8Array([3]));
  b.flush();
  b.close();
  assert.is(publishes(notifier), afterOpen + 2, 'unregistered: no longer signalled');
});

test('an appender given its own notifier keeps it over the registered one', () => {
  const q = path.join(dir, 'q');
  const registered = createQueueNotifier();
  const own = createQueueNotifier();
  const unregister = registerQueueNotifier(q, registered);
  try {
    const a = Appender.open({ dir: q, notifier: own });
    a.append(new Uint8Array([1]));
    a.flush();
    a.close();
    assert.is(publishes(registered), 0);
    assert.ok(publishes(own) >= 1);
  } finally {
    unregister();
  }
});

test('openQueueAppender in the thread running the topology signals the reader notifier of the partition it flushes, and the service sees the event', async () => {
  const file = path.join(dir, 'topology.yaml');
  fs.writeFileSync(
    file,
    `name: perf-producer\ndataDir: ./data\nqueues:\n  - { name: in }\n  - { name: out }\n` +
      `services:\n  - name: echo\n    module: ${echo}\n    inputs: [in]\n    output: out\n`,
  );
  const t = loadTopology(file);
  const running = await startTopology(t, { log: () => {} });
  const notifier = running.plan.notifiers.get('in/0')!;
  try {
    assert.is(registeredQueueNotifier(partitionDir(t, 'in', 0)), notifier);
    const producer = openQueueAppender(t, 'in');
    const before = publishes(notifier);
    producer.appendBytes(100, 'k', new Uint8Array([7, 8, 9]));
    producer.flush();
    assert.ok(publishes(notifier) > before, "flush published on the topology's notifier");
    producer.close();
    const out = Tailer.open({
      dir: partitionDir(t, 'out', 0),
      notifier: running.plan.notifiers.get('out/0'),
    });
    try {
      assert.ok(out.waitForAppend(30_000), 'echoed output arrives');
      const e = decodeEnvelope(out.next()!.bytes);
      assert.is(e.type, 101);
      assert.is(e.key, 'k');
      assert.equal([...e.payload], [7, 8, 9]);
    } finally {
      out.close();
    }
  } finally {
    await running.stop();
  }
  assert.is(
    registeredQueueNotifier(partitionDir(t, 'in', 0)),
    undefined,
    'unregistered once stopped',
  );
});

test('an append by another process publishes on the notifier of a watched partition directory', async () => {
  const q = path.join(dir, 'q');
  const notifier = createQueueNotifier();
  const stop = watchQueueAppends(q, notifier);
  try {
    const before = publishes(notifier);
    const code =
      `import { Appender } from ${JSON.stringify(journalIndex)};\n` +
      `const a = Appender.open({ dir: ${JSON.stringify(q)} }); a.append(new Uint8Array([1, 2])); a.flush(); a.close();`;
    await new Promise<void>((resolve, reject) => {
      const p = spawn(process.execPath, ['--input-type=module', '-e', code], {
        stdio: ['ignore', 'inherit', 'inherit'],
      });
      p.on('error', reject);
      p.on('exit', (c) => (c === 0 ? resolve() : reject(new Error(`appender child exited ${c}`))));
    });
    // The watch's events arrive on this thread's event loop: wait for them (bounded).
    for (let i = 0; i < 300 && publishes(notifier) === before; i++)
      await new Promise((r) => setTimeout(r, 10));
    assert.ok(publishes(notifier) > before, "the other process's append was signalled");
  } finally {
    stop();
  }
});

test.run();
