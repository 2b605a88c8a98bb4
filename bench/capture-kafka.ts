/**
 * Capture drain rate into Kafka against into the journal, same run: N changes staged in a
 * SQLite file (one INSERT ... SELECT under installed triggers), then the topology started and
 * timed from its start until staging is empty; pumps 1, 2 and 4. The journal target has one
 * partition per pump (its rule); the Kafka topic has 4 partitions whatever the pump count.
 * Each configuration gets a fresh copy of the same staged file and fresh topics.
 *   node dist/bench/capture-kafka.js [--brokers host:port] [--changes 20000] [--batch 500,5000]
 * `--batch`: the capture source's batchSizeMax values to run (each a row per pump count; default
 * 500, the default of the topology). On Kafka each pump batch is one transaction, so the batch
 * size sets how many records share a transaction's round trips.
 * Ceiling, same run: raw kafkajs, one transactional producer sending `changes` records of a
 * capture record's size (a ledger insert as the pumps encode it) to a new 4-partition topic,
 * `batchSizeMax` records per transaction (sendBatch of at most 2,000 records, acks -1), keys spread like the rows'.
 * Without --brokers (or SLUICE_KAFKA_BROKERS) a private broker is started (testing/kafka-broker.ts).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import Database from 'better-sqlite3';
import { loadTopology, startTopology, installCapture } from '../index.js';
import { openStaging } from '../engine/cdc/index.js';
import kafkajs from 'kafkajs';
import { startKafka } from '../testing/kafka-broker.js';
import { ChangeRecordWriter } from '../engine/codec/index.js';

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

/** Events/s of one drain. */
async function drainOnce(
  dir: string,
  template: string,
  bus: 'journal' | 'kafka',
  pumps: number,
  brokers: string[],
  changes: number,
  batch: number,
): Promise<number> {
  const run = path.join(dir, `${bus}-${pumps}-${batch}`);
  fs.mkdirSync(run);
  const dbFile = path.join(run, 'app.db');
  fs.copyFileSync(template, dbFile);
  const name = `capkafka-bench-${randomBytes(4).toString('hex')}`;
  const file = path.join(run, 'topology.yaml');
  fs.writeFileSync(
    file,
    [
      `name: ${name}`,
      'dataDir: ./data',
      ...(bus === 'kafka' ? [`bus: { kind: kafka, brokers: [${brokers.join(', ')}] }`] : []),
      'queues:',
      `  - { name: ${name}.ledger, partitions: ${bus === 'kafka' ? 4 : pumps} }`,
      'capture:',
      '  - name: app',
      `    database: { dialect: sqlite, file: ${dbFile} }`,
      `    pumps: ${pumps}`,
      `    batchSizeMax: ${batch}`,
      '    tables:',
      `      - { table: ledger, operations: [insert, update, delete], target: ${name}.ledger }`,
      '',
    ].join('\n'),
  );
  const topology = loadTopology(file);
  const staging = await openStaging(topology.capture[0]!);
  if ((await staging.stagedCount()) !== changes) throw new Error('template not staged');
  // Timed from the first poll that sees staging shrink to the one that sees it empty, so the
  // start (workers, broker connections, reconciliation) is not in the rate.
  const running = startTopology(topology, { log: () => undefined });
  let first: { ms: number; left: number } | null = null;
  for (;;) {
    const left = await staging.stagedCount();
    if (first === null && left < changes) first = { ms: Date.now(), left };
    if (left === 0) break;
    await new Promise((r) => setTimeout(r, 5));
  }
  const rate = first!.left / ((Date.now() - first!.ms) / 1000);
  await staging.close();
  await (await running).stop();
  return rate;
}

/** Raw kafkajs: `changes` records of `value`, `batch` per transaction, into a new 4-partition topic. */
async function rawTxnRate(
  brokers: string[],
  changes: number,
  batch: number,
  value: Buffer,
): Promise<number> {
  const kafka = new kafkajs.Kafka({
    brokers,
    clientId: 'capkafka-raw',
    logLevel: kafkajs.logLevel.NOTHING,
  });
  const topic = `capkafka-raw-${randomBytes(4).toString('hex')}`;
  const admin = kafka.admin();
  await admin.connect();
  await admin.createTopics({ topics: [{ topic, numPartitions: 4 }], waitForLeaders: true });
  await admin.disconnect();
  const p = kafka.producer({ transactionalId: `${topic}-tx`, maxInFlightRequests: 1 });
  await p.connect();
  const t0 = Date.now();
  for (let i = 0; i < changes; i += batch) {
    const messages = [];
    for (let k = i; k < Math.min(changes, i + batch); k++) messages.push({ key: `${k}`, value });
    const t = await p.transaction();
    // Sends of at most 2,000 records: a record batch over the broker's message.max.bytes (1 MB
    // per partition) is refused.
    for (let k = 0; k < messages.length; k += 2000)
      await t.sendBatch({
        acks: -1,
        topicMessages: [{ topic, messages: messages.slice(k, k + 2000) }],
      });
    await t.commit();
  }
  const rate = changes / ((Date.now() - t0) / 1000);
  await p.disconnect();
  return rate;
}

async function main(): Promise<void> {
  const changes = Number(arg('changes') ?? 20_000);
  const batches = (arg('batch') ?? '500').split(',').map(Number);
  let brokers = (arg('brokers') ?? process.env.SLUICE_KAFKA_BROKERS)?.split(',');
  const own = brokers ? null : await startKafka();
  brokers ??= own!.brokers;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'capkafka-bench-'));
  try {
    // The template: the ledger table, capture installed, `changes` inserts staged.
    const template = path.join(dir, 'template.db');
    const db = new Database(template);
    db.exec(
      'CREATE TABLE ledger (id INTEGER PRIMARY KEY, holder TEXT, memo TEXT, amount TEXT, booked TEXT, booked_tz TEXT)',
    );
    db.close();
    const tfile = path.join(dir, 'template.yaml');
    fs.writeFileSync(
      tfile,
      `name: t\nqueues: [{ name: q }]\ncapture:\n  - name: app\n    database: { dialect: sqlite, file: ${template} }\n    tables: [{ table: ledger, operations: [insert, update, delete], target: q }]\n`,
    );
    await installCapture(loadTopology(tfile));
    const w = new Database(template);
    w.exec(
      `WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < ${changes}) INSERT INTO ledger(id, holder, amount) SELECT x, 'holder-' || x, x || '.25' FROM g`,
    );
    w.pragma('wal_checkpoint(TRUNCATE)');
    w.close();
    console.log(
      `### Capture drain rate: into Kafka against into the journal (${changes} staged changes, SQLite)\n`,
    );
    const records = new ChangeRecordWriter();
    records.build({
      stagingId: '54321',
      table: 'ledger',
      op: 'insert',
      key: '["54321"]',
      before: null,
      after:
        '{"id":"54321","holder":"holder-54321","memo":null,"amount":"54321.25","booked":null,"booked_tz":null}',
      txid: '4321',
      commitTimeMs: Date.now(),
    });
    const value = Buffer.from(records.bytes());
    console.log(
      `Raw kafkajs: one transactional producer, records of ${value.length} bytes (a capture record of this table).\n`,
    );
    console.log(
      '| batchSizeMax | pumps | journal events/s | kafka events/s | kafka / journal | raw kafkajs events/s | kafka / raw |',
    );
    console.log('|---|---|---|---|---|---|---|');
    for (const batch of batches) {
      const raw = await rawTxnRate(brokers, changes, batch, value);
      for (const pumps of [1, 2, 4]) {
        const rj = await drainOnce(dir, template, 'journal', pumps, brokers, changes, batch);
        const rk = await drainOnce(dir, template, 'kafka', pumps, brokers, changes, batch);
        console.log(
          `| ${batch} | ${pumps} | ${Math.round(rj)} | ${Math.round(rk)} | ${(rk / rj).toFixed(2)}x | ${Math.round(raw)} | ${(rk / raw).toFixed(2)}x |`,
        );
      }
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
    await own?.stop();
  }
}

await main();
