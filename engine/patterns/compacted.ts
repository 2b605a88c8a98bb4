/**
 * Compacted pattern: after Corda 5's CompactedSubscription. At start it reads every partition of
 * the topic from the beginning up to the end it had at start (last stable offset) into a map of
 * the latest value per key (a null value deletes the key, as a Kafka tombstone), hands the whole
 * map to the processor, then delivers each new record with the previous value of its key and
 * keeps the map current. Nothing is committed: every start rebuilds the map from the topic, and
 * so does a reset of the topic while it runs.
 * Keyless records are delivered but not kept in the map.
 */
import { BusError, type BusBackend, type BusConsumer, type TopicPartition } from '../bus/index.js';
import type { Codec } from './codec.js';
import {
  decodeRecord,
  deferred,
  settleLoop,
  sleep,
  PATTERN_DEFAULTS,
  type PatternRecord,
  type Subscription,
} from './subscription.js';

/** The application side of a compacted subscription. */
export interface CompactedProcessor<V> {
  /**
   * Once, with the latest value of every key at start; again with the rebuilt map if the topic
   * was reset (see {@link startCompacted}). The map is the pattern's: read it, do not keep it.
   */
  onSnapshot(snapshot: ReadonlyMap<string, V>): void | Promise<void>;
  /** Each record after the snapshot, with its key's previous value (null: none); `record.value` null = deleted. */
  onNext(
    record: PatternRecord<V>,
    previous: V | null,
    current: ReadonlyMap<string, V>,
  ): void | Promise<void>;
}

/** Options of {@link startCompacted}. */
export interface CompactedOptions<V> {
  bus: BusBackend;
  topic: string;
  codec: Codec<V>;
  processor: CompactedProcessor<V>;
  /** Decode and processing errors of records after the snapshot (skipped). Default: ignored. Snapshot errors fail the subscription. */
  onError?(error: unknown, record: { topic: string; partition: number; offset: number }): void;
}

/** Longest time between two checks for a reset topic (one ListOffsets request), ms. */
const RESET_CHECK_MS = 5000;
/** Wait between attempts to rebuild the map while the bus is unreachable or the topic is missing, ms. */
const REBUILD_BACKOFF_MS = 500;

/**
 * Starts a compacted subscription; `ready` resolves after onSnapshot returned. The first build
 * fails the subscription when the topic does not exist. Afterwards the subscription survives its
 * bus going away (kafka: a broker restart): when its consumer reports the connection lost, and
 * every 5 s in any case, it compares the partitions' ends with its positions once the bus
 * answers, and if any
 * partition now ends before the position it had read to (the topic was deleted and created
 * again, or the cluster was replaced by an empty one) it drops the map, reads the topic again
 * from the beginning and calls onSnapshot again with the rebuilt map. A consumer that fails
 * (e.g. its group vanished with the cluster) is replaced the same way.
 */
export function startCompacted<V>(opts: CompactedOptions<V>): Subscription {
  const ready = deferred();
  const done = deferred();
  let stopping = false;
  let consumer: BusConsumer | null = null;
  const map = new Map<string, V>();

  const apply = (r: PatternRecord<V>): V | null => {
    if (r.key === null) return null;
    const previous = map.get(r.key) ?? null;
    if (r.value === null) map.delete(r.key);
    else map.set(r.key, r.value);
    return previous;
  };

  /** Reads the whole topic into a fresh map, then hands it to onSnapshot; returns the partitions. */
  const build = async (): Promise<TopicPartition[]> => {
    const n = await opts.bus.partitionCount(opts.topic);
    if (n === null) throw new Error(`compacted topic does not exist, topic=${opts.topic}`);
    const tps = Array.from({ length: n }, (_, partition) => ({ topic: opts.topic, partition }));
    map.clear();
    const c = (consumer = await opts.bus.consumer({ autoOffsetReset: 'earliest' }));
    await c.assign(tps);
    await c.seekToBeginning(tps);
    const ends = await opts.bus.offsets(tps);
    const behind = (): boolean => tps.some((tp, i) => c.position(tp) < ends[i].end);
    while (behind() && !stopping) {
      for (const r of await c.poll({ timeoutMs: PATTERN_DEFAULTS.pollTimeoutMs }))
        apply(decodeRecord(r, opts.codec));
    }
    await opts.processor.onSnapshot(map);
    return tps;
  };

  /** Delivers new records until stopped, or until the topic was reset (returns true). */
  const live = async (tps: TopicPartition[]): Promise<boolean> => {
    const c = consumer!;
    let lost = false;
    c.onConnectionLost?.(() => void (lost = true));
    let nextCheck = Date.now() + RESET_CHECK_MS;
    while (!stopping) {
      // A client may not report every lost connection (kafkajs retries some quietly, and then
      // resets its fetch offset to the new log's start): check now and then as well.
      if (Date.now() >= nextCheck) {
        lost = true;
        nextCheck = Date.now() + RESET_CHECK_MS;
      }
      if (lost) {
        // Wait until the bus answers again, then compare: a partition now ending before what was
        // read means the topic was reset.
        let ends: { start: number; end: number }[] | null = null;
        while (ends === null && !stopping) {
          ends = await opts.bus.offsets(tps).catch((e: unknown) => {
            if (e instanceof BusError && (e.code === 'closed' || e.code === 'bad-input')) throw e;
            return sleep(REBUILD_BACKOFF_MS).then(() => null);
          });
        }
        lost = false;
        if (ends !== null && tps.some((tp, i) => ends![i].end < c.position(tp))) return true;
      }
      for (const r of await c.poll({ timeoutMs: PATTERN_DEFAULTS.pollTimeoutMs })) {
        try {
          const rec = decodeRecord(r, opts.codec);
          await opts.processor.onNext(rec, apply(rec), map);
        } catch (e) {
          opts.onError?.(e, r);
        }
      }
    }
    return false;
  };

  const run = async (): Promise<void> => {
    let tps = await build();
    ready.resolve();
    for (;;) {
      try {
        if (!(await live(tps))) return;
      } catch (e) {
        if (stopping) return;
        if (e instanceof BusError && e.code === 'closed') throw e;
      }
      // Reset, or the bus failed: a new consumer and a new map, once the topic can be read.
      for (;;) {
        await consumer?.close().catch(() => {});
        consumer = null;
        if (stopping) return;
        try {
          tps = await build();
          break;
        } catch (e) {
          if (e instanceof BusError && e.code === 'closed') throw e;
          await sleep(REBUILD_BACKOFF_MS);
        }
      }
    }
  };

  return settleLoop(
    run(),
    async () => consumer?.close().catch(() => {}),
    ready,
    done,
    () => {
      stopping = true;
    },
  );
}
