/**
 * Cost of capture triggers on the writing application (issue 10 item 4, issue 12 target 3):
 * triggers only, no pumps, every variant measured in the same run, interleaved round by round.
 *
 * 1. Bulk INSERT: `INSERT INTO bench_accounts SELECT ... FROM generate_series(1, rows)` (the
 *    shape of pgbench_accounts: aid int primary key, bid int, abalance int, filler char(84))
 *    without capture, with row triggers and with statement triggers (CaptureTable.triggers);
 *    also staging bytes against table bytes after the insert. SQLite: the same insert in one
 *    transaction through better-sqlite3. MariaDB (when SLUICE_BENCH_MARIADB_URL is set):
 *    INSERT ... SELECT from the seq_1_to_N sequence engine.
 * 2. pgbench (PostgreSQL only): `pgbench -c 8 -j 2 -T <s>` at scale 10 without capture, with
 *    row triggers and with statement triggers on the bank example's capture tables
 *    (pgbench_history insert, pgbench_accounts update); staging is emptied between runs.
 *
 *   node dist/bench/capture-triggers.js [--rows 500000] [--rounds 2] [--pgbench-s 30] [--no-pgbench]
 * Env: SLUICE_BENCH_PG_URL (default postgres://postgres@127.0.0.1:5432/sluice_bench_triggers,
 * created if missing), SLUICE_BENCH_MARIADB_URL (optional, e.g. mariadb://root@127.0.0.1:3306/x).
 * The bench's database holds only bench tables: it is dropped and recreated each run.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import Database from 'better-sqlite3';
import { openStaging } from '../engine/cdc/index.js';
import type { CaptureSource, CaptureTable, TriggerLevel } from '../engine/cdc/index.js';
import { isMainModule, machineLine, markdownTable, median } from './lib/report.js';
import { processCpuMs } from './lib/proc-cpu.js';
import { recreatePgDatabase, withPgClient } from './lib/pg-db.js';

const run = promisify(execFile);

/** Options of {@link runCaptureTriggersBench}; every field has a default. */
export interface CaptureTriggersOptions {
  /** Rows of the bulk INSERT; default 500,000. */
  rows?: number;
  /** Interleaved rounds of every variant; default 2. */
  rounds?: number;
  /** Seconds of each pgbench run; 0 skips pgbench; default 30. */
  pgbenchS?: number;
  /** PostgreSQL URL of the bench database (dropped and recreated). */
  pgUrl?: string;
  /** MariaDB URL of a bench database (dropped and recreated); absent: MariaDB skipped. */
  mariadbUrl?: string;
}

type Variant = 'none' | TriggerLevel;
const LEVELS: TriggerLevel[] = ['row', 'statement'];
const VARIANTS: Variant[] = ['none', ...LEVELS];
const STAGING = 'bench_staging';

function pgSource(url: string, tables: CaptureTable[]): CaptureSource {
  return {
    name: 'bench',
    database: { dialect: 'postgres', url, captureSchema: 'sluice_bench' },
    tables,
    pumps: 1,
    batchSizeMax: 1000,
    pollIntervalMs: 10,
    stagingTable: STAGING,
  };
}

/** Installs capture of `tables` at `level`, or removes every capture object for 'none'. */
async function setCapture(url: string, tables: CaptureTable[], variant: Variant): Promise<void> {
  const source = pgSource(
    url,
    tables.map((t) => ({ ...t, ...(variant === 'none' ? {} : { triggers: variant }) })),
  );
  const staging = await openStaging(source);
  try {
    if (variant === 'none') await staging.uninstall({ dropStaging: true });
    else await staging.install();
  } finally {
    // Each run starts with an empty staging table (triggers only: no pump drains it).
    if (variant !== 'none')
      await withPgClient(url, (c) => c.query(`TRUNCATE sluice_bench.${STAGING}`));
    await staging.close();
  }
}

const ACCOUNTS_DDL =
  'CREATE TABLE bench_accounts (aid int PRIMARY KEY, bid int, abalance int, filler char(84))';
const ACCOUNTS: CaptureTable = {
  table: 'bench_accounts',
  operations: ['insert', 'update', 'delete'],
  target: 'accounts',
};

/** One variant's bulk INSERT times (wall, and the PostgreSQL backend's CPU where measured), ms. */
interface BulkRow {
  variant: Variant;
  ms: number[];
  baselineMs: number[];
  cpuMs?: number[];
  baselineCpuMs?: number[];
  tableBytes?: number;
  stagingBytes?: number;
}

async function pgBulk(url: string, rows: number, rounds: number): Promise<BulkRow[]> {
  const out = new Map<Variant, BulkRow>(
    VARIANTS.map((v) => [v, { variant: v, ms: [], baselineMs: [], cpuMs: [], baselineCpuMs: [] }]),
  );
  await withPgClient(url, (c) => c.query(ACCOUNTS_DDL));
  for (let round = 0; round < rounds; round++) {
    let baseline = 0;
    let baselineCpu = 0;
    for (const v of VARIANTS) {
      await withPgClient(url, (c) => c.query('TRUNCATE bench_accounts'));
      await setCapture(url, [ACCOUNTS], v);
      await withPgClient(url, (c) => c.query('CHECKPOINT'));
      const [ms, cpuMs] = await withPgClient(url, async (c) => {
        const pid = (await c.query<{ p: number }>('SELECT pg_backend_pid() AS p')).rows[0]!.p;
        const cpu0 = processCpuMs(pid);
        const t0 = performance.now();
        await c.query(
          `INSERT INTO bench_accounts SELECT g, (g - 1) / 100000 + 1, 0, '' FROM generate_series(1, ${rows}) g`,
        );
        return [performance.now() - t0, processCpuMs(pid) - cpu0];
      });
      if (v === 'none') [baseline, baselineCpu] = [ms, cpuMs];
      const r = out.get(v)!;
      r.ms.push(ms);
      r.baselineMs.push(baseline);
      r.cpuMs!.push(cpuMs);
      r.baselineCpuMs!.push(baselineCpu);
      if (v !== 'none') {
        const sizes = await withPgClient(url, (c) =>
          c.query<{ t: string; s: string }>(
            `SELECT pg_total_relation_size('bench_accounts')::text AS t, pg_total_relation_size('sluice_bench.${STAGING}')::text AS s`,
          ),
        );
        r.tableBytes = Number(sizes.rows[0]!.t);
        r.stagingBytes = Number(sizes.rows[0]!.s);
        const n = await withPgClient(url, (c) =>
          c.query<{ n: string }>(`SELECT count(*)::text AS n FROM sluice_bench.${STAGING}`),
        );
        if (Number(n.rows[0]!.n) !== rows)
          throw new Error(`${v} triggers staged ${n.rows[0]!.n} rows for ${rows} inserted`);
      }
    }
  }
  await setCapture(url, [ACCOUNTS], 'none');
  await withPgClient(url, (c) => c.query('DROP TABLE bench_accounts'));
  return [...out.values()];
}

interface PgbenchRow {
  variant: Variant;
  tps: number[];
  baselineTps: number[];
  load: number[];
}

const PGBENCH_TABLES: CaptureTable[] = [
  {
    table: 'pgbench_history',
    operations: ['insert'],
    columns: ['tid', 'bid', 'aid', 'delta', 'mtime'],
    key: ['aid'],
    target: 'history',
  },
  {
    table: 'pgbench_accounts',
    operations: ['update'],
    columns: ['aid', 'bid', 'abalance'],
    target: 'accounts',
  },
];

async function pgbenchRuns(url: string, seconds: number, rounds: number): Promise<PgbenchRow[]> {
  const u = new URL(url);
  const conn = [
    '-h',
    u.hostname,
    '-p',
    u.port || '5432',
    '-U',
    decodeURIComponent(u.username || 'postgres'),
  ];
  const db = decodeURIComponent(u.pathname.slice(1));
  await run('pgbench', ['-i', '-q', '-s', '10', ...conn, db], { maxBuffer: 1 << 24 });
  const out = new Map<Variant, PgbenchRow>(
    VARIANTS.map((v) => [v, { variant: v, tps: [], baselineTps: [], load: [] }]),
  );
  for (let round = 0; round < rounds; round++) {
    let baseline = 0;
    for (const v of VARIANTS) {
      await setCapture(url, PGBENCH_TABLES, v);
      const { stdout } = await run(
        'pgbench',
        ['-c', '8', '-j', '2', '-T', String(seconds), ...conn, db],
        { maxBuffer: 1 << 24 },
      );
      const m = /tps = ([\d.]+)/.exec(stdout);
      if (!m) throw new Error(`pgbench printed no tps:\n${stdout}`);
      const tps = Number(m[1]);
      if (v === 'none') baseline = tps;
      const r = out.get(v)!;
      r.tps.push(tps);
      r.baselineTps.push(baseline);
      r.load.push(loadavg()[0]!);
    }
  }
  await setCapture(url, PGBENCH_TABLES, 'none');
  return [...out.values()];
}

/** SQLite: the bulk insert in one transaction, without and with the (row) capture triggers. */
async function sqliteBulk(rows: number, rounds: number): Promise<BulkRow[]> {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-bench-triggers-'));
  const out: BulkRow[] = [
    { variant: 'none', ms: [], baselineMs: [] },
    { variant: 'row', ms: [], baselineMs: [] },
  ];
  try {
    const file = join(dir, 'bench.db');
    const db = new Database(file);
    db.pragma('journal_mode = WAL');
    db.exec(
      'CREATE TABLE bench_accounts (aid INTEGER PRIMARY KEY, bid INTEGER, abalance INTEGER, filler TEXT)',
    );
    const source: CaptureSource = {
      name: 'bench',
      database: { dialect: 'sqlite', file },
      tables: [ACCOUNTS],
      pumps: 1,
      batchSizeMax: 1000,
      pollIntervalMs: 10,
      stagingTable: STAGING,
    };
    // No generate_series extension in better-sqlite3's build: a recursive CTE counts instead.
    const insert =
      db.prepare(`WITH RECURSIVE g(v) AS (SELECT 1 UNION ALL SELECT v + 1 FROM g WHERE v < ?)
      INSERT INTO bench_accounts (aid, bid, abalance, filler) SELECT v, (v - 1) / 100000 + 1, 0, printf('%84s', '') FROM g`);
    for (let round = 0; round < rounds; round++) {
      let baseline = 0;
      for (const r of out) {
        db.exec('DELETE FROM bench_accounts');
        const staging = await openStaging(source);
        if (r.variant === 'none') await staging.uninstall({ dropStaging: true });
        else await staging.install();
        await staging.close();
        db.exec('PRAGMA wal_checkpoint(TRUNCATE)');
        const t0 = performance.now();
        db.transaction(() => insert.run(rows))();
        const ms = performance.now() - t0;
        if (r.variant === 'none') baseline = ms;
        r.ms.push(ms);
        r.baselineMs.push(baseline);
      }
    }
    db.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  return out;
}

/** MariaDB: INSERT ... SELECT from the sequence engine, without and with the capture triggers. */
async function mariadbBulk(url: string, rows: number, rounds: number): Promise<BulkRow[]> {
  const mysql = await import('mysql2/promise');
  const u = new URL(url);
  const db = decodeURIComponent(u.pathname.slice(1));
  if (!/^[A-Za-z0-9_]+$/.test(db))
    throw new Error(`bench database name must be [A-Za-z0-9_]+, url=${url}`);
  const admin = await mysql.createConnection({
    host: u.hostname,
    port: Number(u.port || 3306),
    user: decodeURIComponent(u.username || 'root'),
    password: decodeURIComponent(u.password),
  });
  await admin.query(`DROP DATABASE IF EXISTS \`${db}\``);
  await admin.query(`CREATE DATABASE \`${db}\``);
  await admin.query(`USE \`${db}\``);
  await admin.query(
    'CREATE TABLE bench_accounts (aid int PRIMARY KEY, bid int, abalance int, filler char(84)) ENGINE=InnoDB',
  );
  const source: CaptureSource = {
    // The capture database is the bench's own (never the shared default "sluice").
    name: 'bench',
    database: { dialect: 'mariadb', url, captureSchema: `${db}_sluice` },
    tables: [ACCOUNTS],
    pumps: 1,
    batchSizeMax: 1000,
    pollIntervalMs: 10,
    stagingTable: STAGING,
  };
  const out: BulkRow[] = [
    { variant: 'none', ms: [], baselineMs: [] },
    { variant: 'row', ms: [], baselineMs: [] },
  ];
  try {
    for (let round = 0; round < rounds; round++) {
      let baseline = 0;
      for (const r of out) {
        // DELETE: the installed TRUNCATE guard refuses TRUNCATE of a captured table (case C9).
        await admin.query('DELETE FROM bench_accounts');
        const staging = await openStaging(source);
        if (r.variant === 'none') await staging.uninstall({ dropStaging: true });
        else await staging.install();
        await staging.close();
        const t0 = performance.now();
        await admin.query(
          `INSERT INTO bench_accounts SELECT seq, (seq - 1) DIV 100000 + 1, 0, '' FROM seq_1_to_${rows}`,
        );
        const ms = performance.now() - t0;
        if (r.variant === 'none') baseline = ms;
        r.ms.push(ms);
        r.baselineMs.push(baseline);
      }
    }
  } finally {
    const staging = await openStaging(source);
    await staging.uninstall({ dropStaging: true }).finally(() => staging.close());
    await admin.query(`DROP DATABASE IF EXISTS \`${db}\``);
    await admin.query(`DROP DATABASE IF EXISTS \`${db}_sluice\``);
    await admin.end();
  }
  return out;
}

const fmtMs = (xs: number[]) => xs.map((x) => (x / 1000).toFixed(2)).join(' / ');
const ratios = (xs: number[], base: number[]) => xs.map((x, i) => x / base[i]!);
const fmtRatio = (xs: number[]) => xs.map((x) => `${x.toFixed(2)}x`).join(' / ');

function bulkTable(title: string, rows: BulkRow[], n: number): string {
  const body = rows.map((r) => [
    r.variant === 'none' ? 'no capture' : `${r.variant} triggers`,
    fmtMs(r.ms),
    r.variant === 'none' ? '1.00x' : fmtRatio(ratios(r.ms, r.baselineMs)),
    r.variant === 'none' ? '' : `${median(ratios(r.ms, r.baselineMs)).toFixed(2)}x`,
    r.stagingBytes === undefined
      ? ''
      : `${(r.stagingBytes / 2 ** 20).toFixed(0)} MB / ${(r.tableBytes! / 2 ** 20).toFixed(0)} MB`,
    ...(r.cpuMs === undefined
      ? []
      : [
          `${fmtMs(r.cpuMs)}${r.variant === 'none' ? '' : ` (${median(ratios(r.cpuMs, r.baselineCpuMs!)).toFixed(2)}x)`}`,
        ]),
  ]);
  const cpu = rows[0]?.cpuMs !== undefined ? ['backend CPU per round, s (median ratio)'] : [];
  return (
    `### ${title}: INSERT of ${n.toLocaleString('en-US')} rows\n\n` +
    markdownTable(
      [
        'variant',
        'time per round, s',
        'vs same-round no capture',
        'median ratio',
        'staging / table bytes',
        ...cpu,
      ],
      body,
    )
  );
}

/** Runs every part and returns the markdown for bench/RESULTS.md. */
export async function runCaptureTriggersBench(
  options: CaptureTriggersOptions = {},
): Promise<string> {
  const rows = options.rows ?? 500_000;
  const rounds = options.rounds ?? 2;
  const seconds = options.pgbenchS ?? 30;
  const pgUrl =
    options.pgUrl ??
    process.env.SLUICE_BENCH_PG_URL ??
    'postgres://postgres@127.0.0.1:5432/sluice_bench_triggers';
  const mariadbUrl = options.mariadbUrl ?? process.env.SLUICE_BENCH_MARIADB_URL;
  const parts: string[] = [
    `Machine: ${machineLine()}; load average at start ${loadavg()
      .map((x) => x.toFixed(1))
      .join(' ')}.`,
  ];
  await recreatePgDatabase(pgUrl);
  parts.push(bulkTable('PostgreSQL', await pgBulk(pgUrl, rows, rounds), rows));
  parts.push(bulkTable('SQLite (row triggers only)', await sqliteBulk(rows, rounds), rows));
  if (mariadbUrl !== undefined)
    parts.push(
      bulkTable('MariaDB (row triggers only)', await mariadbBulk(mariadbUrl, rows, rounds), rows),
    );
  if (seconds > 0) {
    const pb = await pgbenchRuns(pgUrl, seconds, rounds);
    const body = pb.map((r) => [
      r.variant === 'none' ? 'no capture' : `${r.variant} triggers`,
      r.tps.map((x) => x.toFixed(0)).join(' / '),
      r.variant === 'none'
        ? '100%'
        : ratios(r.tps, r.baselineTps)
            .map((x) => `${(x * 100).toFixed(0)}%`)
            .join(' / '),
      r.variant === 'none' ? '' : `${(median(ratios(r.tps, r.baselineTps)) * 100).toFixed(0)}%`,
      r.load.map((x) => x.toFixed(1)).join(' / '),
    ]);
    parts.push(
      `### pgbench, scale 10, 8 clients, ${seconds} s per run, triggers only (no pumps)\n\n` +
        markdownTable(
          [
            'variant',
            'TPS per round',
            'vs same-round no capture',
            'median',
            'load average (1 min) after',
          ],
          body,
        ),
    );
  }
  parts.push(
    `Load average at end ${loadavg()
      .map((x) => x.toFixed(1))
      .join(' ')}.`,
  );
  return parts.join('\n\n');
}

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(name);
  return i < 0 ? undefined : process.argv[i + 1];
}

if (isMainModule(import.meta.url)) {
  const num = (name: string) => (arg(name) === undefined ? undefined : Number(arg(name)));
  const md = await runCaptureTriggersBench({
    rows: num('--rows'),
    rounds: num('--rounds'),
    pgbenchS: process.argv.includes('--no-pgbench') ? 0 : num('--pgbench-s'),
  });
  console.log(md);
}
