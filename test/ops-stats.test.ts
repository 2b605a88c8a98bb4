/**
 * Per-interval statistics on a real running topology with a capture source (SQLite, PostgreSQL,
 * MariaDB), with a short "minute" (1 s) and "hour" (5 s) condensed after 3 s: the figures land in
 * the journal (GET /stats, `sluice stats`) and in the capture database's stats table, the minute
 * points are condensed to hourly ones in both, counts add up exactly to what was captured and
 * handled, and they survive a restart of the topology.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {
  loadTopology,
  startTopology,
  installCapture,
  uninstallCapture,
  type RunningTopology,
} from '../index.js';
import type { StatsSeries } from '../ops/index.js';
import { createAppDb, LEDGER_DDL, PG_URL, type AppDb, type Dialect } from './cdc-helpers.js';
import { sluice } from './lib/cli.js';

const changeLog = new URL('./fixtures/services/change-log.js', import.meta.url).pathname;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const STATS = { intervalMs: 1000, hourIntervals: 5, condenseAfterMs: 3000, captureSampleMs: 100 };
const HOUR_MS = 5000;
const ROWS = 30;

function databaseYaml(app: AppDb): string {
  const ref = app.ref as { file?: string; url?: string; schema?: string; captureSchema?: string };
  if (app.dialect === 'sqlite') return `{ dialect: sqlite, file: ${JSON.stringify(ref.file)} }`;
  if (app.dialect === 'postgres')
    return `{ dialect: postgres, url: ${JSON.stringify(PG_URL)}, schema: ${ref.schema}, captureSchema: ${ref.captureSchema} }`;
  return `{ dialect: mariadb, url: ${JSON.stringify(ref.url)}, captureSchema: ${ref.captureSchema} }`;
}

function statsTable(app: AppDb): string {
  const schema = (app.ref as { captureSchema?: string }).captureSchema;
  if (app.dialect === 'sqlite') return 'sluice_stats';
  return app.dialect === 'postgres' ? `"${schema}".stats` : `\`${schema}\`.stats`;
}

async function getStats(url: string, step: 'minute' | 'hour'): Promise<StatsSeries[]> {
  const r = await fetch(`${url}/stats?step=${step}&from=0`);
  assert.is(r.status, 200);
  return ((await r.json()) as { series: StatsSeries[] }).series;
}

const sum = (series: StatsSeries[], name: string, field: 'eventsIn' | 'eventsOut' | 'errors') =>
  (series.find((s) => s.name === name)?.points ?? []).reduce((n, p) => n + p[field], 0);

async function until<T>(
  what: string,
  probe: () => Promise<T | null | false>,
  timeoutMs = 45_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(200);
  }
}

for (const dialect of ['sqlite', 'postgres', 'mariadb'] as Dialect[]) {
  test(`${dialect}: per-minute figures in the journal and the capture database, condensed to hourly, exact totals, kept across a restart`, async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ops2-stats-'));
    const app = await createAppDb(dialect);
    let running: RunningTopology | null = null;
    try {
      await app.exec(LEDGER_DDL[dialect]);
      const file = path.join(dir, 'topology.yaml');
      fs.writeFileSync(
        file,
        `name: stats-${dialect}
dataDir: ./data
queues:
  - { name: ledger-changes, partitions: 2 }
  - { name: ledger-log }
capture:
  - name: app
    database: ${databaseYaml(app)}
    pumps: 2
    pollIntervalMs: 20
    tables:
      - { table: ledger, operations: [insert, update, delete], target: ledger-changes }
services:
  - { name: log, module: ${changeLog}, inputs: [ledger-changes], output: ledger-log }
`,
      );
      const t = loadTopology(file);
      await installCapture(t);
      running = await startTopology(t, {
        http: { port: 0 },
        stats: STATS,
        log: (l) => l.startsWith('stats') && console.error(l),
      });
      const url = running.ops.server!.url;
      for (let i = 1; i <= ROWS; i++)
        await app.exec(`INSERT INTO ledger (id, holder) VALUES (${i}, 'h${i}')`);

      // Condensed in the capture database: hourly rows there, the minute rows before them gone.
      const table = statsTable(app);
      await until('hourly rows in the stats table', async () => {
        // The table is created at the first interval's write.
        const r = await app
          .query<{ n: number | string }>(`SELECT count(*) AS n FROM ${table} WHERE step = 'hour'`)
          .catch(() => [{ n: 0 }]);
        return Number(r[0]!.n) > 0;
      });
      const totals = await until('every change counted in the stats table', async () => {
        const r = await app.query<{ i: number | string; o: number | string; e: number | string }>(
          `SELECT sum(events_in) AS i, sum(events_out) AS o, sum(errors) AS e FROM ${table} WHERE topology = 'stats-${dialect}' AND source = 'app' AND table_name = 'ledger'`,
        );
        // Exact once the reading after the last change is in (one reading can count a change in
        // flight twice and the next one corrects it: ops/stats.ts observeCapture).
        return Number(r[0]!.o) === ROWS && Number(r[0]!.i) === ROWS ? r[0]! : null;
      });
      assert.equal([Number(totals.i), Number(totals.o), Number(totals.e)], [ROWS, ROWS, 0]);
      const rows = await app.query<{
        step: string;
        start_ms: number | string;
        interval_ms: number | string;
      }>(`SELECT step, start_ms, interval_ms FROM ${table} ORDER BY start_ms`);
      const hourEnd = Math.max(
        ...rows.filter((r) => r.step === 'hour').map((r) => Number(r.start_ms) + HOUR_MS),
      );
      for (const r of rows) {
        assert.is(Number(r.interval_ms), r.step === 'hour' ? HOUR_MS : 1000);
        if (r.step === 'hour') assert.is(Number(r.start_ms) % HOUR_MS, 0);
        else
          assert.ok(
            Number(r.start_ms) >= hourEnd,
            `minute row at ${r.start_ms} before ${hourEnd} was condensed`,
          );
      }

      // The journal: hourly totals exact for the service, the pumps and the capture table.
      await until('the journal condensed', async () => {
        const hours = fs.readdirSync(path.join(dir, 'data', 'ops', 'stats', 'hour'));
        return hours.some((f) => !f.endsWith('.lock')) && (await getStats(url, 'hour')).length > 0;
      });
      const hourly = await until('the journal counts every change', async () => {
        const s = await getStats(url, 'hour');
        return sum(s, 'service:log', 'eventsIn') === ROWS &&
          sum(s, 'app/ledger', 'eventsOut') === ROWS &&
          sum(s, 'app/ledger', 'eventsIn') === ROWS
          ? s
          : null;
      });
      assert.is(sum(hourly, 'service:log', 'eventsOut'), ROWS);
      assert.is(
        sum(hourly, 'pump:app/0', 'eventsIn') + sum(hourly, 'pump:app/1', 'eventsIn'),
        ROWS,
      );
      assert.is(sum(hourly, 'app/ledger', 'eventsIn'), ROWS);
      assert.is(sum(hourly, 'app/ledger', 'errors'), 0);
      const service = hourly.find((s) => s.name === 'service:log')!;
      assert.is(service.kind, 'actor');
      for (const p of service.points) {
        assert.is(p.intervalMs, HOUR_MS);
        assert.ok(p.lagP50Ms !== null && p.lagP99Ms !== null && p.lagP99Ms >= 0, JSON.stringify(p));
      }
      assert.ok(
        hourly.find((s) => s.name === 'pump:app/0')!.points.every((p) => p.lagP50Ms === null),
        'a pump has no inputs',
      );
      const minutes = await getStats(url, 'minute');
      for (const s of minutes) for (const p of s.points) assert.is(p.intervalMs, 1000);

      const shown = await sluice([
        'stats',
        '--http',
        url,
        '--step',
        'hour',
        '--name',
        'service:log',
      ]);
      assert.is(shown.code, 0, shown.err);
      const lines = shown.out.trim().split('\n');
      assert.match(lines[0], /^start +kind +name +in +out +errors +lag p50 ms +lag p99 ms$/);
      assert.is(
        lines.slice(1).reduce((n, l) => n + Number(l.trim().split(/ +/)[3]), 0),
        ROWS,
        shown.out,
      );

      // Kept across a restart: the figures come back from the journal.
      await running.stop();
      running = await startTopology(loadTopology(file), {
        http: { port: 0 },
        stats: STATS,
        log: () => {},
      });
      const again = await getStats(running.ops.server!.url, 'hour');
      assert.is(sum(again, 'service:log', 'eventsIn'), ROWS);
      assert.is(sum(again, 'app/ledger', 'eventsOut'), ROWS);
      const bad = await fetch(`${running.ops.server!.url}/stats?from=yesterday`);
      assert.is(bad.status, 400);

      // Uninstall takes this topology's rows and the emptied stats table with the staging tables.
      await running.stop();
      running = null;
      await uninstallCapture(loadTopology(file));
      const gone = await app.query(`SELECT count(*) AS n FROM ${table}`).then(
        () => false,
        () => true,
      );
      assert.ok(gone, 'the stats table is dropped');
    } finally {
      await running?.stop();
      await app.destroy();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
}

// The defect this pins down: the recorder took its capture baseline (the target topics' ends)
// at its first capture reading, and the first reading comes with the sampler's first sample
// after the recorder is wired, which on an idle machine is after a small burst was shipped: the
// burst was then in the baseline and counted nowhere (totals 0). Here the samples are taken by
// hand, the first one only once the pumps have shipped everything, so the order is certain.
test('sqlite: changes shipped before the first capture reading are counted (baseline at the start)', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ops2-stats-first-'));
  const app = await createAppDb('sqlite');
  let running: RunningTopology | null = null;
  try {
    await app.exec(LEDGER_DDL.sqlite);
    const file = path.join(dir, 'topology.yaml');
    fs.writeFileSync(
      file,
      `name: stats-first
dataDir: ./data
queues:
  - { name: ledger-changes, partitions: 2 }
  - { name: ledger-log }
capture:
  - name: app
    database: ${databaseYaml(app)}
    pumps: 2
    pollIntervalMs: 20
    tables:
      - { table: ledger, operations: [insert, update, delete], target: ledger-changes }
services:
  - { name: log, module: ${changeLog}, inputs: [ledger-changes], output: ledger-log }
`,
    );
    const t = loadTopology(file);
    await installCapture(t);
    // No timer sample within the test: an hour between two.
    running = await startTopology(t, {
      stats: STATS,
      sampler: { intervalMs: 3_600_000 },
      log: () => {},
    });
    for (let i = 1; i <= ROWS; i++)
      await app.exec(`INSERT INTO ledger (id, holder) VALUES (${i}, 'h${i}')`);
    await until('every change shipped', async () => {
      const r = await app.query<{ n: number }>('SELECT count(*) AS n FROM sluice_staging');
      const log = running!.supervisor.actors().find((a) => a.name === 'service:log');
      return Number(r[0]!.n) === 0 && log!.counters.eventsIn === ROWS;
    });
    const sampler = running.ops.sampler;
    const totals = await until(
      'the burst counted in the stats table',
      async () => {
        sampler.sample();
        const r = await app
          .query<{ i: number | null; o: number | null }>(
            "SELECT sum(events_in) AS i, sum(events_out) AS o FROM sluice_stats WHERE source = 'app' AND table_name = 'ledger'",
          )
          .catch(() => [{ i: null, o: null }]);
        return Number(r[0]!.o) === ROWS && Number(r[0]!.i) === ROWS ? r[0]! : null;
      },
      20_000,
    );
    assert.equal([Number(totals.i), Number(totals.o)], [ROWS, ROWS]);
  } finally {
    await running?.stop();
    await app.destroy();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
