/**
 * Durable pattern example: orders in, invoices out, exactly once, on the embedded journal bus.
 * Run: node dist/examples/patterns/durable.js [dir]   (default: a fresh temp directory)
 * Prints the invoices; running it again on the same dir processes only new orders.
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { pathToFileURL } from 'node:url'
import { createJournalBus } from '../../engine/bus/index.js'
import { jsonCodec, startDurable } from '../../engine/patterns/index.js'

interface Order { id: string; customer: string; amountCents: number }
interface Invoice { orderId: string; customer: string; totalCents: number }

const orders = jsonCodec<Order>()
const invoices = jsonCodec<Invoice>()

/** Sends three orders, runs the pattern until their invoices are committed, returns the invoices. */
export async function main(dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-durable-'))): Promise<Invoice[]> {
  const bus = await createJournalBus({ dir })
  try {
    await bus.createTopics([{ name: 'orders', partitions: 4 }, { name: 'invoices', partitions: 4 }])
    const producer = await bus.producer()
    const sent: Order[] = [
      { id: 'o-1', customer: 'ada', amountCents: 1250 },
      { id: 'o-2', customer: 'bob', amountCents: 990 },
      { id: 'o-3', customer: 'ada', amountCents: 4000 },
    ]
    await producer.send(sent.map((o) => ({ topic: 'orders', key: o.customer, value: orders.encode(o) })))
    await producer.close()

    const sub = startDurable({
      bus, groupId: 'billing', topics: ['orders'], transactionalId: 'billing-1', codec: orders,
      processor: {
        // Outputs are returned, never sent: the pattern commits them with the consumed positions.
        onNext: (records) => records.map((r) => {
          const o = r.value!
          return { topic: 'invoices', key: o.customer, value: invoices.encode({ orderId: o.id, customer: o.customer, totalCents: Math.round(o.amountCents * 1.2) }) }
        }),
      },
    })
    await sub.ready
    const deadline = Date.now() + 10_000
    while (sub.stats.recordsCommitted < sent.length && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20))
    await sub.stop()

    const reader = await bus.consumer()
    const tps = [0, 1, 2, 3].map((partition) => ({ topic: 'invoices', partition }))
    await reader.assign(tps)
    const out = (await reader.poll({ timeoutMs: 0 })).map((r) => invoices.decode(r.value!))
    await reader.close()
    return out.sort((a, b) => a.orderId.localeCompare(b.orderId))
  } finally {
    await bus.close()
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  for (const inv of await main(process.argv[2])) console.log(JSON.stringify(inv))
}
