/**
 * `sluice dlq list|replay|purge` (issue 9, section 3): a poison event dead-lettered by `sluice
 * run` is listed with its position, attempts and error, replayed into its source queue once the
 * handler is fixed (and then processed), and purged.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { loadTopology, partitionDir, type Topology } from '../index.js';
import { Tailer } from '../engine/journal/index.js';
import { EnvelopeView, EVENT_TYPE_JSON, decodeJson } from '../engine/codec/index.js';
import { computeLastWritten } from '../engine/service/index.js';
import { sluice } from './lib/cli.js';

const cli = new URL('../cli/sluice.js', import.meta.url).pathname;
const poisonFile = new URL('./fixtures/services/poison-file.js', import.meta.url).pathname;

/** `sluice run` until the output's LAST_WRITTEN of in/0 is `last`, then SIGINT. */
async function runUntil(
  file: string,
  t: Topology,
  last: number,
): Promise<{ code: number | null; err: string }> {
  const p = spawn(process.execPath, [cli, 'run', file, '--status-ms', '0'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let err = '';
  p.stderr.on('data', (b) => (err += b));
  const exited = new Promise<number | null>((res) => p.on('exit', (code) => res(code)));
  const deadline = Date.now() + 30_000;
  for (;;) {
    const dir = partitionDir(t, 'out', 0);
    if (fs.existsSync(dir)) {
      const tail = Tailer.open({ dir });
      tail.moveToEnd();
      const at = computeLastWritten(tail, [{ queue: 'in', partition: 0 }]).positions['in/0'];
      tail.close();
      if (at === last) break;
    }
    if (Date.now() > deadline) {
      p.kill('SIGKILL');
      assert.unreachable(`LAST_WRITTEN never reached ${last}:\n${err}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  p.kill('SIGINT');
  return { code: await exited, err };
}

function outputNames(t: Topology): string[] {
  const tail = Tailer.open({ dir: partitionDir(t, 'out', 0) });
  const view = new EnvelopeView();
  const names: string[] = [];
  for (let rec = tail.next(); rec; rec = tail.next()) {
    view.wrap(rec.bytes, 0, rec.bytes.length);
    if (view.type === EVENT_TYPE_JSON)
      names.push((decodeJson(view.payload) as { key: string }).key);
  }
  tail.close();
  return names;
}

test('dlq list shows the dead letter; replay re-injects it into its source queue; purge removes it', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-dlq-cli-'));
  try {
    const poison = path.join(dir, 'poison');
    fs.writeFileSync(poison, '');
    const file = path.join(dir, 'topology.yaml');
    fs.writeFileSync(
      file,
      [
        'name: dlq-cli',
        'dataDir: ./data',
        'queues:',
        '  - { name: in }',
        '  - { name: out }',
        'services:',
        '  - name: pass',
        `    module: ${poisonFile}`,
        '    inputs: [in]',
        '    output: out',
        '    errors: { retriesMax: 1, retryBackoffMs: 1 }',
        `    settings: { poisonFile: ${JSON.stringify(poison)} }`,
        '',
      ].join('\n'),
    );
    const t = loadTopology(file);
    const a = await sluice(
      ['append', file, 'in'],
      '{"key":"a"}\n{"key":"b","bad":true}\n{"key":"c"}\n',
    );
    assert.is(a.code, 0, a.err);

    const first = await runUntil(file, t, 2);
    assert.is(first.code, 0, first.err);
    assert.match(
      first.err,
      'service pass: dead-lettered in/0 index 1 (key "b") to pass.dlq after 2 attempts: bad event on purpose',
    );
    assert.equal(outputNames(t), ['a', 'c']);

    const list = await sluice(['dlq', 'list', file, 'pass.dlq']);
    assert.is(list.code, 0, list.err);
    const lines = list.out
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    assert.is(lines.length, 1);
    assert.type(lines[0].failedAtMs, 'number');
    delete lines[0].failedAtMs;
    assert.equal(lines[0], {
      dlqIndex: 0,
      service: 'pass',
      queue: 'in',
      partition: 0,
      index: 1,
      key: 'b',
      attempts: 2,
      error: 'bad event on purpose',
      value: { key: 'b', bad: true },
    });

    // The fix: the handler no longer fails on it. Replay appends it to in/0 at index 3.
    fs.rmSync(poison);
    const replay = await sluice(['dlq', 'replay', file, 'pass.dlq']);
    assert.is(replay.code, 0, replay.err);
    assert.is(replay.out.trim(), '{"dlqIndex":0,"queue":"in","partition":0,"index":3}');
    assert.is(replay.err.trim(), 'sluice: replayed 1 dead letter from pass.dlq');
    const second = await runUntil(file, t, 3);
    assert.is(second.code, 0, second.err);
    assert.equal(outputNames(t), ['a', 'c', 'b']);

    const toOutput = await sluice(['dlq', 'replay', file, 'pass.dlq', '--to', 'out']);
    assert.is(toOutput.code, 2);
    assert.is(
      toOutput.err.trim(),
      `sluice: queue "out" is written by "pass" in ${file}; a queue has one writer (replay to a queue no service or capture source writes)`,
    );
    // Into the dead-letter queue itself: its service writes it, and a raw event there would make
    // every later dlq list or replay fail ("record N is not a dead letter").
    const toItself = await sluice(['dlq', 'replay', file, 'pass.dlq', '--to', 'pass.dlq']);
    assert.is(toItself.code, 2);
    assert.is(
      toItself.err.trim(),
      `sluice: queue "pass.dlq" is written by "pass" in ${file}; a queue has one writer (replay to a queue no service or capture source writes)`,
    );
    const stillListed = await sluice(['dlq', 'list', file, 'pass.dlq']);
    assert.is(stillListed.code, 0, stillListed.err);
    assert.is(stillListed.out.trim().split('\n').length, 1, stillListed.out);
    const noSuch = await sluice(['dlq', 'replay', file, 'pass.dlq', '-i', '7']);
    assert.is(noSuch.code, 2);
    assert.is(
      noSuch.err.trim(),
      'sluice: dead-letter queue "pass.dlq" has no index 7 (it has 1 record, indexes 0)',
    );
    const purge = await sluice(['dlq', 'purge', file, 'pass.dlq']);
    assert.is(purge.code, 0, purge.err);
    assert.is(purge.err.trim(), 'sluice: purged 1 dead letter from pass.dlq');
    const empty = await sluice(['dlq', 'list', file, 'pass.dlq']);
    assert.is(empty.code, 0, empty.err);
    assert.is(empty.out, '');

    const wrong = await sluice(['dlq', 'list', file, 'out']);
    assert.is(wrong.code, 2);
    assert.is(
      wrong.err.trim(),
      `sluice: queue "out" is not a dead-letter queue in ${file} (dead-letter queues: pass.dlq)`,
    );
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
