/**
 * Debezium Embedded against Sluice's trigger capture, on the same pgbench workload in one run.
 *
 *   node dist/bench/peers/debezium.js [--duration-s 30] [--scale 10] [--clients 8] [--rounds 3]
 *
 * 1. A PostgreSQL 15 cluster of the bench's own (bench/lib/pg-cluster.ts): wal_level=logical,
 *    trust, a free port on 127.0.0.1; `pgbench -i -s <scale>` into database `bench`. The system
 *    cluster is never touched.
 * 2. Each round runs `pgbench -c <clients> -j 2 -T <duration>` three times, the order rotating
 *    from round to round (the machine is shared, so drift must hit each side alike):
 *    - no capture;
 *    - Debezium (bench/peers/debezium/, 3.6.1.Final, pgoutput, its own JVM started for the run)
 *      streaming the inserts of pgbench_history and updates of pgbench_accounts, the bank
 *      topology's columns, into a file, fsync per batch (DebeziumCaptureBench.java); its slot
 *      is dropped when it stops;
 *    - Sluice: examples/bank/topology.pg.yaml pointed at the cluster (triggers on the same two
 *      tables and columns, 2 pumps, 2 durable queues, the bank's two services) started in this
 *      process for the run; its triggers and staging table are removed afterwards.
 * 3. For each capture: events delivered to the consumer (Debezium: written to the file and
 *    synced; Sluice: read by the services) against twice the history rows in the database
 *    (Sluice: less the no-op account updates, delta 0, that its triggers suppress);
 *    events/s from the start of pgbench to the last event delivered; capture-to-consumer lag
 *    p50/p99 (Debezium: consumer time minus the commit time the event carries in source.ts_ms;
 *    Sluice: service time minus the row change time the trigger stamped, which is before the
 *    commit, so Sluice's lag includes the rest of its transaction); CPU time of the capture
 *    process (the JVM; this Node process with all its workers) and of the PostgreSQL cluster
 *    (postmaster, backends, WAL sender), and events per CPU-second of the capture process.
 *    Both captures start cold in each round (a new JVM; new worker threads), and the numbers
 *    include that warm-up.
 *
 * Prints a markdown section for bench/RESULTS.md. Run under `flock /tmp/sluice-bench.lock`.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadavg } from 'node:os';
import { createInterface } from 'node:readline';
import { Command, InvalidArgumentError } from 'commander';
import pg from 'pg';
import { loadTopology, startTopology, type ServiceSummary } from '../../index.js';
import { openStaging } from '../../engine/cdc/index.js';
import { startBenchCluster, PG_BIN_DIR, type BenchCluster } from '../lib/pg-cluster.js';
import { clusterCpuMs, processCpuMs } from '../lib/proc-cpu.js';
import { isMainModule, machineLine, markdownTable, median } from '../lib/report.js';
import { buildPeer, REPO_ROOT } from './maven.js';

/** Options of {@link runDebeziumBench}. */
export interface DebeziumBenchOptions {
  /** pgbench -T of each run, seconds. */
  durationS: number;
  /** pgbench -i -s. */
  scale: number;
  /** pgbench -c. */
  clients: number;
  /** Rounds of the three pgbench runs. */
  rounds: number;
}

const DEFAULTS: DebeziumBenchOptions = { durationS: 30, scale: 10, clients: 8, rounds: 3 };
const DATABASE = 'bench';
const SLOT = 'sluice_bench_debezium';
/** Bounds of the waits: the JVM connecting, and events still arriving after pgbench ended. */
const CONNECT_TIMEOUT_MS = 180_000;
const DRAIN_IDLE_TIMEOUT_MS = 20_000;
/** Wait after pgbench exits before reading the cluster's CPU (its backends reaped). */
const BACKEND_REAP_MS = 1000;

/** One pgbench run. */
interface PgbenchRun {
  tps: number;
  transactions: number;
  startMs: number;
  endMs: number;
}

/** One capture's measurements during its pgbench run. */
interface CaptureRun {
  pgbench: PgbenchRun;
  events: number;
  /** Epoch ms at which the last expected event reached the consumer. */
  drainedMs: number;
  lagP50Ms: number;
  lagP99Ms: number;
  captureCpuMs: number;
  clusterCpuMs: number;
  note: string;
}

/** Runs pgbench against `url`; parses TPS and the transaction count. */
async function pgbench(args: string[], url: string): Promise<{ out: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(join(PG_BIN_DIR, 'pgbench'), [...args, url], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (b) => (out += b));
    child.stderr.on('data', (b) => (out += b));
    child.on('error', reject);
    child.on('exit', (code) =>
      code === 0
        ? resolve({ out })
        : reject(new Error(`pgbench ${args.join(' ')} exited ${code}:\n${out}`)),
    );
  });
}

async function runWorkload(o: DebeziumBenchOptions, url: string): Promise<PgbenchRun> {
  const startMs = Date.now();
  const { out } = await pgbench(
    ['-c', String(o.clients), '-j', '2', '-T', String(o.durationS)],
    url,
  );
  const endMs = Date.now();
  const tx = /number of transactions actually processed: (\d+)/.exec(out);
  const tps = /tps = ([\d.]+) \(without initial connection time\)/.exec(out);
  if (!tx || !tps) throw new Error(`could not read pgbench's totals from:\n${out}`);
  return { tps: Number(tps[1]), transactions: Number(tx[1]), startMs, endMs };
}

function postmasterPid(cluster: BenchCluster): number {
  return Number(readFileSync(join(cluster.dir, 'data', 'postmaster.pid'), 'utf8').split('\n')[0]);
}

async function query<T extends pg.QueryResultRow>(url: string, sql: string): Promise<T[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query<T>(sql)).rows;
  } finally {
    await client.end();
  }
}

/**
 * Events a capture of the run must deliver: pgbench truncates pgbench_history before each run,
 * and each transaction inserts one history row and updates one account, so twice the history
 * rows (counted in the database, not taken from pgbench's report). With `noopUpdatesSuppressed`
 * (the Sluice triggers' default, suppressNoopUpdates), minus the updates that changed nothing:
 * the transactions whose delta was 0 (pgbench draws it from -5000..5000).
 */
async function expectedEvents(url: string, noopUpdatesSuppressed: boolean): Promise<number> {
  const rows = await query<{ n: string; noop: string }>(
    url,
    'SELECT count(*) AS n, count(*) FILTER (WHERE delta = 0) AS noop FROM pgbench_history',
  );
  return 2 * Number(rows[0]!.n) - (noopUpdatesSuppressed ? Number(rows[0]!.noop) : 0);
}

/** Lines of JSON a Java peer prints, handed out as they arrive. */
class JsonLines {
  private readonly waiters: ((v: Record<string, unknown>) => void)[] = [];
  private readonly queue: Record<string, unknown>[] = [];
  latestProgress = 0;
  latestProgressAtMs = Date.now();

  constructor(child: ChildProcess) {
    createInterface({ input: child.stdout! }).on('line', (line) => {
      if (!line.startsWith('{')) return;
      const v = JSON.parse(line) as Record<string, unknown>;
      if (v.type === 'progress') {
        if (Number(v.events) !== this.latestProgress) this.latestProgressAtMs = Date.now();
        this.latestProgress = Number(v.events);
        return;
      }
      const w = this.waiters.shift();
      if (w) w(v);
      else this.queue.push(v);
    });
  }

  /** The next non-progress line; rejects after `timeoutMs`. */
  next(timeoutMs: number): Promise<Record<string, unknown>> {
    const q = this.queue.shift();
    if (q) return Promise.resolve(q);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`no line from the peer in ${timeoutMs} ms`)),
        timeoutMs,
      );
      this.waiters.push((v) => {
        clearTimeout(timer);
        resolve(v);
      });
    });
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function runDebeziumPhase(
  o: DebeziumBenchOptions,
  cluster: BenchCluster,
  classpath: string,
  round: number,
): Promise<CaptureRun> {
  const dir = join(cluster.dir, `debezium-${round}`);
  mkdirSync(dir);
  const url = cluster.url(DATABASE);
  const stderr: string[] = [];
  const java = spawn(
    'java',
    [
      '-Xmx2g',
      '-Dorg.slf4j.simpleLogger.defaultLogLevel=warn',
      '-cp',
      classpath,
      'sluice.bench.DebeziumCaptureBench',
      String(cluster.port),
      DATABASE,
      dir,
    ],
    { stdio: ['pipe', 'pipe', 'pipe'] },
  );
  java.stderr!.on('data', (b: Buffer) => stderr.push(b.toString()));
  const exited = new Promise<number>((resolve) => java.on('exit', (code) => resolve(code ?? -1)));
  const lines = new JsonLines(java);
  try {
    const first = await Promise.race([
      lines.next(CONNECT_TIMEOUT_MS),
      exited.then((code) => ({ type: `exited ${code}` })),
    ]);
    if (first.type !== 'started') throw new Error(`Debezium did not start: ${first.type}`);
    // The task is up once its slot streams; changes committed after that are captured.
    const deadline = Date.now() + CONNECT_TIMEOUT_MS;
    for (;;) {
      const rows = await query<{ active: boolean }>(
        url,
        `SELECT active FROM pg_replication_slots WHERE slot_name = '${SLOT}'`,
      );
      if (rows[0]?.active) break;
      if (Date.now() > deadline) throw new Error(`slot ${SLOT} not active after start`);
      await sleep(200);
    }
    await sleep(2000);
    const pid = postmasterPid(cluster);
    const javaCpu0 = processCpuMs(java.pid!);
    const clusterCpu0 = clusterCpuMs(pid);
    const run = await runWorkload(o, url);
    const expected = await expectedEvents(url, false);
    while (
      lines.latestProgress < expected &&
      Date.now() - lines.latestProgressAtMs < DRAIN_IDLE_TIMEOUT_MS
    ) {
      await sleep(100);
    }
    await sleep(Math.max(0, run.endMs + BACKEND_REAP_MS - Date.now()));
    const javaCpu1 = processCpuMs(java.pid!);
    const clusterCpu1 = clusterCpuMs(pid);
    java.stdin!.write('stop\n');
    const done = await lines.next(120_000);
    await exited;
    if (process.env.SLUICE_BENCH_VERBOSE) console.error(stderr.join(''));
    const lag = done.lagMs as Record<string, number>;
    const events = Number(done.events);
    return {
      pgbench: run,
      events,
      drainedMs: Number(done.lastEventMs),
      lagP50Ms: lag.p50!,
      lagP99Ms: lag.p99!,
      captureCpuMs: javaCpu1 - javaCpu0,
      clusterCpuMs: clusterCpu1 - clusterCpu0,
      note: events === expected ? '' : `Debezium delivered ${events} of ${expected} events`,
    };
  } catch (err) {
    java.kill('SIGKILL');
    throw new Error(`${(err as Error).message}\nDebezium stderr:\n${stderr.join('').slice(-4000)}`);
  }
}

async function runSluicePhase(
  o: DebeziumBenchOptions,
  cluster: BenchCluster,
  round: number,
): Promise<CaptureRun> {
  const url = cluster.url(DATABASE);
  const file = join(REPO_ROOT, 'examples', 'bank', 'topology.pg.yaml');
  const loaded = loadTopology(file, { env: { ...process.env, SLUICE_PG_URL: url } });
  const topology = { ...loaded, dataDir: join(cluster.dir, `sluice-${round}`) };
  const source = topology.capture[0]!;
  const staging = await openStaging(source);
  await staging.install();
  await staging.close();
  const running = await startTopology(topology, { log: () => {} });
  const restarts: string[] = [];
  running.supervisor.on('restart', (e: { actor: string; error: string }) =>
    restarts.push(`${e.actor}: ${e.error}`),
  );
  const servicesIn = (): number =>
    Object.entries(running.supervisor.counters())
      .filter(([name]) => name.startsWith('service:'))
      .reduce((n, [, c]) => n + c.eventsIn, 0);
  const pid = postmasterPid(cluster);
  const cpu0 = process.cpuUsage();
  const clusterCpu0 = clusterCpuMs(pid);
  const workload = runWorkload(o, url);
  const finished: { expected: number | null } = { expected: null };
  void workload.then(
    async () => {
      finished.expected = await expectedEvents(url, true);
    },
    () => {},
  );
  let lastIn = 0;
  let lastChangeMs = Date.now();
  let drainedMs = 0;
  for (;;) {
    await sleep(finished.expected !== null ? 5 : 50);
    const n = servicesIn();
    if (n !== lastIn) {
      lastIn = n;
      lastChangeMs = Date.now();
    }
    const expected = finished.expected;
    if (expected !== null && n >= expected) {
      drainedMs = Date.now();
      break;
    }
    if (expected !== null && Date.now() - lastChangeMs > DRAIN_IDLE_TIMEOUT_MS) break;
  }
  const run = await workload;
  await sleep(Math.max(0, run.endMs + BACKEND_REAP_MS - Date.now()));
  const cpu = process.cpuUsage(cpu0);
  const clusterCpu1 = clusterCpuMs(pid);
  const result = await running.stop();
  const services = Object.values(result.summaries).filter(
    (s): s is ServiceSummary => !!s && typeof s === 'object' && 'service' in s,
  );
  const events = services.reduce((n, s) => n + s.eventsIn, 0);
  const replayed = services.reduce((n, s) => n + s.replayed, 0);
  const shipped = Object.entries(result.counters)
    .filter(([name]) => name.startsWith('pump:'))
    .reduce((n, [, c]) => n + c.eventsIn, 0);
  const uninstall = await openStaging(source);
  const staged = await uninstall.stagedCount();
  await uninstall.uninstall({ dropStaging: true });
  await uninstall.close();
  const expected = await expectedEvents(url, true);
  // Not all delivered: count the time to the last event that was, not the idle timeout.
  return {
    pgbench: run,
    events,
    drainedMs: drainedMs || lastChangeMs,
    lagP50Ms: Math.max(...services.map((s) => s.lagMs.p50)),
    lagP99Ms: Math.max(...services.map((s) => s.lagMs.p99)),
    captureCpuMs: (cpu.user + cpu.system) / 1000,
    clusterCpuMs: clusterCpu1 - clusterCpu0,
    note:
      (events === expected
        ? ''
        : `Sluice delivered ${events} of ${expected} events ` +
          `(pumps shipped ${shipped}, ${staged} rows left in staging after stop, services ` +
          `replayed ${replayed})`) + (restarts.length ? ` restarts: ${restarts.join('; ')}` : ''),
  };
}

async function runBaseline(o: DebeziumBenchOptions, cluster: BenchCluster): Promise<BaseRun> {
  const pid = postmasterPid(cluster);
  const cpu0 = clusterCpuMs(pid);
  const pgbench = await runWorkload(o, cluster.url(DATABASE));
  // pgbench's backends exit with it; their CPU reaches the postmaster's cutime once reaped.
  await sleep(BACKEND_REAP_MS);
  return { pgbench, clusterCpuMs: clusterCpuMs(pid) - cpu0 };
}

/** The pgbench run without capture of one round. */
interface BaseRun {
  pgbench: PgbenchRun;
  clusterCpuMs: number;
}

/** One round: each of the three pgbench runs once. */
interface Round {
  order: string;
  none: BaseRun;
  debezium: CaptureRun;
  sluice: CaptureRun;
}

type Phase = 'none' | 'debezium' | 'sluice';
/** Run order per round, rotating, so that drift of the shared machine hits each side alike. */
const ORDERS: readonly (readonly Phase[])[] = [
  ['none', 'debezium', 'sluice'],
  ['sluice', 'none', 'debezium'],
  ['debezium', 'sluice', 'none'],
];

/**
 * Runs the whole comparison (rounds x 3 pgbench runs of durationS, plus setup: about 6 minutes
 * with the defaults) and returns the markdown section. Throws Error if a step fails (the
 * cluster is stopped and removed anyway).
 */
export async function runDebeziumBench(
  options: Partial<DebeziumBenchOptions> = {},
): Promise<string> {
  const o = { ...DEFAULTS, ...options };
  const classpath = await buildPeer('debezium');
  const cluster = await startBenchCluster({
    wal_level: 'logical',
    max_wal_senders: 4,
    max_replication_slots: 4,
  });
  const loadStart = loadavg()[0]!;
  try {
    await query(cluster.url('postgres'), `CREATE DATABASE ${DATABASE}`);
    await pgbench(['-i', '-q', '-s', String(o.scale)], cluster.url(DATABASE));
    const rounds: Round[] = [];
    for (let r = 0; r < o.rounds; r++) {
      const order = ORDERS[r % ORDERS.length]!;
      const round: Partial<Round> = { order: order.join(', ') };
      for (const phase of order) {
        if (phase === 'none') round.none = await runBaseline(o, cluster);
        else if (phase === 'debezium') {
          round.debezium = await runDebeziumPhase(o, cluster, classpath, r);
        } else round.sluice = await runSluicePhase(o, cluster, r);
      }
      rounds.push(round as Round);
      const slots = await query(
        cluster.url(DATABASE),
        'SELECT slot_name FROM pg_replication_slots',
      );
      if (slots.length !== 0) throw new Error(`replication slots left: ${JSON.stringify(slots)}`);
    }
    return report(o, rounds, loadStart, loadavg()[0]!);
  } finally {
    await cluster.stop();
  }
}

const eventsPerS = (c: CaptureRun): number => c.events / ((c.drainedMs - c.pgbench.startMs) / 1000);
const eventsPerCpuS = (c: CaptureRun): number => c.events / (c.captureCpuMs / 1000);
const pgCpuPerTx = (c: BaseRun | CaptureRun): number => c.clusterCpuMs / c.pgbench.transactions;
/**
 * Events per CPU-second of the whole capture: the capture process plus what PostgreSQL spent
 * over the same round's no-capture run per transaction (triggers and pump queries for Sluice;
 * decoding in the WAL sender for Debezium).
 */
const eventsPerTotalCpuS = (c: CaptureRun, none: BaseRun): number =>
  c.events /
  ((c.captureCpuMs + Math.max(0, c.clusterCpuMs - pgCpuPerTx(none) * c.pgbench.transactions)) /
    1000);

function report(
  o: DebeziumBenchOptions,
  rounds: Round[],
  loadStart: number,
  loadEnd: number,
): string {
  const med = (f: (r: Round) => number, digits = 2): string =>
    median(rounds.map(f)).toFixed(digits);
  const all = (f: (r: Round) => number, digits = 2): string =>
    rounds.map((r) => f(r).toFixed(digits)).join(', ');
  const captureRow = (name: string, pick: (r: Round) => CaptureRun): string[] => [
    name,
    `${med((r) => pick(r).pgbench.tps, 0)} (${all((r) => pick(r).pgbench.tps, 0)})`,
    `${med((r) => pick(r).pgbench.tps / r.none.pgbench.tps)}x ` +
      `(${all((r) => pick(r).pgbench.tps / r.none.pgbench.tps)})`,
    `${med((r) => eventsPerS(pick(r)), 0)} (${all((r) => eventsPerS(pick(r)), 0)})`,
    `${med((r) => pick(r).lagP50Ms, 0)} / ${med((r) => pick(r).lagP99Ms, 0)} ` +
      `(${rounds.map((r) => `${pick(r).lagP50Ms}/${pick(r).lagP99Ms}`).join(', ')})`,
    `${med((r) => eventsPerCpuS(pick(r)), 0)} (${all((r) => eventsPerCpuS(pick(r)), 0)})`,
    `${med((r) => pgCpuPerTx(pick(r)))} (${all((r) => pgCpuPerTx(pick(r)))})`,
    `${med((r) => eventsPerTotalCpuS(pick(r), r.none), 0)} ` +
      `(${all((r) => eventsPerTotalCpuS(pick(r), r.none), 0)})`,
  ];
  const header = [
    'capture',
    'pgbench TPS',
    'TPS / no capture (same round)',
    'events/s (pgbench start to last event consumed)',
    'lag p50 / p99 ms',
    'events per capture-process CPU-s',
    'PostgreSQL CPU ms / transaction',
    'events per CPU-s, capture process + PostgreSQL over no capture',
  ];
  const rows = [
    [
      'none',
      `${med((r) => r.none.pgbench.tps, 0)} (${all((r) => r.none.pgbench.tps, 0)})`,
      '1.00x',
      '',
      '',
      '',
      `${med((r) => pgCpuPerTx(r.none))} (${all((r) => pgCpuPerTx(r.none))})`,
      '',
    ],
    captureRow('Debezium 3.6.1 embedded (pgoutput -> file)', (r) => r.debezium),
    captureRow('Sluice triggers (bank topology: 2 pumps -> queues -> 2 services)', (r) => r.sluice),
  ];
  const ratio = (f: (c: CaptureRun) => number): string =>
    `${med((r) => f(r.sluice) / f(r.debezium))}x (${all((r) => f(r.sluice) / f(r.debezium))})`;
  const notes = rounds.flatMap((r, i) =>
    [r.debezium, r.sluice].filter((c) => c.note).map((c) => `round ${i + 1}: ${c.note}`),
  );
  return [
    `Machine: ${machineLine()}. \`node dist/bench/peers/debezium.js --duration-s ${o.durationS}` +
      ` --scale ${o.scale} --clients ${o.clients} --rounds ${o.rounds}\`: each round runs ` +
      `pgbench -c ${o.clients} -j 2 -T ${o.durationS} three times (no capture, Debezium, ` +
      `Sluice; order rotating per round: ${rounds.map((r) => r.order).join(' | ')}) on a ` +
      `PostgreSQL 15 cluster of the bench's own (wal_level=logical, other settings default), ` +
      `scale ${o.scale}. 1-minute load average ${loadStart.toFixed(1)} at start, ` +
      `${loadEnd.toFixed(1)} at end. Median of ${o.rounds} rounds, each round's value in ` +
      'parentheses.',
    '',
    markdownTable(header, rows),
    '',
    `Sluice / Debezium within each round: pgbench TPS ${ratio((c) => c.pgbench.tps)}, ` +
      `events/s ${ratio(eventsPerS)}, events per capture-process CPU-second ` +
      `${ratio(eventsPerCpuS)}, events per CPU-second with PostgreSQL's extra CPU ` +
      `${med(
        (r) => eventsPerTotalCpuS(r.sluice, r.none) / eventsPerTotalCpuS(r.debezium, r.none),
      )}x, ` +
      `lag p50 ${ratio((c) => c.lagP50Ms)}, ` +
      `lag p99 ${ratio((c) => c.lagP99Ms)} (lag: lower is better), PostgreSQL CPU per ` +
      `transaction ${ratio(pgCpuPerTx)}.`,
    ...(notes.length ? ['', `Event counts: ${notes.join('; ')}.`] : []),
    '',
    `Events counted: ${rounds
      .map((r, i) => `round ${i + 1} Debezium ${r.debezium.events}, ` + `Sluice ${r.sluice.events}`)
      .join('; ')} (Debezium: 2 per transaction, one history ` +
      'insert and one account update; Sluice: the same less the account updates that changed ' +
      'nothing, delta 0, which its triggers suppress).',
  ].join('\n');
}

function intOption(name: string) {
  return (value: string): number => {
    const n = Number(value);
    if (!Number.isInteger(n) || n < 1) {
      throw new InvalidArgumentError(`${name} must be an integer >= 1, got "${value}"`);
    }
    return n;
  };
}

if (isMainModule(import.meta.url)) {
  const opts = new Command()
    .option('--duration-s <s>', 'pgbench -T of each run', intOption('--duration-s'), 30)
    .option('--scale <n>', 'pgbench scale', intOption('--scale'), 10)
    .option('--clients <n>', 'pgbench clients', intOption('--clients'), 8)
    .option('--rounds <n>', 'rounds of the three pgbench runs', intOption('--rounds'), 3)
    .parse()
    .opts<DebeziumBenchOptions>();
  console.log(await runDebeziumBench(opts));
  process.exit(0);
}
