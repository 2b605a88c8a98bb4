/**
 * What every pattern returns: a running subscription with a bounded, explicit end.
 */
import type { BusBackend, BusConsumer, ConsumedRecord, TopicPartition } from '../bus/index.js';
import type { Codec } from './codec.js';

/** A record handed to a processor: the bus record with its value decoded (null = tombstone). */
export interface PatternRecord<V> {
  topic: string;
  partition: number;
  offset: number;
  key: string | null;
  value: V | null;
  headers: Record<string, string>;
  timestampMs: number;
}

/** A running pattern. */
export interface Subscription {
  /** Resolves once the pattern reads (positions set); rejects if it failed before. */
  readonly ready: Promise<void>;
  /** Settles when the loop ends: resolves after stop(), rejects with the error that stopped it. */
  readonly done: Promise<void>;
  /**
   * Stops after the current batch and closes the pattern's consumer and producer. With
   * `abandon: true` closes them at once without waiting for the batch (a crash, for tests):
   * an open transaction is aborted by the producer's close.
   */
  stop(opts?: { abandon?: boolean }): Promise<void>;
}

/** Every default of engine/patterns, in one place. */
export const PATTERN_DEFAULTS = {
  /** Longest poll() wait per loop turn, ms: bounds how long stop() waits. */
  pollTimeoutMs: 100,
  /**
   * Durable and state-and-event: retries of a failed batch (processing or commit) in a row; the
   * next failure ends the subscription, so it fails on retriesMax + 1 consecutive failures.
   */
  retriesMax: 10,
  /** Durable and state-and-event: wait before retrying a failed batch, ms. */
  retryBackoffMs: 50,
  /**
   * Durable: most input records in one transaction. Batches polled while the previous commit
   * is still syncing join the next transaction (group commit), up to this bound.
   */
  commitRecordsMax: 5000,
} as const;

/**
 * Decodes a consumed record. Throws Error "cannot decode the value of topic/partition at offset
 * N: <codec's message>" (the codec's error as `cause`).
 */
export function decodeRecord<V>(r: ConsumedRecord, codec: Codec<V>): PatternRecord<V> {
  let value: V | null = null;
  if (r.value !== null) {
    try {
      value = codec.decode(r.value);
    } catch (e) {
      throw new Error(
        `cannot decode the value of ${r.topic}/${r.partition} at offset ${r.offset}: ${(e as Error)?.message ?? String(e)}`,
        { cause: e },
      );
    }
  }
  return {
    topic: r.topic,
    partition: r.partition,
    offset: r.offset,
    key: r.key,
    value,
    headers: r.headers,
    timestampMs: r.timestampMs,
  };
}

/** The retry and sizing options the durable and state-and-event patterns share. */
export interface LoopOptions {
  retriesMax?: number;
  retryBackoffMs?: number;
  sessionTimeoutMs?: number;
  batchSizeMax?: number;
}

/**
 * `opts` with the retry defaults filled in, checked up front: retriesMax an integer >= 0,
 * retryBackoffMs a finite number >= 0, sessionTimeoutMs and batchSizeMax (when given) integers
 * >= 1. Throws Error naming the pattern, the option and its value.
 */
export function checkLoopOptions(
  pattern: string,
  opts: LoopOptions,
): { retriesMax: number; retryBackoffMs: number } {
  const retriesMax = opts.retriesMax ?? PATTERN_DEFAULTS.retriesMax;
  const retryBackoffMs = opts.retryBackoffMs ?? PATTERN_DEFAULTS.retryBackoffMs;
  const bad = (name: string, rule: string, v: unknown): Error =>
    new Error(`${pattern}: ${name} must be ${rule}, ${name}=${String(v)}`);
  if (!(Number.isInteger(retriesMax) && retriesMax >= 0))
    throw bad('retriesMax', 'an integer >= 0', retriesMax);
  if (!(Number.isFinite(retryBackoffMs) && retryBackoffMs >= 0))
    throw bad('retryBackoffMs', 'a number of ms >= 0', retryBackoffMs);
  if (
    opts.sessionTimeoutMs !== undefined &&
    !(Number.isInteger(opts.sessionTimeoutMs) && opts.sessionTimeoutMs >= 1)
  )
    throw bad('sessionTimeoutMs', 'an integer number of ms >= 1', opts.sessionTimeoutMs);
  if (
    opts.batchSizeMax !== undefined &&
    !(Number.isInteger(opts.batchSizeMax) && opts.batchSizeMax >= 1)
  )
    throw bad('batchSizeMax', 'an integer >= 1', opts.batchSizeMax);
  return { retriesMax, retryBackoffMs };
}

/**
 * Throws Error "<pattern> topic does not exist, topic=<name>" for the first of `topics` the bus
 * does not have. Patterns check before they subscribe: a group subscription to a missing topic
 * would otherwise wait, silently, for the topic to appear.
 */
export async function checkTopicsExist(
  bus: BusBackend,
  pattern: string,
  topics: string[],
): Promise<void> {
  for (const topic of topics) {
    if ((await bus.partitionCount(topic)) === null)
      throw new Error(`${pattern} topic does not exist, topic=${topic}`);
  }
}

/**
 * Seeks each of `tps` that `c` still owns (default: every owned partition) back to its group's
 * committed position, or to the partition's start when nothing is committed: how the durable and
 * state-and-event patterns retry after a failed batch.
 */
export async function rewindToCommitted(
  bus: BusBackend,
  c: BusConsumer,
  tps: TopicPartition[] = c.assignment(),
): Promise<void> {
  const owned = c.assignment();
  const mine = tps.filter((tp) =>
    owned.some((o) => o.topic === tp.topic && o.partition === tp.partition),
  );
  if (mine.length === 0) return;
  const committed = await c.committed(mine);
  const starts = await bus.offsets(mine);
  mine.forEach((tp, i) => c.seek(tp, committed[i] ?? starts[i].start));
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** A deferred promise whose rejection is not reported as unhandled (callers may never await it). */
export function deferred(): {
  promise: Promise<void>;
  resolve: () => void;
  reject: (e: unknown) => void;
} {
  let resolve!: () => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<void>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  promise.catch(() => {});
  return { promise, resolve, reject };
}

/** A promise with its resolve/reject, as returned by {@link deferred}. */
export type Deferred = ReturnType<typeof deferred>;

/**
 * Runs a pattern's loop to its end the same way in every pattern, and returns its
 * {@link Subscription}: when the loop ends, close the pattern's clients, then settle `ready` (in
 * case the loop ended before it was ready) and `done` with the loop's outcome. `stop()` calls
 * `requestStop` (the loop then ends after its current batch) and waits for `done`; with
 * `abandon` it closes the clients at once instead.
 */
export function settleLoop(
  loop: Promise<void>,
  close: () => Promise<unknown>,
  ready: Deferred,
  done: Deferred,
  requestStop: () => void,
): Subscription {
  loop.then(
    async () => {
      await close();
      ready.resolve();
      done.resolve();
    },
    async (e) => {
      await close();
      ready.reject(e);
      done.reject(e);
    },
  );
  return {
    ready: ready.promise,
    done: done.promise,
    async stop(o = {}) {
      requestStop();
      if (o.abandon) await close();
      else await done.promise.catch(() => {});
    },
  };
}
