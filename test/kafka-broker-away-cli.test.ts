/**
 * The CLI on a kafka bus while its broker goes away (kill -9 of the real broker). `sluice tail
 * -f`, with the broker back on the same port and data: the tail waits it out (one stderr line
 * when it goes, one when it answers again), keeps running, and prints the records appended after
 * the restart once, after the ones it printed before. `sluice append` whose last flush is not
 * acknowledged: it fails saying how many events (up to which stdin line) are durable. Its own
 * broker: the shared one is not restarted.
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
  }
});

test('sluice append on Kafka whose broker goes away mid-input says how many events are durable', async () => {
  const queue = backend.queue('appended');
  const file = path.join(dir, 'append.yaml');
  fs.writeFileSync(
    file,
    [
      'name: tailf-append',
      'dataDir: ./data',
      ...backend.busLines,
      'queues:',
      `  - { name: ${queue} }`,
      '',
    ].join('\n'),
  );
  await backend.createQueues([{ name: queue, partitions: 1 }]);
  const append = spawn(process.execPath, [SLUICE_CLI, 'append', file, queue], {
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let err = '';
  let exit: number | null | undefined;
  append.stderr.on('data', (b) => (err += b));
  append.on('exit', (code) => (exit = code));
  const lines = (from: number, to: number) =>
    Array.from({ length: to - from }, (_, n) => `{"key":"k${from + n}"}\n`).join('');
  // 1000 events are flushed (and acknowledged) together; 5 more wait for the end of stdin.
  append.stdin.write(lines(0, 1000));
  const count = () => {
    const t = backend.tailer(dir, queue, 0);
    let n = 0;
    for (let rec = t.next(); rec; rec = t.next()) n++;
    t.close();
    return n;
  };
  await until('1000 events in the topic', () => count() >= 1000 || exit !== undefined);
  assert.is(exit, undefined, err);
  append.stdin.write(lines(1000, 1005));
  await new Promise((r) => setTimeout(r, 500));
  await kafka.stopBroker(1, { kill: true });
  append.stdin.end();
  try {
    await until('append to exit', () => exit !== undefined, 180_000);
  } finally {
    // Back up, so that the bus client below closes cleanly (it cannot with no broker).
    await kafka.startBroker(1);
  }
  assert.is.not(exit, 0, err);
  assert.match(
    err,
    `1000 events (stdin lines up to 1000) are durable in queue "${queue}", the 5 after them were not acknowledged and may or may not be there (append from line 1001 again`,
  );
});

test.after(async () => {
  await backend.close();
  await kafka.stop({ kill: true });
});

test.run();
