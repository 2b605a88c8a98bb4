/**
 * The shop, all in one: tables and capture, the topology, a workload, then the verification.
 *
 *   node dist/examples/shop/main.js [--topology examples/shop/topology.yaml] [--orders 2000]
 *        [--duration-s S] [--clients 2] [--settle-ms 30000] [--keep]
 *
 * Starts fresh unless `--keep`: the SQLite file or PostgreSQL schema is made again, the data
 * directory deleted and, on a kafka bus, the topology's topics and consumer groups deleted.
 * Then it installs capture, starts the topology (examples/shop/topology.yaml: pumps, three
 * processors and a service, each actor in its own worker thread), places the orders, waits
 * until the outputs have caught up with the database and compares them (verify.ts), stops (drain)
 * and prints a summary. Exits 0 when everything matches, 1 on any mismatch, 2 on an error.
 */
import fs from 'node:fs';
import { pathToFileURL } from 'node:url';
import { loadTopology, startTopology, type Topology } from 'sluice';
import { openShopDb } from './db.js';
import { runShopWorkload, setupShop, type ShopWorkloadResult } from './workload.js';
import { DEFAULT_TOPOLOGY, printVerdict, verifyShop, type ShopVerdict } from './verify.js';

/** Options of {@link runShop}. */
export interface ShopOptions {
  orders?: number;
  durationMs?: number;
  clients?: number;
  /** Continue the last run: keep its database, data directory and topics. */
  keep?: boolean;
  /** See verifyShop. */
  settleMs?: number;
  log?: (line: string) => void;
  signal?: AbortSignal;
}

/** What {@link runShop} did and found. */
export interface ShopRun {
  workload: ShopWorkloadResult;
  verdict: ShopVerdict;
  /** Changes the pumps shipped, per capture source. */
  captured: Record<string, number>;
  /** Records in and out per processor and service. */
  actors: Record<string, { in: number; out: number }>;
  restarts: string[];
  /** Workload start to verified. */
  totalMs: number;
}

/** Runs the shop on `topology` (see the file comment). */
export async function runShop(topology: Topology, o: ShopOptions = {}): Promise<ShopRun> {
  const log = o.log ?? ((line: string) => console.log(line));
  const source = topology.capture[0];
  if (!source) throw new Error(`${topology.file}: the shop needs a capture source`);
  if (!o.keep) await setupShop(topology);
  fs.mkdirSync(topology.dataDir, { recursive: true });
  log(
    `shop: ${source.database.dialect} tables ${o.keep ? 'kept' : 'created'}, capture installed, ${topology.bus.kind} bus`,
  );
  const running = await startTopology(topology, { log: (l) => log(`sluice: ${l}`) });
  const restarts: string[] = [];
  running.supervisor.on('restart', (e: { actor: string; error: string }) =>
    restarts.push(`${e.actor}: ${e.error}`),
  );
  let verdict: ShopVerdict;
  let workload: ShopWorkloadResult;
  const t0 = Date.now();
  try {
    const db = await openShopDb(source.database);
    try {
      log(
        `shop: workload running (${o.orders !== undefined ? `${o.orders} orders` : `${(o.durationMs ?? 0) / 1000} s`})`,
      );
      workload = await runShopWorkload(db, {
        orders: o.orders,
        durationMs: o.durationMs,
        clients: o.clients,
        signal: o.signal,
      });
    } finally {
      await db.close();
    }
    verdict = await verifyShop(running, { settleMs: o.settleMs });
  } catch (e) {
    await running.stop().catch(() => undefined);
    throw e;
  }
  const totalMs = Date.now() - t0;
  const result = await running.stop();
  const captured: Record<string, number> = {};
  const actors: Record<string, { in: number; out: number }> = {};
  for (const [name, c] of Object.entries(result.counters)) {
    const pump = /^pump:(.+)\/\d+$/.exec(name);
    if (pump) captured[pump[1]!] = (captured[pump[1]!] ?? 0) + c.eventsIn;
    else if (name.startsWith('processor:') || name.startsWith('service:'))
      actors[name] = { in: c.eventsIn, out: c.eventsOut };
  }
  return { workload: workload!, verdict, captured, actors, restarts, totalMs };
}

/** Prints the summary of a run; @returns the exit code (0 match, 1 mismatch). */
export function printShopRun(topology: Topology, r: ShopRun, print = console.log): number {
  const w = r.workload;
  print('');
  print(`shop summary (${topology.capture[0]!.database.dialect}, ${topology.bus.kind} bus)`);
  print(
    `  orders placed             ${w.orders} (${w.lines} lines, ${w.payments} payments) in ${(w.elapsedMs / 1000).toFixed(1)} s`,
  );
  print(
    `  changes captured          ${Object.entries(r.captured)
      .map(([s, n]) => `${s} ${n}`)
      .join(', ')}`,
  );
  for (const [name, a] of Object.entries(r.actors))
    print(`  ${name.padEnd(26)}${a.in} in, ${a.out} out`);
  print(`  workload start to verified ${(r.totalMs / 1000).toFixed(1)} s`);
  print(
    `  actor restarts            ${r.restarts.length}${r.restarts.length ? ': ' + r.restarts.join('; ') : ''}`,
  );
  return printVerdict(r.verdict, print);
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const arg = (name: string) => {
    const i = process.argv.indexOf(name);
    return i > 0 ? process.argv[i + 1] : undefined;
  };
  const num = (name: string, min: number) => {
    const v = arg(name);
    if (v === undefined) return undefined;
    const n = Number(v);
    if (!Number.isInteger(n) || n < min)
      throw new Error(`${name} must be an integer >= ${min}, got ${v}`);
    return n;
  };
  const interrupt = new AbortController();
  process.once('SIGINT', () => interrupt.abort());
  process.once('SIGTERM', () => interrupt.abort());
  const run = async () => {
    const topology = loadTopology(arg('--topology') ?? DEFAULT_TOPOLOGY);
    const durationS = num('--duration-s', 1);
    const r = await runShop(topology, {
      orders: num('--orders', 1) ?? (durationS === undefined ? 2000 : undefined),
      durationMs: durationS === undefined ? undefined : durationS * 1000,
      clients: num('--clients', 1),
      settleMs: num('--settle-ms', 0),
      keep: process.argv.includes('--keep'),
      signal: interrupt.signal,
    });
    return printShopRun(topology, r);
  };
  run().then(
    (code) => process.exit(code),
    (e: unknown) => {
      console.error(`shop: ${e instanceof Error ? e.message : String(e)}`);
      process.exit(2);
    },
  );
}
