/**
 * `sluice tail --all-partitions`: the records of every partition of a topic merged by event time,
 * each line naming its partition; the last n, the first n (--from-start), and --follow.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { sluice } from './lib/cli.js';

const cli = new URL('../cli/sluice.js', import.meta.url).pathname;

const jsonl = (ns: number[]) => ns.map((n) => JSON.stringify({ key: `k${n}`, n })).join('\n');
const parsed = (out: string) =>
  out
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as { partition: number; index: number; value: { n: number } });

test('tail -a merges every partition by event time and shows the partition', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ops2-tail-'));
  try {
    const file = path.join(dir, 'topology.yaml');
    fs.writeFileSync(
      file,
      'name: tails\ndataDir: ./data\nqueues:\n  - { name: orders, partitions: 3 }\n',
    );
    // Three appends one after the other: their event times are in this order.
    assert.is((await sluice(['append', file, 'orders', '-p', '1'], jsonl([0, 1, 2]))).code, 0);
    assert.is((await sluice(['append', file, 'orders', '-p', '0'], jsonl([3, 4, 5]))).code, 0);
    assert.is((await sluice(['append', file, 'orders', '-p', '1'], jsonl([6, 7]))).code, 0);

    const last = await sluice(['tail', file, 'orders', '-a', '-n', '4']);
    assert.is(last.code, 0, last.err);
    assert.is(last.err, '');
    assert.equal(
      parsed(last.out).map((l) => [l.partition, l.index, l.value.n]),
      [
        [0, 1, 4],
        [0, 2, 5],
        [1, 3, 6],
        [1, 4, 7],
      ],
    );
    const first = await sluice([
      'tail',
      file,
      'orders',
      '--all-partitions',
      '--from-start',
      '-n',
      '5',
    ]);
    assert.equal(
      parsed(first.out).map((l) => l.value.n),
      [0, 1, 2, 3, 4],
    );
    const all = await sluice(['tail', file, 'orders', '-a', '-n', '100']);
    assert.equal(
      parsed(all.out).map((l) => l.value.n),
      [0, 1, 2, 3, 4, 5, 6, 7],
    );
    const both = await sluice(['tail', file, 'orders', '-a', '-p', '1']);
    assert.is(both.code, 2);
    assert.match(both.err, '--partition and --all-partitions exclude each other');

    // --follow: what is appended to any partition from now on.
    const follow = spawn(process.execPath, [cli, 'tail', file, 'orders', '-a', '-n', '0', '-f'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    follow.stdout.on('data', (b) => (out += b));
    await new Promise((r) => setTimeout(r, 1000));
    await sluice(['append', file, 'orders', '-p', '2'], jsonl([8]));
    await sluice(['append', file, 'orders', '-p', '0'], jsonl([9]));
    const deadline = Date.now() + 20_000;
    while (out.trim().split('\n').filter(Boolean).length < 2 && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 100));
    follow.kill('SIGTERM');
    assert.equal(
      parsed(out).map((l) => [l.partition, l.value.n]),
      [
        [2, 8],
        [0, 9],
      ],
    );
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
