/**
 * The idempotent key-value store: a Map-like store whose every change is an event in the
 * service's output queue, so the output alone rebuilds it. Periodic update (timer) events
 * advance a snapshot cycle that writes the whole map in batches of `snapshotBatchSize`
 * entries, one batch per timer event, so a large map never stalls the service. A restart
 * replays only from the start of the newest complete cycle (or from the queue's start if none
 * completed). After Chronicle Services' key-value store restart.
 *
 * Records (reserved Sluice types 5..8; values are UTF-8 JSON):
 * ```
 *  type 5 put          key = map key, payload = value JSON; cause = the input (live puts),
 *                      none for snapshot entries
 *  type 6 remove       key = map key; cause = the input
 *  type 7 cycle start  payload = JSON { cycle, entries }   (entries: keys when it started)
 *  type 8 cycle end    payload = JSON { cycle }
 *
 *  ... put remove | start(c) put put | put (live) | put put end(c) | put ...
 *                 ^ S: restart replays from here once end(c) is durable
 * ```
 * Exactness: replaying [S, end) forwards gives the current map. A key changed live after S has
 * its change logged after S; a key not changed after S was written by the cycle (its value at
 * its batch = its current value); a key removed before its batch is skipped by the cycle and
 * its removal logged. "Idempotent": a put of the value already stored writes nothing, and
 * applying the log twice gives the same map.
 */
import { EnvelopeView, EnvelopeWriter, decodeJson, encodeJson } from '../codec/index.js';

export const EVENT_TYPE_KV_PUT = 5;
export const EVENT_TYPE_KV_REMOVE = 6;
export const EVENT_TYPE_KV_CYCLE_START = 7;
export const EVENT_TYPE_KV_CYCLE_END = 8;

/** Every bound of the key-value store, with its default. */
export const KV_DEFAULTS = {
  /** Entries written per timer event while a snapshot cycle runs. */
  snapshotBatchSize: 1000,
} as const;

/** What a service's handlers see as `ctx.kv`. */
export interface KeyValueStore {
  readonly size: number;
  get<T = unknown>(key: string): T | undefined;
  has(key: string): boolean;
  /** Stores a JSON value; writes a put event unless the key already holds an equal value. */
  put(key: string, value: unknown): void;
  /** Removes a key; writes a remove event if it was present. */
  remove(key: string): boolean;
  keys(): IterableIterator<string>;
}

/** Cause stamped on live changes: the current input. */
export interface KvCause {
  queue: number;
  partition: number;
  index: number;
}

const equalBytes = (a: Uint8Array, b: Uint8Array) => {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
};

/**
 * The store. Changes are encoded at once and handed to `sink` (the host's pending batch), so
 * they become durable with the batch of the input that caused them.
 */
export class KvStore implements KeyValueStore {
  private readonly map = new Map<string, { value: unknown; bytes: Uint8Array }>();
  private cycle = 0;
  private cycleKeys: string[] | null = null;
  private cyclePos = 0;
  /** False while the store is rebuilt or the host replays: changes are not logged. */
  logging = true;

  /**
   * @param snapshotBatchSize entries per timer event in a snapshot cycle (>= 1).
   * @throws Error if snapshotBatchSize < 1.
   */
  constructor(
    private readonly writer: EnvelopeWriter,
    private readonly sink: (envelope: Uint8Array) => void,
    private readonly cause: () => KvCause,
    private readonly snapshotBatchSize: number = KV_DEFAULTS.snapshotBatchSize,
  ) {
    if (!(Number.isInteger(snapshotBatchSize) && snapshotBatchSize >= 1))
      throw new Error(
        `snapshotBatchSize must be an integer >= 1, snapshotBatchSize=${snapshotBatchSize}`,
      );
  }

  get size(): number {
    return this.map.size;
  }
  get<T = unknown>(key: string): T | undefined {
    return this.map.get(key)?.value as T | undefined;
  }
  has(key: string): boolean {
    return this.map.has(key);
  }
  keys(): IterableIterator<string> {
    return this.map.keys();
  }

  put(key: string, value: unknown): void {
    const bytes = encodeJson(value);
    const old = this.map.get(key);
    if (old && equalBytes(old.bytes, bytes)) return;
    // Keep private copies: encodeJson results may share a slab, and the caller may mutate an
    // object it put (primitives are immutable: no decode needed).
    this.map.set(key, {
      value: typeof value === 'object' && value !== null ? decodeJson(bytes) : value,
      bytes: bytes.slice(),
    });
    if (!this.logging) return;
    const c = this.cause();
    this.sink(
      this.writer.encode({
        type: EVENT_TYPE_KV_PUT,
        key,
        causeQueue: c.queue,
        causePartition: c.partition,
        causeIndex: c.index,
        payload: bytes,
      }),
    );
  }

  remove(key: string): boolean {
    if (!this.map.delete(key)) return false;
    if (this.logging) {
      const c = this.cause();
      this.sink(
        this.writer.encode({
          type: EVENT_TYPE_KV_REMOVE,
          key,
          causeQueue: c.queue,
          causePartition: c.partition,
          causeIndex: c.index,
        }),
      );
    }
    return true;
  }

  /** True while a snapshot cycle has started and not ended. */
  get cycling(): boolean {
    return this.cycleKeys !== null;
  }

  /**
   * A periodic update: starts a snapshot cycle if none runs, writes the next batch of entries,
   * and ends the cycle when every key it started with was visited. Nothing while not logging.
   */
  onTimer(): void {
    if (!this.logging) return;
    if (!this.cycleKeys) {
      this.cycleKeys = [...this.map.keys()];
      this.cyclePos = 0;
      this.sink(
        this.writer.encode({
          type: EVENT_TYPE_KV_CYCLE_START,
          payload: encodeJson({ cycle: this.cycle, entries: this.cycleKeys.length }),
        }),
      );
    }
    const keys = this.cycleKeys;
    let written = 0;
    while (this.cyclePos < keys.length && written < this.snapshotBatchSize) {
      const key = keys[this.cyclePos++];
      const e = this.map.get(key);
      if (!e) continue; // removed since the cycle started: its removal is logged
      this.sink(this.writer.encode({ type: EVENT_TYPE_KV_PUT, key, payload: e.bytes }));
      written++;
    }
    if (this.cyclePos >= keys.length) {
      this.sink(
        this.writer.encode({
          type: EVENT_TYPE_KV_CYCLE_END,
          payload: encodeJson({ cycle: this.cycle }),
        }),
      );
      this.cycle++;
      this.cycleKeys = null;
    }
  }

  /** Applies one output record while rebuilding (puts and removes; markers set the cycle). */
  apply(view: EnvelopeView): void {
    switch (view.type) {
      case EVENT_TYPE_KV_PUT: {
        const bytes = view.payload.slice();
        this.map.set(view.key ?? '', { value: decodeJson(bytes), bytes });
        break;
      }
      case EVENT_TYPE_KV_REMOVE:
        this.map.delete(view.key ?? '');
        break;
      case EVENT_TYPE_KV_CYCLE_START:
      case EVENT_TYPE_KV_CYCLE_END: {
        const { cycle } = decodeJson(view.payload) as { cycle: number };
        if (cycle >= this.cycle) this.cycle = cycle + 1;
        break;
      }
    }
  }

  /** Plain copy of the map (tests, debugging). */
  toObject(): Record<string, unknown> {
    const o: Record<string, unknown> = {};
    for (const [k, e] of this.map) o[k] = e.value;
    return o;
  }
}

/** A reader that moves both ways over the output queue (a journal Tailer). */
export interface KvOutputReader {
  previous(): { index: number; bytes: Uint8Array } | null;
  next(): { index: number; bytes: Uint8Array } | null;
  moveToEnd(): void;
  moveToIndex(index: number): boolean;
}

/**
 * Rebuilds a store from the output: reads backwards to the newest cycle end, then on to that
 * cycle's start S (0 if no cycle completed), then applies every record from S forwards.
 * @returns the output index replay started at and the records read.
 * @throws Error if a cycle end has no start before it (damaged output).
 */
export function restoreKvStore(
  store: KvStore,
  out: KvOutputReader,
  where: string,
): { fromIndex: number; scanned: number; applied: number } {
  const view = new EnvelopeView();
  let scanned = 0;
  let endCycle = -1;
  let from = 0;
  out.moveToEnd();
  for (let rec = out.previous(); rec; rec = out.previous()) {
    scanned++;
    view.wrap(rec.bytes, 0, rec.bytes.length);
    if (endCycle < 0) {
      if (view.type === EVENT_TYPE_KV_CYCLE_END)
        endCycle = (decodeJson(view.payload) as { cycle: number }).cycle;
      continue;
    }
    if (
      view.type === EVENT_TYPE_KV_CYCLE_START &&
      (decodeJson(view.payload) as { cycle: number }).cycle === endCycle
    ) {
      from = rec.index;
      break;
    }
  }
  if (endCycle >= 0 && from === 0) {
    // the start may be record 0 itself; otherwise the scan ran off the start
    if (!out.moveToIndex(0)) throw new Error(`${where}: cannot move to the start`);
    const first = out.next();
    view.wrap(first!.bytes, 0, first!.bytes.length);
    if (view.type !== EVENT_TYPE_KV_CYCLE_START)
      throw new Error(`${where}: key-value cycle ${endCycle} ends but never starts`);
  }
  const logging = store.logging;
  store.logging = false;
  let applied = 0;
  try {
    if (!out.moveToIndex(from)) throw new Error(`${where}: cannot move to ${from}`);
    for (let rec = out.next(); rec; rec = out.next()) {
      scanned++;
      view.wrap(rec.bytes, 0, rec.bytes.length);
      if (view.type >= EVENT_TYPE_KV_PUT && view.type <= EVENT_TYPE_KV_CYCLE_END) {
        store.apply(view);
        applied++;
      }
    }
  } finally {
    store.logging = logging;
  }
  return { fromIndex: from, scanned, applied };
}
