/**
 * Latency benchmark (issue 12, target 2): append -> durable output at a steady rate, p50 / p99 /
 * p99.9 in an HdrHistogram, with the producer in the topology's own thread and in another
 * process, against the journal alone (append -> visible to a tailer) in the same run.
 *
 *   node dist/bench/latency.js [rate] [seconds] [rounds] [warmupMs] [batch|none]
 *   (default 50000 5 1 1000 batch; the last: the fsync policy of every queue, `none` to see the
 *   wake-up path without the disk's fdatasync)
 *
 * Each case reports all its events and, separately, the events appended after the first
 * `warmupMs` (JIT compilation and first-segment setup in every thread fall there), as latency
 * harnesses such as Chronicle's JLBH leave out their warm-up iterations.
 *
 * Each event's payload carries the monotonic time of its append (bench/lib/clock.ts); a worker
 * of the topology's process tails the output queue (woken by its notifier) and records
 * now - that time. An output is visible only once the service's flush returned, i.e. after its
 * fdatasync (fsync batch, the default), so visible = durable. The path: producer flush ->
 * reader actor (woken by the queue's notifier: registered for same-thread producers, an inotify
 * watch for other processes) -> ring -> service actor -> appendBatch + flush -> tail worker.
 *
 * Baseline: an Appender (fsync batch) in this thread, paced the same way, and a worker tailing it
 * with the notifier: one journal hop including one fdatasync per flush, so a floor for a
 * pipeline that makes one durable hop after the input's own.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { loadTopology, startTopology } from '../index.js';
import { Appender, createQueueNotifier } from '../engine/journal/index.js';
import { EnvelopeWriter } from '../engine/codec/index.js';
import { hrtimeUs } from './lib/clock.js';
import { markdownTable, machineLine, si, isMainModule } from './lib/report.js';
import { startTail, writeTopology } from './pipeline.js';
import { produceAtRate } from './latency-producer.js';
import type { LatencySummary, PipelineTailResult } from './pipeline-tail.worker.js';

const producerScript = new URL('./latency-producer.js', import.meta.url).pathname;
/** All events, and those after the warm-up. */
type Latency = { all: LatencySummary; steady: LatencySummary | null };

function latencyOf(r: PipelineTailResult): Latency {
  return { all: r.latencyUs!, steady: r.steadyLatencyUs };
}

/** Journal alone: paced appends (fsync batch) in this thread, a worker tailing with the notifier. */
async function journalCase(
  dir: string,
  rate: number,
  count: number,
  warmupMs: number,
  fsync: Fsync,
): Promise<Latency> {
  const notifier = createQueueNotifier();
  const a = Appender.open({ dir, fsync, notifier });
  const tail = startTail(dir, count, notifier, true, warmupMs);
  await tail.ready;
  const writer = new EnvelopeWriter();
  const payload = new Uint8Array(16);
  const stamp = new DataView(payload.buffer);
  const sleeper = new Int32Array(new SharedArrayBuffer(4));
  const t0 = hrtimeUs();
  let sent = 0;
  while (sent < count) {
    const due = Math.min(count, Math.floor(((hrtimeUs() - t0) * rate) / 1e6));
    if (due > sent) {
      for (; sent < due; sent++) {
        stamp.setFloat64(0, hrtimeUs(), true);
        a.append(
          writer.encode({ type: 100, key: `k${sent & 1023}`, eventTimeMs: Date.now(), payload }),
        );
      }
      a.flush();
    } else {
      Atomics.wait(sleeper, 0, 0, 0.1);
    }
  }
  const r = await tail.done;
  a.close();
  return latencyOf(r);
}

/** The pipeline with the producer in this thread or in a child process. */
async function pipelineCase(
  dir: string,
  rate: number,
  count: number,
  crossProcess: boolean,
  warmupMs: number,
  fsync: Fsync,
): Promise<Latency> {
  const file = writeTopology(dir, 'latency-bench', 256, fsync);
  const topology = loadTopology(file);
  const running = await startTopology(topology, {
    log: (l) => process.stderr.write(`latency bench: ${l}\n`),
  });
  try {
    const tail = startTail(
      path.join(topology.dataDir, 'queues', 'out', '0'),
      count,
      running.plan.notifiers.get('out/0'),
      true,
      warmupMs,
    );
    await tail.ready;
    if (crossProcess) {
      await new Promise<void>((resolve, reject) => {
        const p = spawn(process.execPath, [producerScript, file, String(rate), String(count)], {
          stdio: ['ignore', 'ignore', 'inherit'],
        });
        p.on('error', reject);
        p.on('exit', (code) =>
          code === 0 ? resolve() : reject(new Error(`producer exited ${code}`)),
        );
      });
    } else {
      produceAtRate(topology, rate, count);
    }
    const r = await tail.done;
    if (r.records !== count) throw new Error(`read ${r.records} of ${count} outputs`);
    return latencyOf(r);
  } finally {
    await running.stop();
  }
}

type Fsync = 'batch' | 'none';

const ms = (us: number) => (us / 1000).toFixed(us < 10_000 ? 2 : 1);

/** Runs the three cases `rounds` times and returns a markdown section. */
export async function runLatencyBench(
  rate = 50_000,
  seconds = 5,
  rounds = 1,
  warmupMs = 1000,
  fsync: Fsync = 'batch',
): Promise<string> {
  const count = rate * seconds;
  const rows: string[][] = [];
  const load0 = os.loadavg()[0];
  for (let round = 1; round <= rounds; round++) {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-latency-bench-'));
    try {
      const cases: [string, () => Promise<Latency>][] = [
        [
          'journal alone (append -> tailer, same process)',
          () => journalCase(path.join(dir, 'journal'), rate, count, warmupMs, fsync),
        ],
        [
          "pipeline, producer in the topology's thread",
          () => pipelineCase(path.join(dir, 'same'), rate, count, false, warmupMs, fsync),
        ],
        [
          'pipeline, producer in another process',
          () => pipelineCase(path.join(dir, 'cross'), rate, count, true, warmupMs, fsync),
        ],
      ];
      for (const [name, run] of cases) {
        fs.mkdirSync(
          path.join(
            dir,
            name === cases[0][0] ? 'journal' : name.includes('another') ? 'cross' : 'same',
          ),
          { recursive: true },
        );
        const { all: l, steady: w } = await run();
        rows.push([
          String(round),
          name,
          si(l.count),
          ms(l.p50),
          ms(l.p99),
          ms(l.p999),
          ms(l.max),
          w ? ms(w.p50) : '-',
          w ? ms(w.p99) : '-',
          w ? ms(w.p999) : '-',
          w ? ms(w.max) : '-',
        ]);
      }
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }
  const load1 = os.loadavg()[0];
  return [
    `### Latency: append -> ${fsync === 'batch' ? 'durable' : 'visible (fsync none)'} output at ${si(rate)} events/s (${seconds} s per case)`,
    '',
    `${machineLine()}; 1-minute load average ${load0.toFixed(1)} at start, ${load1.toFixed(1)} at end.`,
    '',
    markdownTable(
      [
        'round',
        'case',
        'events',
        'p50 ms',
        'p99 ms',
        'p99.9 ms',
        'max ms',
        `after ${warmupMs} ms: p50`,
        'p99',
        'p99.9',
        'max',
      ],
      rows,
      ['r', 'l', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r'],
    ),
    '',
    `HdrHistogram (hdr-histogram-js), 3 significant digits, µs resolution; fsync ${fsync} on every queue; ` +
      'the events due are appended and flushed together every ~100 µs. ' +
      `"after ${warmupMs} ms": the events appended after the first ${warmupMs} ms of each case (warm-up left out).`,
    '',
  ].join('\n');
}

if (isMainModule(import.meta.url)) {
  const [rate, seconds, rounds, warmupMs] = process.argv.slice(2, 6).map(Number);
  const fsync = process.argv[6] ?? 'batch';
  if (fsync !== 'batch' && fsync !== 'none')
    throw new Error(`fsync must be batch or none, got ${fsync}`);
  console.log(
    await runLatencyBench(
      rate || undefined,
      seconds || undefined,
      rounds || undefined,
      Number.isFinite(warmupMs) ? warmupMs : undefined,
      fsync,
    ),
  );
  process.exit(0);
}
