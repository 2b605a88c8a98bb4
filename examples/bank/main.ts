/**
 * The bank job: pgbench's TPC-B workload -> capture triggers -> pumps -> durable queues ->
 * `branch-balances` and `accounts` services, then a verification against the database.
 *
 *   node dist/examples/bank/main.js [--topology examples/bank/topology.yaml] [--scale 1]
 *        [--duration-s 20] [--clients 4] [--keep] [--start-kafka]
 *
 * SQLite topology (embedded default): creates pgbench's tables in a fresh SQLite file and runs
 * the TPC-B transaction from `--clients` worker threads. PostgreSQL topology: runs the real
 * `pgbench -i -s <scale>` then `pgbench -c <clients> -j 2 -T <duration>` against the database.
 * MariaDB topology: creates pgbench's tables (engine/workload/mariadb.ts) and runs the TPC-B
 * transaction from `--clients` connections.
 * Kafka topology (topology.kafka.yaml, `bus: { kind: kafka }`): the queues are topics on the
 * brokers; a fresh run (no --keep) deletes the topics of an earlier run first. `--start-kafka`
 * starts a private single-node broker for the run (tools/kafka/kafka.sh; Java 17) and sets
 * SLUICE_KAFKA_BROKERS, which topology.kafka.yaml's bus line reads, before the topology loads.
 * Exits 0 when every branch total and every changed account balance match the database, 1 on
 * any mismatch, 2 on an error.
 */
import fs from 'node:fs';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Command, InvalidArgumentError } from 'commander';
import Database from 'better-sqlite3';
import pg from 'pg';
import { loadTopology, startTopology, type ServiceSummary, type Topology } from 'sluice';
import { verifyBank } from './verify.js';
import { openStaging } from '../../engine/cdc/index.js';
import {
  createPgbenchSchema,
  runTpcb,
  startKafka,
  PGBENCH_SCALE_MAX,
  TPCB_DEFAULTS,
} from 'sluice/testing';
import {
  createPgbenchSchemaMariaDb,
  ensureMariaDbDatabase,
  keptScaleMariaDb,
  runTpcbMariaDb,
} from '../../engine/workload/index.js';
import { parseHttpAddress } from '../../cli/ops-commands.js';
import kafkajs from 'kafkajs';
import { kafkaBusOptionsOf } from '../../engine/bus/index.js';
import { pumpTransactionalId } from '../../actors/kafka-capture.js';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');

// SIGINT/SIGTERM end the workload early; the job then drains, prints the summary of what ran and
// verifies it. A second signal exits at once (130 / 143).
const interrupt = new AbortController();
let interruptedBy: string | null = null;
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    if (interruptedBy) process.exit(signal === 'SIGINT' ? 130 : 143);
    interruptedBy = signal;
    console.error(
      `bank: ${signal}: stopping the workload, then draining and verifying (again to exit at once)`,
    );
    interrupt.abort();
  });
}

interface Options {
  topology: string;
  /** The --scale given, if any; with --keep the kept database's scale is used (a different one is refused). */
  scale?: number;
  durationS: number;
  clients: number;
  keep: boolean;
  verbose: boolean;
  /** Start a private Kafka broker for the run and point SLUICE_KAFKA_BROKERS at it. */
  startKafka: boolean;
  /** Serve the operations API and dashboard while the job runs. */
  http?: { host: string; port: number };
}

/**
 * Runs a command and resolves with its stdout and stderr (`out`). With `signal`, an abort sends the
 * command SIGINT and whatever it exits with resolves (its output so far); so does its death by
 * SIGINT/SIGTERM (a terminal's Ctrl-C reaches it directly, maybe before our listener runs); then
 * `interrupted` is true.
 */
function run(
  cmd: string,
  args: string[],
  signal?: AbortSignal,
): Promise<{ out: string; interrupted: boolean }> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (b) => (out += b));
    child.stderr.on('data', (b) => (out += b));
    child.on('error', reject);
    const onAbort = () => child.kill('SIGINT');
    if (signal?.aborted) onAbort();
    signal?.addEventListener('abort', onAbort, { once: true });
    child.on('exit', (code, killedBy) => {
      signal?.removeEventListener('abort', onAbort);
      const interrupted =
        !!signal && (signal.aborted || killedBy === 'SIGINT' || killedBy === 'SIGTERM');
      if (code === 0 || interrupted) resolve({ out, interrupted });
      else reject(new Error(`${cmd} ${args.join(' ')} exited ${code}:\n${out}`));
    });
  });
}

/** Rows of pgbench_history: one per committed TPC-B transaction. */
async function pgHistoryRows(url: string): Promise<number> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return Number((await client.query('SELECT count(*) AS n FROM pgbench_history')).rows[0].n);
  } finally {
    await client.end();
  }
}

async function ensurePgDatabase(url: string): Promise<void> {
  const u = new URL(url);
  const name = u.pathname.slice(1);
  const admin = new URL(url);
  admin.pathname = '/postgres';
  const client = new pg.Client({ connectionString: admin.toString() });
  await client.connect();
  try {
    const r = await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [name]);
    if (r.rowCount === 0) await client.query(`CREATE DATABASE "${name.replace(/"/g, '""')}"`);
  } finally {
    await client.end();
  }
}

/** Longest wait for the broker to finish deleting the last run's topics, ms. */
const TOPIC_DELETE_WAIT_MS = 60_000;

/**
 * Kafka bus, fresh run (no --keep): deletes the topics of the topology's queues left by an earlier
 * run (the journal's equivalent is removing dataDir) and the pumps' consumer groups (their
 * reconciliation offsets), and waits until the broker no longer lists the topics, so the
 * topology's start creates them empty. Returns the number of topics deleted.
 */
async function resetKafkaTopics(topology: Topology): Promise<number> {
  if (topology.bus.kind !== 'kafka') return 0;
  const admin = new kafkajs.Kafka({
    ...kafkaBusOptionsOf(topology.bus, 'reset'),
    logLevel: kafkajs.logLevel.NOTHING,
  }).admin();
  await admin.connect();
  try {
    const existing = new Set(await admin.listTopics());
    const topics = topology.queues.map((q) => q.name).filter((t) => existing.has(t));
    if (topics.length > 0) await admin.deleteTopics({ topics, timeout: TOPIC_DELETE_WAIT_MS });
    const groups = topology.capture.flatMap((s) =>
      Array.from({ length: s.pumps }, (_, i) => pumpTransactionalId(topology.name, s.name, i)),
    );
    // A group that does not exist is not an error here; deleteGroups reports it per group.
    await admin.deleteGroups(groups).catch(() => undefined);
    for (const t0 = Date.now(); ; await new Promise((r) => setTimeout(r, 200))) {
      const left = new Set(await admin.listTopics());
      if (!topics.some((t) => left.has(t))) break;
      if (Date.now() - t0 > TOPIC_DELETE_WAIT_MS)
        throw new Error(
          `kafka bus ${topology.bus.brokers.join(',')}: topics ${topics.filter((t) => left.has(t)).join(', ')} still listed ${TOPIC_DELETE_WAIT_MS / 1000} s after their deletion`,
        );
    }
    return topics.length;
  } finally {
    await admin.disconnect();
  }
}

async function main(o: Options): Promise<number> {
  if (!o.startKafka) return runJob(o);
  const k0 = Date.now();
  const kafka = await startKafka();
  process.env.SLUICE_KAFKA_BROKERS = kafka.brokers[0];
  console.log(`bank: kafka broker ${kafka.brokers[0]} started in ${Date.now() - k0} ms`);
  try {
    return await runJob(o);
  } finally {
    await kafka.stop({ kill: true });
  }
}

async function runJob(o: Options): Promise<number> {
  const topology = loadTopology(o.topology);
  const source = topology.capture[0];
  if (!source) throw new Error(`${o.topology}: the bank job needs a capture source`);
  if (!o.keep) fs.rmSync(topology.dataDir, { recursive: true, force: true });
  fs.mkdirSync(topology.dataDir, { recursive: true });
  const db = source.database;
  const t0 = Date.now();
  if (topology.bus.kind === 'kafka') {
    const deleted = o.keep ? 0 : await resetKafkaTopics(topology);
    console.log(
      `bank: kafka bus ${topology.bus.brokers.join(',')}${o.keep ? ', topics kept from the last run' : deleted > 0 ? `, ${deleted} topics of the last run deleted` : ''}`,
    );
  }

  // 1. the database with pgbench's tables, and the capture triggers; a kept database keeps its
  //    scale (pgbench's rule: the row count of pgbench_branches)
  let kept = false;
  let scale = o.scale ?? 1;
  let keptScale: number | null = null;
  if (db.dialect === 'sqlite') {
    kept = o.keep && fs.existsSync(db.file);
    if (kept) {
      const sqlite = new Database(db.file, { readonly: true });
      try {
        keptScale = sqlite.prepare('SELECT count(*) FROM pgbench_branches').pluck().get() as number;
      } finally {
        sqlite.close();
      }
    } else {
      for (const f of [db.file, `${db.file}-wal`, `${db.file}-shm`]) fs.rmSync(f, { force: true });
      const sqlite = new Database(db.file);
      sqlite.pragma('journal_mode = WAL');
      createPgbenchSchema(sqlite, scale);
      sqlite.close();
    }
  } else if (db.dialect === 'mariadb' || db.dialect === 'mysql') {
    await ensureMariaDbDatabase(db.url);
    keptScale = o.keep ? await keptScaleMariaDb(db.url) : null;
    kept = keptScale !== null;
    if (!kept) await createPgbenchSchemaMariaDb(db.url, scale);
  } else {
    await ensurePgDatabase(db.url);
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    try {
      kept =
        o.keep &&
        (await client.query(`SELECT to_regclass('pgbench_branches') IS NOT NULL AS present`))
          .rows[0].present === true;
      if (kept)
        keptScale = Number(
          (await client.query('SELECT count(*) AS n FROM pgbench_branches')).rows[0].n,
        );
    } finally {
      await client.end();
    }
    if (!kept) await run('pgbench', ['-i', '-q', '-s', String(scale), db.url]);
  }
  if (keptScale !== null) {
    if (o.scale !== undefined && o.scale !== keptScale) {
      throw new Error(
        `--scale ${o.scale} with --keep, but the kept database has scale ${keptScale} (pgbench_branches rows); drop --scale, or drop --keep to start over at scale ${o.scale}`,
      );
    }
    scale = keptScale;
  }
  const staging = await openStaging(source);
  await staging.install();
  await staging.close();
  console.log(
    `bank: ${db.dialect} database ${kept ? `kept from the last run (scale ${scale})` : `ready (scale ${scale})`} in ${Date.now() - t0} ms`,
  );

  // 2. the engine
  const running = await startTopology(topology, { http: o.http });
  const restarts: string[] = [];
  running.supervisor.on('restart', (e: { actor: string; error: string }) =>
    restarts.push(`${e.actor}: ${e.error}`),
  );

  // 3. the workload
  console.log(`bank: workload running (${o.clients} clients, ${o.durationS} s)`);
  const w0 = Date.now();
  let transactions: number;
  if (db.dialect === 'sqlite') {
    const r = await runTpcb({
      file: db.file,
      clients: o.clients,
      durationMs: o.durationS * 1000,
      scale,
      signal: interrupt.signal,
    });
    transactions = r.transactions;
  } else if (db.dialect === 'mariadb' || db.dialect === 'mysql') {
    const r = await runTpcbMariaDb({
      url: db.url,
      clients: o.clients,
      durationMs: o.durationS * 1000,
      scale,
      signal: interrupt.signal,
    });
    transactions = r.transactions;
  } else {
    const historyBefore = await pgHistoryRows(db.url);
    const { out, interrupted } = await run(
      'pgbench',
      ['-c', String(o.clients), '-j', '2', '-T', String(o.durationS), db.url],
      interrupt.signal,
    );
    const m = /number of transactions actually processed: (\d+)/.exec(out);
    if (m) transactions = Number(m[1]);
    // An interrupted pgbench prints no totals: count the history rows its transactions inserted.
    else if (interrupted) transactions = (await pgHistoryRows(db.url)) - historyBefore;
    else throw new Error(`could not read the transaction count from pgbench's output:\n${out}`);
  }
  const workloadMs = Date.now() - w0;

  // 4. drain: pumps empty the staging table, readers reach the queue ends, services finish
  const result = await running.stop();
  const totalMs = Date.now() - w0;
  const services = Object.values(result.summaries).filter(
    (s): s is ServiceSummary => !!s && typeof s === 'object' && 'service' in s,
  );
  const captured = Object.entries(result.counters)
    .filter(([name]) => name.startsWith('pump:'))
    .reduce((n, [, c]) => n + c.eventsIn, 0);
  const processed = services.reduce((n, s) => n + s.eventsIn, 0);
  const replayed = services.reduce((n, s) => n + s.replayed, 0);

  if (o.verbose) {
    for (const [name, c] of Object.entries(result.counters)) {
      console.log(
        `  ${name.padEnd(44)} in=${c.eventsIn} out=${c.eventsOut} batches=${c.batches} waits=${c.waits} replayed=${c.replayed}`,
      );
    }
  }

  // 5. verification against the database (examples/bank/verify.ts)
  const verdict = await verifyBank(topology);
  const { mismatches } = verdict;

  // 6. summary
  const lagP50 = Math.max(...services.map((s) => s.lagMs.p50));
  const lagP99 = Math.max(...services.map((s) => s.lagMs.p99));
  console.log('');
  console.log(
    `bank summary (${db.dialect}, scale ${scale}, ${o.clients} clients, ${(workloadMs / 1000).toFixed(1)} s workload${interruptedBy ? `, stopped early by ${interruptedBy}` : ''})`,
  );
  console.log(
    `  transactions run          ${transactions} (${workloadMs > 0 ? Math.round(transactions / (workloadMs / 1000)) : 0} tps)`,
  );
  console.log(`  changes captured          ${captured}`);
  console.log(
    `  events processed          ${processed} (${services.map((s) => `${s.service} ${s.eventsIn}`).join(', ')})${replayed ? `, after replaying ${replayed} from earlier runs` : ''}`,
  );
  console.log(
    `  events/s                  ${totalMs > 0 ? Math.round(processed / (totalMs / 1000)) : 0} (workload start to drained)`,
  );
  console.log(`  capture-to-service lag    p50 ${lagP50} ms, p99 ${lagP99} ms`);
  console.log(
    `  actor restarts            ${restarts.length}${restarts.length ? ': ' + restarts.join('; ') : ''}`,
  );
  if (mismatches.length === 0) {
    console.log(
      `  verification              OK: ${verdict.branches} branch totals and ${verdict.changedAccounts} changed accounts match the database`,
    );
    return 0;
  }
  console.log(`  verification              FAILED: ${mismatches.length} mismatches`);
  for (const m of mismatches.slice(0, 20)) console.log(`    ${m}`);
  return 1;
}

/** An error as one line: its message and its cause's message; the stack too with SLUICE_DEBUG=1. */
function oneLine(e: unknown): string {
  if (!(e instanceof Error)) return String(e);
  if (process.env.SLUICE_DEBUG) return e.stack ?? e.message;
  const cause =
    e.cause instanceof Error ? e.cause.message : e.cause !== undefined ? String(e.cause) : '';
  return cause && !e.message.includes(cause) ? `${e.message} (cause: ${cause})` : e.message;
}

/** Commander parser of an integer option in [min, max]; a bad value is a usage error (exit 2). */
function intIn(name: string, min: number, max: number) {
  return (value: string): number => {
    const n = Number(value);
    if (!Number.isInteger(n) || n < min || n > max)
      throw new InvalidArgumentError(
        `${name} must be an integer in [${min}, ${max}], got "${value}"`,
      );
    return n;
  };
}

// Every option is checked here, before any database or queue is touched.
const program = new Command()
  .name('bank')
  .exitOverride((err) => process.exit(err.exitCode === 0 ? 0 : 2))
  .option('--topology <file>', 'topology file', path.join(repoRoot, 'examples/bank/topology.yaml'))
  .option(
    '--scale <n>',
    "pgbench scale factor (100,000 accounts each; default 1, or with --keep the kept database's)",
    intIn('--scale', 1, PGBENCH_SCALE_MAX),
  )
  .option(
    '--duration-s <s>',
    'workload duration in seconds',
    intIn('--duration-s', 1, 24 * 3600),
    20,
  )
  .option(
    '--clients <n>',
    'concurrent client loops',
    intIn('--clients', 1, TPCB_DEFAULTS.clientsMax),
    4,
  )
  .option(
    '--keep',
    'continue from the last run: keep its database and queues (services replay their inputs, then resume after LAST_WRITTEN)',
    false,
  )
  .option('--verbose', "print every actor's counters at the end", false)
  .option(
    '--start-kafka',
    'start a private single-node Kafka broker for the run and set SLUICE_KAFKA_BROKERS to it (for topology.kafka.yaml; needs Java 17)',
    false,
  )
  .option(
    '--http <[host:]port>',
    'serve the operations API and dashboard while it runs (e.g. 127.0.0.1:8080)',
    parseHttpAddress,
  )
  .parse();
const raw = program.opts<{
  topology: string;
  scale?: number;
  durationS: number;
  clients: number;
  keep: boolean;
  verbose: boolean;
  startKafka: boolean;
  http?: { host: string; port: number };
}>();
main(raw).then(
  (code) => process.exit(code),
  (e: unknown) => {
    console.error(`bank: ${oneLine(e)}`);
    process.exit(2);
  },
);
