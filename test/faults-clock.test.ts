/**
 * Clock jumps (issue "Faults survived": "clock jumps for timers (periodic updates must stay
 * deterministic in replay)"). `sluice run` runs with libfaketime preloaded, so its wall clock
 * (Date.now() in every thread) can be stepped from outside while it runs, as an NTP step or a
 * resumed VM would: one hour back, then three hours forward. A service whose state is built from
 * periodic update events only (fixtures/services/clock-ticks.ts, a 50 ms timer) must
 * - keep getting timer events at their interval after each step (before the fix, a step back
 *   stalled the timer for the hour: its deadlines were on the wall clock);
 * - see the stepped wall clock in the events' time (the step took effect);
 * - never be restarted by the supervisor;
 * and after kill -9 and a restart under yet another clock, replay rebuilds exactly the state of
 * its last durable output, recorded event times included: timer events are inputs in the journal,
 * so a replay sees them, never the clock of the moment.
 *
 * Needs libfaketime (Debian package faketime); prints a SKIP line otherwise.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn, type ChildProcess } from 'node:child_process';
import { loadTopology } from '../index.js';
import { partitionDir } from '../actors/plan.js';
import { Tailer } from '../engine/journal/index.js';
import { EnvelopeView, EVENT_TYPE_JSON, decodeJson } from '../engine/codec/index.js';
import { SLUICE_CLI } from './lib/cli.js';

const LIBFAKETIME = [
  '/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1',
  '/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1',
].find((f) => fs.existsSync(f));
const fixture = new URL('./fixtures/services/clock-ticks.js', import.meta.url).pathname;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const HOUR = 3_600_000;

if (!LIBFAKETIME) console.log('  SKIP faults-clock: libfaketime not installed (Debian: faketime)');

interface ClockOut {
  timerEvents: number;
  tickSum: number;
  lastTimeMs: number;
}

async function until(what: string, probe: () => boolean, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!probe()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

(LIBFAKETIME ? test : test.skip)(
  'wall clock stepped back 1 h and forward 3 h under sluice run: timer events keep their interval, no restart, and replay after kill -9 rebuilds the recorded state',
  async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-clock-'));
    const clockFile = path.join(dir, 'faketime');
    const liveFile = path.join(dir, 'live.jsonl');
    const file = path.join(dir, 'topology.yaml');
    fs.writeFileSync(
      file,
      `name: clock
dataDir: ./data
queues:
  - { name: ticks }
  - { name: out }
services:
  - name: clock
    module: ${fixture}
    inputs: [ticks]
    output: out
    inputsReplay: INPUTS
    settings: ${JSON.stringify({ liveFile, timerQueue: 'ticks', timerIntervalMs: 50 })}
`,
    );
    const outDir = partitionDir(loadTopology(file), 'out', 0);
    const outputs = (): ClockOut[] => {
      if (!fs.existsSync(outDir)) return [];
      const t = Tailer.open({ dir: outDir });
      const view = new EnvelopeView();
      const got: ClockOut[] = [];
      try {
        for (let rec = t.next(); rec; rec = t.next()) {
          view.wrap(rec.bytes, 0, rec.bytes.length);
          if (view.type === EVENT_TYPE_JSON) got.push(decodeJson(view.payload) as ClockOut);
        }
      } finally {
        t.close();
      }
      return got;
    };
    let child: ChildProcess | null = null;
    let err = '';
    const start = (offset: string) => {
      fs.writeFileSync(clockFile, `${offset}\n`);
      err = '';
      const p = spawn(process.execPath, [SLUICE_CLI, 'run', file], {
        stdio: ['ignore', 'pipe', 'pipe'],
        env: {
          ...process.env,
          LD_PRELOAD: LIBFAKETIME,
          FAKETIME_TIMESTAMP_FILE: clockFile,
          FAKETIME_NO_CACHE: '1',
          // The monotonic clock stays real, as it does for an NTP step of the wall clock.
          FAKETIME_DONT_FAKE_MONOTONIC: '1',
        },
      });
      p.stdout!.on('data', (b) => (err += b));
      p.stderr!.on('data', (b) => (err += b));
      child = p;
      return p;
    };
    try {
      let p = start('+0');
      await until('sluice run is up', () => err.includes(' is up ('), 60_000);
      await until('10 timer events', () => outputs().length >= 10);

      // One hour back.
      fs.writeFileSync(clockFile, '-1h\n');
      let n = outputs().length;
      await until(
        `10 timer events after the step back (had ${n})`,
        () => outputs().length >= n + 10,
      );
      const back = outputs().at(-1)!;
      assert.ok(
        back.lastTimeMs < Date.now() - 0.9 * HOUR,
        `the step back reached the timer: ${new Date(back.lastTimeMs).toISOString()}`,
      );

      // Three hours forward (two past the real time).
      fs.writeFileSync(clockFile, '+3h\n');
      n = outputs().length;
      await until(
        `10 timer events after the step forward (had ${n})`,
        () => outputs().length >= n + 10,
      );
      const fwd = outputs().at(-1)!;
      assert.ok(
        fwd.lastTimeMs > Date.now() + 2.9 * HOUR,
        `the step forward reached the timer: ${new Date(fwd.lastTimeMs).toISOString()}`,
      );
      // One timer event per output, numbered without gaps (no burst of missed ticks, none lost).
      const all = outputs();
      all.forEach((o, i) => assert.is(o.timerEvents, i + 1, `output ${i}`));
      assert.not.match(err, /restarting /, 'no actor restarted');

      // kill -9, then a restart under another clock: replay rebuilds the last output's state.
      const exited = new Promise((r) => p.once('exit', r));
      p.kill('SIGKILL');
      await exited;
      const last = outputs().at(-1)!;
      p = start('-7h');
      await until('the restarted service is live', () => {
        const lines = fs.existsSync(liveFile)
          ? fs.readFileSync(liveFile, 'utf8').trim().split('\n')
          : [];
        return lines.length >= 2;
      });
      const lines = fs.readFileSync(liveFile, 'utf8').trim().split('\n');
      assert.equal(JSON.parse(lines[1]!), last, 'the replayed state is the recorded one');
      n = outputs().length;
      await until('timer events after the restart', () => outputs().length >= n + 5);
      const stopped = new Promise<number | null>((r) => p.once('exit', (code) => r(code)));
      p.kill('SIGTERM');
      assert.is(await stopped, 0, err);
      child = null;
      assert.not.match(err, /restarting /, 'no actor restarted');
      console.log(
        `  ${outputs().length} timer events; replayed state after kill -9: ${JSON.stringify(last)}`,
      );
    } finally {
      (child as ChildProcess | null)?.kill('SIGKILL');
      fs.rmSync(dir, { recursive: true, force: true });
    }
  },
);

test.run();
