/**
 * Worker side of the pipeline and latency benchmarks (bench/pipeline.ts, bench/latency.ts):
 * tails one queue partition from its start until `count` records have been read, then posts
 * when the first and the last arrived. With `latency`, each record is an envelope whose payload
 * starts with the time its event was appended (see hrtimeUs), and the
 * worker records now - that time, in microseconds, in an HdrHistogram. The time is
 * process.hrtime (CLOCK_MONOTONIC, shared by every process of the machine) in µs as a float64,
 * so a producer in another process stamps on the same clock.
 * With `warmupMs`, a second histogram leaves out the events appended in the first `warmupMs` after
 * the first event (JIT compilation, first segment and ring setup in every thread), as latency
 * harnesses such as Chronicle's JLBH do with their warm-up iterations; both are reported.
 * workerData: { dir, notifier?, count, latency?, warmupMs? }. Posts 'ready' once the tailer is open.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { performance } from 'node:perf_hooks';
import * as hdr from 'hdr-histogram-js';
import { Tailer } from '../engine/journal/index.js';
import { EnvelopeView } from '../engine/codec/index.js';
import { hrtimeUs } from './lib/clock.js';

/** Message the worker posts when done. Times are performance.timeOrigin-based ms. */
export interface PipelineTailResult {
  records: number;
  firstAtMs: number;
  lastAtMs: number;
  parks: number;
  /** Append -> visible latency in µs (only with `latency`): count, p50, p99, p99.9, max. */
  latencyUs: LatencySummary | null;
  /** The same, without the events appended in the first `warmupMs` (null without warmupMs). */
  steadyLatencyUs: LatencySummary | null;
}

/** Latencies in µs from an HdrHistogram. */
export interface LatencySummary {
  count: number;
  p50: number;
  p99: number;
  p999: number;
  max: number;
}

const WAIT_TIMEOUT_MS = 60_000;

const { dir, notifier, count, latency, warmupMs } = workerData as {
  dir: string;
  notifier?: SharedArrayBuffer;
  count: number;
  latency?: boolean;
  warmupMs?: number;
};
const t = Tailer.open({ dir, notifier });
const view = new EnvelopeView();
const histogram = () =>
  hdr.build({
    lowestDiscernibleValue: 1,
    highestTrackableValue: 60_000_000,
    numberOfSignificantValueDigits: 3,
  });
const hist = latency ? histogram() : null;
const steady = latency && warmupMs !== undefined && warmupMs > 0 ? histogram() : null;
let firstSentUs = -1;
parentPort!.postMessage('ready');
let records = 0;
let firstAtMs = 0;
const origin = performance.timeOrigin;
while (records < count) {
  for (let r = t.next(); r; r = t.next()) {
    if (records === 0) firstAtMs = origin + performance.now();
    if (hist) {
      view.wrap(r.bytes, 0, r.bytes.length);
      const p = view.payload;
      const sent = new DataView(p.buffer, p.byteOffset, 8).getFloat64(0, true);
      const us = Math.round(hrtimeUs() - sent);
      hist.recordValue(us > 0 ? us : 0);
      if (firstSentUs < 0) firstSentUs = sent;
      if (steady && sent - firstSentUs >= warmupMs! * 1000) steady.recordValue(us > 0 ? us : 0);
    }
    if (++records >= count) break;
  }
  if (records >= count) break;
  if (!t.waitForAppend(WAIT_TIMEOUT_MS)) break;
}
const result: PipelineTailResult = {
  records,
  firstAtMs,
  lastAtMs: origin + performance.now(),
  parks: t.stats.parks,
  latencyUs: hist ? summary(hist) : null,
  steadyLatencyUs: steady ? summary(steady) : null,
};
t.close();
parentPort!.postMessage(result);

function summary(h: hdr.Histogram): LatencySummary {
  return {
    count: h.totalCount,
    p50: h.getValueAtPercentile(50),
    p99: h.getValueAtPercentile(99),
    p999: h.getValueAtPercentile(99.9),
    max: h.maxValue,
  };
}
