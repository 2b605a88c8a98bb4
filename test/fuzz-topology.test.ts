/**
 * Property-based fuzzing of topology files (fast-check): generated valid files and mutations of
 * them go through what `sluice check` does (loadTopology, checkEnvironment, planTopology,
 * checkServiceModules, serviceWarnings). Properties:
 * - an invalid file is refused with a ConfigError whose every line is `file:line:col: path:
 *   message`, never another exception or a stack trace;
 * - a file the generator built valid is accepted;
 * - a file check accepts either plans and loads its modules, or fails with a message naming its
 *   field (`file: services[i].field: ...`);
 * - `sluice check` itself (a sample, as a child process) exits 0 or 2 and prints no stack trace;
 * - accepted files (a sample, names and paths up to their limits) start and stop cleanly.
 *
 * Counts: SLUICE_FUZZ_RUNS (default 2,000; `npm run fuzz` runs 100,000), SLUICE_FUZZ_START_RUNS
 * (default 3). The seed is printed at the start and, by fast-check, on failure; replay a failure
 * with SLUICE_FUZZ_SEED=<seed> (and the path fast-check prints, SLUICE_FUZZ_PATH).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import fc from 'fast-check';
import {
  ConfigError,
  checkServiceModules,
  installCapture,
  loadTopology,
  openQueueAppender,
  parseTopology,
  startTopology,
} from '../index.js';
import { checkEnvironment } from '../engine/config/index.js';
import { planTopology, serviceWarnings } from '../actors/index.js';
import type { Topology } from '../index.js';
import { CAPTURE_TABLES, toYaml, topologyFile, validTopology } from './lib/topology-gen.js';

const root = fileURLToPath(new URL('../../', import.meta.url));
const cli = path.join(root, 'dist', 'cli', 'sluice.js');
const serviceModule = path.join(root, 'test', 'fixtures', 'config', 'services', 'running-total.ts');
const runs = Number(process.env.SLUICE_FUZZ_RUNS ?? 2000);
const startRuns = Number(process.env.SLUICE_FUZZ_START_RUNS ?? 3);
const seed = Number(process.env.SLUICE_FUZZ_SEED ?? Date.now() % 2 ** 31);
const replayPath = process.env.SLUICE_FUZZ_PATH;
console.log(
  `fuzz-topology: seed ${seed}, ${runs} files, ${startRuns} started (SLUICE_FUZZ_SEED=${seed} replays)`,
);

/** A capture database with CAPTURE_TABLES, each holding a few rows. */
function createCaptureDb(file: string): void {
  const db = new Database(file);
  for (const t of CAPTURE_TABLES) {
    db.exec(`CREATE TABLE ${t} (id INTEGER PRIMARY KEY, v TEXT, w INTEGER)`);
    db.exec(`INSERT INTO ${t} (v, w) VALUES ('a', 1), ('b', 2)`);
  }
  db.close();
}

const dir = mkdtempSync(path.join(tmpdir(), 'sluice-fuzz-topology-'));
const file = path.join(dir, 'topology.yaml');
createCaptureDb(path.join(dir, 'capture.db'));

const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
/** `file:line:col: path: message` with line, col >= 1, one line, no stack frame. */
const PROBLEM = new RegExp(`^${escape(file)}:[1-9]\\d*:[1-9]\\d*: \\S.*: \\S.*$`);
/** `file: message` (no position: the file as a whole). */
const FILE_PROBLEM = new RegExp(`^${escape(file)}: \\S.*$`);
/** A post-load problem naming its field: `file: services[2].module: ...`. */
const FIELD_PROBLEM = new RegExp(
  `^${escape(file)}: (services|capture|queues)\\[\\d+\\]\\.\\S+: \\S.*$`,
);
/** Longest acceptable problem line: values are shown cut; a resolved path (<= 4095 bytes) is the longest part. */
const LINE_CHARS_MAX = 8192;
/** One file in this many also runs `sluice check` as a child process (about 2 s each on a loaded machine). */
const CLI_EVERY = 400;

/** Each problem has a position, a path and a message, all on one line, as the message prints them. */
function assertProblems(e: ConfigError): void {
  const lines = e.message.split('\n');
  if (lines.length !== e.problems.length)
    throw new Error(`problems span several lines: ${e.message.slice(0, 500)}`);
  e.problems.forEach((p, i) => {
    const positioned = p.line >= 1 && p.col >= 1;
    const expected = positioned
      ? `${p.file}:${p.line}:${p.col}: ${p.path}: ${p.message}`
      : `${p.file}: ${p.message}`;
    if (p.file !== file || p.path === '' || p.message === '' || lines[i] !== expected) {
      throw new Error(`badly formed problem: ${JSON.stringify(p).slice(0, 500)}`);
    }
  });
}

function assertProblemLines(message: string, shape: (line: string) => boolean, what: string): void {
  for (const line of message.split('\n')) {
    if (!shape(line) || line.length > LINE_CHARS_MAX || /^\s+at /.test(line)) {
      throw new Error(`${what}: badly formed problem line: ${JSON.stringify(line.slice(0, 300))}`);
    }
  }
}

/**
 * What `sluice check` does to a file's text, as a property: refused with positioned problems,
 * or accepted and then either planned or refused naming a field. Returns the topology if check
 * accepts it.
 */
async function check(text: string): Promise<Topology | null> {
  let t: Topology;
  try {
    t = parseTopology(text, file, { env: { FUZZ_SET: 'x' } });
  } catch (e) {
    if (!(e instanceof ConfigError))
      throw new Error(`not a ConfigError: ${(e as Error).stack ?? String(e)}`);
    assertProblems(e);
    assertProblemLines(e.message, (l) => PROBLEM.test(l), 'parseTopology');
    return null;
  }
  try {
    checkEnvironment(t);
    planTopology(t);
    await checkServiceModules(t);
    await serviceWarnings(t);
  } catch (e) {
    if (e instanceof ConfigError) {
      assertProblems(e);
      assertProblemLines(
        e.message,
        (l) => PROBLEM.test(l) || FILE_PROBLEM.test(l),
        'checkEnvironment',
      );
    } else {
      assertProblemLines((e as Error).message, (l) => FIELD_PROBLEM.test(l), 'plan or modules');
    }
    return null;
  }
  return t;
}

const params = (numRuns: number): fc.Parameters<unknown> => ({
  numRuns,
  seed,
  ...(replayPath !== undefined ? { path: replayPath } : {}),
  includeErrorInReport: true,
  verbose: 0,
});

test(`generated and mutated files: refused with file:line:col: path: message, or accepted and planned (${runs} files)`, async () => {
  let accepted = 0;
  let refused = 0;
  let cliRuns = 0;
  // One file in CLI_EVERY also goes through the real command line (false shrinks away).
  const viaCli = fc.noBias(fc.nat(CLI_EVERY - 1)).map((n) => n === CLI_EVERY - 1);
  await fc.assert(
    fc.asyncProperty(topologyFile({ module: serviceModule }), viaCli, async (f, cliToo) => {
      const t0 = Date.now();
      const t = await check(f.text);
      if (
        process.env.SLUICE_FUZZ_SLOW_MS &&
        Date.now() - t0 > Number(process.env.SLUICE_FUZZ_SLOW_MS)
      ) {
        console.error(`slow check ${Date.now() - t0} ms: ${JSON.stringify(f).slice(0, 400)}`);
      }
      if (f.valid && t === null) {
        // Say why: the generator and check disagree on what is valid.
        try {
          parseTopology(f.text, file, { env: {} });
        } catch (e) {
          throw new Error(
            `a file built valid was refused:\n${(e as Error).message}\n--- file:\n${f.text}`,
          );
        }
      }
      if (f.valid) assert.ok(t !== null, 'a file built valid is accepted');
      if (t === null) refused++;
      else accepted++;
      if (cliToo) {
        cliRuns++;
        writeFileSync(file, f.text);
        const c0 = Date.now();
        const r = spawnSync(process.execPath, [cli, 'check', file], {
          encoding: 'utf8',
          timeout: 60_000,
        });
        if (process.env.SLUICE_FUZZ_SLOW_MS) console.error(`cli ${Date.now() - c0} ms`);
        assert.ok(
          r.status === 0 || r.status === 2,
          `sluice check exits 0 or 2, got ${r.status}: ${r.stderr}`,
        );
        assert.not.match(r.stderr, /\n\s+at /, 'sluice check prints no stack trace');
        if (r.status === 0) {
          assert.ok(t !== null, `sluice check accepted what loadTopology refused:\n${r.stdout}`);
        } else {
          assert.ok(t === null, `sluice check refused what loadTopology accepted:\n${r.stderr}`);
          const lines = r.stderr.trimEnd().split('\n');
          for (const line of lines) {
            const ok =
              PROBLEM.test(line) || FILE_PROBLEM.test(line) || line.startsWith(`sluice: ${file}: `);
            assert.ok(
              ok,
              `sluice check problem line is file:line:col: path: message: ${line.slice(0, 300)}`,
            );
          }
        }
      }
    }),
    params(runs),
  );
  console.log(
    `fuzz-topology: ${accepted} accepted, ${refused} refused, ${cliRuns} through sluice check`,
  );
  assert.ok(accepted > runs / 10, 'the generator makes valid files');
  assert.ok(refused > runs / 10, 'the mutations make invalid files');
});

test(`accepted files with names and paths up to their limits start and stop cleanly (${startRuns} topologies)`, async () => {
  let n = 0;
  await fc.assert(
    fc.asyncProperty(validTopology({ module: serviceModule }), fc.boolean(), async (doc, flow) => {
      const runDir = mkdtempSync(path.join(tmpdir(), 'sluice-fuzz-run-'));
      try {
        createCaptureDb(path.join(runDir, 'capture.db'));
        const runFile = path.join(runDir, 'topology.yaml');
        writeFileSync(runFile, toYaml(doc, flow));
        const t = loadTopology(runFile, { env: {} });
        checkEnvironment(t);
        await installCapture(t);
        const log: string[] = [];
        const running = await startTopology(t, { log: (line) => log.push(line) });
        let stopped = false;
        try {
          // Feed each queue nobody in the topology writes.
          const written = new Set([
            ...t.services.flatMap((s) => [s.output, s.errors.deadLetterQueue]),
            ...t.capture.flatMap((c) => c.tables.map((x) => x.target)),
          ]);
          for (const q of t.queues.filter((x) => !written.has(x.name))) {
            const appender = openQueueAppender(t, q.name);
            try {
              for (let i = 0; i < 5; i++) appender.appendJson(`k${i}`, { amount: i });
            } finally {
              appender.close();
            }
          }
          await new Promise((r) => setTimeout(r, 200));
          const result = await running.stop();
          stopped = true;
          assert.equal(
            result.terminated,
            [],
            `no actor had to be terminated (log: ${log.join(' | ')})`,
          );
          assert.not.ok(
            log.some((l) => / failed: /.test(l)),
            `no actor failed (log: ${log.join(' | ')})`,
          );
        } finally {
          if (!stopped) await running.stop();
        }
        n++;
      } finally {
        rmSync(runDir, { recursive: true, force: true });
      }
    }),
    params(startRuns),
  );
  assert.is(n, startRuns);
});

test.after(() => rmSync(dir, { recursive: true, force: true }));
test.run();
