/**
 * Capture into Kafka exactly once across kill -9, on the real broker: `sluice run` in a child
 * process (3 pumps, a topic of 2 partitions, batches of 5) while this process keeps writing to
 * the SQLite database; the child is killed with SIGKILL at random moments 10 times, and twice
 * more by the pumps themselves right after a Kafka commit and before the staging delete
 * (SLUICE_FAULT=after-append: the window the reconciliation exists for). Then a clean run ships
 * the rest and a read_committed kafkajs consumer must see every change the writer made exactly
 * once, in the writer's order per key, and the table rebuilt from them equals the database.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import Database from 'better-sqlite3';
import { testKafka } from '../testing/kafka-broker.js';
import { loadTopology, installCapture } from '../index.js';
import { EnvelopeView, decodeChange } from '../engine/codec/index.js';
import { LEDGER_DDL } from './cdc-helpers.js';
import { readCommitted, deleteTopics } from './lib/kafka-read.js';
import { runSluice } from './lib/sluice-child.js';

const KILLS_RANDOM = 10;
const KILLS_AFTER_COMMIT = 2;
/** Changes the writer makes in all (it stops earlier if the kills are over). */
const CHANGES_MAX = 1200;

test(`kill -9 of sluice run ${KILLS_RANDOM} times at random moments and ${KILLS_AFTER_COMMIT} times between a Kafka commit and the staging delete: every change exactly once, in order per key`, async () => {
  const kafka = await testKafka();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'capkafka-crash-'));
  const name = `capkafka-${randomBytes(5).toString('hex')}`;
  const topic = `${name}.ledger`;
  const dbFile = path.join(dir, 'app.db');
  const db = new Database(dbFile, { timeout: 10_000 });
  let writing = true;
  try {
    db.pragma('journal_mode = WAL');
    db.exec(LEDGER_DDL.sqlite);
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
        `    database: { dialect: sqlite, file: ${dbFile} }`,
        '    pumps: 3',
        '    batchSizeMax: 5',
        '    pollIntervalMs: 2',
        '    tables:',
        `      - { table: ledger, operations: [insert, update, delete], target: ${topic} }`,
        '',
      ].join('\n'),
    );
    await installCapture(loadTopology(file));

    // The writer: one statement every few ms over 25 keys; `log` is what the database committed.
    const log = new Map<string, { op: string; v: string | null }[]>();
    const value = new Map<number, number>();
    let changes = 0;
    const writer = (async () => {
      // Bounded, so the last clean run ships the rest in seconds.
      while (writing && changes < CHANGES_MAX) {
        const id = 1 + Math.floor(Math.random() * 25);
        const key = JSON.stringify([String(id)]);
        const list = log.get(key) ?? [];
        log.set(key, list);
        const v = value.get(id);
        if (v === undefined) {
          db.prepare('INSERT INTO ledger(id, amount) VALUES (?, ?)').run(id, '0');
          value.set(id, 0);
          list.push({ op: 'insert', v: '0' });
        } else if (Math.random() < 0.1) {
          db.prepare('DELETE FROM ledger WHERE id = ?').run(id);
          value.delete(id);
          list.push({ op: 'delete', v: null });
        } else {
          db.prepare('UPDATE ledger SET amount = ? WHERE id = ?').run(String(v + 1), id);
          value.set(id, v + 1);
          list.push({ op: 'update', v: String(v + 1) });
        }
        changes++;
        await new Promise((r) => setTimeout(r, 15));
      }
    })();

    const kinds = [
      ...Array(KILLS_RANDOM).fill('random'),
      ...Array(KILLS_AFTER_COMMIT).fill('fault'),
    ].sort(() => Math.random() - 0.5) as ('random' | 'fault')[];
    for (const [i, kind] of kinds.entries()) {
      const r =
        kind === 'fault'
          ? await runSluice(file, { killAfterMs: 20_000, fault: true })
          : await runSluice(file, { killAfterMs: Math.floor(Math.random() * 1500) });
      assert.is(r.signal, 'SIGKILL', `run ${i} (${kind}) should have been killed:\n${r.out}`);
      if (process.env.CAPKAFKA_DEBUG)
        console.log(
          `run ${i} ${kind}`,
          Date.now(),
          r.out
            .split('\n')
            .filter((l) => !l.includes('is up'))
            .join('\n'),
        );
    }
    writing = false;
    await writer;
    const staged = () =>
      (db.prepare('SELECT count(*) AS n FROM sluice_staging').get() as { n: number }).n;
    const final = await runSluice(file, { killAfterMs: null, until: () => staged() === 0 });
    assert.is(final.code, 0, final.out);
    assert.is(staged(), 0);

    const records = await readCommitted(kafka.brokers, [topic], changes, {
      timeoutMs: 60_000,
      settleMs: 1500,
    });
    const view = new EnvelopeView();
    const ids = new Map<string, number>();
    const got = new Map<string, { op: string; v: string | null }[]>();
    const partitionOf = new Map<string, number>();
    for (const r of records) {
      view.wrap(r.value!, 0, r.value!.length);
      const c = decodeChange(view.payload);
      ids.set(c.stagingId, (ids.get(c.stagingId) ?? 0) + 1);
      const list = got.get(c.key) ?? [];
      got.set(c.key, list);
      list.push({
        op: c.op,
        v: c.after === null ? null : (JSON.parse(c.after) as { amount: string }).amount,
      });
      const p = partitionOf.get(c.key);
      assert.ok(p === undefined || p === r.partition, `key ${c.key} in two partitions`);
      partitionOf.set(c.key, r.partition);
    }
    const dups = [...ids].filter(([, n]) => n > 1).map(([id]) => id);
    if (dups.length > 0 && process.env.CAPKAFKA_DEBUG) {
      for (const r of records)
        if (dups.includes(r.headers['sluice.stagingId']!))
          console.log(r.partition, r.offset, JSON.stringify(r.headers));
      fs.writeFileSync(
        '/tmp/capkafka-records.json',
        JSON.stringify(records.map((r) => ({ p: r.partition, o: r.offset, h: r.headers }))),
      );
    }
    for (const [id, n] of ids) assert.is(n, 1, `staging id ${id} read ${n} times`);
    assert.is(records.length, changes, `records read vs changes written (${changes})`);
    assert.equal(got, log, "per key, the changes in the writer's order");
    const rows = db.prepare('SELECT id, amount FROM ledger ORDER BY id').all() as {
      id: number;
      amount: string;
    }[];
    const rebuilt = [...got]
      .map(([k, list]) => [JSON.parse(k)[0] as string, list[list.length - 1]!] as const)
      .filter(([, last]) => last.op !== 'delete')
      .map(([id, last]) => [Number(id), last.v])
      .sort((a, b) => (a[0] as number) - (b[0] as number));
    assert.equal(
      rebuilt,
      rows.map((r) => [r.id, r.amount]),
    );
  } finally {
    writing = false;
    db.close();
    fs.rmSync(dir, { recursive: true, force: true });
    await deleteTopics(kafka.brokers, [topic]);
    await kafka.release();
  }
});

test.run();
