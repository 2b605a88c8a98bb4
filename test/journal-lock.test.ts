/**
 * Exactly one appender per queue directory across the worker threads of one process: a second
 * appender (or journal bus, or topology lock) opened in a real worker thread is refused while
 * the first is open, and a lock left by a worker thread that died is taken over.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Worker } from 'node:worker_threads';
import {
  Appender,
  Tailer,
  JournalLockedError,
  acquireAppenderLock,
} from '../engine/journal/index.js';
import { createJournalBus } from '../engine/bus/journal/index.js';
import type { LockWorkerData, LockWorkerResult } from './journal-lock.worker.js';

const WORKER = new URL('./journal-lock.worker.js', import.meta.url);

function tmpDir(): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-lock-'));
}

interface Started {
  result: Promise<LockWorkerResult>;
  worker: Worker;
  exited: Promise<number>;
}

function startWorker(data: LockWorkerData): Started {
  const worker = new Worker(WORKER, { workerData: data });
  const exited = new Promise<number>((resolve) => worker.once('exit', resolve));
  const result = new Promise<LockWorkerResult>((resolve, reject) => {
    worker.once('message', resolve);
    worker.once('error', reject);
    void exited.then(() => reject(new Error('lock worker exited without reporting')));
  });
  return { result, worker, exited };
}

function readAll(dir: string): string[] {
  const t = Tailer.open({ dir });
  const out: string[] = [];
  for (let r = t.next(); r !== null; r = t.next()) out.push(Buffer.from(r.bytes).toString());
  t.close();
  return out;
}

test('a second appender opened in a worker thread is refused, naming the directory; flushed records stay', async () => {
  const dir = tmpDir();
  try {
    const a = Appender.open({ dir });
    a.append(Buffer.from('first'));
    a.append(Buffer.from('second'));
    a.flush();
    const w = startWorker({ op: 'appender', dir, then: 'close', append: ['intruder'] });
    const r = await w.result;
    await w.exited;
    assert.equal(r.opened, false, 'the worker must not get an appender');
    if (r.opened) return;
    assert.is(r.name, 'JournalLockedError');
    assert.is(
      r.message,
      `${path.resolve(dir, 'appender.lock')}: queue is locked by live worker thread 0 of this process (pid ${process.pid}); exactly one Appender may be open per queue directory`,
    );
    a.append(Buffer.from('third'));
    a.flush();
    assert.equal(readAll(dir), ['first', 'second', 'third']);
    a.close();
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('an appender held by a live worker thread refuses one in the main thread', async () => {
  const dir = tmpDir();
  try {
    const w = startWorker({ op: 'appender', dir, then: 'hold', append: ['from-worker'] });
    assert.equal(await w.result, { opened: true });
    try {
      Appender.open({ dir });
      assert.unreachable('the main thread must not get an appender');
    } catch (e) {
      assert.instance(e, JournalLockedError);
      assert.is((e as JournalLockedError).ownerThreadId, w.worker.threadId);
      assert.match(
        (e as Error).message,
        `${path.resolve(dir, 'appender.lock')}: queue is locked by live worker thread ${w.worker.threadId}`,
      );
    }
    w.worker.postMessage('close');
    await w.exited;
    assert.equal(readAll(dir), ['from-worker']);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('the lock of a worker thread that died without closing is taken over; its records stay', async () => {
  const dir = tmpDir();
  try {
    const w = startWorker({ op: 'appender', dir, then: 'leak', append: ['a', 'b'] });
    assert.equal(await w.result, { opened: true });
    await w.exited;
    const a = Appender.open({ dir });
    assert.is(a.recovery.lockTakenOverFromPid, process.pid);
    a.append(Buffer.from('c'));
    a.flush();
    assert.equal(readAll(dir), ['a', 'b', 'c']);
    a.close();
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('a journal bus open in the main thread refuses a second one in a worker thread', async () => {
  const dir = tmpDir();
  try {
    const bus = await createJournalBus({ dir });
    await bus.createTopics([{ name: 'orders', partitions: 2 }]);
    const p = await bus.producer();
    await p.send([{ topic: 'orders', key: 'k', value: Buffer.from('v1'), partition: 1 }]);
    const w = startWorker({ op: 'bus', dir, then: 'close' });
    const r = await w.result;
    await w.exited;
    assert.equal(r.opened, false);
    if (r.opened) return;
    assert.is(r.name, 'JournalLockedError');
    assert.match(r.message, `${path.resolve(dir)}${path.sep}`);
    assert.match(r.message, 'is locked by live worker thread 0 of this process');
    await p.send([{ topic: 'orders', key: 'k', value: Buffer.from('v2'), partition: 1 }]);
    await bus.close();
    const again = await createJournalBus({ dir });
    const c = await again.consumer();
    await c.assign([{ topic: 'orders', partition: 1 }]);
    const got = await c.poll({ timeoutMs: 100 });
    assert.equal(
      got.map((x) => [x.offset, Buffer.from(x.value!).toString()]),
      [
        [0, 'v1'],
        [1, 'v2'],
      ],
    );
    await again.close();
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('a topology lock held in the main thread is refused to a worker thread', async () => {
  const dir = tmpDir();
  try {
    const lock = acquireAppenderLock(dir, 'topology.lock');
    const w = startWorker({ op: 'topology-lock', dir, then: 'close' });
    const r = await w.result;
    await w.exited;
    assert.equal(r.opened, false);
    if (!r.opened)
      assert.match(
        r.message,
        `${path.resolve(dir, 'topology.lock')}: queue is locked by live worker thread 0`,
      );
    lock.release();
    const w2 = startWorker({ op: 'topology-lock', dir, then: 'close' });
    assert.equal(await w2.result, { opened: true });
    await w2.exited;
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
