/**
 * A capture source shipping into a Kafka topic (topology `bus: { kind: kafka }`) whose broker is
 * killed (kill -9 of a real broker of the test's own: the shared one is not stopped): the pump's
 * outage names what does not answer, the target's brokers and topic, not the capture source, in
 * the log line, in the degraded reason of GET /health/ready, in GET /actors' `outage` and in
 * `sluice status`; the source's database is read fine all along (sluice_capture_source_up 1).
 * With the broker back on the same port and data, capture resumes: every change of the SQLite
 * table is in the topic once, in per-key order, and the table rebuilt from the records equals
 * the database's. test-timeout-s: 420
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { startKafka } from '../testing/kafka-broker.js';
import { EnvelopeView, decodeChange } from '../engine/codec/index.js';
import {
  assertLedgerExactlyOnce,
  createAppDb,
  LEDGER_DDL,
  stagingName,
  type AppDb,
  type LedgerEvent,
} from './cdc-helpers.js';
import { readCommitted } from './lib/kafka-read.js';
import { SLUICE_CLI, sluice } from './lib/cli.js';
import { assertOutageReported, escapeRegExp, until, type ActorsBody } from './lib/outage.js';

async function staged(app: AppDb): Promise<number> {
  const [row] = await app.query<{ n: number }>(`SELECT count(*) AS n FROM ${stagingName(app)}`);
  return Number(row!.n);
}

test('kafka broker killed under a capture pump: the outage names the brokers and topic, not the source; back up, every change once', async () => {
  const kafka = await startKafka();
  const app = await createAppDb('sqlite');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-broker-down-'));
  const name = `brokerdown-${randomBytes(4).toString('hex')}`;
  const topic = `${name}.ledger`;
  const brokers = kafka.brokers.join(',');
  let run: ChildProcess | null = null;
  try {
    await app.exec(LEDGER_DDL.sqlite);
    const ref = app.ref as { file: string };
    const file = path.join(dir, 'topology.yaml');
    fs.writeFileSync(
      file,
      [
        `name: ${name}`,
        `dataDir: ${JSON.stringify(path.join(dir, 'data'))}`,
        `bus: { kind: kafka, brokers: [${kafka.brokers.join(', ')}] }`,
        'queues:',
        `  - { name: ${topic}, partitions: 2 }`,
        'capture:',
        '  - name: app',
        `    database: { dialect: sqlite, file: ${JSON.stringify(ref.file)} }`,
        '    batchSizeMax: 10',
        '    pollIntervalMs: 20',
        '    tables:',
        `      - { table: ledger, operations: [insert, update, delete], target: ${topic} }`,
        '',
      ].join('\n'),
    );
    const installed = await sluice(['install', file]);
    assert.is(installed.code, 0, installed.err);
    let changes = 0;
    for (let id = 1; id <= 20; id++, changes++)
      await app.exec(`INSERT INTO ledger(id, holder) VALUES (${id}, 'a${id}')`);

    run = spawn(process.execPath, [SLUICE_CLI, 'run', file, '--status-ms', '0', '--http', '0'], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let err = '';
    run.stderr!.on('data', (b) => (err += b));
    const exited = new Promise<number | null>((resolve) =>
      run!.on('exit', (code) => resolve(code)),
    );
    await until(
      'sluice run up',
      () => err.includes(' is up ('),
      60_000,
      () => err,
    );
    const url = /operations API and dashboard at (http:\/\/\S+?)\/?\n/.exec(err)?.[1];
    assert.ok(url, err);
    await until('the first changes shipped', async () => (await staged(app)) === 0, 60_000);

    await kafka.stopBroker(1, { kill: true });
    // Changes made while the broker is away stay staged until it is back.
    for (let id = 1; id <= 10; id++, changes++)
      await app.exec(`UPDATE ledger SET holder = 'b${id}' WHERE id = ${id}`);
    for (let id = 21; id <= 30; id++, changes++)
      await app.exec(`INSERT INTO ledger(id, holder) VALUES (${id}, 'a${id}')`);
    for (let id = 15; id <= 18; id++, changes++)
      await app.exec(`DELETE FROM ledger WHERE id = ${id}`);

    const target = `Kafka ${brokers} topic ${topic} (target of capture source "app")`;
    await until(
      'the outage logged',
      () => err.includes(' is down since '),
      120_000,
      () => err,
    );
    assert.match(err, `[pump:app/0] ${target} is down since `, err);
    assert.not.match(err, 'capture source "app" is down', err);

    // The health, GET /actors and `sluice status` name the target, not the source.
    const status = await assertOutageReported(url, 'pump:app/0', target);
    assert.not.match(status, 'capture source "app" is down');
    // The source's database answers all along.
    const metrics = await (await fetch(`${url}/metrics`)).text();
    assert.match(metrics, /^sluice_capture_source_up\{source="app"\} 1$/m);
    assert.ok((await staged(app)) > 0, 'changes staged while the broker is away');

    await kafka.startBroker(1);
    await until(
      'staging drained after the broker is back',
      async () => (await staged(app)) === 0,
      180_000,
      () => err,
    );
    await until(
      'the end of the outage logged',
      () => err.includes(' is up again after '),
      30_000,
      () => err,
    );
    assert.match(
      err,
      new RegExp(`\\[pump:app/0\\] ${escapeRegExp(target)} is up again after \\d+\\.\\d s down`),
    );
    await until(
      'ready again',
      async () => (await fetch(`${url}/health/ready`)).status === 200,
      30_000,
    );
    const again = (await (await fetch(`${url}/actors`)).json()) as ActorsBody;
    assert.is(again.actors.find((a) => a.name === 'pump:app/0')!.outage, null);
    run.kill('SIGTERM');
    assert.is(await exited, 0, err);
    run = null;

    // The topic against the database: each change once, per-key order, the same table.
    const records = await readCommitted(kafka.brokers, [topic], changes);
    const view = new EnvelopeView();
    const events: LedgerEvent[] = records.map((r) => {
      view.wrap(r.value!, 0, r.value!.length);
      const c = decodeChange(view.payload);
      return { stagingId: c.stagingId, key: c.key, op: c.op, after: c.after };
    });
    assert.is(events.length, changes, 'records in the topic');
    await assertLedgerExactlyOnce(app, events);
  } finally {
    if (run) run.kill('SIGKILL');
    await kafka.stop({ kill: true });
    await app.destroy();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
