/**
 * engine/journal tailers across boundaries: a worker thread woken by the notifier (parked in
 * Atomics.wait, not polling), and another process that polls the files.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { Worker } from 'node:worker_threads';
import { performance } from 'node:perf_hooks';
import { Appender, createQueueNotifier } from '../engine/journal/index.js';

const tailChild = new URL('./journal-tail.child.js', import.meta.url);

function withDir(fn: (dir: string) => void | Promise<void>): () => Promise<void> {
  return async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-journal-'));
    try {
      await fn(dir);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  };
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const FLUSHES = 20;
const PER_FLUSH = 5;

test(
  'a tailer in a worker thread is woken by the notifier on each flush, without polling',
  withDir(async (dir) => {
    const notifier = createQueueNotifier();
    const a = Appender.open({ dir, notifier, segmentBytes: 1024 });
    const w = new Worker(tailChild, { workerData: { dir, notifier, count: FLUSHES * PER_FLUSH } });
    const messages: {
      type: string;
      records?: [number, string, number][];
      stats?: { polls: number; parks: number };
    }[] = [];
    const waitFor = (type: string): Promise<void> =>
      new Promise((resolve, reject) => {
        const check = (): void => {
          if (messages.some((m) => m.type === type)) resolve();
        };
        w.on('message', (m) => {
          messages.push(m);
          check();
        });
        w.on('error', reject);
        check();
      });
    const ready = waitFor('ready');
    const done = waitFor('done');
    await ready;
    const flushedAtMs: number[] = [];
    for (let f = 0; f < FLUSHES; f++) {
      await sleep(15);
      for (let k = 0; k < PER_FLUSH; k++) a.append(Buffer.from(`f${f}-${k}`));
      a.flush();
      flushedAtMs.push(performance.timeOrigin + performance.now());
    }
    await done;
    a.close();
    await w.terminate();
    const { records, stats } = messages.find((m) => m.type === 'done')! as {
      records: [number, string, number][];
      stats: { polls: number; parks: number };
    };
    assert.equal(
      records.map(([i, s]) => [i, s]),
      Array.from({ length: FLUSHES * PER_FLUSH }, (_, i) => [
        i,
        `f${Math.floor(i / PER_FLUSH)}-${i % PER_FLUSH}`,
      ]),
    );
    // Parked, not polling: about one park and two looks per flush (plus a recheck per 100 ms);
    // polling every 1 ms over the ~300 ms run would be hundreds of looks.
    assert.ok(stats.parks <= 2 * FLUSHES + 5, `parks=${stats.parks}`);
    assert.ok(stats.polls <= 3 * FLUSHES + 10, `polls=${stats.polls}`);
    const lagsMs = records.map(([i, , at]) => at - flushedAtMs[Math.floor(i / PER_FLUSH)]);
    assert.ok(
      Math.max(...lagsMs) < 100,
      `woken promptly after each flush (max lag ${Math.max(...lagsMs).toFixed(2)} ms)`,
    );
  }),
);

test(
  'a tailer in another process reads every record by polling, across segment rolls and batches',
  withDir(async (dir) => {
    const qdir = path.join(dir, 'q');
    const p = spawn(process.execPath, [tailChild.pathname, qdir, String(FLUSHES * PER_FLUSH)], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    p.stdout.setEncoding('utf8');
    const ready = new Promise<void>((r) =>
      p.stdout.on('data', (s: string) => {
        out += s;
        if (out.includes('ready\n')) r();
      }),
    );
    const exited = new Promise<number | null>((r) => p.on('exit', (code) => r(code)));
    await ready;
    const a = Appender.open({ dir: qdir, segmentBytes: 512 });
    for (let f = 0; f < FLUSHES; f++) {
      const payloads = Array.from({ length: PER_FLUSH }, (_, k) => Buffer.from(`f${f}-${k}`));
      if (f % 2 === 0) a.appendBatch(payloads);
      else for (const b of payloads) a.append(b);
      a.flush();
      await sleep(10);
    }
    a.close();
    assert.is(await exited, 0);
    const result = JSON.parse(out.split('\n').find((l) => l.startsWith('{'))!) as {
      records: [number, string][];
      stats: { polls: number; parks: number };
    };
    assert.equal(
      result.records,
      Array.from({ length: FLUSHES * PER_FLUSH }, (_, i) => [
        i,
        `f${Math.floor(i / PER_FLUSH)}-${i % PER_FLUSH}`,
      ]),
    );
    assert.is(result.stats.parks, 0, 'no notifier across processes');
    assert.ok(result.stats.polls > FLUSHES, `polled the files (${result.stats.polls} looks)`);
    assert.ok(
      fs.readdirSync(qdir).filter((f) => f.endsWith('.seg')).length > 2,
      'the queue rolled while the tailer read',
    );
  }),
);

test.run();
