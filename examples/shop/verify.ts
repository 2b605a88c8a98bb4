/**
 * The shop's check: its outputs against the database.
 *
 * - every placed order in shop_orders has exactly one invoice, and no invoice names another
 *   order; the invoice's customer, line count and amounts are those the database gives with the
 *   pricing settings of `invoicing` (computed here from the rows, not by the handler's code),
 *   and its signature is the one of the order's rows (validate.ts orderSignature, the pool stage);
 * - every customer's newest state in `balances` is the sum of its expected invoice totals, with
 *   the invoice count; no other customer has one;
 * - every customer's newest `payments-out` record is the sum and count of its shop_payments rows.
 *
 * Outputs are read from the topology's bus while it runs (read_committed), so the check waits
 * until everything the database holds has gone through: it reads until every output matches, or
 * until nothing new arrived and the staging tables stayed as they were for `settleMs`; then the
 * mismatches left are the verdict.
 *
 *   node dist/examples/shop/verify.js [--topology examples/shop/topology.yaml] [--settle-ms 30000]
 *
 * starts the topology (it resumes where `sluice run` stopped and ships what is still staged),
 * checks, stops it, and exits 0 when everything matches, 1 on any mismatch, 2 on an error.
 */
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import {
  loadTopology,
  partitionDir,
  startTopology,
  EVENT_TYPE_JSON,
  type RunningTopology,
  type Topology,
} from 'sluice';
import type { BusBackend, BusConsumer, TopicPartition } from 'sluice/bus';
import { openStaging } from '../../engine/cdc/index.js';
import { Tailer } from '../../engine/journal/index.js';
import { EnvelopeView, decodeJson } from '../../engine/codec/index.js';
import { openShopDb, type OrderRow } from './db.js';
import { pricingSettingsOf, type PricingSettings } from './processors/invoicing.js';
import { orderSignature, signatureRoundsOf } from './processors/validate.js';
import type { Balance, Invoice, OrderLine, PaidTotal } from './model.js';

const dec = new TextDecoder();

/** The topics and queues the check reads, by their role in the shop topology. */
export interface ShopTopics {
  invoices: string;
  balances: string;
  payments: string;
  partitions: Record<string, number>;
  pricing: PricingSettings;
  /** validate's settings.signatureRounds. */
  signatureRounds: number;
}

/** Finds the shop's outputs in `topology` (processors invoicing and balances, service payments). */
export function shopTopicsOf(topology: Topology): ShopTopics {
  const processor = (name: string) => {
    const p = topology.processors.find((x) => x.name === name);
    if (!p) throw new Error(`${topology.file}: the shop needs a processor "${name}"`);
    return p;
  };
  const payments = topology.services.find((s) => s.name === 'payments');
  if (!payments) throw new Error(`${topology.file}: the shop needs a service "payments"`);
  const invoicing = processor('invoicing');
  return {
    invoices: invoicing.outputs[0]!,
    balances: processor('balances').stateTopic!,
    payments: payments.output,
    partitions: Object.fromEntries(topology.queues.map((q) => [q.name, q.partitions])),
    pricing: pricingSettingsOf(invoicing.settings),
    signatureRounds: signatureRoundsOf(processor('validate').settings),
  };
}

/** What the check read so far: every invoice, the newest balance and paid total per customer. */
class ShopOutputs {
  readonly invoices = new Map<string, Invoice[]>();
  readonly balances = new Map<string, Balance>();
  readonly paid = new Map<string, PaidTotal>();
  records = 0;
  private consumer: BusConsumer | null = null;
  private readonly view = new EnvelopeView();
  private tailer: Tailer | null = null;

  constructor(
    private readonly topology: Topology,
    private readonly bus: BusBackend,
    private readonly t: ShopTopics,
  ) {}

  /** Reads what is new; @returns how many records that was. */
  async poll(): Promise<number> {
    const before = this.records;
    if (this.consumer === null) {
      this.consumer = await this.bus.consumer();
      const tps: TopicPartition[] = [];
      const topics = [this.t.invoices, this.t.balances];
      // On a kafka bus the service's output queue is a topic too; on the journal it is an
      // engine/journal queue (read below with a tailer).
      if (this.topology.bus.kind === 'kafka') topics.push(this.t.payments);
      for (const topic of topics)
        for (let partition = 0; partition < (this.t.partitions[topic] ?? 1); partition++)
          tps.push({ topic, partition });
      await this.consumer.assign(tps);
      await this.consumer.seekToBeginning(tps);
    }
    for (;;) {
      const recs = await this.consumer.poll({ timeoutMs: 200 });
      if (recs.length === 0) break;
      for (const r of recs) {
        this.records++;
        if (r.topic === this.t.invoices) {
          const inv = JSON.parse(dec.decode(r.value!)) as Invoice;
          const list = this.invoices.get(inv.orderId) ?? [];
          list.push(inv);
          this.invoices.set(inv.orderId, list);
        } else if (r.topic === this.t.balances) {
          if (r.value === null) this.balances.delete(r.key!);
          else this.balances.set(r.key!, JSON.parse(dec.decode(r.value)) as Balance);
        } else if (r.value !== null) this.paidRecord(r.value);
      }
    }
    if (this.topology.bus.kind === 'journal') {
      this.tailer ??= Tailer.open({ dir: partitionDir(this.topology, this.t.payments, 0) });
      for (let rec = this.tailer.next(); rec; rec = this.tailer.next()) {
        this.records++;
        this.paidRecord(rec.bytes);
      }
    }
    return this.records - before;
  }

  private paidRecord(bytes: Uint8Array): void {
    this.view.wrap(bytes, 0, bytes.length);
    if (this.view.type !== EVENT_TYPE_JSON) return; // processed-input records, snapshots
    const v = decodeJson(this.view.payload) as PaidTotal;
    this.paid.set(v.customer, v);
  }

  async close(): Promise<void> {
    this.tailer?.close();
    await this.consumer?.close().catch(() => undefined);
  }
}

/** What {@link verifyShop} found: mismatches (one line each; empty when all match) and counts. */
export interface ShopVerdict {
  mismatches: string[];
  placedOrders: number;
  invoices: number;
  customers: number;
  invoicedCents: number;
  paidCents: number;
  /** Output records read. */
  records: number;
}

/** The invoice the pricing settings give for an order's subtotal (see invoicing.ts). */
function expectedAmounts(subtotalCents: number, p: PricingSettings) {
  const discountCents =
    subtotalCents < p.discountFromCents ? 0 : Math.round((subtotalCents * p.discountPercent) / 100);
  const taxCents = Math.round(((subtotalCents - discountCents) * p.taxPercent) / 100);
  return { discountCents, taxCents, totalCents: subtotalCents - discountCents + taxCents };
}

async function stagedRows(topology: Topology): Promise<number> {
  let n = 0;
  for (const source of topology.capture) {
    const staging = await openStaging(source);
    try {
      n += await staging.stagedCount();
    } finally {
      await staging.close();
    }
  }
  return n;
}

/**
 * Compares the running topology's outputs with its database (see the file comment); waits for
 * the pipeline as described there, at most until nothing moved for `settleMs`.
 */
export async function verifyShop(
  running: Pick<RunningTopology, 'topology' | 'bus'>,
  opts: { settleMs?: number; log?: (line: string) => void } = {},
): Promise<ShopVerdict> {
  const topology = running.topology;
  if (!running.bus) throw new Error(`${topology.file}: the topology has no bus (no processors)`);
  const settleMs = opts.settleMs ?? 30_000;
  const t = shopTopicsOf(topology);
  const outputs = new ShopOutputs(topology, running.bus, t);
  const db = await openShopDb(topology.capture[0]!.database);
  try {
    let mismatches: string[] = [];
    let counts = { placedOrders: 0, customers: 0, invoicedCents: 0, paidCents: 0 };
    let quietSinceMs = Date.now();
    let staged = -1;
    for (;;) {
      const read = await outputs.poll();
      const nowStaged = await stagedRows(topology);
      if (read > 0 || nowStaged !== staged) quietSinceMs = Date.now();
      staged = nowStaged;
      ({ mismatches, ...counts } = compare(
        await db.orders(),
        await db.lines(),
        await db.payments(),
        outputs,
        t,
      ));
      if (mismatches.length === 0 && staged === 0) break;
      if (Date.now() - quietSinceMs >= settleMs) {
        if (staged > 0)
          mismatches.push(`${staged} changes still staged (not shipped by the pumps)`);
        break;
      }
      await new Promise((r) => setTimeout(r, 250));
    }
    const invoices = [...outputs.invoices.values()].reduce((n, l) => n + l.length, 0);
    return { mismatches, invoices, ...counts, records: outputs.records };
  } finally {
    await outputs.close();
    await db.close();
  }
}

/** orderSignature, remembered: the check runs again every poll while it waits. */
const signatures = new Map<string, string>();
function signatureOf(id: string, customer: string, lines: OrderLine[], rounds: number): string {
  const k = JSON.stringify([id, customer, lines, rounds]);
  let v = signatures.get(k);
  if (v === undefined) signatures.set(k, (v = orderSignature(id, customer, lines, rounds)));
  return v;
}

function compare(
  orders: OrderRow[],
  lines: Map<string, OrderLine[]>,
  payments: Map<string, { paidCents: number; payments: number }>,
  out: ShopOutputs,
  t: ShopTopics,
): Omit<ShopVerdict, 'invoices' | 'records'> {
  const mismatches: string[] = [];
  const expectedBalances = new Map<string, Balance>();
  let placedOrders = 0;
  let invoicedCents = 0;
  const placed = new Set<string>();
  for (const o of orders) {
    if (o.status !== 'placed') continue;
    placedOrders++;
    placed.add(o.id);
    const want = { subtotalCents: o.subtotalCents, ...expectedAmounts(o.subtotalCents, t.pricing) };
    invoicedCents += want.totalCents;
    const b = expectedBalances.get(o.customer) ?? { invoicedCents: 0, invoices: 0 };
    expectedBalances.set(o.customer, {
      invoicedCents: b.invoicedCents + want.totalCents,
      invoices: b.invoices + 1,
    });
    const got = out.invoices.get(o.id) ?? [];
    if (got.length !== 1) {
      mismatches.push(`order ${o.id}: ${got.length} invoices (want exactly 1)`);
      continue;
    }
    const inv = got[0]!;
    const diffs = (
      [
        ['customer', inv.customer, o.customer],
        ['lines', inv.lines, o.lines],
        ['subtotalCents', inv.subtotalCents, want.subtotalCents],
        ['discountCents', inv.discountCents, want.discountCents],
        ['taxCents', inv.taxCents, want.taxCents],
        ['totalCents', inv.totalCents, want.totalCents],
        [
          'signature',
          inv.signature,
          signatureOf(o.id, o.customer, lines.get(o.id) ?? [], t.signatureRounds),
        ],
      ] as const
    ).filter(([, a, b]) => a !== b);
    for (const [field, a, b] of diffs)
      mismatches.push(`order ${o.id}: invoice ${field} ${a} != ${b} from the database`);
  }
  for (const id of out.invoices.keys())
    if (!placed.has(id))
      mismatches.push(`invoice for order ${id}, which is not placed in the database`);
  for (const [customer, want] of expectedBalances) {
    const got = out.balances.get(customer);
    if (got?.invoicedCents !== want.invoicedCents || got.invoices !== want.invoices)
      mismatches.push(
        `customer ${customer}: balance ${got ? `${got.invoicedCents} cents in ${got.invoices} invoices` : 'missing'} != ${want.invoicedCents} cents in ${want.invoices} invoices from the database`,
      );
  }
  for (const customer of out.balances.keys())
    if (!expectedBalances.has(customer))
      mismatches.push(`customer ${customer}: a balance, but no placed order in the database`);
  let paidCents = 0;
  for (const [customer, want] of payments) {
    paidCents += want.paidCents;
    const got = out.paid.get(customer);
    if (got?.paidCents !== want.paidCents || got.payments !== want.payments)
      mismatches.push(
        `customer ${customer}: paid ${got ? `${got.paidCents} cents in ${got.payments} payments` : 'missing'} != ${want.paidCents} cents in ${want.payments} payments in shop_payments`,
      );
  }
  for (const customer of out.paid.keys())
    if (!payments.has(customer))
      mismatches.push(`customer ${customer}: a paid total, but no payment in the database`);
  const customers = new Set([...expectedBalances.keys(), ...payments.keys()]).size;
  return { mismatches, placedOrders, customers, invoicedCents, paidCents };
}

/** Prints a verdict as the shop's summary lines; @returns the exit code (0 match, 1 mismatch). */
export function printVerdict(v: ShopVerdict, print: (line: string) => void = console.log): number {
  if (v.mismatches.length === 0) {
    print(
      `  verification              OK: ${v.placedOrders} placed orders, ${v.invoices} invoices (${v.invoicedCents} cents), ${v.customers} customers' balances and paid totals (${v.paidCents} cents) match the database`,
    );
    return 0;
  }
  print(`  verification              FAILED: ${v.mismatches.length} mismatches`);
  for (const m of v.mismatches.slice(0, 20)) print(`    ${m}`);
  return 1;
}

const here = path.dirname(fileURLToPath(import.meta.url));
/** examples/shop/topology.yaml, next to the sources of dist/examples/shop. */
export const DEFAULT_TOPOLOGY = path.resolve(here, '../../../examples/shop/topology.yaml');

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const arg = (name: string) => {
    const i = process.argv.indexOf(name);
    return i > 0 ? process.argv[i + 1] : undefined;
  };
  const run = async (): Promise<number> => {
    const topology = loadTopology(arg('--topology') ?? DEFAULT_TOPOLOGY);
    const settleMs = Number(arg('--settle-ms') ?? 30_000);
    if (!Number.isInteger(settleMs) || settleMs < 0)
      throw new Error(`--settle-ms must be an integer >= 0, got ${arg('--settle-ms')}`);
    const running = await startTopology(topology, { log: (l) => console.error(`sluice: ${l}`) });
    let verdict: ShopVerdict;
    try {
      verdict = await verifyShop(running, { settleMs });
    } finally {
      await running.stop();
    }
    console.log(`shop verification (${topology.file}, ${verdict.records} output records read)`);
    return printVerdict(verdict);
  };
  run().then(
    (code) => process.exit(code),
    (e: unknown) => {
      console.error(`shop verify: ${e instanceof Error ? e.message : String(e)}`);
      process.exit(2);
    },
  );
}
