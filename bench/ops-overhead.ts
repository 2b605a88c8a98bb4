/**
 * What the operations HTTP server costs the pipeline: the bank job (SQLite, 4 clients) with its
 * server on, left alone, hammered by autocannon on GET /metrics and GET /actors (`--connections`,
 * as fast as they are answered) and at fixed overall rates (`--rates`, requests/s over both
 * paths), for the workload's duration; and once without a server for reference. The
 * modes are alternated over `--rounds` (reversed every other round) so a noisy shared machine
 * moves them alike. With `--baseline DIR` (the root of another built checkout, e.g. main in a
 * worktree) every run is made with both builds, one after the other, for a same-run before/after.
 *
 * Besides events/s it reports the CPU time of the bank process (user + system, from
 * /usr/bin/time) and of autocannon (this process's own, over the load: it does nothing else
 * meanwhile), so the reader sees how much of the two cores the load generator took.
 * Prints markdown.
 *   node dist/bench/ops-overhead.js [--duration-s 20] [--rounds 2] [--connections 10]
 *        [--rates 200,50] [--baseline DIR] [--cannon-nice N]
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';
import autocannon from 'autocannon';
import { cannonSummary, type CannonSummary } from './lib/cannon-summary.js';

const thisRoot = path.resolve(path.dirname(new URL(import.meta.url).pathname), '../..');
const TIME = '/usr/bin/time';

type Mode = 'no server' | 'server, idle' | 'server, hammered' | `server, ${number} req/s`;

interface Run {
  build: string;
  mode: Mode;
  eventsPerS: number;
  /** Events the services processed over the run. */
  events: number;
  tps: number;
  /** User + system CPU of the bank process, s. */
  bankCpuS: number;
  /** 1-minute load average when the run started. */
  load: number;
  /** The load's autocannon summary (its cpuS: the process that ran autocannon). */
  requests?: CannonSummary;
}

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1] : undefined;
}

const rateOf = (mode: Mode): number | null => {
  const m = /^server, (\d+) req\/s$/.exec(mode);
  return m ? Number(m[1]) : null;
};

/** The autocannon child of `--cannon-nice` (bench/cannon-child.ts, built next to this file). */
const CANNON_CHILD = path.join(path.dirname(new URL(import.meta.url).pathname), 'cannon-child.js');

async function runBank(
  build: { name: string; root: string },
  mode: Mode,
  durationS: number,
  connections: number,
  cannonNice: number,
): Promise<Run> {
  const bank = path.join(build.root, 'dist/examples/bank/main.js');
  const args = [
    '-f',
    'bench-cpu %U %S',
    process.execPath,
    bank,
    '--duration-s',
    String(durationS),
    '--clients',
    '4',
  ];
  if (mode !== 'no server') args.push('--http', '127.0.0.1:0');
  const load = os.loadavg()[0]!;
  const p = spawn(TIME, args, { stdio: ['ignore', 'pipe', 'pipe'], cwd: build.root });
  let out = '';
  let cannon: ReturnType<typeof autocannon> | null = null;
  let child: ReturnType<typeof spawn> | null = null;
  let childOut = '';
  let childExit: Promise<unknown> | null = null;
  let cpuAtStart: NodeJS.CpuUsage | null = null;
  const onData = (b: Buffer) => {
    out += b;
    const m = /operations API and dashboard at (http:\/\/[\d.:]+)\//.exec(out);
    if (m && mode !== 'no server' && mode !== 'server, idle' && !cannon && !child) {
      const rate = rateOf(mode);
      const options = {
        // The workload's duration from the moment the server is up (the workload starts then):
        // the drain and the verification afterwards are not loaded, and the server's close
        // (503s, refused connections) is not counted.
        url: m[1]!,
        connections,
        duration: durationS,
        ...(rate !== null ? { overallRate: rate } : {}),
        requests: [
          { method: 'GET' as const, path: '/metrics' },
          { method: 'GET' as const, path: '/actors' },
        ],
      };
      if (cannonNice > 0) {
        child = spawn(
          'nice',
          ['-n', String(cannonNice), process.execPath, CANNON_CHILD, JSON.stringify(options)],
          { stdio: ['ignore', 'pipe', 'inherit'] },
        );
        child.stdout!.on('data', (d: Buffer) => (childOut += d));
        childExit = new Promise((r) => child!.on('exit', r));
      } else {
        cpuAtStart = process.cpuUsage();
        cannon = autocannon(options);
      }
    }
  };
  p.stdout.on('data', onData);
  p.stderr.on('data', onData);
  const code = await new Promise<number | null>((r) => p.on('exit', r));
  if (code !== 0) throw new Error(`bank job (${build.name}, ${mode}) exited ${code}:\n${out}`);
  let requests: Run['requests'];
  if (child) {
    const c = child as ReturnType<typeof spawn>;
    if (c.exitCode === null) c.kill('SIGTERM');
    await childExit;
    const r = JSON.parse(childOut.trim().split('\n').pop() ?? 'null') as Run['requests'] | null;
    if (!r) throw new Error(`no result from ${CANNON_CHILD} (${build.name}, ${mode})`);
    requests = r;
  } else if (cannon) {
    const c = cannon as ReturnType<typeof autocannon>;
    c.stop();
    const r = await c;
    requests = cannonSummary(r, process.cpuUsage(cpuAtStart!));
  }
  const eventsPerS = Number(/events\/s\s+(\d+)/.exec(out)?.[1]);
  const events = Number(/events processed\s+(\d+)/.exec(out)?.[1]);
  const tps = Number(/transactions run\s+\d+ \((\d+) tps\)/.exec(out)?.[1]);
  const cpu = /bench-cpu ([\d.]+) ([\d.]+)/.exec(out);
  if (!Number.isFinite(eventsPerS) || !Number.isFinite(events))
    throw new Error(`no events/s in the bank summary:\n${out}`);
  if (!cpu) throw new Error(`no CPU times from ${TIME} in:\n${out}`);
  return {
    build: build.name,
    mode,
    eventsPerS,
    events,
    tps,
    bankCpuS: Number(cpu[1]) + Number(cpu[2]),
    load,
    requests,
  };
}

/** Options of {@link runOpsOverheadBench}. */
export interface OpsBenchOptions {
  /** Workload duration per run, s. */
  durationS?: number;
  rounds?: number;
  /** autocannon connections (at fixed rates, at most the rate). */
  connections?: number;
  /** Fixed overall request rates, requests/s; one run each per round and build. */
  rates?: number[];
  /** Root of another built checkout to compare with, run by run. */
  baseline?: string;
  /**
   * Priority steps (nice) of the load generator: above 0, autocannon runs in a child process
   * under `nice -n` (bench/cannon-child.ts) instead of in this process at the pipeline's
   * priority. Default 0.
   */
  cannonNice?: number;
}

/** Runs the comparison; returns the markdown section. @throws Error when a bank run fails. */
export async function runOpsOverheadBench(o: OpsBenchOptions = {}): Promise<string> {
  const durationS = o.durationS ?? 20;
  const rounds = o.rounds ?? 2;
  const connections = o.connections ?? 10;
  const rates = o.rates ?? [200, 50];
  const cannonNice = o.cannonNice ?? 0;
  const builds = [{ name: 'this', root: thisRoot }];
  if (o.baseline) {
    const root = path.resolve(o.baseline);
    if (!fs.existsSync(path.join(root, 'dist/examples/bank/main.js')))
      throw new Error(`--baseline ${root}: no dist/examples/bank/main.js (npm run build there)`);
    builds.push({ name: 'baseline', root });
  }
  const modes: Mode[] = [
    'no server',
    'server, idle',
    'server, hammered',
    ...rates.map((r) => `server, ${r} req/s` as Mode),
  ];
  const loadStart = os.loadavg();
  const runs: Run[] = [];
  for (let i = 0; i < rounds; i++) {
    // Without a server only in the first round: a reference, not the comparison.
    const order = (i % 2 === 0 ? modes : [...modes].reverse()).filter(
      (m) => i === 0 || m !== 'no server',
    );
    for (const [k, mode] of order.entries()) {
      const bs = (i + k) % 2 === 0 ? builds : [...builds].reverse();
      for (const b of bs) {
        const r = await runBank(b, mode, durationS, connections, cannonNice);
        runs.push(r);
        // Progress on stderr, so a cut-short run leaves its rows.
        console.error(`ops bench: ${JSON.stringify(r)}`);
      }
    }
  }
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  const of = (build: string, mode: Mode) =>
    runs.filter((r) => r.build === build && r.mode === mode);
  const perEvent = (r: Run) => (r.bankCpuS * 1e6) / r.events;
  const cpuCell = (r: Run) => (r.requests ? r.requests.cpuS.toFixed(1) : '-');
  const lines = [
    `### Operations server overhead (bank, SQLite, scale 1, 4 clients, ${durationS} s; autocannon ${connections} connections on /metrics + /actors${cannonNice > 0 ? `, autocannon at nice ${cannonNice} in a process of its own` : ''})`,
    '',
    `${os.cpus().length} CPUs (${os.cpus()[0]?.model ?? '?'}), Node ${process.version}; 1-minute load average ${loadStart[0]!.toFixed(1)} at the start, ${os.loadavg()[0]!.toFixed(1)} at the end${o.baseline ? `; baseline: ${path.resolve(o.baseline)}` : ''}`,
    '',
    '| run | build | mode | load | events/s | tps | bank CPU s | bank CPU µs/event | requests served | req/s | p99 ms | non-2xx | autocannon CPU s |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|---|',
    ...runs.map(
      (r, i) =>
        `| ${i + 1} | ${r.build} | ${r.mode} | ${r.load.toFixed(1)} | ${r.eventsPerS} | ${r.tps} | ${r.bankCpuS.toFixed(1)} | ${Math.round(perEvent(r))} | ${r.requests?.total ?? '-'} | ${r.requests?.perS ?? '-'} | ${r.requests?.p99Ms ?? '-'} | ${r.requests ? r.requests.non2xx + r.requests.errors : '-'} | ${cpuCell(r)} |`,
    ),
    '',
    '| build | mode | mean events/s | vs server idle | bank CPU µs/event | vs server idle | mean req/s | mean autocannon CPU s |',
    '|---|---|---|---|---|---|---|---|',
  ];
  for (const b of builds) {
    const idle = mean(of(b.name, 'server, idle').map((r) => r.eventsPerS));
    const idleCpu = mean(of(b.name, 'server, idle').map(perEvent));
    const vs = (x: number, base: number, mode: Mode) =>
      mode === 'server, idle'
        ? '-'
        : `${x >= base ? '+' : ''}${(((x - base) / base) * 100).toFixed(1)}%`;
    for (const mode of modes) {
      const rs = of(b.name, mode);
      const ev = mean(rs.map((r) => r.eventsPerS));
      const cpu = mean(rs.map(perEvent));
      const loaded = rs.filter((r) => r.requests);
      lines.push(
        `| ${b.name} | ${mode} | ${Math.round(ev)} | ${vs(ev, idle, mode)} | ${Math.round(cpu)} | ${vs(cpu, idleCpu, mode)} | ${loaded.length ? Math.round(mean(loaded.map((r) => r.requests!.perS))) : '-'} | ${loaded.length ? mean(loaded.map((r) => r.requests!.cpuS)).toFixed(1) : '-'} |`,
      );
    }
  }
  lines.push(
    '',
    "\"vs server idle\": against the same build's idle server; events/s is the issue's measure (target: hammered > -5%); bank CPU µs/event (user + system of the whole bank process, server included, over the events processed) is what the server adds per event, steadier than events/s when other work takes the cores. autocannon's CPU is outside the bank process.",
  );
  return lines.join('\n');
}

if (process.argv[1] && new URL(import.meta.url).pathname === process.argv[1]) {
  const num = (name: string) => (arg(name) === undefined ? undefined : Number(arg(name)));
  const rates = arg('--rates');
  runOpsOverheadBench({
    durationS: num('--duration-s'),
    rounds: num('--rounds'),
    connections: num('--connections'),
    rates: rates === undefined ? undefined : rates.split(',').filter(Boolean).map(Number),
    baseline: arg('--baseline'),
    cannonNice: num('--cannon-nice'),
  }).then(
    (md) => console.log(md),
    (e: Error) => {
      console.error(`ops bench: ${e.message}`);
      process.exit(2);
    },
  );
}
