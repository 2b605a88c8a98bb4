/**
 * Debezium Embedded against Sluice's trigger capture, on the same pgbench workload in one run.
 *
 *   node dist/bench/peers/debezium.js [--duration-s 30] [--scale 10] [--clients 8]
 *
 * 1. A PostgreSQL 15 cluster of the bench's own (bench/lib/pg-cluster.ts): wal_level=logical,
 *    trust, a free port on 127.0.0.1; `pgbench -i -s <scale>` into database `bench`.
 * 2. Four pgbench runs of `-c <clients> -j 2 -T <duration>` on it, in this order:
 *    a. no capture;
 *    b. Debezium (bench/peers/debezium/, 3.6.1.Final, pgoutput, its own JVM) streaming the
 *       inserts of pgbench_history and updates of pgbench_accounts, the bank topology's
 *       columns, into a file, fsync per batch (DebeziumCaptureBench.java);
 *    c. Sluice: examples/bank/topology.pg.yaml pointed at the cluster (triggers on the same two
 *       tables and columns, 2 pumps, 2 durable queues, the bank's two services), in this
 *       process;
 *    d. no capture again (triggers removed, slot dropped): the drift of the machine over the run.
 * 3. For b and c: events delivered to the consumer (Debezium: written to the file; Sluice: read
 *    by the services), events/s from the start of pgbench to the last event delivered,
 *    capture-to-consumer lag p50/p99 (Debezium: consumer time minus the commit time the event
 *    carries in source.ts_ms; Sluice: service time minus the row change time the trigger
 *    stamped, which is before the commit), CPU time of the capture process (the JVM; this Node
 *    process with all its workers) and of the PostgreSQL cluster, and events per CPU-second.
 *
 * Prints a markdown section for bench/RESULTS.md. Run under `flock /tmp/sluice-bench.lock`.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { Command, InvalidArgumentError } from 'commander';
import pg from 'pg';
import { loadTopology, startTopology, type ServiceSummary } from '../../index.js';
import { openStaging } from '../../engine/cdc/index.js';
import { startBenchCluster, PG_BIN_DIR, type BenchCluster } from '../lib/pg-cluster.js';
import { clusterCpuMs, processCpuMs } from '../lib/proc-cpu.js';
import { isMainModule, machineLine, markdownTable } from '../lib/report.js';
import { buildPeer, REPO_ROOT } from './maven.js';

/** Options of {@link runDebeziumBench}. */
export interface DebeziumBenchOptions {
  /** pgbench -T of each run, seconds. */
  durationS: number;
  /** pgbench -i -s. */
  scale: number;
  /** pgbench -c. */
  clients: number;
}

const DEFAULTS: DebeziumBenchOptions = { durationS: 30, scale: 10, clients: 8 };
const DATABASE = 'bench';
const SLOT = 'sluice_bench_debezium';
/** Bounds of the waits: the JVM connecting, and events still arriving after pgbench ended. */
const CONNECT_TIMEOUT_MS = 180_000;
const DRAIN_IDLE_TIMEOUT_MS = 60_000;

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
    const child = spawn(join(PG_BIN_DIR, 'pgbench'), [...args, url],
      { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (b) => (out += b));
    child.stderr.on('data', (b) => (out += b));
    child.on('error', reject);
    child.on('exit', (code) => (code === 0 ? resolve({ out })
      : reject(new Error(`pgbench ${args.join(' ')} exited ${code}:\n${out}`))));
  });
}

async function runWorkload(o: DebeziumBenchOptions, url: string): Promise<PgbenchRun> {
  const startMs = Date.now();
  const { out } = await pgbench(['-c', String(o.clients), '-j', '2', '-T', String(o.durationS)],
    url);
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
      const timer = setTimeout(() => reject(new Error(`no line from the peer in ${timeoutMs} ms`)),
        timeoutMs);
      this.waiters.push((v) => {
        clearTimeout(timer);
        resolve(v);
      });
    });
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function runDebeziumPhase(o: DebeziumBenchOptions, cluster: BenchCluster,
    classpath: string): Promise<CaptureRun> {
  const dir = join(cluster.dir, 'debezium');
  mkdirSync(dir);
  const url = cluster.url(DATABASE);
  const stderr: string[] = [];
  const java = spawn('java', ['-Xmx2g', '-Dorg.slf4j.simpleLogger.defaultLogLevel=warn', '-cp',
    classpath, 'sluice.bench.DebeziumCaptureBench', String(cluster.port), DATABASE, dir],
    { stdio: ['pipe', 'pipe', 'pipe'] });
  java.stderr!.on('data', (b: Buffer) => stderr.push(b.toString()));
  const exited = new Promise<number>((resolve) => java.on('exit', (code) => resolve(code ?? -1)));
  const lines = new JsonLines(java);
  try {
    const first = await Promise.race([lines.next(CONNECT_TIMEOUT_MS),
      exited.then((code) => ({ type: `exited ${code}` }))]);
    if (first.type !== 'started') throw new Error(`Debezium did not start: ${first.type}`);
    // The task is up once its slot streams; changes committed after that are captured.
    const deadline = Date.now() + CONNECT_TIMEOUT_MS;
    for (;;) {
      const rows = await query<{ active: boolean }>(url,
        `SELECT active FROM pg_replication_slots WHERE slot_name = '${SLOT}'`);
      if (rows[0]?.active) break;
      if (Date.now() > deadline) throw new Error(`slot ${SLOT} not active after start`);
      await sleep(200);
    }
    await sleep(2000);
    const pid = postmasterPid(cluster);
    const javaCpu0 = processCpuMs(java.pid!);
    const clusterCpu0 = clusterCpuMs(pid);
    const run = await runWorkload(o, url);
    const expected = 2 * run.transactions;
    while (lines.latestProgress < expected &&
        Date.now() - lines.latestProgressAtMs < DRAIN_IDLE_TIMEOUT_MS) {
      await sleep(100);
    }
    const javaCpu1 = processCpuMs(java.pid!);
    const clusterCpu1 = clusterCpuMs(pid);
    java.stdin!.write('stop\n');
    const done = await lines.next(120_000);
    await exited;
    const lag = done.lagMs as Record<string, number>;
    const events = Number(done.events);
    return {
      pgbench: run, events, drainedMs: Number(done.lastEventMs), lagP50Ms: lag.p50!,
      lagP99Ms: lag.p99!, captureCpuMs: javaCpu1 - javaCpu0, clusterCpuMs: clusterCpu1 - clusterCpu0,
      note: events === expected ? '' : `expected ${expected} events (2 per transaction)`,
    };
  } catch (err) {
    java.kill('SIGKILL');
    throw new Error(`${(err as Error).message}\nDebezium stderr:\n${stderr.join('').slice(-4000)}`);
  }
}

async function runSluicePhase(o: DebeziumBenchOptions, cluster: BenchCluster):
    Promise<CaptureRun> {
  const url = cluster.url(DATABASE);
  const file = join(REPO_ROOT, 'examples', 'bank', 'topology.pg.yaml');
  const loaded = loadTopology(file, { env: { ...process.env, SLUICE_PG_URL: url } });
  const topology = { ...loaded, dataDir: join(cluster.dir, 'sluice') };
  const source = topology.capture[0]!;
  const staging = await openStaging(source);
  await staging.install();
  await staging.close();
  const running = await startTopology(topology, { log: () => {} });
  const servicesIn = (): number => Object.entries(running.supervisor.counters())
    .filter(([name]) => name.startsWith('service:'))
    .reduce((n, [, c]) => n + c.eventsIn, 0);
  const pid = postmasterPid(cluster);
  const cpu0 = process.cpuUsage();
  const clusterCpu0 = clusterCpuMs(pid);
  const workload = runWorkload(o, url);
  const finished: { run: PgbenchRun | null } = { run: null };
  void workload.then((r) => { finished.run = r; }, () => {});
  let lastIn = 0;
  let lastChangeMs = Date.now();
  let drainedMs = 0;
  for (;;) {
    await sleep(finished.run ? 5 : 50);
    const n = servicesIn();
    if (n !== lastIn) {
      lastIn = n;
      lastChangeMs = Date.now();
    }
    const run = finished.run;
    if (run && n >= 2 * run.transactions) {
      drainedMs = Date.now();
      break;
    }
    if (run && Date.now() - lastChangeMs > DRAIN_IDLE_TIMEOUT_MS) break;
  }
  const cpu = process.cpuUsage(cpu0);
  const clusterCpu1 = clusterCpuMs(pid);
  const run = await workload;
  const result = await running.stop();
  const services = Object.values(result.summaries).filter(
    (s): s is ServiceSummary => !!s && typeof s === 'object' && 'service' in s);
  const events = services.reduce((n, s) => n + s.eventsIn, 0);
  const uninstall = await openStaging(source);
  await uninstall.uninstall({ dropStaging: true });
  await uninstall.close();
  const expected = 2 * run.transactions;
  return {
    pgbench: run, events, drainedMs: drainedMs || Date.now(),
    lagP50Ms: Math.max(...services.map((s) => s.lagMs.p50)),
    lagP99Ms: Math.max(...services.map((s) => s.lagMs.p99)),
    captureCpuMs: (cpu.user + cpu.system) / 1000, clusterCpuMs: clusterCpu1 - clusterCpu0,
    note: events === expected ? '' : `expected ${expected} events (2 per transaction)`,
  };
}

async function runBaseline(o: DebeziumBenchOptions, cluster: BenchCluster):
    Promise<{ run: PgbenchRun; clusterCpuMs: number }> {
  const pid = postmasterPid(cluster);
  const cpu0 = clusterCpuMs(pid);
  const run = await runWorkload(o, cluster.url(DATABASE));
  return { run, clusterCpuMs: clusterCpuMs(pid) - cpu0 };
}

/**
 * Runs the whole comparison (about 4 x durationS plus setup, a few minutes) and returns the
 * markdown section. Throws Error if a step fails (the cluster is stopped and removed anyway).
 */
export async function runDebeziumBench(options: Partial<DebeziumBenchOptions> = {}):
    Promise<string> {
  const o = { ...DEFAULTS, ...options };
  const classpath = await buildPeer('debezium');
  const cluster = await startBenchCluster({
    wal_level: 'logical', max_wal_senders: 4, max_replication_slots: 4,
  });
  try {
    await query(cluster.url('postgres'), `CREATE DATABASE ${DATABASE}`);
    await pgbench(['-i', '-q', '-s', String(o.scale)], cluster.url(DATABASE));
    const before = await runBaseline(o, cluster);
    const debezium = await runDebeziumPhase(o, cluster, classpath);
    const sluice = await runSluicePhase(o, cluster);
    const after = await runBaseline(o, cluster);
    const slots = await query(cluster.url(DATABASE), 'SELECT slot_name FROM pg_replication_slots');
    if (slots.length !== 0) throw new Error(`replication slots left: ${JSON.stringify(slots)}`);
    return report(o, before, after, debezium, sluice);
  } finally {
    await cluster.stop();
  }
}

function report(o: DebeziumBenchOptions, before: { run: PgbenchRun; clusterCpuMs: number },
    after: { run: PgbenchRun; clusterCpuMs: number }, debezium: CaptureRun,
    sluice: CaptureRun): string {
  const baseTps = (before.run.tps + after.run.tps) / 2;
  const row = (name: string, c: CaptureRun): string[] => {
    const spanS = (c.drainedMs - c.pgbench.startMs) / 1000;
    return [name, c.pgbench.tps.toFixed(0), `${(c.pgbench.tps / baseTps).toFixed(2)}x`,
      String(c.events), (c.events / spanS).toFixed(0),
      `${c.lagP50Ms} / ${c.lagP99Ms}`, (c.captureCpuMs / 1000).toFixed(1),
      (c.events / (c.captureCpuMs / 1000)).toFixed(0),
      (c.clusterCpuMs / 1000).toFixed(1),
      (c.clusterCpuMs / c.pgbench.transactions).toFixed(2), c.note];
  };
  const base = (name: string, b: { run: PgbenchRun; clusterCpuMs: number }): string[] =>
    [name, b.run.tps.toFixed(0), `${(b.run.tps / baseTps).toFixed(2)}x`, '', '', '', '', '',
      (b.clusterCpuMs / 1000).toFixed(1), (b.clusterCpuMs / b.run.transactions).toFixed(2), ''];
  const ratio = (f: (c: CaptureRun) => number): string => (f(sluice) / f(debezium)).toFixed(2);
  const eventsPerS = (c: CaptureRun) => c.events / ((c.drainedMs - c.pgbench.startMs) / 1000);
  return [
    `Machine: ${machineLine()}. \`node dist/bench/peers/debezium.js --duration-s ${o.durationS}` +
      ` --scale ${o.scale} --clients ${o.clients}\`: pgbench -c ${o.clients} -j 2 -T ` +
      `${o.durationS} on a PostgreSQL 15 cluster of the bench's own (wal_level=logical, other ` +
      `settings default), scale ${o.scale}; runs in the order of the table.`,
    '',
    markdownTable(['capture', 'pgbench TPS', 'TPS / no capture', 'events', 'events/s',
      'lag p50 / p99 ms', 'capture CPU s', 'events per capture CPU-s', 'PostgreSQL CPU s',
      'PostgreSQL CPU ms / transaction', 'note'], [
      base('none (before)', before),
      row('Debezium 3.6.1 embedded (pgoutput -> file)', debezium),
      row('Sluice triggers (bank topology, 2 pumps -> queues -> services)', sluice),
      base('none (after)', after),
    ]),
    '',
    `Sluice / Debezium in this run: pgbench TPS ${ratio((c) => c.pgbench.tps)}x, events/s ` +
      `${ratio(eventsPerS)}x, events per capture CPU-second ` +
      `${ratio((c) => c.events / c.captureCpuMs)}x, lag p50 ${ratio((c) => c.lagP50Ms)}x, ` +
      `p99 ${ratio((c) => c.lagP99Ms)}x (lag: lower is better).`,
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
    .parse().opts<DebeziumBenchOptions>();
  console.log(await runDebeziumBench(opts));
  process.exit(0);
}
