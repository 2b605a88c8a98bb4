/**
 * Compacted pattern: after Corda 5's CompactedSubscription. At start it reads every partition of
 * the topic from the beginning up to the end it had at start (last stable offset) into a map of
 * the latest value per key (a null value deletes the key, as a Kafka tombstone), hands the whole
 * map to the processor, then delivers each new record with the previous value of its key and
 * keeps the map current. Nothing is committed: every start rebuilds the map from the topic.
 * Keyless records are delivered but not kept in the map.
 */
import type { BusBackend, BusConsumer } from '../bus/index.js'
import type { Codec } from './codec.js'
import { decodeRecord, deferred, settleLoop, PATTERN_DEFAULTS, type PatternRecord, type Subscription } from './subscription.js'

/** The application side of a compacted subscription. */
export interface CompactedProcessor<V> {
  /** Once, with the latest value of every key at start. The map is the pattern's: read it, do not keep it. */
  onSnapshot(snapshot: ReadonlyMap<string, V>): void | Promise<void>
  /** Each record after the snapshot, with its key's previous value (null: none); `record.value` null = deleted. */
  onNext(record: PatternRecord<V>, previous: V | null, current: ReadonlyMap<string, V>): void | Promise<void>
}

/** Options of {@link startCompacted}. */
export interface CompactedOptions<V> {
  bus: BusBackend
  topic: string
  codec: Codec<V>
  processor: CompactedProcessor<V>
  /** Decode and processing errors of records after the snapshot (skipped). Default: ignored. Snapshot errors fail the subscription. */
  onError?(error: unknown, record: { topic: string; partition: number; offset: number }): void
}

/** Starts a compacted subscription; `ready` resolves after onSnapshot returned. */
export function startCompacted<V>(opts: CompactedOptions<V>): Subscription {
  const ready = deferred()
  const done = deferred()
  let stopping = false
  let consumer: BusConsumer | null = null
  const map = new Map<string, V>()

  const apply = (r: PatternRecord<V>): V | null => {
    if (r.key === null) return null
    const previous = map.get(r.key) ?? null
    if (r.value === null) map.delete(r.key)
    else map.set(r.key, r.value)
    return previous
  }

  const run = async (): Promise<void> => {
    const n = await opts.bus.partitionCount(opts.topic)
    if (n === null) throw new Error(`compacted topic does not exist, topic=${opts.topic}`)
    const tps = Array.from({ length: n }, (_, partition) => ({ topic: opts.topic, partition }))
    consumer = await opts.bus.consumer({ autoOffsetReset: 'earliest' })
    await consumer.assign(tps)
    await consumer.seekToBeginning(tps)
    const ends = await opts.bus.offsets(tps)
    const behind = (): boolean => tps.some((tp, i) => consumer!.position(tp) < ends[i].end)
    while (behind() && !stopping) {
      for (const r of await consumer.poll({ timeoutMs: PATTERN_DEFAULTS.pollTimeoutMs })) apply(decodeRecord(r, opts.codec))
    }
    await opts.processor.onSnapshot(map)
    ready.resolve()
    while (!stopping) {
      for (const r of await consumer.poll({ timeoutMs: PATTERN_DEFAULTS.pollTimeoutMs })) {
        try {
          const rec = decodeRecord(r, opts.codec)
          await opts.processor.onNext(rec, apply(rec), map)
        } catch (e) {
          opts.onError?.(e, r)
        }
      }
    }
  }

  return settleLoop(run(), async () => consumer?.close().catch(() => {}), ready, done, () => { stopping = true })
}
