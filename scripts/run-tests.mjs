#!/usr/bin/env node
/**
 * Runs every compiled uvu test file (dist/test/**\/*.test.js) in its own Node process (three at a
 * time by default, the slowest first), so a leaked handle or global state in one file cannot stall or skew the others, and
 * a hung file is killed after its timeout instead of hanging CI.
 *   node scripts/run-tests.mjs [substring ...]     only files whose path under dist/test contains a substring
 * Env: SLUICE_TEST_JOBS (default 3) files at a time (1: one after another, output streamed);
 * SLUICE_TEST_TIMEOUT_S (default 300) per file; a file whose source says `test-timeout-s: N` in
 * its first comment gets N s when that is longer (the few files that inject many faults).
 * SLUICE_KAFKA_BROKERS: a running Kafka broker
 * for the Kafka tests; unset, a single-node broker is started here (tools/kafka/kafka.sh) when a
 * selected file calls testKafka() (testing/kafka-broker.ts), shared by every file, stopped at the end.
 * Prints each file's output, then "N passed, N failed, N skipped"; exits 1 if anything failed.
 */
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const dir = path.join(root, 'dist', 'test');
const timeoutS = Number(process.env.SLUICE_TEST_TIMEOUT_S ?? 300);
const filters = process.argv.slice(2);

function list(d) {
  return fs.readdirSync(d, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(d, e.name);
    return e.isDirectory() ? list(p) : e.name.endsWith('.test.js') ? [p] : [];
  });
}

const strip = (s) => s.replace(/\x1b\[[0-9;]*m/g, '');
const files = list(dir)
  .sort()
  .filter((f) => filters.length === 0 || filters.some((x) => path.relative(dir, f).includes(x)));
if (files.length === 0) {
  console.error(
    `no test files under ${dir}${filters.length ? ` matching ${filters.join(', ')}` : ''}; run npm run build first`,
  );
  process.exit(1);
}
// One Kafka broker for the whole run (tests use topic and group names of their own; tests that
// stop or restart brokers start private ones). Its log stays in its directory under the temp dir.
let kafkaDir = null;
if (
  !process.env.SLUICE_KAFKA_BROKERS &&
  files.some((f) => /\btestKafka\(/.test(fs.readFileSync(f, 'utf8')))
) {
  const t = Date.now();
  try {
    const out = execFileSync(
      'bash',
      [path.join(root, 'tools', 'kafka', 'kafka.sh'), 'start', '--owner-pid', String(process.pid)],
      { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] },
    );
    process.env.SLUICE_KAFKA_BROKERS = /^brokers=(.*)$/m.exec(out)[1];
    kafkaDir = /^dir=(.*)$/m.exec(out)[1];
    console.log(
      `kafka: shared broker ${process.env.SLUICE_KAFKA_BROKERS} started in ${((Date.now() - t) / 1000).toFixed(1)} s (logs: ${kafkaDir}/node-1/logs)`,
    );
  } catch (e) {
    console.log(
      `kafka: starting the shared broker failed; each Kafka test file starts its own:\n${e.stderr ?? e.message}`,
    );
  }
}
const stopKafka = () => {
  if (kafkaDir === null) return;
  try {
    execFileSync(
      'bash',
      [path.join(root, 'tools', 'kafka', 'kafka.sh'), 'stop', '--kill', '--dir', kafkaDir],
      { stdio: 'ignore' },
    );
    fs.rmSync(kafkaDir, { recursive: true, force: true });
  } catch {}
  kafkaDir = null;
};
let passed = 0,
  failed = 0,
  skipped = 0;
const failures = [];
const t0 = Date.now();
// CPU seconds of reaped children (their threads and their own reaped children included), from
// this process's /proc/self/stat (cutime + cstime, clock ticks): read at each file's exit, the
// growth since the last read is that file's (one exit is handled at a time).
const TICKS_PER_S = (() => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
  } catch {
    return 100;
  }
})();
const childCpuS = () => {
  try {
    const f = fs.readFileSync('/proc/self/stat', 'utf8');
    const rest = f.slice(f.lastIndexOf(')') + 2).split(' ');
    // After ") ": field 3 (state) is rest[0], so cutime (16) and cstime (17) are rest[13], rest[14].
    return (Number(rest[13]) + Number(rest[14])) / TICKS_PER_S;
  } catch {
    return NaN;
  }
};
let cpuSeen = childCpuS();
const cpu0 = cpuSeen;
// Files known to run for minutes start first, so the run is not left waiting on one of them at
// the end (the rest fill the other job slots meanwhile).
const SLOW_FIRST = [
  'faults-ci',
  'cdc-initial-load-crash',
  'capture-kafka-crash',
  'replay-crash-kafka',
  'processors-scaleout',
  'replay-crash.test',
  'package.test',
  'faults-disk-full',
  'faults-netem',
  'cdc-initial-load.test',
];
const rank = (f) => {
  const i = SLOW_FIRST.findIndex((s) => path.relative(dir, f).includes(s));
  return i < 0 ? SLOW_FIRST.length : i;
};
const queue = [...files].sort((a, b) => rank(a) - rank(b));
const jobs = Math.max(1, Number(process.env.SLUICE_TEST_JOBS ?? 3));
const single = jobs === 1;

/** Runs one file; with one job its output streams, with more it is printed whole when the file ends. */
async function runFile(file) {
  const rel = path.relative(dir, file);
  const started = Date.now();
  let cpuS = NaN;
  const { code, signal, out } = await new Promise((resolve) => {
    const child = spawn(process.execPath, [file], {
      cwd: root,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, FORCE_COLOR: '0' },
    });
    let out = '';
    // uvu prints "Duration:" once, after the file's last test: a file still running 30 s later
    // holds a leaked handle; kill it then rather than at the timeout (counted as failed).
    let exitTimer = null;
    child.stdout.on('data', (b) => {
      out += b;
      if (single) process.stdout.write(b);
      // The tail only: the summary is at the end, and a chunk may split its word.
      if (!exitTimer && /Duration:/.test(strip(out.slice(-256)))) {
        exitTimer = setTimeout(() => {
          out += `\n${rel}: did not exit 30 s after its tests ended (a leaked handle)\n`;
          child.kill('SIGKILL');
        }, 30_000);
      }
    });
    child.stderr.on('data', (b) => {
      out += b;
      if (single) process.stderr.write(b);
    });
    const own = /test-timeout-s: (\d+)/.exec(fs.readFileSync(file, 'utf8').slice(0, 4096));
    const limitS = Math.max(timeoutS, own ? Number(own[1]) : 0);
    const timer = setTimeout(() => {
      out += `\n${rel}: timed out after ${limitS} s\n`;
      child.kill('SIGKILL');
    }, limitS * 1000);
    child.on('exit', (code, signal) => {
      const now = childCpuS();
      cpuS = now - cpuSeen;
      cpuSeen = now;
      clearTimeout(timer);
      clearTimeout(exitTimer);
      resolve({ code, signal, out: strip(out) });
    });
  });
  if (!single) process.stdout.write(`== ${rel}\n${out}\n`);
  const total = Number(/Total:\s+(\d+)/.exec(out)?.[1] ?? 0);
  const ok = Number(/Passed:\s+(\d+)/.exec(out)?.[1] ?? 0);
  // Tests that cannot show their behaviour on a backend (the Kafka mock's limits) pass in uvu's
  // count but print a "SKIP [backend] ..." line with the reason: count those as skipped.
  const noted = (out.match(/\bSKIP \[[^\]]+\]/g) ?? []).length;
  const skip = Number(/Skipped:\s+(\d+)/.exec(out)?.[1] ?? 0) + noted;
  // uvu: Total counts the tests that ran (not test.skip ones); SKIP-noted tests ran and passed.
  let bad = Math.max(0, total - ok);
  if ((code !== 0 || signal) && bad === 0) bad = 1; // crashed or hung outside a test
  passed += ok - noted;
  failed += bad;
  skipped += skip;
  if (bad > 0) failures.push(`${rel} (${code !== null ? `exit ${code}` : signal})`);
  console.log(
    `-- ${rel}: ${ok - noted} passed, ${bad} failed, ${skip} skipped in ${((Date.now() - started) / 1000).toFixed(1)} s (cpu ${cpuS.toFixed(1)} s)\n`,
  );
}
// SLUICE_TEST_JOBS files at a time (default 3 on two cores: the files mostly wait on child
// processes, brokers and databases; a file's cpu figure above is typically 0.1-0.6 of its wall
// time, e.g. kafka-broker-away-cli 8.9 s of 92 s, cli 28.7 s of 51.7 s on 2026-12-02).
await Promise.all(
  Array.from({ length: Math.min(jobs, queue.length) }, async () => {
    for (let f = queue.shift(); f !== undefined; f = queue.shift()) await runFile(f);
  }),
);
stopKafka();
if (failures.length) console.log(`failed files: ${failures.join(', ')}`);
console.log(
  `tests: ${files.length} files in ${((Date.now() - t0) / 1000).toFixed(1)} s, cpu ${(childCpuS() - cpu0).toFixed(0)} s (${jobs} at a time)`,
);
console.log(`${passed} passed, ${failed} failed, ${skipped} skipped`);
process.exit(failed > 0 ? 1 : 0);
