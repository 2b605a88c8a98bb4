/**
 * The bank example on the real Kafka broker, as users run it (`npm run bank:kafka`):
 * examples/bank/topology.kafka.yaml is examples/bank/topology.yaml with its `bus` line changed and
 * nothing else; the job runs briefly on it (SQLite TPC-B, capture, two pumps into Kafka topics,
 * two services with transactional outputs), then with --keep (services replay their input
 * topics and resume), each run ending with the verification against the database, which reads
 * the services' output topics through the bus (read_committed).
 *
 * The queues' topics have the names the topology gives them; the job deletes them at a fresh
 * start, and this file deletes them at the end (the shared broker is used by other files, whose
 * topics have prefixes of their own).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';
import kafkajs from 'kafkajs';
import { loadTopology } from '../index.js';
import { testKafka, type TestKafka } from '../testing/index.js';

const main = new URL('../examples/bank/main.js', import.meta.url).pathname;
const root = new URL('../../', import.meta.url).pathname;
const journalFile = path.join(root, 'examples/bank/topology.yaml');
const kafkaFile = path.join(root, 'examples/bank/topology.kafka.yaml');
const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-bank-kafka-'));
let broker: TestKafka | null = null;

test.before(async () => {
  broker = await testKafka();
});

test.after(async () => {
  fs.rmSync(dataDir, { recursive: true, force: true });
  if (!broker) return;
  const admin = new kafkajs.Kafka({
    brokers: broker.brokers,
    logLevel: kafkajs.logLevel.NOTHING,
  }).admin();
  try {
    await admin.connect();
    const existing = new Set(await admin.listTopics());
    const topics = loadTopology(kafkaFile, { env: env() })
      .queues.map((q) => q.name)
      .filter((t) => existing.has(t));
    if (topics.length > 0) await admin.deleteTopics({ topics });
  } finally {
    await admin.disconnect();
    await broker.release();
  }
});

/** The job's environment: its own data directory, and the test's broker for the bus line. */
function env(): Record<string, string> {
  return { BANK_DATA: dataDir, SLUICE_KAFKA_BROKERS: broker!.brokers[0] };
}

function runBank(args: string[]): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    const p = spawn(process.execPath, [main, '--topology', kafkaFile, ...args], {
      cwd: root,
      env: { ...process.env, ...env() },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    p.stdout.on('data', (b) => (out += b));
    p.stderr.on('data', (b) => (out += b));
    p.on('exit', (code) => resolve({ code, out }));
  });
}

function number(out: string, label: string): number {
  const m = new RegExp(`${label}\\s+(\\d+)`).exec(out);
  assert.ok(m, `no "${label}" line in:\n${out}`);
  return Number(m![1]);
}

test('topology.kafka.yaml is topology.yaml with only its bus line changed', () => {
  const a = fs.readFileSync(journalFile, 'utf8').split('\n');
  const b = fs.readFileSync(kafkaFile, 'utf8').split('\n');
  assert.is(b.length, a.length, 'same number of lines');
  const changed = a.flatMap((line, i) => (line === b[i] ? [] : [i]));
  assert.equal(changed.length, 1, `lines ${changed.map((i) => i + 1).join(', ')} differ`);
  assert.match(a[changed[0]], /^bus: \{ kind: journal \}/);
  assert.match(b[changed[0]], /^bus: \{ kind: kafka, brokers: \[/);
  const journal = loadTopology(journalFile, { env: env() });
  const kafka = loadTopology(kafkaFile, { env: env() });
  assert.is(journal.bus.kind, 'journal');
  assert.equal(kafka.bus, {
    kind: 'kafka',
    brokers: [broker!.brokers[0]],
    clientId: 'sluice-bank',
    recordBytesMax: 1_000_000,
  });
  assert.equal({ ...kafka, bus: null, file: null }, { ...journal, bus: null, file: null });
});

test('bank job on Kafka: every branch total and changed account matches the database', async () => {
  const r = await runBank(['--duration-s', '2', '--clients', '2']);
  assert.is(r.code, 0, r.out);
  assert.match(r.out, `bank: kafka bus ${broker!.brokers[0]}`);
  assert.match(
    r.out,
    /verification\s+OK: 1 branch totals and \d+ changed accounts match the database/,
  );
  const tx = number(r.out, 'transactions run');
  assert.ok(tx > 100, `only ${tx} transactions`);
  // Each TPC-B transaction inserts one history row and updates one account (unless its delta is 0).
  const captured = number(r.out, 'changes captured');
  assert.ok(
    captured >= 2 * tx - tx / 500 - 5 && captured <= 2 * tx,
    `captured ${captured} for ${tx} transactions`,
  );
  // The queues were Kafka topics, not journal partitions: nothing under dataDir/queues, and the
  // history topic holds one committed record per transaction (read_committed, both partitions).
  assert.not.ok(fs.existsSync(path.join(dataDir, 'queues')), 'no journal queues in dataDir');
  const kafka = new kafkajs.Kafka({ brokers: broker!.brokers, logLevel: kafkajs.logLevel.NOTHING });
  const group = `bank-kafka-test-${process.pid}`;
  const consumer = kafka.consumer({ groupId: group, readUncommitted: false });
  const admin = kafka.admin();
  try {
    await admin.connect();
    const ends = await admin.fetchTopicOffsets('history-changes');
    assert.is(ends.length, 2, 'history-changes has the two partitions of its queue');
    let seen = 0;
    await consumer.connect();
    await consumer.subscribe({ topics: ['history-changes'], fromBeginning: true });
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`read ${seen} of ${tx} history records in 60 s`)),
        60_000,
      );
      void consumer.run({
        eachBatch: async ({ batch }) => {
          seen += batch.messages.length;
          if (seen >= tx) {
            clearTimeout(timer);
            resolve();
          }
        },
      });
    });
    // A duplicate would also break the branch totals the job verified.
    assert.is(seen, tx, 'one history record per transaction');
  } finally {
    await consumer.disconnect();
    await admin.deleteGroups([group]).catch(() => undefined);
    await admin.disconnect();
  }
});

test('bank job on Kafka with --keep: services replay their input topics, resume, verification passes', async () => {
  const r = await runBank(['--duration-s', '1', '--clients', '2', '--keep']);
  assert.is(r.code, 0, r.out);
  assert.match(r.out, 'topics kept from the last run');
  assert.match(r.out, 'database kept from the last run');
  assert.match(r.out, /after replaying \d+ from earlier runs/);
  assert.match(r.out, /verification\s+OK/);
});

test.run();
