/**
 * `sluice run` of a topology whose sink's broker is not up yet (a real broker of the test's own,
 * started only later on the port the sink names): the start waits for it to create the sink's
 * topic, without end, and meanwhile the operations API is up: GET /health/ready is 503
 * `degraded` naming the broker, the topic, the sink that needs it and since when, and so does
 * `sluice status`; the waiting log line names the sink. Once the broker is up the run goes on by
 * itself and ships every record once, in order. test-timeout-s: 420
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { startKafka, type KafkaCluster } from '../testing/kafka-broker.js';
import { EnvelopeView, decodeJson } from '../engine/codec/index.js';
import type { Health } from '../ops/index.js';
import { readCommitted } from './lib/kafka-read.js';
import { SLUICE_CLI, sluice } from './lib/cli.js';
import { escapeRegExp, until } from './lib/outage.js';

/** `count` JSON lines keyed k<from>..k<from+count-1>. */
function lines(from: number, count: number): string {
  return Array.from({ length: count }, (_, i) => `{"key":"k${from + i}","n":${from + i}}\n`).join(
    '',
  );
}

/** A TCP port of 127.0.0.1 that nothing listens on now (the OS's pick). */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address() as net.AddressInfo;
      s.close(() => resolve(port));
    });
    s.on('error', reject);
  });
}

test("sluice run while the sink's broker is down: the API is up and names the broker, topic and sink; once the broker is up, every record once", async () => {
  const port = await freePort();
  const broker = `127.0.0.1:${port}`;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-sink-down-start-'));
  const name = `sinkstart-${randomBytes(4).toString('hex')}`;
  const topic = `${name}.shipped`;
  let run: ChildProcess | null = null;
  let kafka: KafkaCluster | null = null;
  try {
    const file = path.join(dir, 'topology.yaml');
    fs.writeFileSync(
      file,
      [
        `name: ${name}`,
        `dataDir: ${JSON.stringify(path.join(dir, 'data'))}`,
        'queues:',
        '  - { name: events }',
        'sinks:',
        '  - name: ship',
        '    from: events',
        `    to: { brokers: [${broker}], topic: ${topic}, partitions: 1 }`,
        '    batchSizeMax: 5',
        '',
      ].join('\n'),
    );
    const first = await sluice(['append', file, 'events'], lines(0, 10));
    assert.is(first.code, 0, first.err);

    const startedMs = Date.now();
    run = spawn(process.execPath, [SLUICE_CLI, 'run', file, '--status-ms', '0', '--http', '0'], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let err = '';
    run.stderr!.on('data', (b) => (err += b));
    let exitCode: number | null | undefined;
    const exited = new Promise<number | null>((resolve) =>
      run!.on('exit', (code) => resolve((exitCode = code))),
    );
    await until(
      'the operations API up',
      () => /operations API and dashboard at http/.test(err),
      60_000,
      () => err,
    );
    const url = /operations API and dashboard at (http:\/\/\S+?)\/?\n/.exec(err)?.[1];
    assert.ok(url, err);
    // The waiting line names the topic and the sink that needs it.
    await until(
      'the waiting line',
      () => err.includes(' s to create topic '),
      60_000,
      () => err,
    );
    assert.match(
      err,
      new RegExp(
        `kafka ${escapeRegExp(broker)}: waiting \\d+ s to create topic ${escapeRegExp(topic)} \\(target of sink "ship"\\): `,
      ),
    );

    const what = `Kafka ${broker} topic ${topic} (target of sink "ship")`;
    const ready = await fetch(`${url}/health/ready`);
    assert.is(ready.status, 503);
    const health = (await ready.json()) as Health;
    assert.is(health.status, 'degraded');
    assert.is(health.ready, false);
    assert.equal(health.degraded, []);
    assert.is(health.waiting.length, 1, JSON.stringify(health));
    const w = health.waiting[0]!;
    assert.is(w.what, what);
    assert.is(w.action, `create topic ${topic}`);
    assert.match(w.error, 'ECONNREFUSED');
    const sinceMs = Date.parse(w.since);
    assert.ok(sinceMs >= startedMs && sinceMs <= Date.now(), w.since);
    assert.ok(
      health.reasons.includes(
        `start: degraded since ${w.since}: ${what} is down: ${w.error}; ` +
          `waiting to create topic ${topic} before the actors start`,
      ),
      health.reasons.join('\n'),
    );
    const actors = (await (await fetch(`${url}/actors`)).json()) as { actors: unknown[] };
    assert.equal(actors.actors, [], 'no actor is launched before its topic exists');
    const status = await sluice(['status', '--http', url, '--once']);
    assert.is(status.code, 0, status.err);
    assert.match(status.out, `health: degraded (start: degraded since ${w.since}: ${what} is down`);
    assert.match(
      status.out,
      `start: ${what} DOWN since ${w.since}: waiting to create topic ${topic}`,
    );

    // A wait, not a failure: still there a while later, the run not exited.
    await new Promise((r) => setTimeout(r, 3000));
    assert.is(exitCode, undefined, err);
    assert.not.match(err, ' is up (');
    const later = (await (await fetch(`${url}/health/ready`)).json()) as Health;
    assert.is(later.waiting[0]?.since, w.since, 'the wait keeps its start');

    kafka = await startKafka({ port });
    assert.equal(kafka.brokers, [broker]);
    await until(
      'sluice run up',
      () => err.includes(' is up ('),
      120_000,
      () => err,
    );
    await until(
      'ready',
      async () => (await fetch(`${url}/health/ready`)).status === 200,
      60_000,
      () => err,
    );
    const up = (await (await fetch(`${url}/health/ready`)).json()) as Health;
    assert.equal(up.waiting, []);
    const second = await sluice(['append', file, 'events'], lines(10, 5));
    assert.is(second.code, 0, second.err);

    const records = await readCommitted(kafka.brokers, [topic], 15);
    const view = new EnvelopeView();
    assert.equal(
      records.map((r) => {
        view.wrap(r.value!, 0, r.value!.length);
        return (decodeJson(view.payload) as { n: number }).n;
      }),
      Array.from({ length: 15 }, (_, i) => i),
    );
    run.kill('SIGTERM');
    assert.is(await exited, 0, err);
    run = null;
  } finally {
    if (run) run.kill('SIGKILL');
    await kafka?.stop({ kill: true });
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
