/**
 * The operations side of the command line, as an operator runs it: `sluice run --http` with
 * JSON logs on stdout (supervisor and actor lines, with actor and topology), `sluice status`
 * showing the figures of /actors, `sluice log-level` changing an actor's level while it runs,
 * `sluice --version`, and a bad --http value.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn, type ChildProcess } from 'node:child_process';
import type { ActorStatus } from '../ops/index.js';
import { sluice } from './lib/cli.js';

const cli = new URL('../cli/sluice.js', import.meta.url).pathname;
const service = new URL('./fixtures/services/ops-logger.js', import.meta.url).pathname;
const pkg = JSON.parse(fs.readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
  version: string;
};
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let dir = '';
let child: ChildProcess | null = null;
test.before.each(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-ops-cli-'));
});
test.after.each(() => {
  if (child && child.exitCode === null) child.kill('SIGKILL');
  child = null;
  fs.rmSync(dir, { recursive: true, force: true });
});

test('--version prints the package version', async () => {
  const r = await sluice(['--version']);
  assert.is(r.code, 0);
  assert.is(r.out.trim(), pkg.version);
});

test('a bad --http value is a usage error naming the expected form', async () => {
  const r = await sluice(['run', path.join(dir, 'none.yaml'), '--http', 'localhost:99999']);
  assert.is(r.code, 2);
  assert.match(
    r.err,
    '--http must be [host:]port with port 0-65535 (e.g. 127.0.0.1:8080), got "localhost:99999"',
  );
  const nice = await sluice([
    'run',
    path.join(dir, 'none.yaml'),
    '--http',
    '0',
    '--http-nice',
    '20',
  ]);
  assert.is(nice.code, 2);
  assert.match(nice.err, '--http-nice must be an integer 0-19, got "20"');
  for (const bad of ['', '0x5', '1e1', '5.0']) {
    const r = await sluice(['run', path.join(dir, 'none.yaml'), '--http', '0', '--http-nice', bad]);
    assert.is(r.code, 2, bad);
    assert.match(r.err, `--http-nice must be an integer 0-19, got "${bad}"`);
  }
  const status = await sluice(['run', path.join(dir, 'none.yaml'), '--status-ms', '']);
  assert.match(status.err, '--status-ms must be an integer >= 0, got ""');
  const alone = await sluice(['run', path.join(dir, 'none.yaml'), '--http-nice', '5']);
  assert.is(alone.code, 2);
  assert.match(alone.err, '--http-nice needs --http');
});

test('run --http --log-format json: JSON logs with actor and topology, status and log-level against it', async () => {
  const file = path.join(dir, 'topology.yaml');
  fs.writeFileSync(
    file,
    `name: cli-ops\ndataDir: ./data\nqueues:\n  - { name: in }\n  - { name: out }\nservices:\n  - name: pass\n    module: ${service}\n    inputs: [in]\n    output: out\n`,
  );
  child = spawn(
    process.execPath,
    [
      cli,
      'run',
      file,
      '--http',
      '127.0.0.1:0',
      '--http-nice',
      '3',
      '--log-format',
      'json',
      '--status-ms',
      '0',
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  const lines: Record<string, unknown>[] = [];
  let partial = '';
  child.stdout!.on('data', (b: Buffer) => {
    partial += b.toString();
    const parts = partial.split('\n');
    partial = parts.pop()!;
    for (const p of parts) lines.push(JSON.parse(p) as Record<string, unknown>);
  });
  let stderr = '';
  child.stderr!.on('data', (b) => (stderr += b));
  // One bound for the start and the actor's first line; generous: a loaded machine (ci-2 today)
  // took over 30 s to bring the service live.
  const deadline = Date.now() + 90_000;
  const waitLine = async (pred: (l: Record<string, unknown>) => boolean, what: string) => {
    for (;;) {
      const hit = lines.find(pred);
      if (hit) return hit;
      if (Date.now() > deadline)
        throw new Error(`no log line ${what}; stdout: ${JSON.stringify(lines)} stderr: ${stderr}`);
      await sleep(50);
    }
  };
  const up = await waitLine(
    (l) => String(l.msg).startsWith('http: operations API and dashboard at '),
    'with the URL',
  );
  assert.is(up.topology, 'cli-ops');
  assert.is(up.level, 30);
  const url = /at (http:\/\/127\.0\.0\.1:\d+)\//.exec(String(up.msg))![1];
  // --http-nice 3: one thread of the process (the API's) runs 3 steps below the main thread.
  const niceOf = (tid: string) => {
    const stat = fs.readFileSync(`/proc/${child!.pid}/task/${tid}/stat`, 'utf8');
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[16]);
  };
  const base = niceOf(String(child.pid));
  const lowered = fs.readdirSync(`/proc/${child.pid}/task`).filter((t) => niceOf(t) !== base);
  assert.equal(
    lowered.map((t) => niceOf(t)),
    [Math.min(19, base + 3)],
  );
  const live = await waitLine((l) => l.msg === 'ops-logger is live', 'from the actor');
  assert.equal([live.actor, live.topology, live.level], ['service:pass', 'cli-ops', 30]);

  const appended = await sluice(['append', file, 'in'], '{"key":"a","n":1}\n{"key":"b","n":2}\n');
  assert.is(appended.code, 0, appended.err);
  const status = await until(async () => {
    const s = await sluice(['status', '--http', url, '--once']);
    return s.out.includes('service:pass') && /service:pass\s+live\s+0\s+2\s+2\s/.test(s.out)
      ? s
      : null;
  });
  assert.is(status.code, 0, status.err);
  assert.match(status.out, /^health: ok\n/);
  assert.match(
    status.out,
    /actor\s+state\s+restarts\s+in\s+out\s+in\/s 1s\s+in\/s 1m\s+out\/s 1m\s+lag rec\s+lag ms\s+ring/,
  );
  assert.match(status.out, /reader:in\/0>pass\s+live\s+0\s+2\s+2\s.*\s0%$/m);
  const json = await sluice(['status', '--http', url, '--json']);
  const actors = (JSON.parse(json.out) as { actors: ActorStatus[] }).actors;
  assert.equal(
    actors.map((a) => [a.name, a.counters.eventsIn]),
    [
      ['service:pass', 2],
      ['reader:in/0>pass', 2],
    ],
  );
  assert.is(lines.filter((l) => l.msg === 'handled').length, 0, 'no debug lines at info');

  const set = await sluice(['log-level', '--http', url, '--actor', 'service:pass', 'debug']);
  assert.is(set.code, 0, set.err);
  assert.match(
    set.out,
    new RegExp(`^service:pass: info -> debug \\(by ${os.userInfo().username} at \\d{4}-`),
  );
  assert.is((await sluice(['append', file, 'in'], '{"key":"c","n":3}\n')).code, 0);
  const handled = await waitLine((l) => l.msg === 'handled', 'at debug');
  assert.equal(
    [handled.actor, handled.topology, handled.level, handled.key, handled.n],
    ['service:pass', 'cli-ops', 20, 'c', 3],
  );
  const show = await sluice(['log-level', '--http', url]);
  assert.is(show.out, 'global  info\nservice:pass  debug\nreader:in/0>pass  info\n');
  const bad = await sluice(['log-level', '--http', url, 'loud']);
  assert.is(bad.code, 2);
  assert.match(
    bad.err,
    'log-level: HTTP 400: body/level must be equal to one of the allowed values (trace, debug, info, warn, error, fatal, silent), got "loud"',
  );

  child.kill('SIGINT');
  const code = await new Promise<number | null>((r) => child!.on('exit', (c) => r(c)));
  assert.is(code, 0, stderr);
  const unreachable = await sluice(['status', '--http', url, '--once']);
  assert.is(unreachable.code, 2);
  assert.match(unreachable.err, `sluice: cannot reach ${url}/actors`);
});

async function until<T>(probe: () => Promise<T | null>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v) return v;
    if (Date.now() > deadline) throw new Error('timed out');
    await sleep(200);
  }
}

test.run();
