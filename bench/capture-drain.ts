/**
 * Capture drain rate on PostgreSQL into the journal (issue 10 item 12, issue 12 target 3): N
 * changes staged once by the capture triggers, then for each pump count and variant the staging
 * table is refilled from a copy of those rows and drained; events/s from the first poll that sees
 * staging shrink to the one that sees it empty (worker start and reconciliation not counted).
 *
 * Variants, interleaved round by round so a loaded machine moves them together:
 * - `bare`: the ceiling. One `pg` connection per pump in this process running the pumps' own
 *   statements (claim: `SELECT ... WHERE key_hash % N = i ORDER BY id LIMIT b`, then
 *   `DELETE ... WHERE id = ANY(ids)`) with nothing in between: no encoding, no journal.
 * - `new`: a topology of this build (dist/index.js): N pump workers into a journal queue of N
 *   partitions (fsync batch), batchSizeMax b.
 * - `base`: the same topology run by another build's dist (`--base DIR`, e.g. main built in
 *   another worktree), in the same process and run.
 *
 *   node dist/bench/capture-drain.js [--changes 200000] [--pumps 1,2,4] [--rounds 2]
 *        [--batch 500] [--base /path/to/other/dist] [--variants bare,base,new]
 * Env: SLUICE_BENCH_PG_URL (default postgres://postgres@127.0.0.1:5432/sluice_bench_drain; the
 * database is dropped and recreated, so give it one that holds only this bench).
 * Rows: the pgbench_accounts shape (aid int primary key, bid int, abalance int, filler
 * char(84)), captured with the default statement-level triggers: ~250 bytes of staged text each.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import pg from 'pg';
import { openStaging } from '../engine/cdc/index.js';
import type { CaptureSource } from '../engine/cdc/index.js';
import { isMainModule, machineLine, markdownTable, median } from './lib/report.js';
import { recreatePgDatabase, withPgClient } from './lib/pg-db.js';

const SCHEMA = 'sluice_bench';
const STAGING = 'drain_staging';
const TEMPLATE = `${SCHEMA}.drain_template`;
const STAGING_REF = `${SCHEMA}.${STAGING}`;

type Variant = 'bare' | 'base' | 'new';

/** Options of {@link runCaptureDrainBench}; every field has a default. */
export interface CaptureDrainOptions {
  /** Staged changes per drain; default 200,000. */
  changes?: number;
  /** Pump counts; default [1, 2, 4]. */
  pumps?: number[];
  /** Interleaved rounds; default 2. */
  rounds?: number;
  /** batchSizeMax of the pumps and claim limit of the bare loop; default 500. */
  batch?: number;
  /** dist directory of the build to compare against (variant `base`); absent: no base. */
  base?: string;
  /** Variants to run; default bare, base (when given), new. */
  variants?: Variant[];
  /** PostgreSQL URL of the bench database (dropped and recreated). */
  pgUrl?: string;
}

interface TopologyModule {
  loadTopology(file: string): unknown;
  startTopology(t: unknown, o: { log: () => void }): Promise<{ stop(): Promise<unknown> }>;
}

function source(url: string, pumps: number, batch: number): CaptureSource {
  return {
    name: 'drain',
    database: { dialect: 'postgres', url, captureSchema: SCHEMA },
    tables: [{ table: 'bench_accounts', operations: ['insert', 'update', 'delete'], target: 'q' }],
    pumps,
    batchSizeMax: batch,
    pollIntervalMs: 10,
    stagingTable: STAGING,
  };
}

/** Drops and recreates the database, stages `changes` inserts, keeps a copy of the rows. */
async function prepare(url: string, changes: number, pumpCounts: number[]): Promise<void> {
  await recreatePgDatabase(url);
  await withPgClient(url, (c) =>
    c.query(
      'CREATE TABLE bench_accounts (aid int PRIMARY KEY, bid int, abalance int, filler char(84))',
    ),
  );
  // One install per pump count: each adds its (key_hash % N, id) index.
  for (const n of pumpCounts) {
    const staging = await openStaging(source(url, n, 500));
    try {
      await staging.install();
    } finally {
      await staging.close();
    }
  }
  await withPgClient(url, async (c) => {
    await c.query(
      `INSERT INTO bench_accounts SELECT g, 1 + g / 100000, 0, '' FROM generate_series(1, ${changes}) g`,
    );
    await c.query(`CREATE TABLE ${TEMPLATE} AS SELECT * FROM ${STAGING_REF}`);
  });
}

/** Refills staging from the template (same ids, same rows) and vacuums it. */
async function refill(url: string): Promise<void> {
  await withPgClient(url, async (c) => {
    await c.query(`TRUNCATE ${STAGING_REF}`);
    await c.query(`INSERT INTO ${STAGING_REF} OVERRIDING SYSTEM VALUE SELECT * FROM ${TEMPLATE}`);
    await c.query(`VACUUM ANALYZE ${STAGING_REF}`);
  });
}

/** The bare loop: each pump's claim and delete statements back to back. Events/s. */
async function drainBare(url: string, pumps: number, batch: number): Promise<number> {
  const clients = await Promise.all(
    Array.from({ length: pumps }, async () => {
      const c = new pg.Client({ connectionString: url });
      await c.connect();
      return c;
    }),
  );
  try {
    let total = 0;
    const t0 = performance.now();
    await Promise.all(
      clients.map(async (c, pump) => {
        const where = pumps > 1 ? `WHERE key_hash % ${pumps} = $2` : '';
        const params = pumps > 1 ? [batch, pump] : [batch];
        for (;;) {
          const res = await c.query<{ staging_id: string }>(
            `SELECT id::text AS staging_id, table_name, op, key, key_hash::text AS key_hash, before, after, txid,
                    time_ms::text AS time_ms, attempts
             FROM ${STAGING_REF} ${where} ORDER BY id LIMIT $1`,
            params,
          );
          if (res.rows.length === 0) return;
          await c.query(`DELETE FROM ${STAGING_REF} WHERE id = ANY($1::bigint[])`, [
            res.rows.map((r) => r.staging_id),
          ]);
          total += res.rows.length;
        }
      }),
    );
    return total / ((performance.now() - t0) / 1000);
  } finally {
    await Promise.all(clients.map((c) => c.end()));
  }
}

/** A topology of `mod` (one build's dist) drains staging; events/s. */
async function drainTopology(
  mod: TopologyModule,
  url: string,
  dir: string,
  pumps: number,
  batch: number,
  changes: number,
): Promise<number> {
  const run = fs.mkdtempSync(path.join(dir, 'run-'));
  const file = path.join(run, 'topology.yaml');
  fs.writeFileSync(
    file,
    [
      'name: drain',
      'dataDir: ./data',
      'queues:',
      `  - { name: q, partitions: ${pumps} }`,
      'capture:',
      '  - name: drain',
      `    database: { dialect: postgres, url: "${url}", captureSchema: ${SCHEMA} }`,
      `    stagingTable: ${STAGING}`,
      `    pumps: ${pumps}`,
      `    batchSizeMax: ${batch}`,
      '    tables:',
      '      - { table: bench_accounts, operations: [insert, update, delete], target: q }',
      '',
    ].join('\n'),
  );
  const poll = new pg.Client({ connectionString: url });
  await poll.connect();
  try {
    const running = mod.startTopology(mod.loadTopology(file), { log: () => undefined });
    running.catch(() => undefined);
    // count(*) only until the first shrink; then the cheaper lowest-id probe for emptiness.
    let first: { ms: number; left: number } | null = null;
    while (first === null) {
      const r = await poll.query<{ n: string }>(`SELECT count(*)::text AS n FROM ${STAGING_REF}`);
      const left = Number(r.rows[0]!.n);
      if (left < changes) first = { ms: performance.now(), left };
      else await new Promise((r) => setTimeout(r, 5));
    }
    for (;;) {
      const r = await poll.query(`SELECT id FROM ${STAGING_REF} ORDER BY id LIMIT 1`);
      if (r.rows.length === 0) break;
      await new Promise((r) => setTimeout(r, 5));
    }
    const rate = first.left / ((performance.now() - first.ms) / 1000);
    await (await running).stop();
    return rate;
  } finally {
    await poll.end();
    fs.rmSync(run, { recursive: true, force: true });
  }
}

/** Runs the bench; returns a markdown section for bench/RESULTS.md. */
export async function runCaptureDrainBench(options: CaptureDrainOptions = {}): Promise<string> {
  const changes = options.changes ?? 200_000;
  const pumpCounts = options.pumps ?? [1, 2, 4];
  const rounds = options.rounds ?? 2;
  const batch = options.batch ?? 500;
  const url =
    options.pgUrl ??
    process.env.SLUICE_BENCH_PG_URL ??
    'postgres://postgres@127.0.0.1:5432/sluice_bench_drain';
  const variants =
    options.variants ?? (['bare', ...(options.base ? ['base'] : []), 'new'] as Variant[]);
  const mods: Partial<Record<Variant, TopologyModule>> = {
    new: (await import(new URL('../index.js', import.meta.url).href)) as TopologyModule,
  };
  if (variants.includes('base')) {
    if (!options.base) throw new Error('variant base needs --base <dist directory>');
    mods.base = (await import(
      pathToFileURL(path.resolve(options.base, 'index.js')).href
    )) as TopologyModule;
  }
  const load0 = os.loadavg();
  await prepare(url, changes, pumpCounts);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'capture-drain-'));
  const rates = new Map<string, number[]>();
  try {
    for (let round = 0; round < rounds; round++) {
      for (const pumps of pumpCounts) {
        for (const v of variants) {
          await refill(url);
          const rate =
            v === 'bare'
              ? await drainBare(url, pumps, batch)
              : await drainTopology(mods[v]!, url, dir, pumps, batch, changes);
          const k = `${v}/${pumps}`;
          rates.set(k, [...(rates.get(k) ?? []), rate]);
          console.error(`round ${round + 1} pumps ${pumps} ${v}: ${Math.round(rate)} events/s`);
        }
      }
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
  const load1 = os.loadavg();
  const fmt = (xs: number[]) =>
    `${Math.round(median(xs)).toLocaleString('en-US')} (${xs.map((x) => Math.round(x).toLocaleString('en-US')).join(', ')})`;
  const header = ['pumps', ...variants.map((v) => `${v} events/s`)];
  if (variants.includes('new') && variants.includes('bare')) header.push('new / bare');
  if (variants.includes('new') && variants.includes('base')) header.push('new / base');
  const rows = pumpCounts.map((p) => {
    const med = (v: Variant) => median(rates.get(`${v}/${p}`)!);
    const cells = [String(p), ...variants.map((v) => fmt(rates.get(`${v}/${p}`)!))];
    if (header.includes('new / bare')) cells.push(`${(med('new') / med('bare')).toFixed(2)}x`);
    if (header.includes('new / base')) cells.push(`${(med('new') / med('base')).toFixed(2)}x`);
    return cells;
  });
  return (
    `### Capture drain rate, PostgreSQL into the journal (${changes.toLocaleString('en-US')} staged changes, batchSizeMax ${batch}, ${rounds} rounds)\n\n` +
    `${machineLine()}; load average ${load0.map((x) => x.toFixed(1)).join(' ')} at start, ` +
    `${load1.map((x) => x.toFixed(1)).join(' ')} at end. Median (each round).\n\n` +
    markdownTable(header, rows) +
    '\n'
  );
}

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

if (isMainModule(import.meta.url)) {
  const num = (s: string | undefined) => (s === undefined ? undefined : Number(s));
  console.log(
    await runCaptureDrainBench({
      changes: num(arg('changes')),
      pumps: arg('pumps')?.split(',').map(Number),
      rounds: num(arg('rounds')),
      batch: num(arg('batch')),
      base: arg('base'),
      variants: arg('variants')?.split(',') as Variant[] | undefined,
    }),
  );
  process.exit(0);
}
