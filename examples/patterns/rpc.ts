/**
 * RPC pattern example: a price quote service. The responder answers on the request's partition;
 * the sender awaits a promise bounded by a timeout. Run: node dist/examples/patterns/rpc.js
 */
import { pathToFileURL } from 'node:url';
import { createMemoryBus } from 'sluice/bus';
import { jsonCodec, RpcTimeoutError, startRpcResponder, startRpcSender } from 'sluice/patterns';

interface QuoteRequest {
  symbol: string;
}
interface Quote {
  symbol: string;
  priceCents: number;
}

/** Asks for two quotes (one known, one the responder ignores); returns what came back. */
export async function main(): Promise<(Quote | string)[]> {
  const bus = createMemoryBus(); // or createJournalBus({ dir }) / createKafkaBus({ brokers })
  try {
    await bus.createTopics([
      { name: 'quote-requests', partitions: 2 },
      { name: 'quote-responses', partitions: 2 },
    ]);
    const common = {
      bus,
      requestTopic: 'quote-requests',
      responseTopic: 'quote-responses',
      requestCodec: jsonCodec<QuoteRequest>(),
      responseCodec: jsonCodec<Quote>(),
    };
    const prices: Record<string, number> = { ACME: 1234 };
    const responder = startRpcResponder({
      ...common,
      processor: {
        onRequest: async (r) => {
          if (!(r.value!.symbol in prices)) await new Promise((res) => setTimeout(res, 500)); // too slow
          return { symbol: r.value!.symbol, priceCents: prices[r.value!.symbol] ?? 0 };
        },
      },
    });
    const sender = startRpcSender({ ...common, timeoutMs: 200 });
    await Promise.all([responder.ready, sender.ready]);
    const out: (Quote | string)[] = [];
    for (const symbol of ['ACME', 'UNKNOWN']) {
      out.push(
        await sender
          .send({ symbol }, { key: symbol })
          .catch((e: Error) =>
            e instanceof RpcTimeoutError ? `timeout: ${symbol}` : `error: ${e.message}`,
          ),
      );
    }
    await sender.stop();
    await responder.stop();
    return out;
  } finally {
    await bus.close();
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href)
  for (const x of await main()) console.log(JSON.stringify(x));
