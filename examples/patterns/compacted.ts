/**
 * Compacted pattern example: a configuration cache. At start it gets every key's latest value
 * (deleted keys absent), then each change with the previous value.
 * Run: node dist/examples/patterns/compacted.js
 */
import { pathToFileURL } from 'node:url';
import { createMemoryBus } from 'sluice/bus';
import { startCompacted, stringCodec } from 'sluice/patterns';

/** Returns the snapshot at start and the change lines after it. */
export async function main(): Promise<{ snapshot: Record<string, string>; changes: string[] }> {
  const bus = createMemoryBus(); // or createJournalBus({ dir }) / createKafkaBus({ brokers })
  try {
    await bus.createTopics([{ name: 'config', partitions: 2, compacted: true }]);
    const producer = await bus.producer();
    const put = (key: string, value: string | null) =>
      producer.send([
        { topic: 'config', key, value: value === null ? null : stringCodec.encode(value) },
      ]);
    await put('timeoutMs', '500');
    await put('retries', '3');
    await put('timeoutMs', '800');
    await put('retries', null); // a tombstone deletes the key
    let snapshot: Record<string, string> = {};
    const changes: string[] = [];
    const sub = startCompacted({
      bus,
      topic: 'config',
      codec: stringCodec,
      processor: {
        onSnapshot: (map) => void (snapshot = Object.fromEntries(map)),
        onNext: (r, previous) => void changes.push(`${r.key}: ${previous} -> ${r.value}`),
      },
    });
    await sub.ready;
    await put('timeoutMs', '1000');
    const deadline = Date.now() + 5000;
    while (changes.length < 1 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    await sub.stop();
    return { snapshot, changes };
  } finally {
    await bus.close();
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href)
  console.log(JSON.stringify(await main()));
