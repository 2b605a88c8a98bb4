/**
 * Durable pattern example: orders in, invoices out, exactly once, on the embedded journal bus.
 * Run: node dist/examples/patterns/durable.js [dir]   (default: a fresh temp directory)
 * Each run sends three new orders (numbered on from the orders already in the dir: o-1..o-3, then
 * o-4..o-6, ...), processes them and prints every invoice in the dir, one JSON line each, with
 * "new": true for the invoices of this run's orders. Running it again on the same dir therefore
 * prints the earlier invoices once each ("new": false) and three new ones: the committed orders
 * are not processed again.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { createJournalBus } from 'sluice/bus';
import { jsonCodec, startDurable } from 'sluice/patterns';

interface Order {
  id: string;
  customer: string;
  amountCents: number;
}
interface Invoice {
  orderId: string;
  customer: string;
  totalCents: number;
}

const orders = jsonCodec<Order>();
const invoices = jsonCodec<Invoice>();

/** The number of an order id `o-N`. */
const orderNumber = (id: string): number => Number(id.slice(2));

/**
 * Sends three new orders (ids numbered on from the orders already in `dir`), runs the pattern
 * until their invoices are committed, and returns every invoice in `dir` by order number.
 */
export async function main(
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-durable-')),
): Promise<Invoice[]> {
  const bus = await createJournalBus({ dir });
  try {
    await bus.createTopics([
      { name: 'orders', partitions: 4 },
      { name: 'invoices', partitions: 4 },
    ]);
    const before = (
      await bus.offsets([0, 1, 2, 3].map((partition) => ({ topic: 'orders', partition })))
    ).reduce((n, o) => n + o.end, 0);
    const producer = await bus.producer();
    const sent: Order[] = [
      { id: `o-${before + 1}`, customer: 'ada', amountCents: 1250 },
      { id: `o-${before + 2}`, customer: 'bob', amountCents: 990 },
      { id: `o-${before + 3}`, customer: 'ada', amountCents: 4000 },
    ];
    await producer.send(
      sent.map((o) => ({ topic: 'orders', key: o.customer, value: orders.encode(o) })),
    );
    await producer.close();

    const sub = startDurable({
      bus,
      groupId: 'billing',
      topics: ['orders'],
      transactionalId: 'billing-1',
      codec: orders,
      processor: {
        // Outputs are returned, never sent: the pattern commits them with the consumed positions.
        onNext: (records) =>
          records.map((r) => {
            const o = r.value!;
            return {
              topic: 'invoices',
              key: o.customer,
              value: invoices.encode({
                orderId: o.id,
                customer: o.customer,
                totalCents: Math.round(o.amountCents * 1.2),
              }),
            };
          }),
      },
    });
    await sub.ready;
    const deadline = Date.now() + 10_000;
    while (sub.stats.recordsCommitted < sent.length && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 20));
    await sub.stop();

    const reader = await bus.consumer();
    const tps = [0, 1, 2, 3].map((partition) => ({ topic: 'invoices', partition }));
    await reader.assign(tps);
    const out = (await reader.poll({ timeoutMs: 0 })).map((r) => invoices.decode(r.value!));
    await reader.close();
    return out.sort((a, b) => orderNumber(a.orderId) - orderNumber(b.orderId));
  } finally {
    await bus.close();
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  // With a directory the journal stays there for the next run; without one it is a temporary
  // directory, removed at the end.
  const dir = process.argv[2];
  const tmp = dir === undefined ? fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-durable-')) : null;
  const all = await main(dir ?? tmp!).then(
    (invoices) => invoices,
    (e: unknown) => {
      console.error(
        `durable example: ${(e as Error).message}${dir !== undefined ? ` (journal directory ${dir})` : ''}`,
      );
      return null;
    },
  );
  if (tmp !== null) fs.rmSync(tmp, { recursive: true, force: true });
  if (all === null) process.exit(1);
  // This run's orders are the last three numbers; earlier runs' invoices are listed once each.
  const firstNew = all.length > 0 ? orderNumber(all[all.length - 1].orderId) - 2 : 1;
  for (const inv of all)
    console.log(JSON.stringify({ ...inv, new: orderNumber(inv.orderId) >= firstNew }));
}
