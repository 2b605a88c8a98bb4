/**
 * `sluice tail -f` on a kafka bus while its broker goes away (kill -9 of the real broker) and
 * comes back on the same port and data: the tail waits it out (one stderr line when it goes, one
 * when it answers again), keeps running, and prints the records appended after the restart once,
 * after the ones it printed before. Its own broker: the shared one is not restarted.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startKafka } from '../testing/kafka-broker.js';
import { kafkaBackend } from './lib/backends.js';
import { SLUICE_CLI, sluice } from './lib/cli.js';

const kafka = await startKafka();
const backend = await kafkaBackend('tailf', {
  brokers: kafka.brokers,
  release: async () => undefined,
});
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-tail-follow-'));

/** Resolves once `cond()` holds; fails naming `what` after `ms`. */
async function until(what: string, cond: () => boolean, ms = 90_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    assert.ok(Date.now() < deadline, `${what} within ${ms / 1000} s`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

test('sluice tail -f on Kafka waits out a broker killed and restarted, then prints what comes after', async () => {
  const queue = backend.queue('events');
  const file = path.join(dir, 'topology.yaml');
  fs.writeFileSync(
    file,
    [
      'name: tailf',
      'dataDir: ./data',
      ...backend.busLines,
      'queues:',
      `  - { name: ${queue} }`,
      '',
    ].join('\n'),
  );
  await backend.createQueues([{ name: queue, partitions: 1 }]);
  const before = await sluice(['append', file, queue], '{"key":"a"}\n{"key":"b"}\n{"key":"c"}\n');
  assert.is(before.code, 0, before.err);

  const tail = spawn(
    process.execPath,
    [SLUICE_CLI, 'tail', file, queue, '-f', '--from-start', '-n', '100'],
    {
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let out = '';
  let err = '';
  let exit: number | null | undefined;
  tail.stdout.on('data', (b) => (out += b));
  tail.stderr.on('data', (b) => (err += b));
  tail.on('exit', (code) => (exit = code));
  const keys = () =>
    out
      .split('\n')
      .filter((l) => l !== '')
      .map((l) => (JSON.parse(l) as { key: string }).key);
  try {
    await until('the first 3 records', () => keys().length >= 3 || exit !== undefined);
    assert.equal(keys(), ['a', 'b', 'c'], err);

    await kafka.stopBroker(1, { kill: true });
    await until(
      'the tail reporting the broker gone',
      () => /the broker cannot be read/.test(err) || exit !== undefined,
    );
    assert.is(exit, undefined, `tail exited (${exit}) when the broker went away: ${err}`);
    assert.match(err, `queue "${queue}" partition 0: the broker cannot be read (`);

    await kafka.startBroker(1);
    const after = await sluice(['append', file, queue], '{"key":"d"}\n{"key":"e"}\n');
    assert.is(after.code, 0, after.err);
    await until(
      'the 2 records appended after the restart',
      () => keys().length >= 5 || exit !== undefined,
    );
    assert.is(exit, undefined, `tail exited (${exit}): ${err}`);
    assert.equal(keys(), ['a', 'b', 'c', 'd', 'e']);
    assert.match(err, /the broker answers again after [\d.]+ s; following/);
  } finally {
    tail.kill('SIGKILL');
    await kafka.stop({ kill: true });
  }
});

test.run();
