/**
 * Capture into Kafka topics (topology `bus: { kind: kafka }`), on the real broker: SQLite,
 * PostgreSQL and MariaDB changes read back by a plain read_committed kafkajs consumer and compared with the
 * database; per-key order with 2 pumps and 3 partitions; the JSON format; an existing topic
 * with another partition count refused at start.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { testKafka, type TestKafka } from '../testing/kafka-broker.js';
import { loadTopology, startTopology, installCapture, ConfigError } from '../index.js';
import { openStaging, KAFKA_CAPTURE_HEADERS, type CaptureJsonValue } from '../engine/cdc/index.js';
import { EnvelopeView, decodeChange } from '../engine/codec/index.js';
import { createAppDb, LEDGER_DDL, type AppDb } from './cdc-helpers.js';
import { readCommitted, createTopic, deleteTopics, type ReadRecord } from './lib/kafka-read.js';

let kafka: TestKafka;
const topics: string[] = [];

test.before(async () => {
  kafka = await testKafka();
});

test.after(async () => {
  await deleteTopics(kafka.brokers, topics);
  await kafka.release();
});

/** A unique name for this run's topics, topology and transactional ids. */
function unique(): string {
  return `capkafka-${randomBytes(5).toString('hex')}`;
}

function dbYaml(app: AppDb): string {
  const ref = app.ref;
  if (ref.dialect === 'sqlite') return `{ dialect: sqlite, file: "${ref.file}" }`;
  if (ref.dialect === 'postgres')
    return `{ dialect: postgres, url: "${ref.url}", schema: ${ref.schema}, captureSchema: ${ref.captureSchema} }`;
  if (ref.dialect === 'mariadb')
    return `{ dialect: mariadb, url: "${ref.url}", captureSchema: ${ref.captureSchema} }`;
  throw new Error('unused dialect');
}

/** Writes the topology, installs capture, returns its file. */
async function setup(
  dir: string,
  app: AppDb,
  o: { name: string; topic: string; partitions: number; pumps: number; format?: string },
): Promise<string> {
  const file = path.join(dir, 'topology.yaml');
  fs.writeFileSync(
    file,
    [
      `name: ${o.name}`,
      'dataDir: ./data',
      `bus: { kind: kafka, brokers: [${kafka.brokers.join(', ')}] }`,
      'queues:',
      `  - { name: ${o.topic}, partitions: ${o.partitions} }`,
      'capture:',
      '  - name: app',
      `    database: ${dbYaml(app)}`,
      `    pumps: ${o.pumps}`,
      '    batchSizeMax: 7',
      '    pollIntervalMs: 5',
      '    tables:',
      `      - { table: ledger, operations: [insert, update, delete], target: ${o.topic}${o.format ? `, format: ${o.format}` : ''} }`,
      '',
    ].join('\n'),
  );
  await installCapture(loadTopology(file));
  return file;
}

/** 40 keys inserted, 15 of them updated 3 times, 6 deleted: 91 changes. */
async function writeChanges(app: AppDb): Promise<number> {
  for (let id = 1; id <= 40; id++)
    await app.exec(`INSERT INTO ledger(id, holder, amount) VALUES (${id}, 'h${id}', '${id}.5')`);
  for (let round = 1; round <= 3; round++) {
    for (let id = 1; id <= 15; id++)
      await app.exec(
        `UPDATE ledger SET memo = 'r${round}', amount = '${id * 10 + round}' WHERE id = ${id}`,
      );
  }
  for (let id = 35; id <= 40; id++) await app.exec(`DELETE FROM ledger WHERE id = ${id}`);
  return 40 + 45 + 6;
}

/** Runs the topology until staging is empty, then drains it. */
async function runUntilShipped(file: string): Promise<void> {
  const topology = loadTopology(file);
  const running = await startTopology(topology, { log: () => undefined });
  const staging = await openStaging(topology.capture[0]!);
  try {
    const deadline = Date.now() + 60_000;
    while ((await staging.stagedCount()) > 0) {
      if (Date.now() > deadline) throw new Error('staging not drained within 60 s');
      await new Promise((r) => setTimeout(r, 50));
    }
  } finally {
    await staging.close();
    await running.stop();
  }
}

interface Seen {
  stagingId: string;
  key: string;
  op: string;
  after: Record<string, string | null> | null;
  partition: number;
}

/**
 * Checks the records against the database: each staging id once, one partition per key, staging
 * ids rising per key in offset order, and the table rebuilt from the last image per key equal to
 * the database's rows.
 */
async function assertMatchesDatabase(app: AppDb, seen: Seen[], expected: number): Promise<void> {
  const ids = new Set(seen.map((s) => s.stagingId));
  assert.is(seen.length, expected, 'records read');
  assert.is(ids.size, expected, 'distinct staging ids');
  const partitionOfKey = new Map<string, number>();
  const lastIdOfKey = new Map<string, bigint>();
  const rebuilt = new Map<string, Record<string, string | null> | null>();
  for (const s of seen) {
    const p = partitionOfKey.get(s.key);
    assert.ok(
      p === undefined || p === s.partition,
      `key ${s.key} in partitions ${p} and ${s.partition}`,
    );
    partitionOfKey.set(s.key, s.partition);
    const id = BigInt(s.stagingId);
    const last = lastIdOfKey.get(s.key);
    assert.ok(last === undefined || id > last, `key ${s.key}: staging id ${id} after ${last}`);
    lastIdOfKey.set(s.key, id);
    rebuilt.set(s.key, s.after);
  }
  const rows = await app.query<Record<string, unknown>>(
    'SELECT id, holder, memo, amount FROM ledger ORDER BY id',
  );
  const fromEvents = [...rebuilt.entries()]
    .filter(([, a]) => a !== null)
    .map(([, a]) => ({ id: a!.id, holder: a!.holder, memo: a!.memo, amount: a!.amount }))
    .sort((x, y) => Number(x.id) - Number(y.id));
  // Small decimals: PostgreSQL prints numeric(18,6) with its scale, the images without trailing zeros.
  const norm = (v: unknown) => (v === null ? null : String(Number(v)));
  assert.equal(
    fromEvents.map((r) => [r.id, r.holder, r.memo, norm(r.amount)]),
    rows.map((r) => [String(r.id), r.holder, r.memo, norm(r.amount)]),
    'table rebuilt from the events equals the database',
  );
}

function envelopeSeen(records: ReadRecord[]): Seen[] {
  const view = new EnvelopeView();
  return records.map((r) => {
    view.wrap(r.value!, 0, r.value!.length);
    const c = decodeChange(view.payload);
    assert.is(r.key, c.key, 'record key is the change key');
    assert.is(r.headers[KAFKA_CAPTURE_HEADERS.stagingId], c.stagingId);
    return {
      stagingId: c.stagingId,
      key: c.key,
      op: c.op,
      after: c.after === null ? null : JSON.parse(c.after),
      partition: r.partition,
    };
  });
}

test('sqlite into a kafka topic: 2 pumps, 3 partitions, each change once, per-key order, the table rebuilt equals the database', async () => {
  const app = await createAppDb('sqlite');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'capkafka-'));
  const name = unique();
  const topic = `${name}.ledger`;
  topics.push(topic);
  try {
    await app.exec(LEDGER_DDL.sqlite);
    const file = await setup(dir, app, { name, topic, partitions: 3, pumps: 2 });
    const expected = await writeChanges(app);
    await runUntilShipped(file);
    const records = await readCommitted(kafka.brokers, [topic], expected);
    assert.equal(
      new Set(records.map((r) => r.partition)),
      new Set([0, 1, 2]),
      'keys spread over the 3 partitions',
    );
    assert.equal(
      new Set(records.map((r) => r.headers[KAFKA_CAPTURE_HEADERS.pump])),
      new Set(['app/0', 'app/1']),
      'both pumps shipped',
    );
    await assertMatchesDatabase(app, envelopeSeen(records), expected);
    // A second run ships the next changes only (nothing of the first again).
    await app.exec(`UPDATE ledger SET memo = 'again' WHERE id = 2`);
    await runUntilShipped(file);
    const after = await readCommitted(kafka.brokers, [topic], expected + 1);
    assert.is(after.length, expected + 1);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
    await app.destroy();
  }
});

test('postgres into a kafka topic with format json: self-describing values, key as the record key, equal to the database', async () => {
  const app = await createAppDb('postgres');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'capkafka-'));
  const name = unique();
  const topic = `${name}.ledger-json`;
  topics.push(topic);
  try {
    await app.exec(LEDGER_DDL.postgres);
    const file = await setup(dir, app, { name, topic, partitions: 2, pumps: 3, format: 'json' });
    const expected = await writeChanges(app);
    await runUntilShipped(file);
    const records = await readCommitted(kafka.brokers, [topic], expected);
    const schema = (app.ref as { schema: string }).schema;
    const seen = records.map((r): Seen => {
      const v = JSON.parse(r.value!.toString('utf8')) as CaptureJsonValue;
      assert.equal(Object.keys(v), ['op', 'before', 'after', 'source']);
      assert.equal(Object.keys(v.source), [
        'name',
        'dialect',
        'database',
        'schema',
        'table',
        'txId',
        'stagingId',
        'captureTimeMs',
        'installation',
      ]);
      assert.match(v.source.installation ?? '', /^[0-9a-f]{16}$/);
      assert.is(v.source.name, 'app');
      assert.is(v.source.dialect, 'postgres');
      assert.is(v.source.database, 'test');
      assert.is(v.source.schema, schema);
      assert.is(v.source.table, 'ledger');
      assert.match(v.source.txId ?? '', /^[0-9]+$/);
      assert.is(typeof v.source.captureTimeMs, 'number');
      assert.is(r.timestampMs, v.source.captureTimeMs, 'record timestamp is the capture time');
      const op = { c: 'insert', u: 'update', d: 'delete' }[v.op as 'c' | 'u' | 'd'];
      assert.ok(op !== undefined, `op ${v.op}`);
      assert.is(v.before === null, op === 'insert');
      assert.is(v.after === null, op === 'delete');
      const image = (v.after ?? v.before)!;
      assert.is(r.key, JSON.stringify([image.id]), 'record key is the key columns as a JSON array');
      return {
        stagingId: v.source.stagingId,
        key: r.key!,
        op,
        after: v.after,
        partition: r.partition,
      };
    });
    await assertMatchesDatabase(app, seen, expected);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
    await app.destroy();
  }
});

test('mariadb into a kafka topic: 3 pumps, 2 partitions, each change once, per-key order, the table rebuilt equals the database; format json names the source', async () => {
  const app = await createAppDb('mariadb', 'h_sinkeo_');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'capkafka-'));
  const name = unique();
  const topic = `${name}.ledger`;
  topics.push(topic);
  try {
    await app.exec(LEDGER_DDL.mariadb);
    const file = await setup(dir, app, { name, topic, partitions: 2, pumps: 3 });
    const expected = await writeChanges(app);
    await runUntilShipped(file);
    const records = await readCommitted(kafka.brokers, [topic], expected);
    assert.equal(
      new Set(records.map((r) => r.headers[KAFKA_CAPTURE_HEADERS.pump])),
      new Set(['app/0', 'app/1', 'app/2']),
      'every pump shipped',
    );
    await assertMatchesDatabase(app, envelopeSeen(records), expected);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
    await app.destroy();
  }
  // The JSON format's source block for MariaDB: the database is the schema.
  const app2 = await createAppDb('mariadb', 'h_sinkeo_');
  const dir2 = fs.mkdtempSync(path.join(os.tmpdir(), 'capkafka-'));
  const name2 = unique();
  const topic2 = `${name2}.ledger-json`;
  topics.push(topic2);
  try {
    await app2.exec(LEDGER_DDL.mariadb);
    const file = await setup(dir2, app2, {
      name: name2,
      topic: topic2,
      partitions: 1,
      pumps: 1,
      format: 'json',
    });
    await app2.exec(`INSERT INTO ledger(id, holder, amount) VALUES (1, 'h1', '1.5')`);
    await app2.exec(`UPDATE ledger SET memo = 'm' WHERE id = 1`);
    await runUntilShipped(file);
    const records = await readCommitted(kafka.brokers, [topic2], 2);
    const values = records.map((r) => JSON.parse(r.value!.toString('utf8')) as CaptureJsonValue);
    assert.equal(
      values.map((v) => v.op),
      ['c', 'u'],
    );
    const database = new URL((app2.ref as { url: string }).url).pathname.slice(1);
    for (const v of values) {
      assert.is(v.source.dialect, 'mariadb');
      assert.is(v.source.database, database);
      assert.is(v.source.table, 'ledger');
    }
    assert.is(values[1]!.after!.memo, 'm');
    assert.is(records[0]!.key, JSON.stringify(['1']));
  } finally {
    fs.rmSync(dir2, { recursive: true, force: true });
    await app2.destroy();
  }
});

test("an existing topic with another partition count is refused at start, at the queue's partitions", async () => {
  const app = await createAppDb('sqlite');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'capkafka-'));
  const name = unique();
  const topic = `${name}.taken`;
  topics.push(topic);
  try {
    await app.exec(LEDGER_DDL.sqlite);
    await createTopic(kafka.brokers, topic, 5);
    const file = await setup(dir, app, { name, topic, partitions: 3, pumps: 1 });
    try {
      await startTopology(loadTopology(file), { log: () => undefined });
      assert.unreachable('started');
    } catch (e) {
      assert.instance(e, ConfigError);
      assert.match((e as Error).message, `${file}:5:`);
      assert.match(
        (e as Error).message,
        `queues[0].partitions: queue "${topic}": Kafka topic ${topic} on ${kafka.brokers.join(',')}: topic exists with 5 partitions`,
      );
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
    await app.destroy();
  }
});

test.run();
