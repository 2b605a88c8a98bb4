/**
 * The pump count of a capture source changed while the topology runs on a kafka bus (issues 8
 * and 11), against the real broker and PostgreSQL, while a writer keeps updating rows: 1 -> 4
 * -> 3 -> 2 (any count: on Kafka a record's partition does not depend on the pumps). Every row
 * carries a counter `n` that each update raises by one, so a read_committed consumer's sequence
 * of `n` per key must be 0, 1, 2, ... without a gap, a repeat or a step back, end at the
 * database's value, and stay in one partition. Before the change the count was refused on a
 * kafka bus (400).
 *
 * The same on the journal bus with the target a processor topic (shipped into the bus in its
 * transactions, as on Kafka), old pumps terminated.
 *
 * On Kafka twice (the first under npm run test:long only): with the default drainTimeoutMs (the old pumps stop cleanly after their batch) and with
 * drainTimeoutMs 1 (every old pump busy with a batch is terminated: its transaction may be open,
 * or committed but not deleted from staging, and the change must reconcile it before the new
 * pumps start; actors/pump-count.ts step 3').
 *
 * And deterministically: 2 pumps each commit a batch and hang before deleting it from staging
 * (fault hang-after-append); 2 -> 1 terminates both, and pump 1's batch, whose transactional id
 * no new pump has, must not be shipped again (it was, before the change reconciled it).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { loadTopology, startTopology, installCapture, type RunningTopology } from '../index.js';
import { EnvelopeView, decodeChange } from '../engine/codec/index.js';
import { createAppDb, stagingName, PG_URL, type AppDb } from './cdc-helpers.js';
import { readCommitted, deleteTopics } from './lib/kafka-read.js';
import { testKafka, type TestKafka } from '../testing/index.js';
import { readTopic } from './patterns-helpers.js';
import { LONG } from './lib/long.js';

const echo = new URL('./fixtures/processors/echo.js', import.meta.url).pathname;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const KEYS = 200;
const PARTITIONS = 6;

let kafka: TestKafka;
const topics: string[] = [];
test.before(async () => {
  kafka = await testKafka();
});
test.after(async () => {
  await deleteTopics(kafka.brokers, topics);
  await kafka.release();
});

async function until<T>(
  what: string,
  probe: () => Promise<T | null | false> | T | null | false,
  timeoutMs = 90_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

/** Keeps raising `n` of random rows until stopped; counts the updates. */
function startWriter(app: AppDb): { stop(): Promise<void>; updates(): number } {
  let running = true;
  let updates = 0;
  const done = (async () => {
    while (running) {
      const ids = Array.from({ length: 5 }, () => 1 + Math.floor(Math.random() * KEYS));
      for (const id of ids) await app.exec(`UPDATE tally SET n = n + 1 WHERE id = ${id}`);
      updates += ids.length;
      await sleep(2);
    }
  })();
  return {
    async stop() {
      running = false;
      await done;
    },
    updates: () => updates,
  };
}

/**
 * The topology file of a case: table `tally` of `app` captured into `topic` (PARTITIONS
 * partitions), on the kafka bus or, with `echo`, on the journal bus with a processor reading the
 * target (so the target is a bus topic there too).
 */
function tallyTopology(o: {
  name: string;
  topic: string;
  app: AppDb;
  bus: 'kafka' | 'journal';
  pumps: number;
  drainTimeoutMs: number | null;
}): string {
  const ref = o.app.ref as { schema?: string; captureSchema?: string };
  return [
    `name: ${o.name}`,
    'dataDir: ./data',
    ...(o.bus === 'kafka' ? [`bus: { kind: kafka, brokers: [${kafka.brokers.join(', ')}] }`] : []),
    ...(o.drainTimeoutMs === null ? [] : [`supervisor: { drainTimeoutMs: ${o.drainTimeoutMs} }`]),
    'queues:',
    `  - { name: ${o.topic}, partitions: ${PARTITIONS} }`,
    // On the journal bus a capture target is a bus topic when a processor reads it.
    ...(o.bus === 'journal'
      ? [
          `  - { name: ${o.topic}.out, partitions: 1 }`,
          'processors:',
          `  - { name: echo, pattern: durable, module: ${echo}, inputs: [${o.topic}], outputs: [${o.topic}.out], codec: string }`,
        ]
      : []),
    'capture:',
    '  - name: app',
    `    database: { dialect: postgres, url: ${JSON.stringify(PG_URL)}, schema: ${ref.schema}, captureSchema: ${ref.captureSchema} }`,
    `    pumps: ${o.pumps}`,
    '    batchSizeMax: 20',
    '    pollIntervalMs: 10',
    '    tables:',
    `      - { table: tally, operations: [insert, update], target: ${o.topic} }`,
    '',
  ].join('\n');
}

// The clean stop of the old pumps on Kafka runs under npm run test:long (test/lib/long.ts); the
// terminated case, which must reconcile, runs in npm test too.
const VARIANTS: Array<{ bus: 'kafka' | 'journal'; drainTimeoutMs: number | null }> = [
  ...(LONG ? [{ bus: 'kafka' as const, drainTimeoutMs: null }] : []),
  { bus: 'kafka', drainTimeoutMs: 1 },
  { bus: 'journal', drainTimeoutMs: 1 },
];
for (const { bus, drainTimeoutMs } of VARIANTS) {
  const how = `${bus === 'kafka' ? 'kafka bus' : 'journal bus, into a processor topic'}, ${drainTimeoutMs === null ? 'old pumps stop cleanly' : 'old pumps terminated'}`;
  test(`${how}: pump count 1 -> 4 -> 3 -> 2 under a writer: per key every change once, in order, in one partition, final state equal to the database`, async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ops-pumps-kafka-'));
    const app = await createAppDb('postgres', 'h_ops_kafka_');
    const name = `opspumps-${randomBytes(4).toString('hex')}`;
    const topic = `${name}.tally`;
    topics.push(topic);
    let running: RunningTopology | null = null;
    let writer: ReturnType<typeof startWriter> | null = null;
    try {
      await app.exec('CREATE TABLE tally (id bigint PRIMARY KEY, n bigint NOT NULL)');
      const file = path.join(dir, 'topology.yaml');
      fs.writeFileSync(file, tallyTopology({ name, topic, app, bus, pumps: 1, drainTimeoutMs }));
      const t = loadTopology(file);
      await installCapture(t);
      running = await startTopology(t, { stats: false, log: () => {} });
      const r = running;
      const shipped = () =>
        r.supervisor
          .actors()
          .filter((a) => a.name.startsWith('pump:app/'))
          .reduce((s, a) => s + a.counters.eventsIn, 0);
      const values = Array.from({ length: KEYS }, (_, i) => `(${i + 1}, 0)`);
      for (let i = 0; i < values.length; i += 100)
        await app.exec(`INSERT INTO tally (id, n) VALUES ${values.slice(i, i + 100).join(', ')}`);
      writer = startWriter(app);
      const w = writer;
      await until('the first pump shipping updates', () => shipped() > KEYS + 100);

      const terminated: string[] = [];
      for (const n of [4, 3, 2]) {
        const at = w.updates();
        const change = await r.pumps.set('app', n);
        assert.equal([change.after, r.pumps.current('app')], [n, n]);
        terminated.push(...change.terminated);
        if (process.env.SLUICE_TEST_VERBOSE)
          console.log(
            `${how}: ${change.before} -> ${n} in ${change.switchMs} ms, terminated ${change.terminated.join(',') || 'none'}`,
          );
        assert.equal(
          r.supervisor
            .actors()
            .filter((a) => a.name.startsWith('pump:app/'))
            .map((a) => a.name)
            .sort(),
          Array.from({ length: n }, (_, i) => `pump:app/${i}`),
        );
        await until(`more updates under ${n} pumps`, () => w.updates() > at + 200);
      }
      await writer.stop();
      writer = null;
      if (drainTimeoutMs !== null)
        assert.ok(terminated.length > 0, 'some old pump was terminated mid-batch');

      const staging = stagingName(app);
      // The backlog of a slow switch drains at ~80 rows/s on a loaded 2-core machine.
      await until(
        'staging drained',
        async () => {
          const left = await app.query<{ n: number | string }>(
            `SELECT count(*) AS n FROM ${staging}`,
          );
          return Number(left[0]!.n) === 0;
        },
        300_000,
      );
      const rows = await app.query<{ id: number | string; n: number | string }>(
        'SELECT id, n FROM tally ORDER BY id',
      );
      const expected = KEYS + rows.reduce((s, row) => s + Number(row.n), 0);
      const records =
        bus === 'kafka'
          ? await readCommitted(kafka.brokers, [topic], expected, { settleMs: 1500 })
          : await readTopic(r.bus!, topic);
      const view = new EnvelopeView();
      const byKey = new Map<number, { n: number[]; partitions: Set<number> }>();
      for (const rec of records.sort((a, b) => a.partition - b.partition || a.offset - b.offset)) {
        view.wrap(rec.value!, 0, rec.value!.length);
        const c = decodeChange(view.payload);
        const id = Number((JSON.parse(c.key) as unknown[])[0]);
        let k = byKey.get(id);
        if (!k) byKey.set(id, (k = { n: [], partitions: new Set() }));
        k.n.push(Number((JSON.parse(c.after!) as { n: number | string }).n));
        k.partitions.add(rec.partition);
      }
      if (process.env.SLUICE_TEST_VERBOSE)
        console.log(`${how}: ${records.length} records read, ${expected} changes`);
      assert.is(records.length, expected, 'records read (each change once)');
      for (const row of rows) {
        const k = byKey.get(Number(row.id))!;
        assert.is(k.partitions.size, 1, `key ${row.id} in one partition`);
        assert.equal(
          k.n,
          Array.from({ length: Number(row.n) + 1 }, (_, i) => i),
          `key ${row.id}: ${k.n.join(',')}`,
        );
      }
      assert.ok(expected > KEYS + 600, `${expected} changes`);
    } finally {
      await writer?.stop();
      await running?.stop();
      await app.destroy();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
}

test('kafka bus: a retired pump terminated with a batch committed but not deleted from staging is reconciled before the new pumps start (2 -> 1: no new pump has its transactional id)', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ops-pumps-kafka-'));
  const app = await createAppDb('postgres', 'h_ops_kafka_');
  const name = `opspumps-${randomBytes(4).toString('hex')}`;
  const topic = `${name}.tally`;
  topics.push(topic);
  let running: RunningTopology | null = null;
  try {
    await app.exec('CREATE TABLE tally (id bigint PRIMARY KEY, n bigint NOT NULL)');
    const file = path.join(dir, 'topology.yaml');
    fs.writeFileSync(
      file,
      tallyTopology({ name, topic, app, bus: 'kafka', pumps: 2, drainTimeoutMs: 300 }),
    );
    const t = loadTopology(file);
    await installCapture(t);
    // Both pumps commit their first batch, then hang before deleting it from staging.
    process.env.SLUICE_FAULT = 'hang-after-append';
    try {
      running = await startTopology(t, { stats: false, log: () => {} });
    } finally {
      delete process.env.SLUICE_FAULT; // the next pumps' workers run without it
    }
    const r = running;
    const values = Array.from({ length: KEYS }, (_, i) => `(${i + 1}, 0)`);
    await app.exec(`INSERT INTO tally (id, n) VALUES ${values.join(', ')}`);
    const committed = (i: number) =>
      r.supervisor.actors().find((a) => a.name === `pump:app/${i}`)?.counters.eventsOut ?? 0;
    await until('both pumps committed a batch', () => committed(0) > 0 && committed(1) > 0);
    const change = await r.pumps.set('app', 1);
    assert.equal(change.terminated.sort(), ['pump:app/0', 'pump:app/1']);
    const staging = stagingName(app);
    await until('staging drained', async () => {
      const left = await app.query<{ n: number | string }>(`SELECT count(*) AS n FROM ${staging}`);
      return Number(left[0]!.n) === 0;
    });
    const records = await readCommitted(kafka.brokers, [topic], KEYS, { settleMs: 1500 });
    const view = new EnvelopeView();
    const ids = records.map((rec) => {
      view.wrap(rec.value!, 0, rec.value!.length);
      return Number((JSON.parse(decodeChange(view.payload).key) as unknown[])[0]);
    });
    assert.is(records.length, KEYS, 'each insert once (none shipped again)');
    assert.equal(
      [...new Set(ids)].sort((a, b) => a - b),
      Array.from({ length: KEYS }, (_, i) => i + 1),
    );
  } finally {
    await running?.stop();
    await app.destroy();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
