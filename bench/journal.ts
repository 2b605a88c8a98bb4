/**
 * Journal benchmark (engine/journal): append throughput at 100 B and 1 KiB payloads with fsync
 * 'none' and 'batch' (a flush, hence one fdatasync, per 1000 records), tail throughput from a
 * second thread (live, while the appender writes, and catching up on a written queue), and
 * reading backwards. `runJournalBench()` returns a markdown "## Journal" section for
 * bench/RESULTS.md; `node dist/bench/journal.js` prints it. About 30 s on a 2-CPU machine.
 *
 * Queues live in os.tmpdir() (say which filesystem in RESULTS.md: fsync cost is the disk's).
 * Rates count payload bytes only (frames add 16 bytes of header and up to 7 of padding).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import { performance } from 'node:perf_hooks';
import {
  Appender,
  Tailer,
  createQueueNotifier,
  type FsyncPolicy,
} from '../engine/journal/index.js';
import type { TailResult } from './journal-tail.worker.js';

const FLUSH_EVERY_RECORDS = 1000;
const worker = new URL('./journal-tail.worker.js', import.meta.url);

interface Row {
  name: string;
  records: number;
  payloadBytes: number;
  ms: number;
  note: string;
}

function tmpQueue(): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-journal-bench-'));
}

function payload(bytes: number): Buffer {
  const b = Buffer.alloc(bytes);
  for (let i = 0; i < bytes; i++) b[i] = (i * 31 + 1) & 0xff;
  return b;
}

/** Appends `size`-byte records for ~durationMs, flushing every 1000; the appender is left open. */
function appendFor(
  a: Appender,
  size: number,
  durationMs: number,
  batch: boolean,
): { records: number; ms: number; flushes: number } {
  const p = payload(size);
  const batchPayloads = Array.from({ length: FLUSH_EVERY_RECORDS }, () => p);
  const t0 = performance.now();
  const deadline = t0 + durationMs;
  let records = 0;
  let flushes = 0;
  while (performance.now() < deadline) {
    if (batch) a.appendBatch(batchPayloads);
    else for (let i = 0; i < FLUSH_EVERY_RECORDS; i++) a.append(p);
    a.flush();
    records += FLUSH_EVERY_RECORDS;
    flushes++;
  }
  return { records, ms: performance.now() - t0, flushes };
}

function appendCase(size: number, fsync: FsyncPolicy, durationMs: number, batch = false): Row {
  const dir = tmpQueue();
  try {
    const a = Appender.open({ dir, fsync });
    appendFor(a, size, Math.min(200, durationMs / 5), batch); // warm up the JIT and the files
    const r = appendFor(a, size, durationMs, batch);
    a.close();
    const how = batch ? 'appendBatch(1000) + flush()' : 'append() x1000 + flush()';
    return {
      name: `append ${size} B, fsync '${fsync}', ${how}`,
      records: r.records,
      payloadBytes: r.records * size,
      ms: r.ms,
      note: fsync === 'none' ? '' : `${((r.flushes / r.ms) * 1000).toFixed(0)} fdatasync/s`,
    };
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

function startTailer(
  dir: string,
  notifier?: SharedArrayBuffer,
): { ready: Promise<void>; done: Promise<TailResult> } {
  const w = new Worker(worker, { workerData: { dir, notifier } });
  let readyResolve: () => void = () => {};
  const ready = new Promise<void>((r) => (readyResolve = r));
  const done = new Promise<TailResult>((resolve, reject) => {
    w.on('message', (m: 'ready' | TailResult) => {
      if (m === 'ready') readyResolve();
      else {
        resolve(m);
        void w.terminate();
      }
    });
    w.on('error', reject);
  });
  return { ready, done };
}

/** Live tail: main appends 100 B records (fsync 'none') while a worker tails; then a fresh worker catches up from the start. */
async function tailCases(durationMs: number): Promise<Row[]> {
  const size = 100;
  const dir = tmpQueue();
  try {
    const notifier = createQueueNotifier();
    const a = Appender.open({ dir, fsync: 'none', notifier });
    const live = startTailer(dir, notifier);
    await live.ready;
    const t0 = performance.timeOrigin + performance.now();
    const w = appendFor(a, size, durationMs, false);
    a.append(new Uint8Array(0)); // end sentinel
    a.close();
    const r = await live.done;
    const rows: Row[] = [
      {
        name: `tail ${size} B live, worker thread + notifier, while appending (fsync 'none')`,
        records: r.records,
        payloadBytes: r.records * size,
        ms: r.lastAtMs - t0,
        note: `appender in that run: ${(((w.records / w.ms) * 1000) / 1e6).toFixed(2)} M rec/s; tailer parked ${r.parks}x`,
      },
    ];
    const catchUp = startTailer(dir);
    const c = await catchUp.done;
    rows.push({
      name: `tail ${size} B catch-up from the start, worker thread (page cache warm)`,
      records: c.records,
      payloadBytes: c.records * size,
      ms: c.lastAtMs - c.firstAtMs,
      note: '',
    });
    const back = Tailer.open({ dir, from: 'end' });
    back.previous(); // the sentinel
    const b0 = performance.now();
    let n = 0;
    const deadline = b0 + durationMs;
    while (performance.now() < deadline) {
      let k = 0;
      for (; k < 10_000 && back.previous() !== null; k++);
      n += k;
      if (k < 10_000) break;
    }
    const bms = performance.now() - b0;
    back.close();
    rows.push({
      name: `read ${size} B backwards with previous(), main thread`,
      records: n,
      payloadBytes: n * size,
      ms: bms,
      note: '',
    });
    return rows;
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/** Runs the journal benchmark (~2 s per case by default) and returns a markdown "## Journal" section. */
export async function runJournalBench(durationMs = 2000): Promise<string> {
  const rows: Row[] = [];
  for (const size of [100, 1024]) {
    for (const fsync of ['none', 'batch'] as FsyncPolicy[])
      rows.push(appendCase(size, fsync, durationMs));
  }
  rows.push(appendCase(100, 'batch', durationMs, true));
  rows.push(...(await tailCases(durationMs)));
  const cpu = os.cpus()[0]?.model ?? 'unknown CPU';
  const lines = [
    '## Journal',
    '',
    `Machine: ${os.cpus().length} CPUs (nproc), ${cpu}; Node ${process.version}; ` +
      `${new Date().toISOString().slice(0, 10)}; queues in ${os.tmpdir()}. \`node dist/bench/journal.js\`.`,
    '',
    '| case | records/s | MB/s (payload) | records | note |',
    '|---|---:|---:|---:|---|',
    ...rows.map(
      (r) =>
        `| ${r.name} | ${fmtRate((r.records / r.ms) * 1000)} | ${(((r.payloadBytes / r.ms) * 1000) / 1e6).toFixed(0)} | ${r.records} | ${r.note} |`,
    ),
    '',
  ];
  return lines.join('\n');
}

function fmtRate(perS: number): string {
  return perS >= 1e6 ? `${(perS / 1e6).toFixed(2)} M` : `${(perS / 1e3).toFixed(0)} k`;
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  console.log(await runJournalBench());
}
