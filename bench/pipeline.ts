/**
 * Live pipeline benchmark (issue 12, target 1): the engine's main path, queue -> queue reader
 * actor -> ring -> service actor -> output queue, against the journal's own append + tail of
 * the same bytes in the same run.
 *
 *   node dist/bench/pipeline.js [events] [rounds] [batchSizeMax]   (default 1000000 2 256)
 *
 * Pipeline: `startTopology` on a topology of two queues (`in`, `out`; fsync batch, the default)
 * and one service (test/fixtures/services/bench-echo: each input of type 100 emitted as type 101
 * with the same key, payload and event time). The main thread appends `events` small events
 * with `openQueueAppender` (16-byte payload, 1024 keys of 4-5 characters, a flush per 1000
 * events, as fast as it can) while a worker tails `out`; the rate is events / (first append ->
 * last output visible). Visible means flushed by the service with its fdatasync, so durable.
 *
 * Baseline: an Appender (fsync batch, flush per 1000) appends the same envelope bytes the
 * producer wrote, and a worker tails them with the notifier: one journal hop of the same bytes,
 * timed the same way. The pipeline makes two hops plus a ring, in three threads on this
 * machine's two cores, so the bound is well under 1x; the target is >= 0.5x.
 *
 * Each round runs the baseline, then the pipeline, back to back (same noise).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Worker } from 'node:worker_threads';
import { performance } from 'node:perf_hooks';
import { loadTopology, openQueueAppender, startTopology } from '../index.js';
import { Appender, createQueueNotifier } from '../engine/journal/index.js';
import { EnvelopeWriter } from '../engine/codec/index.js';
import { markdownTable, machineLine, median, si, isMainModule } from './lib/report.js';
import type { PipelineTailResult } from './pipeline-tail.worker.js';

const FLUSH_EVERY = 1000;
const KEYS = 1024;
const PAYLOAD_BYTES = 16;
const IN_TYPE = 100;
const tailWorker = new URL('./pipeline-tail.worker.js', import.meta.url);
const echoModule = new URL('../test/fixtures/services/bench-echo.js', import.meta.url).pathname;

const keys = Array.from({ length: KEYS }, (_, i) => `k${i}`);
const payload = new Uint8Array(PAYLOAD_BYTES).map((_, i) => i * 7);

/**
 * Starts a worker tailing `dir` until `count` records; resolves `ready` once it is open. With
 * `latency`, the worker records append -> visible latency, and with `warmupMs` also without the
 * events appended in the first `warmupMs` (bench/pipeline-tail.worker.ts).
 */
export function startTail(
  dir: string,
  count: number,
  notifier?: SharedArrayBuffer,
  latency = false,
  warmupMs = 0,
): { ready: Promise<void>; done: Promise<PipelineTailResult> } {
  const w = new Worker(tailWorker, { workerData: { dir, notifier, count, latency, warmupMs } });
  let readyResolve: () => void = () => {};
  const ready = new Promise<void>((r) => (readyResolve = r));
  const done = new Promise<PipelineTailResult>((resolve, reject) => {
    w.on('message', (m: 'ready' | PipelineTailResult) => {
      if (m === 'ready') return readyResolve();
      resolve(m);
      void w.terminate();
    });
    w.on('error', reject);
    w.on('exit', (code) => reject(new Error(`tail worker exited ${code}`)));
  });
  return { ready, done };
}

interface Result {
  ms: number;
  produceMs: number;
  records: number;
}

/** One journal hop of the producer's bytes: append (fsync batch) + tail in a worker. */
async function journalRound(dir: string, events: number): Promise<Result> {
  const writer = new EnvelopeWriter();
  const eventTimeMs = Date.now();
  const records = keys.map((key) => writer.encode({ type: IN_TYPE, key, eventTimeMs, payload }));
  const notifier = createQueueNotifier();
  const a = Appender.open({ dir, fsync: 'batch', notifier });
  const tail = startTail(dir, events, notifier);
  await tail.ready;
  const t0 = performance.timeOrigin + performance.now();
  for (let i = 0; i < events; i++) {
    a.append(records[i & (KEYS - 1)]);
    if (i % FLUSH_EVERY === FLUSH_EVERY - 1) a.flush();
  }
  a.flush();
  const produceMs = performance.timeOrigin + performance.now() - t0;
  const r = await tail.done;
  a.close();
  return { ms: r.lastAtMs - t0, produceMs, records: r.records };
}

/** Writes the benchmark topology into `dir` and returns its file; `fsync` of both queues. */
export function writeTopology(
  dir: string,
  name: string,
  batchSizeMax: number,
  fsync: 'batch' | 'none' = 'batch',
): string {
  const file = path.join(dir, 'topology.yaml');
  fs.writeFileSync(
    file,
    [
      `name: ${name}`,
      `dataDir: ${path.join(dir, 'data')}`,
      'queues:',
      `  - { name: in, fsync: ${fsync} }`,
      `  - { name: out, fsync: ${fsync} }`,
      'services:',
      '  - name: echo',
      `    module: ${echoModule}`,
      '    inputs: [in]',
      '    output: out',
      `    batchSizeMax: ${batchSizeMax}`,
      '',
    ].join('\n'),
  );
  return file;
}

/** The live pipeline: producer in this thread, reader and service actors, output tailed in a worker. */
async function pipelineRound(dir: string, events: number, batchSizeMax: number): Promise<Result> {
  const topology = loadTopology(writeTopology(dir, 'pipeline-bench', batchSizeMax));
  const running = await startTopology(topology, {
    log: (l) => process.stderr.write(`pipeline bench: ${l}\n`),
  });
  try {
    const tail = startTail(
      path.join(topology.dataDir, 'queues', 'out', '0'),
      events,
      running.plan.notifiers.get('out/0'),
    );
    await tail.ready;
    const producer = openQueueAppender(topology, 'in');
    const t0 = performance.timeOrigin + performance.now();
    for (let i = 0; i < events; i++) {
      producer.appendBytes(IN_TYPE, keys[i & (KEYS - 1)], payload);
      if (i % FLUSH_EVERY === FLUSH_EVERY - 1) producer.flush();
    }
    producer.flush();
    const produceMs = performance.timeOrigin + performance.now() - t0;
    const r = await tail.done;
    producer.close();
    return { ms: r.lastAtMs - t0, produceMs, records: r.records };
  } finally {
    await running.stop();
  }
}

/** Runs `rounds` rounds (journal baseline, then pipeline) and returns a markdown section. */
export async function runPipelineBench(
  events = 1_000_000,
  rounds = 2,
  batchSizeMax = 256,
): Promise<string> {
  const rows: string[][] = [];
  const ratios: number[] = [];
  const rates: number[] = [];
  const load0 = os.loadavg()[0];
  for (let round = 1; round <= rounds; round++) {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-pipeline-bench-'));
    try {
      const j = await journalRound(path.join(dir, 'journal'), events);
      const p = await pipelineRound(dir, events, batchSizeMax);
      if (p.records !== events || j.records !== events)
        throw new Error(`round ${round}: read ${j.records} / ${p.records} of ${events}`);
      const jRate = (events / j.ms) * 1000;
      const pRate = (events / p.ms) * 1000;
      ratios.push(pRate / jRate);
      rates.push(pRate);
      rows.push([
        String(round),
        `${si(jRate)}`,
        `${si((events / j.produceMs) * 1000)}`,
        `${si(pRate)}`,
        `${si((events / p.produceMs) * 1000)}`,
        `${(pRate / jRate).toFixed(2)}x`,
      ]);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }
  const load1 = os.loadavg()[0];
  return [
    `### Live pipeline: queue -> reader -> ring -> service -> output queue (${si(events)} events, batchSizeMax ${batchSizeMax})`,
    '',
    `${machineLine()}; 1-minute load average ${load0.toFixed(1)} at start, ${load1.toFixed(1)} at end.`,
    '',
    markdownTable(
      [
        'round',
        'journal append+tail events/s',
        '(its append alone)',
        'pipeline events/s',
        '(its producer alone)',
        'pipeline / journal',
      ],
      rows,
    ),
    '',
    `Median pipeline ${si(median(rates))} events/s, ${median(ratios).toFixed(2)}x of the journal's append+tail of the same bytes. ` +
      `Events: type ${IN_TYPE}, ${PAYLOAD_BYTES}-byte payload, ${KEYS} keys; a flush per ${FLUSH_EVERY}; fsync batch on every queue.`,
    '',
  ].join('\n');
}

if (isMainModule(import.meta.url)) {
  const [events, rounds, batch] = process.argv.slice(2).map(Number);
  console.log(await runPipelineBench(events || undefined, rounds || undefined, batch || undefined));
  process.exit(0);
}
