/**
 * Pub/sub pattern: after Corda 5's PubSubSubscription. Every instance reads every partition of
 * the topic (manual assignment, no group), starting at the end: records produced before it
 * started are never seen. No outputs, no committed positions: at-most-once (a record whose
 * processing throws is reported to `onError` and skipped; a crash loses what was not processed).
 */
import type { BusBackend, BusConsumer } from '../bus/index.js';
import type { Codec } from './codec.js';
import {
  decodeRecord,
  deferred,
  settleLoop,
  PATTERN_DEFAULTS,
  type PatternRecord,
  type Subscription,
} from './subscription.js';

/** The application side of a pub/sub subscription. */
export interface PubSubProcessor<V> {
  /** One record at a time, in offset order per partition. Throwing skips the record. */
  onNext(record: PatternRecord<V>): void | Promise<void>;
  /**
   * Optional: when present, called once per poll with the poll's decoded records instead of
   * onNext per record (a pool stage spreads them over threads). It reports its own records'
   * failures; if it throws, the error is reported to `onError` for every record of the poll.
   */
  onBatch?(records: PatternRecord<V>[]): Promise<void>;
}

/** Options of {@link startPubSub}. */
export interface PubSubOptions<V> {
  bus: BusBackend;
  topic: string;
  codec: Codec<V>;
  processor: PubSubProcessor<V>;
  /** Processing and decode errors (the record is skipped). Default: ignored. */
  onError?(error: unknown, record: { topic: string; partition: number; offset: number }): void;
}

/**
 * Starts a pub/sub subscription; `ready` resolves once it is positioned at the end of every
 * partition (records produced after that are delivered). Throws (in `ready`/`done`)
 * BusError 'unknown-topic'.
 */
export function startPubSub<V>(opts: PubSubOptions<V>): Subscription {
  const ready = deferred();
  const done = deferred();
  let stopping = false;
  let consumer: BusConsumer | null = null;

  const run = async (): Promise<void> => {
    const n = await opts.bus.partitionCount(opts.topic);
    if (n === null) throw new Error(`pub/sub topic does not exist, topic=${opts.topic}`);
    const tps = Array.from({ length: n }, (_, partition) => ({ topic: opts.topic, partition }));
    consumer = await opts.bus.consumer({ autoOffsetReset: 'latest' });
    await consumer.assign(tps);
    await consumer.seekToEnd(tps);
    ready.resolve();
    const onBatch = opts.processor.onBatch?.bind(opts.processor);
    while (!stopping) {
      const polled = await consumer.poll({ timeoutMs: PATTERN_DEFAULTS.pollTimeoutMs });
      if (onBatch !== undefined) {
        const good: PatternRecord<V>[] = [];
        for (const r of polled) {
          try {
            good.push(decodeRecord(r, opts.codec));
          } catch (e) {
            opts.onError?.(e, r);
          }
        }
        if (good.length === 0) continue;
        try {
          await onBatch(good);
        } catch (e) {
          for (const r of good) opts.onError?.(e, r);
        }
        continue;
      }
      for (const r of polled) {
        try {
          await opts.processor.onNext(decodeRecord(r, opts.codec));
        } catch (e) {
          opts.onError?.(e, r);
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
