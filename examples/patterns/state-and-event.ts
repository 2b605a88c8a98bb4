/**
 * State-and-event pattern example: account balances. Deposits are events; the balance per account
 * is the state, kept in a compacted state topic and committed with each deposit's position.
 * Run: node dist/examples/patterns/state-and-event.js
 */
import { pathToFileURL } from 'node:url';
import { createMemoryBus } from 'sluice/bus';
import { jsonCodec, startStateAndEvent } from 'sluice/patterns';

interface Deposit {
  amountCents: number;
}
interface Balance {
  cents: number;
  deposits: number;
}

const deposits = jsonCodec<Deposit>();
const balances = jsonCodec<Balance>();

/** Sends deposits for two accounts; returns the notifications written, in order per account. */
export async function main(): Promise<string[]> {
  const bus = createMemoryBus(); // or createJournalBus({ dir }) / createKafkaBus({ brokers })
  try {
    await bus.createTopics([
      { name: 'deposits', partitions: 2 },
      { name: 'balances', partitions: 2, compacted: true }, // same partition count as the events
      { name: 'notifications', partitions: 2 },
    ]);
    const producer = await bus.producer();
    const send = (account: string, amountCents: number) =>
      producer.send([{ topic: 'deposits', key: account, value: deposits.encode({ amountCents }) }]);
    await send('ada', 1000);
    await send('bob', 250);
    await send('ada', 500);
    const sub = startStateAndEvent({
      bus,
      groupId: 'balances',
      eventTopic: 'deposits',
      stateTopic: 'balances',
      transactionalId: 'balances-1',
      eventCodec: deposits,
      stateCodec: balances,
      processor: {
        onNext: (balance, deposit) => {
          const next = {
            cents: (balance?.cents ?? 0) + deposit.value!.amountCents,
            deposits: (balance?.deposits ?? 0) + 1,
          };
          return {
            state: next,
            outputs: [
              {
                topic: 'notifications',
                key: deposit.key,
                value: new TextEncoder().encode(`${deposit.key}: ${next.cents}`),
              },
            ],
          };
        },
      },
    });
    await sub.ready;
    const reader = await bus.consumer();
    await reader.assign([
      { topic: 'notifications', partition: 0 },
      { topic: 'notifications', partition: 1 },
    ]);
    const out: string[] = [];
    const deadline = Date.now() + 5000;
    while (out.length < 3 && Date.now() < deadline)
      for (const r of await reader.poll({ timeoutMs: 50 }))
        out.push(new TextDecoder().decode(r.value!));
    await sub.stop();
    return out.sort();
  } finally {
    await bus.close();
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href)
  for (const line of await main()) console.log(line);
