/**
 * Runs examples/processors/topology.yaml embedded: starts it (each processor an actor in its own
 * worker thread), sends orders to its bus (RunningTopology.bus), waits for every invoice and
 * balance, prints them as JSON lines, and stops (drain, exit 0).
 * Run: node dist/examples/processors/main.js [--topology FILE] [--orders N]
 * A data directory of its own each run (the topology's dataDir is overridden to a temp dir
 * unless SLUICE_DATA_DIR is set), so the numbers printed are those of this run.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { loadTopology, startTopology } from 'sluice';
import type { Invoice, Order } from './invoicing.js';

const here = path.dirname(fileURLToPath(import.meta.url));
/** The topology next to the sources (dist/examples/processors -> examples/processors). */
const defaultTopology = path.resolve(
  here,
  '..',
  '..',
  '..',
  'examples',
  'processors',
  'topology.yaml',
);

const enc = new TextEncoder();
const dec = new TextDecoder();

/** Starts the topology, sends `count` orders, returns the invoices and balances once all are there. */
export async function main(
  topologyFile = defaultTopology,
  count = 12,
): Promise<{ invoices: Invoice[]; balances: Record<string, number> }> {
  const topology = loadTopology(topologyFile);
  topology.dataDir =
    process.env.SLUICE_DATA_DIR ?? fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-processors-'));
  // Topic names from the topology (a test renames them to share a broker).
  const invoicing = topology.processors.find((p) => p.pattern === 'durable')!;
  const [ordersTopic, invoicesTopic] = [invoicing.inputs[0]!, invoicing.outputs[0]!];
  const balancesTopic = topology.processors.find(
    (p) => p.pattern === 'state-and-event',
  )!.stateTopic!;
  const running = await startTopology(topology, { log: () => {} });
  try {
    const bus = running.bus!;
    const producer = await bus.producer();
    const customers = ['ada', 'bob', 'cy'];
    const orders: Order[] = Array.from({ length: count }, (_, i) => ({
      id: `o-${i + 1}`,
      customer: customers[i % 3]!,
      amountCents: 1000 + i,
    }));
    await producer.send(
      orders.map((o) => ({
        topic: ordersTopic,
        key: o.customer,
        value: enc.encode(JSON.stringify(o)),
      })),
    );
    await producer.close();
    // Read until every invoice and the last balance of each customer are there.
    const tps = (topic: string) => [0, 1, 2, 3].map((partition) => ({ topic, partition }));
    const consumer = await bus.consumer();
    await consumer.assign([...tps(invoicesTopic), ...tps(balancesTopic)]);
    await consumer.seekToBeginning([...tps(invoicesTopic), ...tps(balancesTopic)]);
    const invoices: Invoice[] = [];
    const balances: Record<string, number> = {};
    const expected: Record<string, number> = {};
    for (const o of orders)
      expected[o.customer] = (expected[o.customer] ?? 0) + Math.round(o.amountCents * 1.2);
    const deadline = Date.now() + 30_000;
    while (
      (invoices.length < count || customers.some((c) => balances[c] !== expected[c])) &&
      Date.now() < deadline
    ) {
      for (const r of await consumer.poll({ timeoutMs: 200 })) {
        const value = JSON.parse(dec.decode(r.value!)) as Invoice | number;
        if (r.topic === invoicesTopic) invoices.push(value as Invoice);
        else balances[r.key!] = value as number;
      }
    }
    await consumer.close();
    return { invoices, balances };
  } finally {
    await running.stop();
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const arg = (name: string) => {
    const i = process.argv.indexOf(name);
    return i > 0 ? process.argv[i + 1] : undefined;
  };
  const { invoices, balances } = await main(
    arg('--topology') ?? defaultTopology,
    Number(arg('--orders') ?? 12),
  );
  for (const i of invoices.sort((a, b) => Number(a.orderId.slice(2)) - Number(b.orderId.slice(2))))
    console.log(JSON.stringify(i));
  console.log(JSON.stringify({ balances }));
}
