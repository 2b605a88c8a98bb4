/**
 * Two fixes found by the operations review: `sluice tail` keeps every record intact when it
 * prints more than one read buffer's worth (the tailer's bytes are a Buffer, whose slice() does
 * not copy), and a pump-count change asked for while the topology drains is a 409 naming the
 * state, not a 500.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { loadTopology, startTopology, installCapture, PumpCountError } from '../index.js';
import { sluice } from './lib/cli.js';

test('tail --from-start and -n over several MiB prints every record as written', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ops-review-tail-'));
  try {
    const file = path.join(dir, 'topology.yaml');
    fs.writeFileSync(file, 'name: tails\ndataDir: ./data\nqueues:\n  - { name: orders }\n');
    const N = 20_000;
    const pad = 'x'.repeat(200);
    const lines = Array.from({ length: N }, (_, n) => JSON.stringify({ key: `k${n}`, n, pad }));
    assert.is((await sluice(['append', file, 'orders'], lines.join('\n'))).code, 0);
    for (const args of [
      ['--from-start', '-n', String(N)],
      ['-n', String(N)],
      ['-a', '-n', String(N)],
    ]) {
      const r = await sluice(['tail', file, 'orders', ...args]);
      assert.is(r.code, 0, r.err);
      const got = r.out
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as { index: number; key: string; value: { n: number } });
      assert.is(got.length, N, args.join(' '));
      got.forEach((g, i) => {
        if (g.index !== i || g.key !== `k${i}` || g.value?.n !== i)
          assert.unreachable(`${args.join(' ')}: line ${i} is ${JSON.stringify(g).slice(0, 200)}`);
      });
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('a pump-count change while the topology drains is a 409, nothing changed', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ops-review-pumps-'));
  try {
    const db = path.join(dir, 'app.db');
    const d = new Database(db);
    d.exec('CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)');
    d.close();
    const file = path.join(dir, 'topology.yaml');
    fs.writeFileSync(
      file,
      [
        'name: drainpumps',
        'dataDir: ./data',
        'queues:',
        '  - { name: t-changes, partitions: 2 }',
        'capture:',
        '  - name: src',
        `    database: { dialect: sqlite, file: ${JSON.stringify(db)} }`,
        '    pumps: 1',
        '    tables:',
        '      - { table: t, operations: [insert], target: t-changes }',
        '',
      ].join('\n'),
    );
    const topology = loadTopology(file);
    await installCapture(topology);
    const running = await startTopology(topology);
    const stopping = running.stop();
    let err: unknown = null;
    try {
      await running.pumps.set('src', 2);
    } catch (e) {
      err = e;
    }
    await stopping;
    assert.ok(err instanceof PumpCountError, String(err));
    assert.is((err as PumpCountError).status, 409);
    assert.match((err as Error).message, /the topology is (draining|stopped)/);
    assert.is(running.pumps.current('src'), 1);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
