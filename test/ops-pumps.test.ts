/**
 * The pump count of a capture source changed while the topology runs and a writer keeps
 * updating rows (issue 11 §3), on SQLite and PostgreSQL: 1 -> 4 pumps over HTTP, 4 -> 2 with
 * `sluice pumps`, each change audited. Every row carries a counter `n` that each update raises
 * by one, so the consumer's sequence of `n` per key must be 0, 1, 2, ... without a gap, a repeat
 * or a step back, and its last value must be the database's.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { loadTopology, startTopology, installCapture, type RunningTopology } from '../index.js';
import { Tailer } from '../engine/journal/index.js';
import { EnvelopeView, decodeJson } from '../engine/codec/index.js';
import type { AuditEntry } from '../ops/index.js';
import { createAppDb, stagingName, PG_URL, type AppDb, type Dialect } from './cdc-helpers.js';
import { sluice } from './lib/cli.js';

const serviceModule = new URL('./fixtures/services/change-image.js', import.meta.url).pathname;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const KEYS = 300;
const PARTITIONS = 4;

const DDL: Record<'sqlite' | 'postgres', string> = {
  sqlite: 'CREATE TABLE tally (id INTEGER PRIMARY KEY, n INTEGER NOT NULL)',
  postgres: 'CREATE TABLE tally (id bigint PRIMARY KEY, n bigint NOT NULL)',
};

function databaseYaml(app: AppDb): string {
  const ref = app.ref as { file?: string; schema?: string; captureSchema?: string };
  if (app.dialect === 'sqlite') return `{ dialect: sqlite, file: ${JSON.stringify(ref.file)} }`;
  return `{ dialect: postgres, url: ${JSON.stringify(PG_URL)}, schema: ${ref.schema}, captureSchema: ${ref.captureSchema} }`;
}

async function until<T>(
  what: string,
  probe: () => Promise<T | null | false> | T | null | false,
  timeoutMs = 60_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

/** The consumer's output: per key (the row id), the `n` of each change in output order. */
function consumed(dir: string): Map<number, number[]> {
  const out = new Map<number, number[]>();
  if (!fs.existsSync(dir)) return out;
  const t = Tailer.open({ dir });
  const view = new EnvelopeView();
  try {
    for (let r = t.next(); r; r = t.next()) {
      view.wrap(r.bytes, 0, r.bytes.length);
      const e = decodeJson(view.payload) as { key: string; after: string | null };
      const id = Number((JSON.parse(e.key) as unknown[])[0]);
      const n = Number((JSON.parse(e.after!) as { n: number | string }).n);
      let list = out.get(id);
      if (!list) out.set(id, (list = []));
      list.push(n);
    }
  } finally {
    t.close();
  }
  return out;
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
      // Lets the HTTP requests and the test's probes run between statements (SQLite is sync).
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

const pumpsOf = (r: RunningTopology) =>
  r.supervisor
    .actors()
    .filter((a) => a.name.startsWith('pump:app/'))
    .map((a) => a.name)
    .sort();

for (const dialect of ['sqlite', 'postgres'] as Dialect[]) {
  test(`${dialect}: pump count 1 -> 4 -> 2 under a writer: per key every change once, in order, final state equal to the database; audited`, async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ops-pumps-'));
    const app = await createAppDb(dialect, 'h_ops_pumps_');
    let running: RunningTopology | null = null;
    let writer: ReturnType<typeof startWriter> | null = null;
    try {
      await app.exec(DDL[dialect as 'sqlite' | 'postgres']);
      const file = path.join(dir, 'topology.yaml');
      fs.writeFileSync(
        file,
        `name: pumps-${dialect}
dataDir: ./data
queues:
  - { name: tally-changes, partitions: ${PARTITIONS} }
  - { name: tally-log }
capture:
  - name: app
    database: ${databaseYaml(app)}
    pumps: 1
    batchSizeMax: 20
    pollIntervalMs: 10
    tables:
      - { table: tally, operations: [insert, update], target: tally-changes }
services:
  - { name: image, module: ${serviceModule}, inputs: [tally-changes], output: tally-log }
`,
      );
      const t = loadTopology(file);
      await installCapture(t);
      running = await startTopology(t, { http: { port: 0 }, stats: false, log: () => {} });
      const url = running.ops.server!.url;
      const r = running;
      const handled = () =>
        r.supervisor.actors().find((a) => a.name === 'service:image')?.counters.eventsIn ?? 0;
      const values = Array.from({ length: KEYS }, (_, i) => `(${i + 1}, 0)`);
      for (let i = 0; i < values.length; i += 100)
        await app.exec(`INSERT INTO tally (id, n) VALUES ${values.slice(i, i + 100).join(', ')}`);
      writer = startWriter(app);
      const w = writer;

      // 1 -> 4 over HTTP, once one pump has shipped a part of the writer's changes.
      await until('the first pump shipping updates', () => handled() > KEYS + 200, 120_000);
      const up = await fetch(`${url}/capture/app/pumps`, {
        method: 'PUT',
        headers: { 'content-type': 'application/json', 'x-sluice-user': 'alice' },
        body: JSON.stringify({ pumps: 4 }),
      });
      assert.is(up.status, 200, await up.clone().text());
      const upBody = (await up.json()) as AuditEntry & { switchMs: number };
      assert.equal(
        [upBody.action, upBody.target, upBody.before, upBody.after, upBody.user],
        ['pumps', 'app', 1, 4, 'alice'],
      );
      assert.equal(pumpsOf(r), ['pump:app/0', 'pump:app/1', 'pump:app/2', 'pump:app/3']);
      const atFour = w.updates();
      // Each of the four ships a share of the writer's changes (its own keys).
      await until('every one of the 4 pumps shipping', () =>
        r.supervisor
          .actors()
          .filter((a) => a.name.startsWith('pump:app/'))
          .every((a) => a.counters.eventsIn > 0),
      );

      // A count that does not divide the partitions and an unknown source are refused.
      const three = await fetch(`${url}/capture/app/pumps`, {
        method: 'PUT',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ pumps: 3 }),
      });
      assert.is(three.status, 400);
      assert.match(
        ((await three.json()) as { error: string }).error,
        'capture source "app": 3 pumps do not divide the 4 partitions of target queue "tally-changes" (a key keeps its partition; possible counts: 1, 2, 4)',
      );
      const nowhere = await fetch(`${url}/capture/nowhere/pumps`, {
        method: 'PUT',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ pumps: 2 }),
      });
      assert.is(nowhere.status, 404);

      // 4 -> 2 with the CLI, while the writer still writes.
      await until('more updates under 4 pumps', () => w.updates() > atFour + 200);
      const down = await sluice(['pumps', '--http', url, '--source', 'app', '2']);
      assert.is(down.code, 0, down.err);
      assert.match(down.out, /^app: 4 -> 2 pumps in \d+ ms \(by .+ at .+\)$/m);
      assert.equal(pumpsOf(r), ['pump:app/0', 'pump:app/1']);
      const shown = await sluice(['pumps', '--http', url, '--source', 'app']);
      assert.is(shown.out.trim(), 'app  2');
      const atTwo = w.updates();
      await until('more updates under 2 pumps', () => w.updates() > atTwo + 200);
      await writer.stop();
      writer = null;

      // Caught up: nothing staged, and the consumer's last value of every key is the database's.
      const rows = await app.query<{ id: number | string; n: number | string }>(
        'SELECT id, n FROM tally ORDER BY id',
      );
      const staging = stagingName(app);
      const outDir = path.join(dir, 'data', 'queues', 'tally-log', '0');
      const seen = await until('the consumer caught up with the database', async () => {
        const left = await app.query<{ n: number | string }>(
          `SELECT count(*) AS n FROM ${staging}`,
        );
        if (Number(left[0]!.n) !== 0) return null;
        const c = consumed(outDir);
        return rows.every((row) => c.get(Number(row.id))?.at(-1) === Number(row.n)) ? c : null;
      });
      let changes = 0;
      for (const row of rows) {
        const list = seen.get(Number(row.id))!;
        changes += list.length;
        const expected = Array.from({ length: Number(row.n) + 1 }, (_, i) => i);
        assert.equal(list, expected, `key ${row.id}: ${list.join(',')}`);
      }
      assert.is(changes, KEYS + rows.reduce((s, row) => s + Number(row.n), 0));
      assert.ok(changes > KEYS + 600, `${changes} changes`);

      const capture = (await (await fetch(`${url}/capture`)).json()) as {
        sources: Array<{ source: string; pumps: number }>;
      };
      assert.is(capture.sources[0]!.pumps, 2);
      const audit = (await (await fetch(`${url}/audit`)).json()) as { entries: AuditEntry[] };
      const changesAudited = audit.entries
        .filter((e) => e.action === 'pumps')
        .map((e) => [e.target, e.before, e.after]);
      assert.equal(changesAudited, [
        ['app', 4, 2],
        ['app', 1, 4],
      ]);
    } finally {
      await writer?.stop();
      await running?.stop();
      await app.destroy();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
}

test.run();
