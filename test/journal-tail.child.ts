/**
 * A tailer on the other side of a thread or process boundary, for journal-tailers.test.ts.
 *
 * As a worker thread (workerData { dir, notifier, count }): parks on the notifier, posts
 * 'ready', then { type: 'done', records: [index, text, receivedAtMs][], stats }.
 * As a child process (argv: dir count): polls the files, prints 'ready', then one JSON line
 * { records: [index, text][], stats }.
 */
import { isMainThread, parentPort, workerData } from 'node:worker_threads';
import fs from 'node:fs';
import { performance } from 'node:perf_hooks';
import { Tailer } from '../engine/journal/index.js';

const WAIT_TIMEOUT_MS = 10_000;

if (!isMainThread) {
  const { dir, notifier, count } = workerData as {
    dir: string;
    notifier: SharedArrayBuffer;
    count: number;
  };
  const t = Tailer.open({ dir, notifier });
  parentPort!.postMessage({ type: 'ready' });
  const records: [number, string, number][] = [];
  while (records.length < count && t.waitForAppend(WAIT_TIMEOUT_MS)) {
    for (let r = t.next(); r; r = t.next())
      records.push([
        r.index,
        Buffer.from(r.bytes).toString(),
        performance.timeOrigin + performance.now(),
      ]);
  }
  parentPort!.postMessage({ type: 'done', records, stats: t.stats });
  t.close();
} else {
  const [dir, countArg] = process.argv.slice(2);
  const count = Number(countArg);
  const t = Tailer.open({ dir, pollIntervalMs: 2 });
  fs.writeSync(1, 'ready\n');
  const records: [number, string][] = [];
  while (records.length < count && t.waitForAppend(WAIT_TIMEOUT_MS)) {
    for (let r = t.next(); r; r = t.next())
      records.push([r.index, Buffer.from(r.bytes).toString()]);
  }
  fs.writeSync(1, JSON.stringify({ records, stats: t.stats }) + '\n');
  t.close();
}
