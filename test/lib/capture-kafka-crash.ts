/**
 * Test helper (not a test file): capture into Kafka exactly once across kill -9, on the real
 * broker, for any capture dialect. `sluice run` in a child process (3 pumps, a topic of 2
 * partitions, batches of 5) while this process keeps writing to the database; the child is
 * killed with SIGKILL at random moments, and a few times by the pumps themselves right after a
 * Kafka commit and before the staging delete (SLUICE_FAULT=after-append: the window the
 * reconciliation exists for). Then a clean run ships the rest and a read_committed consumer must
 * see every change the writer made exactly once, in the writer's order per key, and the table
 * rebuilt from them equals the database.
 */
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { testKafka } from '../../testing/kafka-broker.js';
import { loadTopology, installCapture } from '../../index.js';
import { EnvelopeView, decodeChange } from '../../engine/codec/index.js';
import { createAppDb, LEDGER_DDL, stagingName, type AppDb, type Dialect } from '../cdc-helpers.js';
import { readCommitted, deleteTopics } from './kafka-read.js';
import { runSluice } from './sluice-child.js';

/** Shape of one crash run. */
export interface CaptureCrashOptions {
  /** Kills at a random moment 0-1.5 s after the child is up. */
  killsRandom: number;
  /** Kills by the pump right after a Kafka commit, before the staging delete. */
  killsAfterCommit: number;
  /** Changes the writer makes in all (it stops earlier if the kills are over). */
  changesMax: number;
}

function databaseYaml(app: AppDb): string {
  const ref = app.ref;
  if (ref.dialect === 'sqlite') return `{ dialect: sqlite, file: ${ref.file} }`;
  if (ref.dialect === 'postgres')
    return `{ dialect: postgres, url: "${ref.url}", schema: ${ref.schema}, captureSchema: ${ref.captureSchema} }`;
  if (ref.dialect === 'mariadb')
    return `{ dialect: mariadb, url: "${ref.url}", captureSchema: ${ref.captureSchema} }`;
  throw new Error(`no crash case for dialect ${ref.dialect}`);
}

/** Runs the crash case on a fresh database of `dialect` (see the module comment). */
export async function runCaptureCrash(dialect: Dialect, o: CaptureCrashOptions): Promise<void> {
  const kafka = await testKafka();
  const app = await createAppDb(dialect, 'h_capcrash_');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'capkafka-crash-'));
  const name = `capkafka-${randomBytes(5).toString('hex')}`;
  const topic = `${name}.ledger`;
  let writing = true;
  try {
    await app.exec(LEDGER_DDL[dialect]);
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
        `    database: ${databaseYaml(app)}`,
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
      while (writing && changes < o.changesMax) {
        const id = 1 + Math.floor(Math.random() * 25);
        const key = JSON.stringify([String(id)]);
        const list = log.get(key) ?? [];
        log.set(key, list);
        const v = value.get(id);
        if (v === undefined) {
          await app.exec(`INSERT INTO ledger(id, amount) VALUES (${id}, '0')`);
          value.set(id, 0);
          list.push({ op: 'insert', v: '0' });
        } else if (Math.random() < 0.1) {
          await app.exec(`DELETE FROM ledger WHERE id = ${id}`);
          value.delete(id);
          list.push({ op: 'delete', v: null });
        } else {
          await app.exec(`UPDATE ledger SET amount = '${v + 1}' WHERE id = ${id}`);
          value.set(id, v + 1);
          list.push({ op: 'update', v: String(v + 1) });
        }
        changes++;
        await new Promise((r) => setTimeout(r, 15));
      }
    })();

    const kinds = [
      ...Array(o.killsRandom).fill('random'),
      ...Array(o.killsAfterCommit).fill('fault'),
    ].sort(() => Math.random() - 0.5) as ('random' | 'fault')[];
    for (const [i, kind] of kinds.entries()) {
      const r =
        kind === 'fault'
          ? await runSluice(file, { killAfterMs: 20_000, fault: true })
          : await runSluice(file, { killAfterMs: Math.floor(Math.random() * 1500) });
      assert.is(r.signal, 'SIGKILL', `run ${i} (${kind}) should have been killed:\n${r.out}`);
    }
    writing = false;
    await writer;
    const reader = await app.connect();
    const staged = async () =>
      Number(
        (
          await reader.query<{ n: number | string }>(
            `SELECT count(*) AS n FROM ${stagingName(app)}`,
          )
        )[0]!.n,
      );
    const final = await runSluice(file, {
      killAfterMs: null,
      until: async () => (await staged()) === 0,
    });
    assert.is(final.code, 0, final.out);
    assert.is(await staged(), 0);
    await reader.close();

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
      const amount = c.after === null ? null : (JSON.parse(c.after) as { amount: string }).amount;
      // MariaDB and PostgreSQL print decimal(18,6) with its scale.
      list.push({ op: c.op, v: amount === null ? null : String(Number(amount)) });
      const p = partitionOf.get(c.key);
      assert.ok(p === undefined || p === r.partition, `key ${c.key} in two partitions`);
      partitionOf.set(c.key, r.partition);
    }
    console.log(
      `  capture ${dialect} -> kafka: ${o.killsRandom + o.killsAfterCommit} kills; ${changes} changes written; read_committed topic ${records.length} records, ${ids.size} distinct staging ids`,
    );
    for (const [id, n] of ids) assert.is(n, 1, `staging id ${id} read ${n} times`);
    assert.is(records.length, changes, `records read vs changes written (${changes})`);
    assert.equal(got, log, "per key, the changes in the writer's order");
    const rows = await app.query<{ id: number | string; amount: string }>(
      'SELECT id, amount FROM ledger ORDER BY id',
    );
    const rebuilt = [...got]
      .map(([k, list]) => [JSON.parse(k)[0] as string, list[list.length - 1]!] as const)
      .filter(([, last]) => last.op !== 'delete')
      .map(([id, last]) => [Number(id), last.v])
      .sort((a, b) => (a[0] as number) - (b[0] as number));
    assert.equal(
      rebuilt,
      rows.map((r) => [Number(r.id), String(Number(r.amount))]),
    );
  } finally {
    writing = false;
    fs.rmSync(dir, { recursive: true, force: true });
    await app.destroy();
    await deleteTopics(kafka.brokers, [topic]);
    await kafka.release();
  }
}
