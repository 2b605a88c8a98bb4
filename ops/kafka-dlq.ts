/**
 * The operations API's dead letters on a kafka bus: the same answers as engine/service's
 * listDeadLetters / replayDeadLetterQueue / purgeDeadLetters (which `sluice dlq` uses), but
 * asynchronous, through an engine/bus kafka client on the main thread, so a request never blocks
 * the thread that runs the supervisor (those functions wait on a blocking client).
 *
 * Each call opens a client and closes it (a dead-letter request is rare; a client kept open
 * would hold broker connections for nothing):
 * - list: partition 0 of the dead-letter topic read read_committed from its first offset to its
 *   last stable offset at the call (a topic not created yet: no dead letters);
 * - replay: the events sent again through a plain idempotent producer, one send per target
 *   partition (targets and checks as engine/service replayTargets); the broker assigns the
 *   offsets, so `index` is -1;
 * Purge is not here: the API runs inside the running topology, whose services write their
 * dead-letter topics, so the route refuses it (409) as the journal's appender lock does; `sluice
 * dlq purge` purges with the topology stopped.
 */
import {
  actorBusOf,
  deadLetterOwner,
  decodeDeadLetter,
  replayTargets,
  type DeadLetterEntry,
  type ReplayedDeadLetter,
} from '../engine/service/index.js';
import { EnvelopeView } from '../engine/codec/index.js';
import type { BusBackend } from '../engine/bus/index.js';
import type { Topology } from '../engine/config/index.js';
import { kafkaOptionsOf } from '../actors/kafka-capture.js';

/** Largest sum of values in one send, bytes (under the broker's default message.max.bytes). */
const SEND_BYTES_MAX = 512 * 1024;
/** Longest wait for the records below a partition's last stable offset, ms. */
const READ_WAIT_MS = 30_000;

/** Runs `f` with a kafka bus client of the topology, closed afterwards. */
async function withBus<T>(topology: Topology, f: (bus: BusBackend) => Promise<T>): Promise<T> {
  const b = actorBusOf(topology);
  if (b.kind !== 'kafka') throw new Error(`${topology.file}: not a kafka bus`);
  const { createKafkaBus } = await import('../engine/bus/index.js');
  const bus = createKafkaBus(kafkaOptionsOf(b.connection));
  try {
    return await f(bus);
  } catch (err) {
    throw new Error(
      `kafka bus ${b.connection.brokers.join(', ')} (${topology.file}): ${(err as Error).message}`,
      { cause: err },
    );
  } finally {
    await bus.close().catch(() => undefined);
  }
}

/** Offsets of partition 0 of `topic`; null when the topic does not exist. */
async function dlqOffsets(
  bus: BusBackend,
  topic: string,
): Promise<{ start: number; end: number } | null> {
  if ((await bus.partitionCount(topic)) === null) return null;
  const [o] = await bus.offsets([{ topic, partition: 0 }]);
  return o!;
}

/** The dead letters of partition 0 of `topic` in [start, end), oldest first. */
async function readRange(
  bus: BusBackend,
  topic: string,
  start: number,
  end: number,
): Promise<DeadLetterEntry[]> {
  if (end <= start) return [];
  const tp = { topic, partition: 0 };
  const consumer = await bus.consumer({});
  const view = new EnvelopeView();
  const where = `kafka topic ${topic} partition 0`;
  const out: DeadLetterEntry[] = [];
  try {
    await consumer.assign([tp]);
    consumer.seek(tp, start);
    const deadline = Date.now() + READ_WAIT_MS;
    while (consumer.position(tp) < end) {
      if (Date.now() > deadline)
        throw new Error(
          `${where}: no record from offset ${consumer.position(tp)} within ${READ_WAIT_MS} ms although its last stable offset is ${end}`,
        );
      for (const r of await consumer.poll({ timeoutMs: 500 })) {
        if (r.offset >= end) break;
        out.push(
          decodeDeadLetter(view, where, { index: r.offset, bytes: r.value ?? new Uint8Array() }),
        );
      }
    }
  } finally {
    await consumer.close();
  }
  return out;
}

/**
 * Every dead letter of dead-letter queue `queue` (a topic on the topology's kafka bus), oldest
 * first. @throws Error if `queue` is not a service's dead-letter queue, or naming the brokers
 * and the topology file when the broker cannot be read.
 */
export async function kafkaListDeadLetters(
  topology: Topology,
  queue: string,
): Promise<DeadLetterEntry[]> {
  deadLetterOwner(topology, queue);
  return withBus(topology, async (bus) => {
    const o = await dlqOffsets(bus, queue);
    return o === null ? [] : readRange(bus, queue, o.start, o.end);
  });
}

/**
 * Sends the dead-lettered events of `queue` again (all, or `options.indexes`) to their source
 * partitions or to `options.to`; `index` of each is -1 (see the module comment).
 * @throws Error as engine/service replayTargets, or naming the brokers when sending fails.
 */
export async function kafkaReplayDeadLetters(
  topology: Topology,
  queue: string,
  options: { to?: string; indexes?: number[] } = {},
): Promise<ReplayedDeadLetter[]> {
  const targets = replayTargets(
    topology,
    queue,
    await kafkaListDeadLetters(topology, queue),
    options,
  );
  const out: ReplayedDeadLetter[] = [];
  await withBus(topology, async (bus) => {
    const producer = await bus.producer();
    try {
      for (const g of targets.values()) {
        // Sends under the broker's message.max.bytes (one send is one record batch per partition).
        for (let i = 0; i < g.entries.length;) {
          let bytes = 0;
          let j = i;
          while (
            j < g.entries.length &&
            (j === i || bytes + g.entries[j]!.bytes.length <= SEND_BYTES_MAX)
          )
            bytes += g.entries[j++]!.bytes.length;
          await producer.send(
            g.entries
              .slice(i, j)
              .map((e) => ({ topic: g.queue, partition: g.partition, key: null, value: e.bytes })),
          );
          i = j;
        }
        for (const e of g.entries)
          out.push({ dlqIndex: e.dlqIndex, queue: g.queue, partition: g.partition, index: -1 });
      }
    } finally {
      await producer.close();
    }
  });
  return out.sort((a, b) => a.dlqIndex - b.dlqIndex);
}
