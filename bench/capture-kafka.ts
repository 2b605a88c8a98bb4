/**
 * Capture drain rate into Kafka against into the journal, same run: N changes staged in a
 * SQLite file (one INSERT ... SELECT under installed triggers), then the topology started and
 * timed from its start until staging is empty; pumps 1, 2 and 4. The journal target has one
 * partition per pump (its rule); the Kafka topic has 4 partitions whatever the pump count.
 * Each configuration gets a fresh copy of the same staged file and fresh topics.
 *   node dist/bench/capture-kafka.js [--brokers host:port] [--changes 20000]
 * Without --brokers (or SLUICE_KAFKA_BROKERS) a private broker is started (testing/kafka-broker.ts).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import Database from 'better-sqlite3';
import { loadTopology, startTopology, installCapture } from '../index.js';
import { openStaging } from '../engine/cdc/index.js';
import { startKafka } from '../testing/kafka-broker.js';

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
): Promise<number> {
  const run = path.join(dir, `${bus}-${pumps}`);
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

async function main(): Promise<void> {
  const changes = Number(arg('changes') ?? 20_000);
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
      `### Capture drain rate: into Kafka against into the journal (${changes} staged changes, SQLite, batchSizeMax 500)\n`,
    );
    console.log('| pumps | journal events/s | kafka events/s | kafka / journal |');
    console.log('|---|---|---|---|');
    for (const pumps of [1, 2, 4]) {
      const rj = await drainOnce(dir, template, 'journal', pumps, brokers, changes);
      const rk = await drainOnce(dir, template, 'kafka', pumps, brokers, changes);
      console.log(
        `| ${pumps} | ${Math.round(rj)} | ${Math.round(rk)} | ${(rk / rj).toFixed(2)}x |`,
      );
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
    await own?.stop();
  }
}

await main();
