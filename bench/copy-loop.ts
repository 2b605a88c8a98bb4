/**
 * Copy benchmark behind engine/codec/envelope.ts COPY_LOOP_BYTES_MAX: copying n bytes out of a
 * reused buffer into a target at an offset with a byte loop, against `target.set(buf.subarray(0,
 * n), offset)` (EnvelopeWriter.copyTo) and against `target.set(src, offset)` of a whole small
 * array (the payload copy in EnvelopeWriter.build), for n = 16..1024, in the same process and
 * run. Prints a markdown table of ns per copy (median of rounds) and the loop / set ratios.
 *
 * `node dist/bench/copy-loop.js [durationMsPerCase]` (default 300): an ArrayBuffer target (a
 * journal appender's write buffer), then a SharedArrayBuffer one (a ring).
 */
import { cpus } from 'node:os';

const SIZES = [16, 32, 64, 128, 256, 512, 1024];
const TARGET_BYTES = 1 << 16;
let sink = 0;

/** Runs `op` in rounds of 10,000 calls for about `durationMs`; the median ns per call. */
function measure(op: (i: number) => number, durationMs: number): number {
  const batch = 10_000;
  for (let i = 0; i < 50_000; i++) sink += op(i);
  const perRound: number[] = [];
  const deadline = performance.now() + durationMs;
  while (performance.now() < deadline) {
    const t0 = performance.now();
    for (let i = 0; i < batch; i++) sink += op(i);
    perRound.push(((performance.now() - t0) * 1e6) / batch);
  }
  perRound.sort((a, b) => a - b);
  return perRound[perRound.length >> 1]!;
}

/** One row per size: loop, set(subarray) and set(whole array), ns per copy. */
export function runCopyLoopBench(durationMs = 300, shared = false): string {
  const target = shared
    ? new Uint8Array(new SharedArrayBuffer(TARGET_BYTES))
    : new Uint8Array(TARGET_BYTES);
  const source = new Uint8Array(4096);
  for (let i = 0; i < source.length; i++) source[i] = i & 0xff;
  const rows: string[] = [];
  for (const n of SIZES) {
    const whole = source.slice(0, n);
    const slots = Math.floor(TARGET_BYTES / n);
    const loop = measure((i) => {
      const at = (i % slots) * n;
      for (let j = 0; j < n; j++) target[at + j] = source[j]!;
      return target[at]!;
    }, durationMs);
    const setSub = measure((i) => {
      const at = (i % slots) * n;
      target.set(source.subarray(0, n), at);
      return target[at]!;
    }, durationMs);
    const setWhole = measure((i) => {
      const at = (i % slots) * n;
      target.set(whole, at);
      return target[at]!;
    }, durationMs);
    rows.push(
      `| ${n} | ${loop.toFixed(1)} | ${setSub.toFixed(1)} | ${setWhole.toFixed(1)} | ${(loop / setSub).toFixed(2)}x | ${(loop / setWhole).toFixed(2)}x |`,
    );
  }
  return [
    `Node ${process.version}, ${cpus()[0]?.model ?? 'unknown CPU'}, ${durationMs} ms per case; ns per copy into ${shared ? 'a SharedArrayBuffer' : 'an ArrayBuffer'} target (median of rounds of 10,000).`,
    '',
    '| bytes | byte loop | set(subarray) | set(array) | loop / set(subarray) | loop / set(array) |',
    '|---|---|---|---|---|---|',
    ...rows,
    '',
    `(checksum ${sink % 1000})`,
  ].join('\n');
}

if (import.meta.url === new URL(process.argv[1]!, 'file:').href) {
  const ms = Number(process.argv[2] ?? 300);
  console.log(runCopyLoopBench(ms, false));
  console.log('');
  console.log(runCopyLoopBench(ms, true));
}
