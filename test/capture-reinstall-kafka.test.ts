/**
 * Capture into Kafka installed again while the topic keeps the earlier installation's records
 * (test/capture-reinstall.test.ts does the journal queue): the recreated staging table reuses
 * staging ids, and a pump's start must not take the earlier installation's last transaction for
 * its own unacked batch. SQLite source, real broker: ship a first set of changes; uninstall with
 * the staging tables, recreate the table, install; write new changes; `sluice run` killed by a
 * pump right after a Kafka commit, before the staging delete (SLUICE_FAULT=after-append); a clean
 * run ships the rest. A read_committed consumer must see every change of both installations
 * exactly once, each record stamped with its installation's id (header sluice.installation).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { testKafka } from '../testing/kafka-broker.js';
import { loadTopology, installCapture } from '../index.js';
import { openStaging } from '../engine/cdc/index.js';
import { EnvelopeView, decodeChange } from '../engine/codec/index.js';
import { createAppDb, LEDGER_DDL, stagingName } from './cdc-helpers.js';
import { readCommitted, deleteTopics } from './lib/kafka-read.js';
import { runSluice } from './lib/sluice-child.js';

const ROWS = 12;

test('kafka target: capture installed again over a topic holding the earlier installation: a crash after commit loses nothing new', async () => {
  const kafka = await testKafka();
  const app = await createAppDb('sqlite');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-epoch-kafka-'));
  const name = `h-epoch-${randomBytes(5).toString('hex')}`;
  const topic = `${name}.ledger`;
  try {
    await app.exec(LEDGER_DDL.sqlite);
    const file = path.join(dir, 'topology.yaml');
    fs.writeFileSync(
      file,
      [
        `name: ${name}`,
        'dataDir: ./data',
        `bus: { kind: kafka, brokers: [${kafka.brokers.join(', ')}] }`,
        'supervisor: { backoffInitialMs: 10 }',
        'queues:',
        `  - { name: ${topic}, partitions: 2 }`,
        'capture:',
        '  - name: app',
        `    database: { dialect: sqlite, file: ${(app.ref as { file: string }).file} }`,
        '    pumps: 2',
        '    batchSizeMax: 4',
        '    pollIntervalMs: 2',
        '    tables:',
        `      - { table: ledger, operations: [insert, update, delete], target: ${topic} }`,
        '',
      ].join('\n'),
    );
    const topology = loadTopology(file);
    const staged = async () =>
      Number(
        (await app.query<{ n: number }>(`SELECT count(*) AS n FROM ${stagingName(app)}`))[0]!.n,
      );
    const write = async (gen: string): Promise<string[]> => {
      const tags: string[] = [];
      for (let id = 1; id <= ROWS; id++) {
        await app.exec(`INSERT INTO ledger(id, holder) VALUES (${id}, '${gen}-h${id}')`);
        tags.push(`insert:${gen}-h${id}`);
      }
      for (let id = 1; id <= ROWS; id++) {
        await app.exec(`UPDATE ledger SET memo = '${gen}-m${id}' WHERE id = ${id}`);
        tags.push(`update:${gen}-m${id}`);
      }
      return tags;
    };

    await installCapture(topology);
    const first = await write('old');
    const r1 = await runSluice(file, {
      killAfterMs: null,
      until: async () => (await staged()) === 0,
    });
    assert.is(r1.code, 0, r1.out);

    const staging = await openStaging(topology.capture[0]!);
    await staging.uninstall({ dropStaging: true });
    await app.exec('DROP TABLE ledger');
    await app.exec(LEDGER_DDL.sqlite);
    await staging.install();
    await staging.close();
    const second = await write('new');
    assert.is(await staged(), second.length);

    const r2 = await runSluice(file, { killAfterMs: 20_000, fault: true });
    assert.is(r2.signal, 'SIGKILL', `the faulty run should have died after a commit:\n${r2.out}`);
    const r3 = await runSluice(file, {
      killAfterMs: null,
      until: async () => (await staged()) === 0,
    });
    assert.is(r3.code, 0, r3.out);
    assert.is(await staged(), 0);

    const all = [...first, ...second];
    const records = await readCommitted(kafka.brokers, [topic], all.length, {
      timeoutMs: 60_000,
      settleMs: 1500,
    });
    const view = new EnvelopeView();
    const tags = new Map<string, number>();
    const installationOf = new Map<string, Set<string>>();
    for (const r of records) {
      view.wrap(r.value!, 0, r.value!.length);
      const c = decodeChange(view.payload);
      const after = JSON.parse(c.after ?? '{}') as Record<string, string | null>;
      const tag = `${c.op}:${after.memo ?? after.holder}`;
      tags.set(tag, (tags.get(tag) ?? 0) + 1);
      const gen = tag.slice(tag.indexOf(':') + 1, tag.indexOf('-'));
      const set = installationOf.get(gen) ?? new Set();
      installationOf.set(gen, set);
      set.add(`${c.installation}|${r.headers['sluice.installation']}`);
    }
    const missing = all.filter((t) => !tags.has(t));
    assert.equal(missing, [], 'changes never shipped (deleted from staging unshipped)');
    for (const t of all) assert.is(tags.get(t), 1, `change ${t} read ${tags.get(t)} times`);
    assert.is(records.length, all.length);
    // Each installation's records carry one id, in the value and the header alike; two ids.
    const ids = ['old', 'new'].map((g) => [...(installationOf.get(g) ?? [])]);
    for (const list of ids) {
      assert.is(list.length, 1, `one installation id per installation: ${list.join(', ')}`);
      const [v, h] = list[0]!.split('|');
      assert.match(v!, /^[0-9a-f]{16}$/);
      assert.is(v, h);
    }
    assert.is.not(ids[0]![0], ids[1]![0], 'the second install has a new installation id');
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
    await app.destroy();
    await deleteTopics(kafka.brokers, [topic]);
    await kafka.release();
  }
});

test.run();
