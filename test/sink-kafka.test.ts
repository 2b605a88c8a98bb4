/**
 * The sink actor (topology `sinks`): capture into the embedded journal, ship the queue to a
 * Kafka topic exactly once, on the real broker, across kill -9 of `sluice run` (in a child
 * process) at random moments while the database is written; then a clean run. A read_committed
 * kafkajs consumer must see every journal record of every partition once, in index order, with
 * the journal's bytes, and the journal must hold every change the writer made. Also: the sinks
 * section's refusals, with file:line:col.
 *
 * Two defects this caught (both fixed): the sink sent views of the tailer's read buffer
 * (Buffer.slice() does not copy), so a later read in the batch could overwrite a value before
 * the send (a byte mismatch at one index); and kafkajs' read_committed filter returned the open
 * batch of a killed sink, aborted when the restart fenced it, whenever another producer's
 * transaction in the same partition was aborted first (5 "duplicates" in 600; see
 * engine/bus/kafka/read-committed.ts).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import Database from 'better-sqlite3';
// First: kafkajs must load with the corrected read_committed filter installed.
import '../engine/bus/kafka/read-committed.js';
import kafkajs from 'kafkajs';
import { testKafka } from '../testing/kafka-broker.js';
import {
  loadTopology,
  parseTopology,
  installCapture,
  partitionDir,
  ConfigError,
} from '../index.js';
import { Tailer } from '../engine/journal/index.js';
import { EnvelopeView, decodeChange } from '../engine/codec/index.js';
import { LEDGER_DDL } from './cdc-helpers.js';
import { readCommitted, deleteTopics } from './lib/kafka-read.js';
import { longOr } from './lib/long.js';
import { runSluice } from './lib/sluice-child.js';

/** npm test: 5; npm run test:long: 10 (test/lib/long.ts). */
const KILLS = longOr(10, 5);
const PARTITIONS = 2;

function journal(dir: string): Uint8Array[] {
  const t = Tailer.open({ dir });
  const out: Uint8Array[] = [];
  for (let r = t.next(); r; r = t.next()) out.push(new Uint8Array(r.bytes));
  t.close();
  return out;
}

test(`sink: journal queue to a Kafka topic exactly once across ${KILLS} kill -9 of sluice run`, async () => {
  const kafka = await testKafka();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'capkafka-sink-'));
  const name = `capkafka-${randomBytes(5).toString('hex')}`;
  const topic = `${name}.shipped`;
  const dbFile = path.join(dir, 'app.db');
  const db = new Database(dbFile, { timeout: 10_000 });
  const admin = new kafkajs.Kafka({
    brokers: kafka.brokers,
    logLevel: kafkajs.logLevel.NOTHING,
  }).admin();
  let writing = true;
  try {
    await admin.connect();
    db.pragma('journal_mode = WAL');
    db.exec(LEDGER_DDL.sqlite);
    const file = path.join(dir, 'topology.yaml');
    fs.writeFileSync(
      file,
      [
        `name: ${name}`,
        'dataDir: ./data',
        'supervisor: { backoffInitialMs: 10 }',
        'queues:',
        `  - { name: ledger-changes, partitions: ${PARTITIONS} }`,
        'capture:',
        '  - name: app',
        `    database: { dialect: sqlite, file: ${dbFile} }`,
        `    pumps: ${PARTITIONS}`,
        '    batchSizeMax: 20',
        '    pollIntervalMs: 2',
        '    tables:',
        '      - { table: ledger, operations: [insert, update, delete], target: ledger-changes }',
        'sinks:',
        '  - name: ship',
        '    from: ledger-changes',
        `    to: { brokers: [${kafka.brokers.join(', ')}], topic: ${topic}, partitions: 3 }`,
        '    batchSizeMax: 5',
        '',
      ].join('\n'),
    );
    const topology = loadTopology(file);
    await installCapture(topology);
    let changes = 0;
    const writer = (async () => {
      while (writing && changes < 600) {
        const id = 1 + Math.floor(Math.random() * 20);
        db.prepare(
          'INSERT INTO ledger(id, amount) VALUES (?, ?) ON CONFLICT(id) DO UPDATE SET amount = excluded.amount',
        ).run(id, String(changes));
        changes++;
        // Paced so that the changes span several of the kills.
        await new Promise((r) => setTimeout(r, 25));
      }
    })();
    for (let i = 0; i < KILLS; i++) {
      const r = await runSluice(file, { killAfterMs: Math.floor(Math.random() * 1500) });
      assert.is(r.signal, 'SIGKILL', `run ${i} should have been killed:\n${r.out}`);
    }
    writing = false;
    await writer;
    const dirs = Array.from({ length: PARTITIONS }, (_, p) =>
      partitionDir(topology, 'ledger-changes', p),
    );
    const staged = () =>
      (db.prepare('SELECT count(*) AS n FROM sluice_staging').get() as { n: number }).n;
    // Done when staging is empty and each sink partition's committed position is its journal's end.
    const shipped = async (): Promise<boolean> => {
      if (staged() > 0) return false;
      for (let p = 0; p < PARTITIONS; p++) {
        const [o] = await admin.fetchOffsets({
          groupId: `sluice.sink.${name}.ship.${p}`,
          topics: [topic],
        });
        const at = Number(o?.partitions.find((x) => x.partition === 0)?.offset ?? -1);
        if (at !== journal(dirs[p]!).length) return false;
      }
      return true;
    };
    const final = await runSluice(file, { killAfterMs: null, until: shipped });
    assert.is(final.code, 0, final.out);

    const queues = dirs.map(journal);
    const total = queues.reduce((n, q) => n + q.length, 0);
    assert.is(total, changes, 'the journal holds every change once');
    const records = await readCommitted(kafka.brokers, [topic], total, { settleMs: 1500 });
    const seen = new Map<string, number>();
    for (const r of records) {
      const at = `${r.headers['sluice.partition']}/${r.headers['sluice.index']}`;
      seen.set(at, (seen.get(at) ?? 0) + 1);
    }
    const twice = [...seen].filter(([, n]) => n > 1).map(([at]) => at);
    assert.is(
      records.length,
      total,
      `records in the topic (journal partition/index seen more than once: ${twice.join(' ') || 'none'})`,
    );
    console.log(
      `  sink: ${KILLS} kills; journal ${queues.map((q) => q.length).join(' + ')} = ${total} records; read_committed topic ${records.length} records`,
    );
    const view = new EnvelopeView();
    for (let p = 0; p < PARTITIONS; p++) {
      const mine = records
        .filter((r) => r.headers['sluice.partition'] === String(p))
        .sort((a, b) => Number(a.headers['sluice.index']) - Number(b.headers['sluice.index']));
      assert.equal(
        mine.map((r) => Number(r.headers['sluice.index'])),
        queues[p]!.map((_, i) => i),
        `partition ${p}: every index once`,
      );
      mine.forEach((r, i) => {
        assert.ok(
          Buffer.from(queues[p]![i]!).equals(r.value!),
          `partition ${p} index ${i}: the journal's bytes`,
        );
        view.wrap(r.value!, 0, r.value!.length);
        assert.is(r.key, decodeChange(view.payload).key);
        assert.is(r.headers['sluice.queue'], 'ledger-changes');
      });
      // Per key, the topic keeps the journal's order (one key, one Kafka partition).
      const byKey = new Map<string, number[]>();
      for (const r of records)
        if (r.headers['sluice.partition'] === String(p))
          byKey.set(r.key!, [...(byKey.get(r.key!) ?? []), Number(r.headers['sluice.index'])]);
      for (const [key, idx] of byKey)
        assert.equal(
          idx,
          [...idx].sort((a, b) => a - b),
          `key ${key} in index order`,
        );
    }
  } finally {
    writing = false;
    db.close();
    await admin.disconnect().catch(() => undefined);
    fs.rmSync(dir, { recursive: true, force: true });
    await deleteTopics(kafka.brokers, [topic]);
    await kafka.release();
  }
});

test('sinks and format: refusals at file:line:col', () => {
  const file = '/tmp/capkafka-sinks.yaml';
  const problems = (text: string): string[] => {
    try {
      parseTopology(text, file);
    } catch (e) {
      assert.instance(e, ConfigError);
      return (e as Error).message.split('\n').map((l) => l.slice(file.length + 1));
    }
    return [];
  };
  const base = ['name: x', 'queues:', '  - { name: q, partitions: 2 }'];
  assert.equal(
    problems(
      [...base, 'sinks:', '  - { name: s, from: nope, to: { brokers: [h:1] } }', ''].join('\n'),
    ),
    ['5:22: sinks[0].from: unknown queue "nope" (known: q)'],
  );
  // to.recordBytesMax has bus.recordBytesMax's bounds (64 KiB .. 256 MiB).
  assert.equal(
    problems(
      [
        ...base,
        'sinks:',
        '  - { name: s, from: q, to: { brokers: [h:1], recordBytesMax: 1000 } }',
        '',
      ].join('\n'),
    ),
    ['5:63: sinks[0].to.recordBytesMax: must be in [65536, 268435456], got 1000'],
  );
  assert.is(
    parseTopology(
      [
        ...base,
        'sinks:',
        '  - { name: s, from: q, to: { brokers: [h:1], recordBytesMax: 2000000 } }',
        '',
      ].join('\n'),
      file,
    ).sinks[0]!.to.recordBytesMax,
    2_000_000,
  );
  assert.equal(
    problems(
      [
        ...base,
        'sinks:',
        '  - { name: s, from: q, to: { brokers: [h:1] } }',
        '  - { name: s, from: q, to: { brokers: [h] } }',
        '',
      ].join('\n'),
    ),
    [
      '6:13: sinks[1].name: duplicate sink name "s" (first defined at line 5)',
      '6:41: sinks[1].to.brokers[0]: must be host:port with a port 1-65535 (an IPv6 host in brackets), got "h"',
    ],
  );
  assert.equal(
    problems(
      [
        'name: x',
        'bus: { kind: kafka, brokers: [h:1] }',
        ...base.slice(1),
        'sinks:',
        '  - { name: s, from: q, to: { brokers: [h:1] } }',
        '',
      ].join('\n'),
    ),
    [
      '6:5: sinks[0]: a sink forwards a queue of the embedded journal to Kafka; on a kafka bus the queues are Kafka topics already (remove the sink, or use bus kind journal)',
    ],
  );
  const capture = (bus: string, table: string) =>
    [
      'name: x',
      ...(bus ? [bus] : []),
      'queues:',
      '  - { name: q, partitions: 3 }',
      'capture:',
      '  - name: app',
      '    database: { dialect: postgres, url: "postgres://h/db" }',
      '    pumps: 2',
      '    tables:',
      `      - ${table}`,
      '',
    ].join('\n');
  // On a kafka bus pumps and partitions are independent; on the journal one partition per pump.
  assert.equal(
    problems(
      capture(
        'bus: { kind: kafka, brokers: [h:1] }',
        '{ table: t, operations: [insert], target: q, format: json }',
      ),
    ),
    [],
  );
  const journalBus = problems(
    capture('', '{ table: t, operations: [insert], target: q, format: json }'),
  );
  assert.equal(journalBus.length, 2);
  assert.match(
    journalBus[0]!,
    'capture[0].tables[0].target: queue "q" has 3 partitions but capture source "app" has 2 pumps; on the journal bus the partitions of a capture target must be a multiple of the pumps',
  );
  assert.match(journalBus[1]!, 'capture[0].tables[0].format: format json needs a kafka bus');
  assert.equal(
    parseTopology(
      capture(
        'bus: { kind: kafka, brokers: [h:1] }',
        '{ table: t, operations: [insert], target: q, format: json }',
      ),
      file,
    ).capture[0]!.tables[0]!.format,
    'json',
  );
  const t = parseTopology(
    [...base, 'sinks:', '  - { name: s, from: q, to: { brokers: [h:1] } }', ''].join('\n'),
    file,
  );
  assert.equal(t.sinks, [
    {
      name: 's',
      from: 'q',
      to: {
        brokers: ['h:1'],
        topic: 'q',
        partitions: 2,
        clientId: 'sluice-x',
        recordBytesMax: 1_000_000,
      },
      format: 'envelope',
      batchSizeMax: 500,
      pollIntervalMs: 10,
    },
  ]);
});

test.run();
