/**
 * The README's service example ("Writing a service", examples/bank/services/branch-balances.ts)
 * as a user runs it: in a topology that captures inserts, updates and deletes of its table from
 * SQLite. A captured delete has no after image and an insert no before image; the service
 * handles both (it used to crash on `change.after!`).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { loadTopology, startTopology, installCapture, partitionDir } from '../index.js';
import { Tailer } from '../engine/journal/index.js';
import { EnvelopeView, decodeJson } from '../engine/codec/index.js';

const root = new URL('../../', import.meta.url).pathname;
const source = path.join(root, 'examples', 'bank', 'services', 'branch-balances.ts');

test("the README's service example is examples/bank/services/branch-balances.ts from its import on", () => {
  const readme = fs.readFileSync(path.join(root, 'README.md'), 'utf8');
  const file = fs.readFileSync(source, 'utf8');
  const block =
    /## Writing a service\n\n```ts\n\/\/ examples\/bank\/services\/branch-balances\.ts\n([\s\S]*?)```\n/.exec(
      readme,
    );
  assert.ok(block, 'no service example in the README');
  assert.is(block![1], file.slice(file.indexOf('\nimport ') + 1));
});

test('the example service keeps exact branch totals over captured inserts, updates and deletes', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-service-example-'));
  try {
    const dbFile = path.join(dir, 'bank.db');
    const db = new Database(dbFile);
    db.exec('CREATE TABLE pgbench_history (hid INTEGER PRIMARY KEY, bid INTEGER, delta INTEGER)');
    const file = path.join(dir, 'topology.yaml');
    fs.writeFileSync(
      file,
      [
        'name: example',
        'dataDir: ./data',
        'queues:',
        '  - { name: history-changes }',
        '  - { name: totals }',
        'services:',
        '  - name: branch-balances',
        `    module: ${source}`,
        '    inputs: [history-changes]',
        '    output: totals',
        'capture:',
        '  - name: bank-db',
        '    database: { dialect: sqlite, file: ./bank.db }',
        '    tables:',
        '      - table: pgbench_history',
        '        operations: [insert, update, delete]',
        '        target: history-changes',
        '',
      ].join('\n'),
    );
    const topology = loadTopology(file);
    await installCapture(topology);
    const log: string[] = [];
    const running = await startTopology(topology, { log: (l) => log.push(l) });
    const insert = db.prepare('INSERT INTO pgbench_history (hid, bid, delta) VALUES (?, ?, ?)');
    insert.run(1, 1, 10);
    insert.run(2, 1, 5);
    insert.run(3, 2, 7);
    db.prepare('UPDATE pgbench_history SET delta = 8 WHERE hid = 2').run();
    db.prepare('UPDATE pgbench_history SET bid = 1 WHERE hid = 3').run();
    db.prepare('DELETE FROM pgbench_history WHERE hid = 1').run();
    db.close();
    const expected = [
      '1:1=10',
      '1:1=15',
      '2:2=7', // three inserts
      '1:1=18', // update of hid 2: delta 5 -> 8 (before and after in branch 1)
      '2:2=0',
      '1:1=25', // update of hid 3: bid 2 -> 1 (before in branch 2, after in branch 1)
      '1:1=15', // delete of hid 1: only a before image
    ];
    const read = (): string[] => {
      const outputs: string[] = [];
      const t = Tailer.open({ dir: partitionDir(topology, 'totals', 0) });
      const view = new EnvelopeView();
      for (let rec = t.next(); rec; rec = t.next()) {
        view.wrap(rec.bytes, 0, rec.bytes.length);
        const v = decodeJson(view.payload) as { bid: number; total: number };
        outputs.push(`${view.key}:${v.bid}=${v.total}`);
      }
      t.close();
      return outputs;
    };
    for (
      const t0 = Date.now();
      read().length < expected.length;
      await new Promise((r) => setTimeout(r, 20))
    ) {
      assert.ok(
        Date.now() - t0 < 20_000,
        `outputs after 20 s: ${read().join(' ')}; log: ${log.join(' | ')}`,
      );
    }
    await running.stop();
    assert.equal(read(), expected);
    assert.equal(
      log.filter((l) => l.includes('restarting')),
      [],
    );
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
