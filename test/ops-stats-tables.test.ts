/**
 * Per capture table statistics (issue 11): a table's `eventsOut` is the changes of that table
 * the pumps shipped, and its `eventsIn` what the triggers staged, whatever else the target topic
 * holds and wherever it lives. On a running topology with a short "minute" (1 s):
 *  - kafka bus (real broker, PostgreSQL): two tables into two Kafka topics, and another producer
 *    writing into one of them: per table exactly the rows written;
 *  - journal bus (SQLite): two tables into one queue, a pump restarted (an injected exit) and the
 *    pump count changed 2 -> 1 in between: per table its own rows, not the queue's total, and no
 *    change lost or counted twice by the restart or the new pumps;
 *  - journal bus (SQLite) into a processor topic (shipped into the bus, not a queue directory).
 * Before the fix the figures were the target's record count read from `<dataDir>/queues`: 0 on
 * Kafka and in a processor topic, the queue's total for each of two tables sharing it.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { Kafka, logLevel } from 'kafkajs';
import { loadTopology, startTopology, installCapture, type RunningTopology } from '../index.js';
import { readStats, type StatsSeries } from '../ops/index.js';
import { createAppDb, stagingName, PG_URL, type AppDb } from './cdc-helpers.js';
import { readCommitted, deleteTopics } from './lib/kafka-read.js';
import { testKafka, type TestKafka } from '../testing/index.js';
import { readTopic } from './patterns-helpers.js';
import { WORKER_FAULT_DIR_ENV } from '../engine/actor/runtime.js';

const echo = new URL('./fixtures/processors/echo.js', import.meta.url).pathname;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const STATS = {
  intervalMs: 1000,
  hourIntervals: 60,
  condenseAfterMs: 3_600_000,
  captureSampleMs: 100,
};
const SAMPLER = { intervalMs: 200 };
/** Rows written into table alpha and into table beta. */
const N = 37;
const M = 23;

let kafka: TestKafka | null = null;
const topics: string[] = [];
test.after(async () => {
  if (kafka) {
    await deleteTopics(kafka.brokers, topics);
    await kafka.release();
  }
});

function databaseYaml(app: AppDb): string {
  const ref = app.ref as { file?: string; schema?: string; captureSchema?: string };
  if (app.dialect === 'sqlite') return `{ dialect: sqlite, file: ${JSON.stringify(ref.file)} }`;
  return `{ dialect: postgres, url: ${JSON.stringify(PG_URL)}, schema: ${ref.schema}, captureSchema: ${ref.captureSchema} }`;
}

async function createTables(app: AppDb): Promise<void> {
  const id = app.dialect === 'sqlite' ? 'INTEGER' : 'bigint';
  await app.exec(`CREATE TABLE alpha (id ${id} PRIMARY KEY, v text)`);
  await app.exec(`CREATE TABLE beta (id ${id} PRIMARY KEY, v text)`);
}

/** Inserts rows ids from..to-1 into `table`. */
async function insert(app: AppDb, table: string, from: number, to: number): Promise<void> {
  for (let id = from; id < to; id++)
    await app.exec(`INSERT INTO ${table} (id, v) VALUES (${id}, '${table}${id}')`);
}

async function until(what: string, probe: () => Promise<boolean> | boolean, timeoutMs = 60_000) {
  const deadline = Date.now() + timeoutMs;
  while (!(await probe())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

async function stagingEmpty(app: AppDb): Promise<boolean> {
  const r = await app.query<{ n: number | string }>(
    `SELECT count(*) AS n FROM ${stagingName(app)}`,
  );
  return Number(r[0]!.n) === 0;
}

/** Sums of one capture table's points (every minute point in the journal). */
function totals(series: StatsSeries[], name: string) {
  const points = series.find((s) => s.kind === 'capture' && s.name === name)?.points ?? [];
  return {
    eventsIn: points.reduce((n, p) => n + p.eventsIn, 0),
    eventsOut: points.reduce((n, p) => n + p.eventsOut, 0),
    errors: points.reduce((n, p) => n + p.errors, 0),
  };
}

const journalStats = (dataDir: string) =>
  readStats(dataDir, { fromMs: 0, toMs: Number.MAX_SAFE_INTEGER, step: 'minute' }, 3_600_000);

/**
 * Once everything is shipped: waits (at most 15 s) until the journal's per-table sums are the
 * expected ones, 1 s more (a wrong figure that keeps growing shows), stops the topology (which
 * writes the interval in progress) and asserts the exact figures per table.
 */
async function assertPerTable(
  running: RunningTopology,
  expected: Record<string, number>,
): Promise<void> {
  const dataDir = running.topology.dataDir;
  const matches = () =>
    Object.entries(expected).every(([name, n]) => {
      const t = totals(journalStats(dataDir), name);
      return t.eventsOut === n && t.eventsIn === n;
    });
  await until('the expected per-table figures', matches, 15_000).catch(() => undefined);
  await sleep(1000);
  await running.stop();
  const series = journalStats(dataDir);
  for (const [name, n] of Object.entries(expected))
    assert.equal(
      totals(series, name),
      { eventsIn: n, eventsOut: n, errors: 0 },
      `${name}: ${JSON.stringify(series.find((s) => s.name === name)?.points ?? [])}`,
    );
}

test('kafka bus: two tables into two Kafka topics, another producer writing one of them: per table eventsOut and eventsIn are exactly its rows', async () => {
  kafka ??= await testKafka();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ops-stats-tables-kafka-'));
  const app = await createAppDb('postgres', 'h_stats_tables_');
  const name = `statstables-${randomBytes(4).toString('hex')}`;
  const topicA = `${name}.alpha`;
  const topicB = `${name}.beta`;
  topics.push(topicA, topicB);
  let running: RunningTopology | null = null;
  try {
    await createTables(app);
    const file = path.join(dir, 'topology.yaml');
    fs.writeFileSync(
      file,
      [
        `name: ${name}`,
        'dataDir: ./data',
        `bus: { kind: kafka, brokers: [${kafka.brokers.join(', ')}] }`,
        'queues:',
        `  - { name: ${topicA}, partitions: 3 }`,
        `  - { name: ${topicB}, partitions: 2 }`,
        'capture:',
        '  - name: app',
        `    database: ${databaseYaml(app)}`,
        '    pumps: 2',
        '    batchSizeMax: 7',
        '    pollIntervalMs: 10',
        '    tables:',
        `      - { table: alpha, operations: [insert, update, delete], target: ${topicA} }`,
        `      - { table: beta, operations: [insert, update, delete], target: ${topicB} }`,
        '',
      ].join('\n'),
    );
    const t = loadTopology(file);
    await installCapture(t);
    running = await startTopology(t, { stats: STATS, sampler: SAMPLER, log: () => {} });
    // Another writer of alpha's topic: its records are not alpha's changes.
    const producer = new Kafka({
      clientId: `${name}-other`,
      brokers: kafka.brokers,
      logLevel: logLevel.NOTHING,
    }).producer();
    await producer.connect();
    try {
      await producer.send({
        topic: topicA,
        messages: Array.from({ length: 11 }, (_, i) => ({ key: `other-${i}`, value: 'x' })),
      });
    } finally {
      await producer.disconnect();
    }
    await Promise.all([insert(app, 'alpha', 1, N + 1), insert(app, 'beta', 1, M + 1)]);
    await until('staging drained', () => stagingEmpty(app));
    const inA = await readCommitted(kafka.brokers, [topicA], N + 11, { settleMs: 500 });
    const inB = await readCommitted(kafka.brokers, [topicB], M, { settleMs: 500 });
    assert.is(inA.length, N + 11, 'alpha topic: the rows and the other records');
    assert.is(inB.length, M);
    await assertPerTable(running, { 'app/alpha': N, 'app/beta': M });
    running = null;
  } finally {
    await running?.stop();
    await app.destroy();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('journal bus: two tables into one queue, a pump restarted and the pump count changed 2 -> 1 in between: per table its own rows, each counted once', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ops-stats-tables-journal-'));
  const app = await createAppDb('sqlite');
  const faults = path.join(dir, 'faults');
  fs.mkdirSync(faults);
  // Workers copy the environment at their launch: set before the start.
  process.env[WORKER_FAULT_DIR_ENV] = faults;
  let running: RunningTopology | null = null;
  try {
    await createTables(app);
    const file = path.join(dir, 'topology.yaml');
    fs.writeFileSync(
      file,
      `name: stats-tables-journal
dataDir: ./data
queues:
  - { name: changes, partitions: 2 }
capture:
  - name: app
    database: ${databaseYaml(app)}
    pumps: 2
    batchSizeMax: 5
    pollIntervalMs: 10
    tables:
      - { table: alpha, operations: [insert, update, delete], target: changes }
      - { table: beta, operations: [insert, update, delete], target: changes }
`,
    );
    const t = loadTopology(file);
    await installCapture(t);
    running = await startTopology(t, { stats: STATS, sampler: SAMPLER, log: () => {} });
    const r = running;
    // Rows in three parts: the first pumps, pump 0 restarted (its own counters start at 0
    // again), then the new count's pump.
    const cut = (n: number, k: number) => Math.floor((n * k) / 3);
    const part = async (k: number) => {
      await Promise.all([
        insert(app, 'alpha', cut(N, k - 1) + 1, cut(N, k) + 1),
        insert(app, 'beta', cut(M, k - 1) + 1, cut(M, k) + 1),
      ]);
      await until(`part ${k} drained`, () => stagingEmpty(app));
      // The recorder reads the totals of the pumps that shipped it before they go.
      await sleep(500);
    };
    await part(1);
    fs.writeFileSync(path.join(faults, encodeURIComponent('pump:app/0')), 'exit');
    await until('pump 0 restarted', () =>
      r.supervisor
        .actors()
        .some((a) => a.name === 'pump:app/0' && a.restarts > 0 && a.counters.state === 'live'),
    );
    await part(2);
    const change = await r.pumps!.set('app', 1);
    assert.equal([change.before, change.after], [2, 1]);
    await part(3);
    await assertPerTable(r, { 'app/alpha': N, 'app/beta': M });
    running = null;
  } finally {
    delete process.env[WORKER_FAULT_DIR_ENV];
    await running?.stop();
    await app.destroy();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test("pump count changed while the pumps ship: the pump actors' per-minute eventsOut sum to every row shipped once (their last counts before a retire are kept)", async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ops-stats-pumps-retired-'));
  const app = await createAppDb('sqlite');
  let running: RunningTopology | null = null;
  try {
    await createTables(app);
    const file = path.join(dir, 'topology.yaml');
    fs.writeFileSync(
      file,
      `name: stats-pumps-retired
dataDir: ./data
queues:
  - { name: changes, partitions: 4 }
capture:
  - name: app
    database: ${databaseYaml(app)}
    pumps: 2
    batchSizeMax: 5
    pollIntervalMs: 10
    tables:
      - { table: alpha, operations: [insert, update, delete], target: changes }
`,
    );
    const t = loadTopology(file);
    await installCapture(t);
    // A slow sampler: the pumps retired by a change ship well after its last sample.
    running = await startTopology(t, {
      stats: STATS,
      sampler: { intervalMs: 2000 },
      log: () => {},
    });
    const r = running;
    const rows = 300;
    await insert(app, 'alpha', 1, rows + 1);
    // Each change while the pumps are still shipping what is staged.
    for (const count of [4, 1, 2]) {
      await sleep(150);
      await r.pumps!.set('app', count);
    }
    await until('staging drained', () => stagingEmpty(app));
    await sleep(300);
    await r.stop();
    running = null;
    const series = journalStats(t.dataDir);
    const pumpsOut = series
      .filter((x) => x.kind === 'actor' && x.name.startsWith('pump:app/'))
      .flatMap((x) => x.points)
      .reduce((n, p) => n + p.eventsOut, 0);
    assert.is(pumpsOut, rows, JSON.stringify(series.filter((x) => x.kind === 'actor')));
    assert.equal(totals(series, 'app/alpha'), { eventsIn: rows, eventsOut: rows, errors: 0 });
  } finally {
    await running?.stop();
    await app.destroy();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('journal bus into a processor topic: the table counts its rows (the topic is in the bus, not under dataDir/queues)', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ops-stats-tables-bus-'));
  const app = await createAppDb('sqlite');
  let running: RunningTopology | null = null;
  try {
    await createTables(app);
    const file = path.join(dir, 'topology.yaml');
    fs.writeFileSync(
      file,
      `name: stats-tables-bus
dataDir: ./data
queues:
  - { name: alpha-changes, partitions: 2 }
  - { name: alpha-echo, partitions: 1 }
processors:
  - { name: echo, pattern: durable, module: ${echo}, inputs: [alpha-changes], outputs: [alpha-echo], codec: string }
capture:
  - name: app
    database: ${databaseYaml(app)}
    pumps: 2
    batchSizeMax: 5
    pollIntervalMs: 10
    tables:
      - { table: alpha, operations: [insert, update, delete], target: alpha-changes }
`,
    );
    const t = loadTopology(file);
    await installCapture(t);
    running = await startTopology(t, { stats: STATS, sampler: SAMPLER, log: () => {} });
    await insert(app, 'alpha', 1, N + 1);
    await until('staging drained', () => stagingEmpty(app));
    assert.is((await readTopic(running.bus!, 'alpha-changes')).length, N, 'the rows in the bus');
    await assertPerTable(running, { 'app/alpha': N });
    running = null;
  } finally {
    await running?.stop();
    await app.destroy();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
