/**
 * A sink (topology `sinks`: a journal queue shipped to a Kafka topic) whose broker is killed
 * (kill -9 of a real broker of the test's own: the shared one is not stopped): the sink's outage
 * names what does not answer, the Kafka brokers and topic of the sink, not its journal queue, in
 * the log line, in the degraded reason of GET /health/ready, in GET /actors' `outage` and in
 * `sluice status` (its line marked `DOWN since`); the sink's lag (GET /actors `inputs`, the lag
 * column of `sluice status`) counts the records appended meanwhile. Records appended to the queue
 * while the broker is away are shipped once it is back on the same port and data: a
 * read_committed reader of the topic sees every record once, in order, and the lag is 0.
 * test-timeout-s: 420
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { startKafka } from '../testing/kafka-broker.js';
import { EnvelopeView, decodeJson } from '../engine/codec/index.js';
import type { ActorStatus, InputLag } from '../ops/index.js';
import { readCommitted } from './lib/kafka-read.js';
import { SLUICE_CLI, sluice } from './lib/cli.js';
import { assertOutageReported, escapeRegExp, until, type ActorsBody } from './lib/outage.js';

/** `count` JSON lines keyed k<from>..k<from+count-1>. */
function lines(from: number, count: number): string {
  return Array.from({ length: count }, (_, i) => `{"key":"k${from + i}","n":${from + i}}\n`).join(
    '',
  );
}

/** The one input of sink:ship/0 in GET /actors: the partition it ships and its lag. */
async function sinkInput(url: string): Promise<InputLag> {
  const body = (await (await fetch(`${url}/actors`)).json()) as { actors: ActorStatus[] };
  const inputs = body.actors.find((a) => a.name === 'sink:ship/0')!.inputs;
  assert.is(inputs.length, 1, JSON.stringify(inputs));
  return inputs[0]!;
}

test("kafka broker killed under a sink: the outage names the sink's brokers and topic; back up, every record once, in order", async () => {
  const kafka = await startKafka();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-sink-down-'));
  const name = `sinkdown-${randomBytes(4).toString('hex')}`;
  const topic = `${name}.shipped`;
  const brokers = kafka.brokers.join(',');
  let run: ChildProcess | null = null;
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
        `    to: { brokers: [${kafka.brokers.join(', ')}], topic: ${topic}, partitions: 1 }`,
        '    batchSizeMax: 5',
        '',
      ].join('\n'),
    );
    const first = await sluice(['append', file, 'events'], lines(0, 20));
    assert.is(first.code, 0, first.err);

    run = spawn(process.execPath, [SLUICE_CLI, 'run', file, '--status-ms', '0', '--http', '0'], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let err = '';
    run.stderr!.on('data', (b) => (err += b));
    const exited = new Promise<number | null>((resolve) =>
      run!.on('exit', (code) => resolve(code)),
    );
    await until(
      'sluice run up',
      () => err.includes(' is up ('),
      60_000,
      () => err,
    );
    const url = /operations API and dashboard at (http:\/\/\S+?)\/?\n/.exec(err)?.[1];
    assert.ok(url, err);
    assert.is((await readCommitted(kafka.brokers, [topic], 20, { settleMs: 0 })).length, 20);

    await kafka.stopBroker(1, { kill: true });
    // The journal takes records while the broker is away.
    const second = await sluice(['append', file, 'events'], lines(20, 20));
    assert.is(second.code, 0, second.err);

    const target = `Kafka ${brokers} topic ${topic} (target of sink "ship")`;
    await until(
      'the outage logged',
      () => err.includes(' is down since '),
      120_000,
      () => err,
    );
    assert.match(err, `[sink:ship/0] ${target} is down since `, err);
    assert.not.match(err, 'journal queue "events"', err);

    const status = await assertOutageReported(url, 'sink:ship/0', target);
    // Its lag: the 20 records appended during the outage are not shipped yet.
    const behind = await sinkInput(url);
    assert.equal(
      { ...behind, lagMs: 0 },
      { queue: 'events', partition: 0, endIndex: 40, handledIndex: 19, lagRecords: 20, lagMs: 0 },
    );
    assert.ok(behind.lagMs > 0, JSON.stringify(behind));
    const row = status.split('\n').find((l) => l.startsWith('sink:ship/0 '))!;
    // actor, state, restarts, in, out, in/s 1s, in/s 1m, out/s 1m, lag rec, ...
    assert.is(row.trim().split(/\s+/)[8], '20', status);

    await kafka.startBroker(1);
    await until(
      'the end of the outage logged',
      () => err.includes(' is up again after '),
      180_000,
      () => err,
    );
    assert.match(
      err,
      new RegExp(`\\[sink:ship/0\\] ${escapeRegExp(target)} is up again after \\d+\\.\\d s down`),
    );
    await until(
      'ready again',
      async () => (await fetch(`${url}/health/ready`)).status === 200,
      30_000,
    );
    const again = (await (await fetch(`${url}/actors`)).json()) as ActorsBody;
    assert.is(again.actors.find((a) => a.name === 'sink:ship/0')!.outage, null);
    await until('the sink caught up', async () => (await sinkInput(url)).lagRecords === 0, 30_000);
    assert.equal(
      { ...(await sinkInput(url)), lagMs: 0 },
      { queue: 'events', partition: 0, endIndex: 40, handledIndex: 39, lagRecords: 0, lagMs: 0 },
    );

    // Every record once, in order, the ones appended during the outage included.
    const records = await readCommitted(kafka.brokers, [topic], 40);
    const view = new EnvelopeView();
    assert.equal(
      records.map((r) => {
        view.wrap(r.value!, 0, r.value!.length);
        return (decodeJson(view.payload) as { n: number }).n;
      }),
      Array.from({ length: 40 }, (_, i) => i),
    );
    run.kill('SIGTERM');
    assert.is(await exited, 0, err);
    run = null;
  } finally {
    if (run) run.kill('SIGKILL');
    await kafka.stop({ kill: true });
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
