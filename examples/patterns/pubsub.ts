/**
 * Pub/sub pattern example: a price ticker listener that sees only prices published after it
 * started (at-most-once, no positions kept). Run: node dist/examples/patterns/pubsub.js
 */
import { pathToFileURL } from 'node:url';
import { createMemoryBus } from 'sluice/bus';
import { jsonCodec, startPubSub } from 'sluice/patterns';

interface Price {
  symbol: string;
  priceCents: number;
}
const prices = jsonCodec<Price>();

/** Publishes one old and two new prices; returns what the listener saw (the two new ones). */
export async function main(): Promise<Price[]> {
  const bus = createMemoryBus(); // or createJournalBus({ dir }) / createKafkaBus({ brokers })
  try {
    await bus.createTopics([{ name: 'prices', partitions: 2 }]);
    const producer = await bus.producer();
    const publish = (p: Price) =>
      producer.send([{ topic: 'prices', key: p.symbol, value: prices.encode(p) }]);
    await publish({ symbol: 'ACME', priceCents: 100 }); // before the listener: never seen
    const seen: Price[] = [];
    const sub = startPubSub({
      bus,
      topic: 'prices',
      codec: prices,
      processor: { onNext: (r) => void seen.push(r.value!) },
    });
    await sub.ready;
    await publish({ symbol: 'ACME', priceCents: 101 });
    await publish({ symbol: 'INIT', priceCents: 5000 });
    const deadline = Date.now() + 5000;
    while (seen.length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    await sub.stop();
    return seen;
  } finally {
    await bus.close();
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  for (const p of await main()) console.log(JSON.stringify(p));
}
