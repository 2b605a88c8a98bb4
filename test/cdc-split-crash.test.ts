/**
 * Crash after a refused batch was split and its halves shipped, before the ack (engine/cdc/pump.ts
 * points 3-5 and "Exactly-once hand-off"), deterministically, on PostgreSQL. One claimed batch of
 * 37 changes holds one change over the capture source's recordBytesMax: the sink refuses the
 * batch, the pump halves it down to the refused change, and ships the rest as several appends
 * (on a bus: several transactions). `sluice run` with SLUICE_FAULT=after-append kills itself with
 * SIGKILL after the cycle shipped, before its ack; a clean run then ships the rest, the refused
 * change is retried and parked in the error table. Every shipped change must be in the target
 * exactly once, in the database's order per key.
 *
 * Three targets: a Kafka topic (real broker, read back read_committed by a plain kafkajs
 * consumer), a processor topic of the journal bus (the same Kafka pump sink over the embedded
 * bus), and a journal queue (the pump actor's own appenders, reconciled by a window of staged
 * changes: engine/cdc/journal-sink.ts).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { loadTopology, installCapture } from '../index.js';
import { openStaging } from '../engine/cdc/index.js';
import { EnvelopeView, decodeChange, type Change } from '../engine/codec/index.js';
import { createJournalBus } from '../engine/bus/journal/index.js';
import { testKafka, type TestKafka } from '../testing/index.js';
import { createAppDb, LEDGER_DDL, PG_URL, stagingName, type AppDb } from './cdc-helpers.js';
import { readCommitted, deleteTopics } from './lib/kafka-read.js';
import { readTopic } from './patterns-helpers.js';
import { readAll } from './initial-load-helpers.js';
import { runSluice } from './lib/sluice-child.js';

const echo = new URL('./fixtures/processors/echo.js', import.meta.url).pathname;

/** Keys 1..KEYS are inserted, then the big row, then each key updated twice. */
const KEYS = 12;
const UPDATES = 2;
const BIG_ID = 99;
/** capture[].recordBytesMax: the big row's memo (10,000 characters) is over it, the others not. */
const RECORD_BYTES_MAX = 4000;
const PARTITIONS = 2;

type Target = 'kafka' | 'journal bus' | 'journal queue';

let kafka: TestKafka;
const topics: string[] = [];
test.before(async () => {
  kafka = await testKafka();
});
test.after(async () => {
  await deleteTopics(kafka.brokers, topics);
  await kafka.release();
});

function topologyText(name: string, topic: string, app: AppDb, target: Target): string {
  const ref = app.ref as { schema?: string; captureSchema?: string };
  return [
    `name: ${name}`,
    'dataDir: ./data',
    ...(target === 'kafka' ? [`bus: { kind: kafka, brokers: [${kafka.brokers.join(', ')}] }`] : []),
    'supervisor: { backoffInitialMs: 10 }',
    'queues:',
    `  - { name: ${topic}, partitions: ${PARTITIONS} }`,
    // On the journal bus a capture target is a bus topic when a processor reads it.
    ...(target === 'journal bus'
      ? [
          `  - { name: ${topic}.out, partitions: 1 }`,
          'processors:',
          `  - { name: echo, pattern: durable, module: ${echo}, inputs: [${topic}], outputs: [${topic}.out], codec: string }`,
        ]
      : []),
    'capture:',
    '  - name: app',
    `    database: { dialect: postgres, url: ${JSON.stringify(PG_URL)}, schema: ${ref.schema}, captureSchema: ${ref.captureSchema} }`,
    '    pumps: 1',
    // Every staged change in the first claim.
    '    batchSizeMax: 50',
    '    pollIntervalMs: 5',
    `    recordBytesMax: ${RECORD_BYTES_MAX}`,
    '    errors: { retriesImmediate: 0, attemptsMax: 2, retryDelayMs: 100, retryDelayMaxMs: 100 }',
    '    tables:',
    `      - { table: ledger, operations: [insert, update, delete], target: ${topic} }`,
    '',
  ].join('\n');
}

/** The target's changes, in order per partition. */
async function readTarget(
  target: Target,
  dir: string,
  topic: string,
  expected: number,
): Promise<Change[]> {
  const view = new EnvelopeView();
  const decode = (value: Uint8Array): Change => {
    view.wrap(value, 0, value.length);
    return decodeChange(view.payload);
  };
  if (target === 'journal queue') {
    const out: Change[] = [];
    for (let p = 0; p < PARTITIONS; p++)
      out.push(...readAll(path.join(dir, 'data/queues', topic, String(p))));
    return out;
  }
  if (target === 'kafka') {
    const records = await readCommitted(kafka.brokers, [topic], expected, { settleMs: 1500 });
    return records.map((r) => decode(r.value!));
  }
  const bus = await createJournalBus({ dir: path.join(dir, 'data/bus') });
  try {
    const records = await readTopic(bus, topic);
    records.sort((a, b) => a.partition - b.partition || a.offset - b.offset);
    return records.map((r) => decode(r.value!));
  } finally {
    await bus.close();
  }
}

for (const target of ['kafka', 'journal bus', 'journal queue'] as const) {
  test(`${target}: kill -9 after a batch with a change over recordBytesMax was split and its halves shipped, before the ack; after restart every shipped change is in the target once, in order per key, and the refused one is parked`, async () => {
    const app = await createAppDb('postgres', 'hsplit_');
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-split-crash-'));
    const name = `split-${randomBytes(5).toString('hex')}`;
    const topic = `${name}.ledger`;
    if (target === 'kafka') topics.push(topic);
    try {
      await app.exec(LEDGER_DDL.postgres);
      const file = path.join(dir, 'topology.yaml');
      fs.writeFileSync(file, topologyText(name, topic, app, target));
      const topology = loadTopology(file);
      await installCapture(topology);
      // One statement per change: staging ids in this order, one claim of 37.
      for (let id = 1; id <= KEYS; id++)
        await app.exec(`INSERT INTO ledger(id, holder, amount) VALUES (${id}, 'h${id}', '0')`);
      await app.exec(
        `INSERT INTO ledger(id, holder, memo, amount) VALUES (${BIG_ID}, 'big', '${'m'.repeat(10_000)}', '0')`,
      );
      for (let u = 1; u <= UPDATES; u++)
        for (let id = 1; id <= KEYS; id++)
          await app.exec(`UPDATE ledger SET amount = '${u}' WHERE id = ${id}`);
      const shippable = KEYS * (1 + UPDATES);
      const staged = async () =>
        Number(
          (await app.query<{ n: string }>(`SELECT count(*) AS n FROM ${stagingName(app)}`))[0]!.n,
        );
      assert.is(await staged(), shippable + 1, 'staged before the pump starts');

      const crashed = await runSluice(file, { killAfterMs: 60_000, fault: true });
      assert.is(crashed.signal, 'SIGKILL', `killed itself after the append:\n${crashed.out}`);
      // Every half reached the target; at least the last one is still staged (not acked).
      const before = await readTarget(target, dir, topic, shippable);
      assert.is(new Set(before.map((c) => c.stagingId)).size, shippable, 'all halves shipped');
      const left = await staged();
      console.log(`${target}: ${left} changes still staged after the kill`);
      assert.ok(left > 1, `the last half is not acked: ${left} staged`);

      const clean = await runSluice(file, {
        killAfterMs: null,
        until: async () => (await staged()) === 0,
      });
      assert.is(clean.code, 0, clean.out);

      const changes = await readTarget(target, dir, topic, shippable);
      const ids = new Map<string, number>();
      for (const c of changes) ids.set(c.stagingId, (ids.get(c.stagingId) ?? 0) + 1);
      const twice = [...ids].filter(([, n]) => n > 1).map(([id, n]) => `${id} x${n}`);
      console.log(
        `${target}: ${changes.length} records, ${ids.size} distinct staging ids, ${twice.length} more than once`,
      );
      assert.equal(twice, [], 'staging ids in the target more than once');
      assert.is(ids.size, shippable, 'every shippable change');
      assert.is(changes.length, shippable, 'records in the target');

      // Per key: insert with amount 0, then each update in the database's order.
      const byKey = new Map<string, string[]>();
      for (const c of changes) {
        const list = byKey.get(c.key) ?? [];
        byKey.set(c.key, list);
        list.push(`${c.op}:${(JSON.parse(c.after!) as { amount: string }).amount}`);
      }
      assert.not.ok(byKey.has(JSON.stringify([String(BIG_ID)])), 'the big row is not shipped');
      for (let id = 1; id <= KEYS; id++) {
        assert.equal(
          byKey.get(JSON.stringify([String(id)])),
          ['insert:0', ...Array.from({ length: UPDATES }, (_, u) => `update:${u + 1}`)],
          `key ${id} in order`,
        );
      }

      const staging = await openStaging(topology.capture[0]!);
      try {
        const parked = await staging.listParked();
        assert.is(parked.length, 1, 'one change parked');
        assert.equal(parked[0]!.key, JSON.stringify([String(BIG_ID)]));
        assert.match(parked[0]!.error, `exceeds`);
      } finally {
        await staging.close();
      }
    } finally {
      await app.destroy();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
}

test.run();
