/**
 * Pool stage scaling, same run: records/s of one durable processor from a topology file with a
 * CPU-heavy handler (bench/lib/order-transform.ts: decode, validate and price a 60-line JSON
 * order, re-encode it) run inline (in the processor's thread) and with `pool: { threads: N }`
 * for N = 1, 2, 4, the same module in every cell.
 * Method: the processor is planned (planTopology) and run under a Supervisor in its own worker
 * thread, as startTopology does; one fresh journal bus per cell (fsync 'batch'), in this thread,
 * served to the worker over a MessagePort; input topic of 4 partitions pre-filled with N orders
 * (keys c<i % 500>); clock from supervisor.start until the group's committed offsets sum to N
 * (checked every 5 ms; the worker's start and the pool threads' start are inside). Cells run in
 * the order inline, 1, 2, 4, 4, 2, 1, inline; the faster of each pair is printed. Before the
 * cells, the transform's cost per record is timed in this thread (median of 5 runs of 2000).
 * The last column is the CPU time of the whole process (every thread: the bus here, the
 * processor's worker, the pool threads) per record over the timed span, from process.cpuUsage:
 * what the pool costs on top of the transform, less sensitive to other tenants than seconds.
 * Run: flock /tmp/sluice-bench.lock node dist/bench/pool.js [--records N] [--rounds R]
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { MessageChannel } from 'node:worker_threads';
import { planTopology } from '../actors/index.js';
import { createJournalBus, serveBus, type BusBackend } from '../engine/bus/index.js';
import { parseTopology } from '../engine/config/index.js';
import { Supervisor } from '../engine/supervisor/index.js';
import { priceOrder } from './lib/order-transform.js';

const PARTITIONS = 4;
const here = path.dirname(new URL(import.meta.url).pathname);
const handlerSource = path.resolve(here, '..', '..', 'bench', 'lib', 'order-transform.ts');
let seq = 0;

/** Order i as JSON bytes: 60 lines. */
function order(i: number): Uint8Array {
  const lines = Array.from({ length: 60 }, (_, k) => ({
    sku: `SKU-${String((i * 7 + k) % 10_000).padStart(4, '0')}`,
    qty: 1 + ((i + k) % 9),
    unitCents: 100 + ((i * 13 + k * 17) % 5000),
  }));
  return new TextEncoder().encode(JSON.stringify({ id: `o-${i}`, customer: `c${i % 500}`, lines }));
}

async function prefill(bus: BusBackend, topic: string, n: number): Promise<void> {
  const p = await bus.producer();
  for (let i = 0; i < n; i += 500)
    await p.send(
      Array.from({ length: Math.min(500, n - i) }, (_, k) => ({
        topic,
        key: `c${(i + k) % 500}`,
        value: order(i + k),
      })),
    );
  await p.close();
}

async function committedSum(bus: BusBackend, group: string, topic: string): Promise<number> {
  const tps = Array.from({ length: PARTITIONS }, (_, partition) => ({ topic, partition }));
  return (await bus.committed(group, tps)).reduce<number>((a, b) => a + (b ?? 0), 0);
}

/** Seconds until `n` orders are committed by the processor, with `threads` pool threads or inline (0). */
async function cell(
  bus: BusBackend,
  threads: number,
  n: number,
  rounds: number,
): Promise<{ s: number; cpuUs: number }> {
  const id = `pool${process.pid}-${++seq}`;
  const [input, output, group] = [`${id}-in`, `${id}-out`, `${id}-g`];
  await bus.createTopics([
    { name: input, partitions: PARTITIONS },
    { name: output, partitions: PARTITIONS },
  ]);
  await prefill(bus, input, n);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pool_bench-'));
  const text = JSON.stringify({
    name: 'bench',
    dataDir: dir,
    queues: [input, output].map((name) => ({ name, partitions: PARTITIONS })),
    processors: [
      {
        name: id,
        pattern: 'durable',
        module: handlerSource,
        inputs: [input],
        outputs: [output],
        group,
        codec: 'bytes',
        settings: { rounds },
        ...(threads > 0 ? { pool: { threads } } : {}),
      },
    ],
  });
  const file = path.join(dir, 'topology.yaml');
  fs.writeFileSync(file, text);
  const plan = planTopology(parseTopology(text, file, { env: {} }), {
    connectBus: () => {
      const { port1, port2 } = new MessageChannel();
      serveBus(bus, port1);
      return port2;
    },
  });
  const supervisor = new Supervisor({ restartsMax: 0 });
  const t0 = performance.now();
  const cpu0 = process.cpuUsage();
  await supervisor.start(plan.groups);
  const deadline = Date.now() + 300_000;
  while ((await committedSum(bus, group, input)) < n) {
    if (Date.now() > deadline) throw new Error(`pool ${threads}: not all ${n} committed in 300 s`);
    await new Promise((r) => setTimeout(r, 5));
  }
  const s = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  await supervisor.stop();
  fs.rmSync(dir, { recursive: true, force: true });
  return { s, cpuUs: (cpu.user + cpu.system) / n };
}

/** The transform's cost per record in this thread, µs (median of 5 runs of 2000 records). */
function transformUs(rounds: number): number {
  const orders = Array.from({ length: 2000 }, (_, i) => order(i));
  const runs: number[] = [];
  for (let r = 0; r < 5; r++) {
    const t0 = performance.now();
    for (const o of orders) for (let k = 0; k < rounds; k++) priceOrder(o, 20);
    runs.push(((performance.now() - t0) * 1000) / orders.length);
  }
  return runs.sort((a, b) => a - b)[2]!;
}

export async function main(argv = process.argv.slice(2)): Promise<string> {
  const arg = (name: string, d: number) => {
    const i = argv.indexOf(name);
    return i >= 0 ? Number(argv[i + 1]) : d;
  };
  const n = arg('--records', 10_000);
  const rounds = arg('--rounds', 1);
  const out: string[] = [];
  const say = (l: string) => (out.push(l), console.log(l));
  const us = transformUs(rounds);
  say(
    `Transform: ${us.toFixed(0)} µs per record in one thread (${n} orders of ${order(0).length} bytes, ${rounds} round(s)); ${os.availableParallelism()} CPUs seen by Node.\n`,
  );
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'pool_bench-bus-'));
  const best = new Map<number, { s: number; cpuUs: number }>();
  for (const threads of [0, 1, 2, 4, 4, 2, 1, 0]) {
    const bus = await createJournalBus({ dir: path.join(root, `b${++seq}`) });
    try {
      const r = await cell(bus, threads, n, rounds);
      if (!best.has(threads) || r.s < best.get(threads)!.s) best.set(threads, r);
    } finally {
      await bus.close();
    }
  }
  fs.rmSync(root, { recursive: true, force: true });
  const inline = best.get(0)!.s;
  say('| handler | s | records/s | vs inline | CPU µs per record (all threads) |');
  say('|---|---|---|---|---|');
  for (const threads of [0, 1, 2, 4]) {
    const { s, cpuUs } = best.get(threads)!;
    say(
      `| ${threads === 0 ? 'inline' : `pool, ${threads} thread${threads > 1 ? 's' : ''}`} | ${s.toFixed(2)} | ${Math.round(n / s)} | ${(inline / s).toFixed(2)}x | ${cpuUs.toFixed(0)} |`,
    );
  }
  return out.join('\n');
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) await main();
