/**
 * SIGINT/SIGTERM on `sluice run`: the topology drains (readers reach the queue ends, services
 * finish and flush), queues are fsynced and closed, and the process exits 0.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { SIGNALS_READY_ENV, SIGNALS_READY_LINE } from '../cli/signals.js';
import { Appender, Tailer } from '../engine/journal/index.js';
import { EnvelopeWriter, EVENT_TYPE_JSON, encodeJson } from '../engine/codec/index.js';

const cli = new URL('../cli/sluice.js', import.meta.url).pathname;
const serviceModule = new URL('./fixtures/services/running-sum.js', import.meta.url).pathname;

function countRecords(dir: string): number {
  const t = Tailer.open({ dir });
  let n = 0;
  while (t.next()) n++;
  t.close();
  return n;
}

/** Appends `n` JSON inputs `{ v: 1, n }` (keys k0..k4) to queue `in` of the topology in `dir`. */
function appendInputs(dir: string, n: number): void {
  const writer = new EnvelopeWriter();
  const a = Appender.open({ dir: path.join(dir, 'data/queues/in/0') });
  for (let i = 0; i < n; i++)
    a.append(
      writer.encode({
        type: EVENT_TYPE_JSON,
        key: `k${i % 5}`,
        eventTimeMs: Date.now(),
        payload: encodeJson({ v: 1, n: i }),
      }),
    );
  a.close();
}

for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  test(`${signal} drains the topology and exits 0 with every accepted input processed`, async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-drain-'));
    try {
      const file = path.join(dir, 'topology.yaml');
      fs.writeFileSync(
        file,
        `name: drain\ndataDir: ./data\nqueues:\n  - { name: in }\n  - { name: out }\nservices:\n  - name: summer\n    module: ${serviceModule}\n    inputs: [in]\n    output: out\n    settings: { spinUs: 50 }\n`,
      );
      const N = 3000;
      appendInputs(dir, N);
      const child = spawn(process.execPath, [cli, 'run', file, '--status-ms', '0'], {
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let err = '';
      child.stderr.on('data', (b) => (err += b));
      child.stdout.on('data', (b) => (err += b));
      while (!err.includes('is up')) await new Promise((r) => setTimeout(r, 20));
      // Signal while the service is still working through the input (3000 x 50 us = 150 ms of work).
      await new Promise((r) => setTimeout(r, 30));
      child.kill(signal);
      const code = await new Promise<number | null>((r) => child.on('exit', (c) => r(c)));
      assert.is(code, 0, err);
      assert.match(err, `${signal}: draining`);
      // Drained: every input that was in the queue when the signal came has its output.
      assert.is(countRecords(path.join(dir, 'data/queues/out/0')), N);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
}

test('a SIGINT in the first moments (while the CLI is still loading) stops cleanly with exit 0', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-drain-early-'));
  try {
    const file = path.join(dir, 'topology.yaml');
    fs.writeFileSync(
      file,
      `name: drain\ndataDir: ./data\nqueues:\n  - { name: in }\n  - { name: out }\nservices:\n  - name: summer\n    module: ${serviceModule}\n    inputs: [in]\n    output: out\n`,
    );
    const child = spawn(process.execPath, [cli, 'run', file, '--status-ms', '0'], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, [SIGNALS_READY_ENV]: '1' },
    });
    let err = '';
    child.stderr.on('data', (b) => (err += b));
    // Before this change the listeners came after loading the CLI and the topology (~0.3 s on
    // a fast machine): a signal at 250 ms killed the process (exit 130) without a word. The
    // signal goes at 250 ms, or, on a machine so loaded that Node itself has not run the CLI's
    // first lines by then, once the entry says its listeners are installed (SIGNALS_READY_ENV):
    // a signal before that is Node's own (it catches SIGINT from its start and dies of it),
    // which no code of ours can change. /proc's SigCgt cannot tell the two apart.
    const exited = new Promise<[number | null, string | null]>((r) =>
      child.on('exit', (c, sig) => r([c, sig])),
    );
    await new Promise((r) => setTimeout(r, 250));
    while (!err.includes(SIGNALS_READY_LINE) && child.exitCode === null)
      await new Promise((r) => setTimeout(r, 5));
    child.kill('SIGINT');
    const [code, signal] = await exited;
    assert.is(code, 0, `exit ${code} signal ${signal}: ${err}`);
    assert.match(err, 'SIGINT: draining');
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('a SIGINT while the actors start (the service launched, its reader not yet) exits 0 at once, inputs kept for the next start', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-drain-starting-'));
  try {
    const file = path.join(dir, 'topology.yaml');
    fs.writeFileSync(
      file,
      `name: drain\ndataDir: ./data\nqueues:\n  - { name: in }\n  - { name: out }\nservices:\n  - name: summer\n    module: ${serviceModule}\n    inputs: [in]\n    output: out\n`,
    );
    appendInputs(dir, 100);
    const run = async (signalAt: 'http' | null) => {
      // --http prints its line before any actor starts: a signal then lands in the group's start.
      const child = spawn(
        process.execPath,
        [cli, 'run', file, '--status-ms', '0', '--http', '127.0.0.1:0'],
        { stdio: ['ignore', 'pipe', 'pipe'] },
      );
      let err = '';
      let signalled = 0;
      child.stderr.on('data', (b) => {
        err += b;
        if (!signalled && (signalAt === 'http' ? /http: operations/ : /is up/).test(err)) {
          signalled = Date.now();
          child.kill('SIGINT');
        }
      });
      const code = await new Promise<number | null>((r) => child.on('exit', (c) => r(c)));
      return { code, err, ms: Date.now() - signalled };
    };
    const early = await run('http');
    // Before the fix: the service waited for a ring its never-launched reader would close, was
    // terminated after drainTimeoutMs (10 s) and the process exited 1.
    assert.is(early.code, 0, early.err);
    assert.not.match(early.err, 'did not drain');
    assert.ok(early.ms < 5000, `exited ${early.ms} ms after the signal`);
    // Nothing lost: the next start (signalled once up, so it drains) processes every input once.
    const next = await run(null);
    assert.is(next.code, 0, next.err);
    assert.is(countRecords(path.join(dir, 'data/queues/out/0')), 100);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('SIGINT during a long replay stops the replay, drains and exits 0; nothing is written', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-drain-replay-'));
  try {
    const file = path.join(dir, 'topology.yaml');
    const topology = (spinReplayUs: number) =>
      `name: drain\ndataDir: ./data\nqueues:\n  - { name: in }\n  - { name: out }\nservices:\n  - name: summer\n    module: ${serviceModule}\n    inputs: [in]\n    output: out\n    inputsReplay: INPUTS\n    settings: { spinReplayUs: ${spinReplayUs} }\n`;
    fs.writeFileSync(file, topology(0));
    const writer = new EnvelopeWriter();
    const a = Appender.open({ dir: path.join(dir, 'data/queues/in/0') });
    const N = 20000;
    for (let n = 0; n < N; n++)
      a.append(
        writer.encode({
          type: EVENT_TYPE_JSON,
          key: `k${n % 5}`,
          eventTimeMs: Date.now(),
          payload: encodeJson({ v: 1, n }),
        }),
      );
    a.close();
    /**
     * Spawns `sluice run`; `signalWhen` is matched against stderr (polled every 20 ms) and the
     * SIGINT goes `delayMs` after it first matches.
     */
    const run = async (statusMs: number, signalWhen: RegExp, delayMs: number) => {
      const child = spawn(process.execPath, [cli, 'run', file, '--status-ms', String(statusMs)], {
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let err = '';
      child.stderr.on('data', (b) => (err += b));
      const exited = new Promise<number | null>((r) => child.on('exit', (c) => r(c)));
      let gone = false;
      void exited.then(() => (gone = true));
      while (!gone && !signalWhen.test(err)) await new Promise((r) => setTimeout(r, 20));
      await new Promise((r) => setTimeout(r, delayMs));
      const signalledAt = Date.now();
      child.kill('SIGINT');
      const code = await exited;
      return { code, err, exitMs: Date.now() - signalledAt };
    };
    // First run: everything processed live, then a clean stop.
    const first = await run(0, /is up/, 200);
    assert.is(first.code, 0, first.err);
    assert.is(countRecords(path.join(dir, 'data/queues/out/0')), N);
    // Second run: the replay of 20000 inputs takes ~10 s at 500 us each. The signal goes once
    // stderr shows the replay under way (not at a fixed time: a slow machine may still be loading
    // the CLI after a second, and then there is no replay to interrupt yet).
    fs.writeFileSync(file, topology(500));
    const second = await run(0, /sluice: replay service:summer: \d+\/20000 records/, 100);
    assert.is(second.code, 0, second.err);
    assert.match(second.err, 'SIGINT: draining');
    assert.not.match(second.err, 'is up');
    assert.not.match(second.err, 'replay service:summer done');
    const last = /service:summer\s+stopped\s+in=0 out=0(?: replayed=(\d+))?\n/.exec(second.err);
    assert.ok(last, `no final "service:summer stopped in=0 out=0" line in:\n${second.err}`);
    // Interrupted: short of the 20000 inputs, and well within the ~10 s the replay would take.
    assert.ok(Number(last[1] ?? 0) < N, `replayed ${last[1]} of ${N}`);
    assert.ok(second.exitMs < 4000, `exit ${second.exitMs} ms after the signal`);
    assert.is(countRecords(path.join(dir, 'data/queues/out/0')), N);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
