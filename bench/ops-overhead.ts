/**
 * What the operations HTTP server costs the pipeline: the bank job (SQLite, 4 clients) with its
 * server on, once left alone and once while autocannon hammers GET /metrics and GET /actors
 * (10 connections, as fast as they are answered, for the workload's duration), alternated over
 * `--rounds` so a noisy shared machine moves both sides alike; and once without a server for
 * reference. Prints markdown.
 *   node dist/bench/ops-overhead.js [--duration-s 20] [--rounds 2] [--connections 10]
 */
import os from 'node:os';
import { spawn } from 'node:child_process';
import autocannon from 'autocannon';

const bank = new URL('../examples/bank/main.js', import.meta.url).pathname;

interface Run {
  mode: 'no server' | 'server, idle' | 'server, hammered';
  eventsPerS: number;
  tps: number;
  requests?: { total: number; perS: number; p99Ms: number; non2xx: number; errors: number };
}

function arg(name: string, fallback: number): number {
  const i = process.argv.indexOf(name);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
}

async function runBank(mode: Run['mode'], durationS: number, connections: number): Promise<Run> {
  const args = [bank, '--duration-s', String(durationS), '--clients', '4'];
  if (mode !== 'no server') args.push('--http', '127.0.0.1:0');
  const p = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let load: ReturnType<typeof autocannon> | null = null;
  const onData = (b: Buffer) => {
    out += b;
    const m = /operations API and dashboard at (http:\/\/[\d.:]+)\//.exec(out);
    if (m && mode === 'server, hammered' && !load) {
      load = autocannon({
        // The workload's duration from the moment the server is up (the workload starts then):
        // the drain and the verification afterwards are not hammered, and the server's close
        // (503s, refused connections) is not counted.
        url: m[1],
        connections,
        duration: durationS,
        requests: [
          { method: 'GET', path: '/metrics' },
          { method: 'GET', path: '/actors' },
        ],
      });
    }
  };
  p.stdout.on('data', onData);
  p.stderr.on('data', onData);
  const code = await new Promise<number | null>((r) => p.on('exit', r));
  if (code !== 0) throw new Error(`bank job (${mode}) exited ${code}:\n${out}`);
  let requests: Run['requests'];
  if (load) {
    const l = load as ReturnType<typeof autocannon>;
    l.stop();
    const r = await l;
    requests = {
      total: r.requests.total,
      perS: Math.round(r.requests.average),
      p99Ms: r.latency.p99,
      non2xx: r.non2xx,
      errors: r.errors,
    };
  }
  const eventsPerS = Number(/events\/s\s+(\d+)/.exec(out)?.[1]);
  const tps = Number(/transactions run\s+\d+ \((\d+) tps\)/.exec(out)?.[1]);
  if (!Number.isFinite(eventsPerS)) throw new Error(`no events/s in the bank summary:\n${out}`);
  return { mode, eventsPerS, tps, requests };
}

/** Runs the comparison; returns the markdown section. */
export async function runOpsOverheadBench(
  durationS = 20,
  rounds = 2,
  connections = 10,
): Promise<string> {
  const runs: Run[] = [await runBank('no server', durationS, connections)];
  for (let i = 0; i < rounds; i++) {
    const order: Run['mode'][] =
      i % 2 === 0 ? ['server, idle', 'server, hammered'] : ['server, hammered', 'server, idle'];
    for (const mode of order) runs.push(await runBank(mode, durationS, connections));
  }
  const mean = (mode: Run['mode']) => {
    const xs = runs.filter((r) => r.mode === mode).map((r) => r.eventsPerS);
    return xs.reduce((a, b) => a + b, 0) / xs.length;
  };
  const idle = mean('server, idle');
  const hammered = mean('server, hammered');
  const lines = [
    `### Operations server overhead (bank, SQLite, scale 1, 4 clients, ${durationS} s; autocannon ${connections} connections on /metrics + /actors)`,
    '',
    `${os.cpus().length} CPUs (${os.cpus()[0]?.model ?? '?'}), Node ${process.version}, load average at the end ${os
      .loadavg()
      .map((x) => x.toFixed(1))
      .join(' ')}`,
    '',
    '| run | mode | events/s | tps | requests served | req/s | p99 ms | non-2xx |',
    '|---|---|---|---|---|---|---|---|',
    ...runs.map(
      (r, i) =>
        `| ${i + 1} | ${r.mode} | ${r.eventsPerS} | ${r.tps} | ${r.requests?.total ?? '-'} | ${r.requests?.perS ?? '-'} | ${r.requests?.p99Ms ?? '-'} | ${r.requests ? r.requests.non2xx + r.requests.errors : '-'} |`,
    ),
    '',
    `Mean events/s: server idle ${Math.round(idle)}, hammered ${Math.round(hammered)}: the hammered server costs ${(((idle - hammered) / idle) * 100).toFixed(1)}% (target < 5%).`,
  ];
  return lines.join('\n');
}

if (process.argv[1] && new URL(import.meta.url).pathname === process.argv[1]) {
  runOpsOverheadBench(arg('--duration-s', 20), arg('--rounds', 2), arg('--connections', 10)).then(
    (md) => console.log(md),
    (e: Error) => {
      console.error(`ops bench: ${e.message}`);
      process.exit(2);
    },
  );
}
