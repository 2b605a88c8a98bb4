/**
 * State-and-event pattern: after Corda 5's StateAndEventSubscription. An event topic and a state
 * topic with the same partition count (and keys, so a key's state and events share a partition
 * number). When the group assigns an event partition, the whole state partition of the same
 * number is loaded (from its start to its end) before any event of it is processed: the load runs
 * inside the bus's `assigned` callback, i.e. inside poll(), so no event of that partition can be
 * returned first (case P4). The processor gets (event, current state of the key) and returns the
 * new state (null = delete, undefined = unchanged) and outputs; the state record, the outputs
 * and the event's position commit in one transaction per batch, and the in-memory state changes
 * only after the commit. A failed batch is aborted and rewound as in the durable pattern.
 */
import {
  BusError,
  type BusBackend,
  type BusConsumer,
  type BusProducer,
  type ConsumedRecord,
  type ProducerRecord,
  type TopicPartition,
} from '../bus/index.js';
import type { Codec } from './codec.js';
import {
  checkLoopOptions,
  decodeRecord,
  rewindToCommitted,
  deferred,
  settleLoop,
  PATTERN_DEFAULTS,
  sleep,
  type PatternRecord,
  type Subscription,
} from './subscription.js';

/** What the processor returns for one event. */
export interface StateAndEventResult<S> {
  /** New state of the event's key; null deletes it; undefined leaves it. */
  state?: S | null;
  outputs?: ProducerRecord[];
}

/** The application side of a state-and-event subscription. */
export interface StateAndEventProcessor<S, E> {
  /** One event with its key's current state (null: none). Must not have effects outside its result (it may be re-run after a failure). */
  onNext(
    state: S | null,
    event: PatternRecord<E>,
  ): StateAndEventResult<S> | Promise<StateAndEventResult<S>>;
}

/** Partition lifecycle callbacks (partitions of the event topic). */
export interface StateAndEventListener<S> {
  /** Assigned, before its states are loaded. */
  onPartitionAssigned?(partition: number): void;
  /** States of the partition loaded; its events are processed from now on. */
  onPartitionSynced?(partition: number, states: ReadonlyMap<string, S>): void;
  /** Revoked (or the subscription stopped); its states are dropped. */
  onPartitionLost?(partition: number): void;
}

/** Options of {@link startStateAndEvent}. */
export interface StateAndEventOptions<S, E> {
  bus: BusBackend;
  groupId: string;
  eventTopic: string;
  stateTopic: string;
  transactionalId: string;
  eventCodec: Codec<E>;
  stateCodec: Codec<S>;
  processor: StateAndEventProcessor<S, E>;
  listener?: StateAndEventListener<S>;
  batchSizeMax?: number;
  retriesMax?: number;
  retryBackoffMs?: number;
  sessionTimeoutMs?: number;
}

/**
 * Starts a state-and-event subscription. `done` rejects on the failure after `retriesMax`
 * retries in a row (retriesMax + 1 consecutive failed batches), on 'fenced'/'closed', or when a
 * topic does not exist or the state topic has fewer partitions than the event topic. Throws at
 * once on a bad `retriesMax`, `retryBackoffMs`, `sessionTimeoutMs` or `batchSizeMax`.
 */
export function startStateAndEvent<S, E>(
  opts: StateAndEventOptions<S, E>,
): Subscription & { readonly stats: { eventsCommitted: number; batchesFailed: number } } {
  const { retriesMax, retryBackoffMs } = checkLoopOptions(`state-and-event ${opts.groupId}`, opts);
  const stats = { eventsCommitted: 0, batchesFailed: 0 };
  const ready = deferred();
  const done = deferred();
  const states = new Map<number, Map<string, S>>();
  let stopping = false;
  let consumer: BusConsumer | null = null;
  let producer: BusProducer | null = null;

  const loadStates = async (partition: number): Promise<Map<string, S>> => {
    const tp = { topic: opts.stateTopic, partition };
    const [{ end }] = await opts.bus.offsets([tp]);
    const map = new Map<string, S>();
    const c = await opts.bus.consumer();
    try {
      await c.assign([tp]);
      await c.seekToBeginning([tp]);
      while (c.position(tp) < end) {
        for (const r of await c.poll({ timeoutMs: PATTERN_DEFAULTS.pollTimeoutMs })) {
          if (r.key === null) continue;
          if (r.value === null) map.delete(r.key);
          else map.set(r.key, opts.stateCodec.decode(r.value));
        }
      }
    } finally {
      await c.close();
    }
    return map;
  };

  const closeAll = async (): Promise<void> => {
    for (const p of states.keys()) opts.listener?.onPartitionLost?.(p);
    states.clear();
    await consumer?.close().catch(() => {});
    await producer?.close().catch(() => {});
  };

  const processBatch = async (
    c: BusConsumer,
    p: BusProducer,
    batch: ConsumedRecord[],
  ): Promise<void> => {
    const tps = new Map<string, TopicPartition>();
    for (const r of batch)
      tps.set(`${r.topic}:${r.partition}`, { topic: r.topic, partition: r.partition });
    const positions = [...tps.values()].map((tp) => ({ ...tp, offset: c.position(tp) }));
    const pending = new Map<string, { partition: number; key: string; state: S | null }>();
    const sends: ProducerRecord[] = [];
    for (const r of batch) {
      const event = decodeRecord(r, opts.eventCodec);
      const key = r.key;
      const current =
        key === null
          ? null
          : pending.has(`${r.partition}:${key}`)
            ? pending.get(`${r.partition}:${key}`)!.state
            : (states.get(r.partition)?.get(key) ?? null);
      const result = await opts.processor.onNext(current, event);
      if (result.outputs) sends.push(...result.outputs);
      if (key !== null && result.state !== undefined) {
        pending.set(`${r.partition}:${key}`, { partition: r.partition, key, state: result.state });
        sends.push({
          topic: opts.stateTopic,
          key,
          partition: r.partition,
          value: result.state === null ? null : opts.stateCodec.encode(result.state),
        });
      }
    }
    const txn = await p.begin();
    try {
      if (sends.length > 0) await txn.send(sends);
      await txn.sendOffsets(c.groupMetadata() ?? opts.groupId, positions);
      await txn.commit();
    } catch (e) {
      await txn.abort().catch(() => {});
      throw e;
    }
    for (const u of pending.values()) {
      const m = states.get(u.partition);
      if (!m) continue;
      if (u.state === null) m.delete(u.key);
      else m.set(u.key, u.state);
    }
  };

  const run = async (): Promise<void> => {
    const [events, stateParts] = [
      await opts.bus.partitionCount(opts.eventTopic),
      await opts.bus.partitionCount(opts.stateTopic),
    ];
    if (events === null)
      throw new Error(`state-and-event event topic does not exist, topic=${opts.eventTopic}`);
    if (stateParts === null)
      throw new Error(`state-and-event state topic does not exist, topic=${opts.stateTopic}`);
    if (stateParts < events) {
      throw new Error(
        `state topic needs at least the event topic's partitions, eventTopic=${opts.eventTopic} partitions=${events} stateTopic=${opts.stateTopic} partitions=${stateParts}`,
      );
    }
    consumer = await opts.bus.consumer({
      groupId: opts.groupId,
      pollRecordsMax: opts.batchSizeMax,
      sessionTimeoutMs: opts.sessionTimeoutMs,
      autoOffsetReset: 'earliest',
    });
    producer = await opts.bus.producer({ transactionalId: opts.transactionalId });
    await consumer.subscribe([opts.eventTopic], {
      assigned: async (tps) => {
        for (const tp of tps) {
          opts.listener?.onPartitionAssigned?.(tp.partition);
          const m = await loadStates(tp.partition);
          states.set(tp.partition, m);
          opts.listener?.onPartitionSynced?.(tp.partition, m);
        }
      },
      revoked: (tps) => {
        for (const tp of tps) {
          states.delete(tp.partition);
          opts.listener?.onPartitionLost?.(tp.partition);
        }
      },
    });
    ready.resolve();
    let failures = 0;
    while (!stopping) {
      const c = consumer;
      const batch = await c.poll({ timeoutMs: PATTERN_DEFAULTS.pollTimeoutMs });
      if (batch.length === 0 || stopping) continue;
      try {
        await processBatch(c, producer, batch);
        stats.eventsCommitted += batch.length;
        failures = 0;
      } catch (e) {
        if (stopping) return;
        if (e instanceof BusError && (e.code === 'fenced' || e.code === 'closed')) throw e;
        stats.batchesFailed++;
        if (++failures > retriesMax)
          throw new Error(
            `state-and-event ${opts.groupId}: ${failures} consecutive failed batches, last: ${(e as Error).message}`,
            { cause: e },
          );
        await sleep(retryBackoffMs);
        await rewindToCommitted(opts.bus, c);
      }
    }
  };

  return {
    stats,
    ...settleLoop(run(), closeAll, ready, done, () => {
      stopping = true;
    }),
  };
}
