/**
 * Shared by the pattern conformance suite and its crash child: the durable test processor and
 * bus helpers. Importing it registers no tests.
 */
import {
  createJournalBus,
  createKafkaBus,
  type BusBackend,
  type ConsumedRecord,
  type ProducerRecord,
} from '../engine/bus/index.js';
import type { DurableProcessor } from '../engine/patterns/index.js';

const enc = new TextEncoder();
export const text = (r: { value: Uint8Array | null }): string =>
  r.value === null ? 'null' : new TextDecoder().decode(r.value);
export const bytes = (s: string): Uint8Array => enc.encode(s);

/** Where a crash child opens its bus (JSON on its command line). */
export type ChildBusSpec = { kind: 'journal'; dir: string } | { kind: 'kafka'; brokers: string[] };

export async function openChildBus(spec: ChildBusSpec): Promise<BusBackend> {
  return spec.kind === 'kafka'
    ? createKafkaBus({ brokers: spec.brokers })
    : createJournalBus({ dir: spec.dir, fsync: 'none' });
}

/** Durable test processor: each input "v" with key k becomes "o:v" with key k on `output`. */
export function echoProcessor(output: string): DurableProcessor<string> {
  return {
    onNext: (records) =>
      records.map((r): ProducerRecord => ({
        topic: output,
        key: r.key,
        value: enc.encode(`o:${r.value}`),
      })),
  };
}

/** Every committed record of `topic`, reading each partition up to its current end. */
export async function readTopic(bus: BusBackend, topic: string): Promise<ConsumedRecord[]> {
  const n = (await bus.partitionCount(topic)) ?? 0;
  const tps = Array.from({ length: n }, (_, partition) => ({ topic, partition }));
  const ends = await bus.offsets(tps);
  const c = await bus.consumer();
  try {
    await c.assign(tps);
    await c.seekToBeginning(tps);
    const out: ConsumedRecord[] = [];
    const deadline = Date.now() + 10_000;
    while (tps.some((tp, i) => c.position(tp) < ends[i].end) && Date.now() < deadline)
      out.push(...(await c.poll({ timeoutMs: 100 })));
    return out;
  } finally {
    await c.close();
  }
}

/** Polls `topic` until `count` records are there or `timeoutMs` passed; returns them all. */
export async function waitForRecords(
  bus: BusBackend,
  topic: string,
  count: number,
  timeoutMs = 15_000,
): Promise<ConsumedRecord[]> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const got = await readTopic(bus, topic);
    if (got.length >= count || Date.now() > deadline) return got;
    await new Promise((r) => setTimeout(r, 50));
  }
}
