/**
 * The shop's workload: customers place orders of 1 to 5 lines, one database transaction per
 * order (the order inserted open, its lines, then the order set placed), and about one order in
 * four comes with a payment. Deterministic for a seed (mulberry32), so a run can be repeated.
 *
 *   node dist/examples/shop/workload.js --topology examples/shop/topology.yaml --setup
 *   node dist/examples/shop/workload.js --topology examples/shop/topology.yaml --orders 2000
 *        [--duration-s S] [--clients 2] [--seed 42] [--payment-every 4 (0: no payments)]
 *
 * `--setup` starts afresh ({@link setupShop}: data directory and Kafka topics deleted, tables
 * made again, capture installed); otherwise it places `--orders` orders (or for `--duration-s`) into the topology's
 * capture database, whether or not the topology runs (what is staged waits for the pumps).
 */
import fs from 'node:fs';
import { pathToFileURL } from 'node:url';
import { Kafka, logLevel } from 'kafkajs';
import { installCapture, loadTopology, type Topology } from 'sluice';
import { createShopDb, openShopDb, type NewOrder, type ShopDb } from './db.js';

/** Bounds and defaults of the workload. */
export const WORKLOAD_DEFAULTS = {
  customers: 40,
  linesMax: 5,
  skus: 200,
  qtyMax: 4,
  /** Unit prices from 1.00 to 150.00. */
  unitCentsMin: 100,
  unitCentsMax: 15_000,
  /** One order in paymentEvery comes with a payment. */
  paymentEvery: 4,
  seed: 42,
  /** Concurrent order loops (PostgreSQL: one connection each). */
  clients: 2,
} as const;

/** Options of {@link runShopWorkload}: a count of orders, a duration, or both (whichever ends first). */
export interface ShopWorkloadOptions {
  orders?: number;
  durationMs?: number;
  clients?: number;
  seed?: number;
  /** One order in paymentEvery comes with a payment; 0: none. Default {@link WORKLOAD_DEFAULTS}. */
  paymentEvery?: number;
  signal?: AbortSignal;
}

/** What a workload run did. */
export interface ShopWorkloadResult {
  orders: number;
  lines: number;
  payments: number;
  elapsedMs: number;
}

/** mulberry32: a small seeded PRNG (Tommy Ettinger's), uniform in [0, 1). */
function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * Kafka bus: deletes the topology's topics and its consumer groups (processors' groups and the
 * capture pumps' reconciliation groups), and waits until the broker no longer lists the topics.
 */
async function resetKafka(topology: Topology): Promise<void> {
  if (topology.bus.kind !== 'kafka') return;
  const admin = new Kafka({
    brokers: topology.bus.brokers,
    clientId: `${topology.bus.clientId}-reset`,
    logLevel: logLevel.NOTHING,
  }).admin();
  await admin.connect();
  try {
    const names = new Set(topology.queues.map((q) => q.name));
    const present = (await admin.listTopics()).filter((t) => names.has(t));
    if (present.length > 0) await admin.deleteTopics({ topics: present, timeout: 30_000 });
    const groups = new Set([
      ...topology.processors.map((p) => p.group ?? p.name),
      ...topology.capture.flatMap((c) =>
        Array.from({ length: c.pumps }, (_, i) => `sluice.capture.${topology.name}.${c.name}.${i}`),
      ),
    ]);
    const known = new Set((await admin.listGroups()).groups.map((g) => g.groupId));
    const stale = [...groups].filter((g) => known.has(g));
    if (stale.length > 0) await admin.deleteGroups(stale);
    for (let i = 0; i < 300; i++) {
      if (!(await admin.listTopics()).some((t) => names.has(t))) return;
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error(
      `kafka ${topology.bus.brokers.join(',')}: topics ${present.join(', ')} still listed 30 s after their deletion`,
    );
  } finally {
    await admin.disconnect();
  }
}

/**
 * Starts the shop afresh: deletes the data directory (its queues and journal bus) and, on a kafka
 * bus, the topology's topics and groups, so no output of an earlier run remains (nor a pump's
 * record of staging ids, which start at 1 again in a new database); creates the tables afresh in
 * the topology's capture database and installs capture.
 */
export async function setupShop(topology: Topology): Promise<void> {
  const source = topology.capture[0];
  if (!source) throw new Error(`${topology.file}: the shop needs a capture source`);
  fs.rmSync(topology.dataDir, { recursive: true, force: true });
  await resetKafka(topology);
  await createShopDb(source.database);
  await installCapture(topology);
}

/**
 * Places orders into `db` until `orders` are placed or `durationMs` passed (at least one of
 * them is required) or `signal` aborts. Between two transactions it yields to the event loop,
 * so a topology started in the same thread keeps being served.
 * @throws Error when neither a count nor a duration is given.
 */
export async function runShopWorkload(
  db: ShopDb,
  opts: ShopWorkloadOptions,
): Promise<ShopWorkloadResult> {
  if (opts.orders === undefined && opts.durationMs === undefined)
    throw new Error('the shop workload needs orders or durationMs');
  const d = WORKLOAD_DEFAULTS;
  const random = mulberry32(opts.seed ?? d.seed);
  const int = (min: number, max: number) => min + Math.floor(random() * (max - min + 1));
  const t0 = Date.now();
  const endMs = opts.durationMs === undefined ? Infinity : t0 + opts.durationMs;
  const result: ShopWorkloadResult = { orders: 0, lines: 0, payments: 0, elapsedMs: 0 };
  let started = 0;
  const more = () =>
    started < (opts.orders ?? Infinity) && Date.now() < endMs && !opts.signal?.aborted;
  const loop = async () => {
    while (more()) {
      started++;
      const order: NewOrder = {
        customer: `c${int(1, d.customers)}`,
        lines: Array.from({ length: int(1, d.linesMax) }, () => ({
          sku: `sku-${int(1, d.skus)}`,
          qty: int(1, d.qtyMax),
          unitCents: int(d.unitCentsMin, d.unitCentsMax),
        })),
      };
      const every = opts.paymentEvery ?? d.paymentEvery;
      const payment = every > 0 && int(1, every) === 1 ? int(500, 50_000) : undefined;
      await db.placeOrder(order, payment);
      result.orders++;
      result.lines += order.lines.length;
      if (payment !== undefined) result.payments++;
      await new Promise((r) => setImmediate(r));
    }
  };
  await Promise.all(Array.from({ length: opts.clients ?? d.clients }, loop));
  result.elapsedMs = Date.now() - t0;
  return result;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const arg = (name: string) => {
    const i = process.argv.indexOf(name);
    return i > 0 ? process.argv[i + 1] : undefined;
  };
  const num = (name: string) => {
    const v = arg(name);
    if (v === undefined) return undefined;
    const n = Number(v);
    if (!Number.isInteger(n) || n < 1) throw new Error(`${name} must be an integer >= 1, got ${v}`);
    return n;
  };
  const run = async () => {
    const file = arg('--topology');
    if (!file) throw new Error('--topology <file> is required');
    const topology = loadTopology(file);
    if (process.argv.includes('--setup')) {
      await setupShop(topology);
      console.log(
        `shop: ${topology.capture[0]!.database.dialect} tables created, capture installed`,
      );
      return;
    }
    const orders = num('--orders');
    const durationS = num('--duration-s');
    const db = await openShopDb(topology.capture[0]!.database);
    try {
      const r = await runShopWorkload(db, {
        orders: orders ?? (durationS === undefined ? 1000 : undefined),
        durationMs: durationS === undefined ? undefined : durationS * 1000,
        clients: num('--clients'),
        seed: num('--seed'),
        paymentEvery: arg('--payment-every') === '0' ? 0 : num('--payment-every'),
      });
      console.log(
        `shop: ${r.orders} orders (${r.lines} lines, ${r.payments} payments) in ${r.elapsedMs} ms`,
      );
    } finally {
      await db.close();
    }
  };
  run().catch((e: unknown) => {
    console.error(`shop workload: ${e instanceof Error ? e.message : String(e)}`);
    process.exit(2);
  });
}
