/**
 * Sink actor (worker entry): forwards one partition of a journal queue to a Kafka topic, exactly
 * once. For users who capture into the embedded journal and ship to Kafka later.
 *
 * Protocol (after Kafka Streams' EOS v1 sink: positions and outputs in one transaction):
 *  1. start: create the transactional producer of the fixed transactional.id
 *     `sluice.sink.<topology>.<sink>.<partition>`; its InitProducerId fences an older producer
 *     with the id (a replaced thread, a killed process) and waits until that one's last
 *     transaction is complete. Then read the committed offset of the consumer group of the same
 *     name for partition 0 of the topic: it is the next journal index to forward (none: 0).
 *  2. each cycle: read up to batchSizeMax records from that index; in one transaction send them
 *     (key: the event's key; value: the envelope bytes, or the JSON value with format json;
 *     headers `sluice.queue`, `sluice.partition`, `sluice.index`; timestamp: the event time)
 *     and sendOffsets(group, partition 0 of the topic = index after the batch); commit.
 *  3. a failed cycle (broker down, fenced) aborts; the actor waits (100 ms doubling to 5 s) and
 *     goes back to step 1, so it resumes from what the last committed transaction recorded.
 *  4. a record whose value is over the target's record limit (sinks[].to.recordBytesMax,
 *     engine/bus/record-limit.ts) ends the batch before it: the records before it are sent and
 *     the committed offset is its index. Then the actor stops shipping the partition: the broker
 *     would refuse the record (MESSAGE_TOO_LARGE) at every try, and a sink has no dead-letter
 *     queue to put it in (nor may it skip a journal record: "each record once, in order"). It
 *     reports the error once (actor state `failed`, its message as the actor's last
 *     error, downSinceMs set, so ops/health.ts shows the topology degraded naming the sink,
 *     queue, partition, index, size and limit), and idles until drained: it is not restarted,
 *     and a restart of the topology stops at the same index, shipping nothing twice. Raising
 *     the limit (and the broker's) and restarting ships it and what follows.
 * A read_committed consumer of the topic sees each journal record once, in index order per
 * journal partition (records of one key keep their order when the key maps to one partition).
 * The next index to ship, as read in step 1 and after each commit of step 2, is published in
 * SINK_SHARED.position: the operations layer's lag of the sink is the partition's end minus it.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { mkdirSync } from 'node:fs';
import { SINK_SHARED, type SinkData } from './contracts.js';
import { runActor, Counter } from '../engine/actor/index.js';
import { Tailer } from '../engine/journal/index.js';
import {
  EnvelopeView,
  decodeChange,
  EVENT_TYPE_CHANGE,
  EVENT_TYPE_JSON,
} from '../engine/codec/index.js';
import { createKafkaBus, type BusProducer, type ProducerRecord } from '../engine/bus/index.js';
import { checkRecordBytes, RecordTooLargeError } from '../engine/bus/record-limit.js';
import {
  CDC_DEFAULTS,
  encodeCaptureJson,
  jsonSourceInfo,
  type JsonSourceInfo,
} from '../engine/cdc/index.js';
import { kafkaOptionsOf } from './kafka-capture.js';

/** Header names of a forwarded record. */
export const SINK_HEADERS = {
  queue: 'sluice.queue',
  partition: 'sluice.partition',
  index: 'sluice.index',
} as const;

runActor<SinkData>(async (ctx) => {
  const d = ctx.data;
  const c = ctx.counters;
  const bus = createKafkaBus(kafkaOptionsOf(d.connection));
  // The queue may not have been written yet: its directory is the journal's to create.
  mkdirSync(d.dir, { recursive: true });
  const tailer = Tailer.open({ dir: d.dir });
  const view = new EnvelopeView();
  const info: JsonSourceInfo | null = d.captureSource ? jsonSourceInfo(d.captureSource) : null;
  const at = { [SINK_HEADERS.queue]: d.queue, [SINK_HEADERS.partition]: String(d.partition) };
  let producer: BusProducer | null = null;
  let next = 0;
  /** SINK_SHARED.position: `next` once known, for the operations layer's lag. */
  const position = new Float64Array(ctx.shared(SINK_SHARED.position));
  const outage = { sinceMs: 0, attempts: 0, what: '' };
  // What an outage names (GET /actors `outage`, the health's degraded reason, the log): the
  // journal queue for a failure of its reads, else the Kafka target.
  const targetName = `Kafka ${d.connection.brokers.join(',')} topic ${d.topic} (target of sink "${d.sink}")`;
  const sourceName = `journal queue "${d.queue}" partition ${d.partition} (source of sink "${d.sink}")`;
  const journalFailures = new WeakSet<object>();
  /** Runs a read of the journal; what it throws is marked as the source's. */
  const journalRead = <T>(read: () => T): T => {
    try {
      return read();
    } catch (e) {
      if (typeof e === 'object' && e !== null) journalFailures.add(e);
      throw e;
    }
  };
  /** Set by a cycle that met a record over the limit (step 4): why the partition stops. */
  let refused: string | null = null;

  /** Step 1. */
  const up = async (): Promise<void> => {
    if (producer) await producer.close().catch(() => undefined);
    producer = null;
    producer = await bus.producer({ transactionalId: d.transactionalId });
    const [committed] = await bus.committed(d.transactionalId, [{ topic: d.topic, partition: 0 }]);
    next = committed ?? 0;
    position[0] = next;
    if (!journalRead(() => tailer.moveToIndex(next))) {
      const e = new Error(
        `sink ${d.sink}: Kafka group ${d.transactionalId} says index ${next} of ${d.queue}/${d.partition} is next, but the journal ends at ${tailer.index}`,
      );
      journalFailures.add(e);
      throw e;
    }
  };

  /** The Kafka value of one journal record, or null when format json does not forward it. */
  const valueOf = (bytes: Uint8Array): Uint8Array | null => {
    if (d.format === 'envelope') return bytes;
    view.wrap(bytes, 0, bytes.length);
    if (view.type === EVENT_TYPE_JSON) return new Uint8Array(view.payload);
    if (view.type !== EVENT_TYPE_CHANGE) return null;
    const ch = decodeChange(view.payload);
    return encodeCaptureJson(
      {
        stagingId: ch.stagingId,
        table: ch.table,
        op: ch.op as never,
        key: ch.key,
        keyHash: 0,
        before: ch.before,
        after: ch.after,
        txid: ch.txid,
        timeMs: ch.commitTimeMs,
        attempts: 0,
      },
      info ?? { name: '', dialect: 'sqlite', database: '', tables: new Map() },
      ch.installation ?? '',
    );
  };

  /**
   * Step 4's check: null when `value` fits the target's limit, else why the partition stops at
   * journal index `index`.
   */
  const overLimit = (value: Uint8Array, index: number): string | null => {
    try {
      checkRecordBytes(
        value.length,
        d.recordBytesMax,
        'kafka',
        `sinks[].to.recordBytesMax of sink "${d.sink}", topic "${d.topic}"`,
      );
      return null;
    } catch (e) {
      if (!(e instanceof RecordTooLargeError)) throw e;
      return (
        `sink "${d.sink}" stops shipping queue "${d.queue}" partition ${d.partition} at index ` +
        `${index}: ${e.message}; the records before it are shipped, it and the ones after are ` +
        "not (raise sinks[].to.recordBytesMax, under the brokers' message.max.bytes and the " +
        "topic's max.message.bytes, and restart to ship them)"
      );
    }
  };

  /** Step 2; returns the records read from the journal (0: caught up, or stopped by step 4). */
  const cycle = async (): Promise<number> => {
    const records: ProducerRecord[] = [];
    let read = 0;
    /** The index after the last record of this batch: the committed offset. */
    let end = next;
    let over: string | null = null;
    while (read < d.batchSizeMax) {
      const rec = journalRead(() => tailer.next());
      if (!rec) break;
      const value = valueOf(rec.bytes);
      if (value !== null) over = overLimit(value, rec.index);
      if (over !== null) break;
      read++;
      end = tailer.index;
      if (value === null) continue;
      view.wrap(rec.bytes, 0, rec.bytes.length);
      const key = view.key;
      records.push({
        topic: d.topic,
        key: key === '[]' ? null : key,
        // A copy: rec.bytes is a view of the tailer's read buffer (a Buffer, whose slice() does
        // not copy), which the next reads of this batch may overwrite before the send.
        value: value === rec.bytes ? new Uint8Array(value) : value,
        timestampMs: view.eventTimeMs,
        headers: { ...at, [SINK_HEADERS.index]: String(rec.index) },
      });
    }
    if (read > 0) {
      const t = await producer!.begin();
      try {
        if (records.length > 0) await t.send(records);
        await t.sendOffsets(d.transactionalId, [{ topic: d.topic, partition: 0, offset: end }]);
        await t.commit();
      } catch (err) {
        await t.abort().catch(() => undefined);
        throw err;
      }
    }
    // Only once what came before it is committed: a failed cycle re-reads it after step 1.
    refused = over;
    if (read === 0) return 0;
    next = end;
    position[0] = next;
    c[Counter.eventsIn] += read;
    c[Counter.eventsOut] += records.length;
    c[Counter.batches]++;
    return read;
  };

  const down = async (err: unknown): Promise<void> => {
    const source = typeof err === 'object' && err !== null && journalFailures.has(err);
    const what = source ? sourceName : targetName;
    const error = String((err as Error).message ?? err);
    // Sent before the counter is set, so the health finds it with the counter (ops/health.ts).
    if (outage.what !== what) {
      outage.what = what;
      ctx.send({ type: 'outage', outage: { side: source ? 'source' : 'target', what, error } });
    }
    if (outage.sinceMs === 0) {
      outage.sinceMs = Date.now();
      c[Counter.downSinceMs] = outage.sinceMs;
      ctx.log(
        'warn',
        `${what} is down since ${new Date(outage.sinceMs).toISOString()}: ${error}; retrying`,
      );
    }
    c[Counter.errors]++;
    const delayMs = Math.min(
      CDC_DEFAULTS.outageBackoffInitialMs * 2 ** outage.attempts,
      CDC_DEFAULTS.outageBackoffMaxMs,
    );
    outage.attempts++;
    for (let waitedMs = 0; waitedMs < delayMs && !ctx.draining(); waitedMs += 50) {
      ctx.heartbeat();
      await sleep(Math.min(50, delayMs - waitedMs));
    }
  };

  /** Step 4: reports why the partition stops, then idles until drained. */
  const stopShipping = async (why: string): Promise<void> => {
    c[Counter.errors]++;
    c[Counter.downSinceMs] = Date.now();
    ctx.setState('failed');
    // The supervisor logs it (`actor sink:<sink>/<p> failed: ...`) and keeps it as lastError.
    ctx.send({ type: 'failed', message: why });
    while (!ctx.draining()) {
      ctx.heartbeat();
      await sleep(100);
    }
  };

  ctx.send({ type: 'ready', info: {} });
  ctx.setState('live');
  ctx.send({ type: 'live' });
  let connected = false;
  try {
    for (;;) {
      ctx.heartbeat();
      try {
        if (!connected) {
          await up();
          connected = true;
          if (outage.sinceMs !== 0) {
            ctx.log(
              'info',
              `${outage.what} is up again after ${((Date.now() - outage.sinceMs) / 1000).toFixed(1)} s down`,
            );
            ctx.send({ type: 'outage', outage: null });
          }
          outage.what = '';
          outage.sinceMs = 0;
          outage.attempts = 0;
          c[Counter.downSinceMs] = 0;
        }
        // A cycle that shipped the records before a refused one is not followed by another: the
        // tailer is past the refused record.
        if ((await cycle()) > 0 && refused === null) continue;
        if (refused !== null) {
          await stopShipping(refused);
          break;
        }
      } catch (err) {
        connected = false;
        await down(err);
        if (ctx.draining())
          throw new Error(`sink "${d.sink}" is down while draining: ${(err as Error).message}`);
        continue;
      }
      // Drain: stop once everything published before the drain is forwarded.
      if (ctx.draining()) break;
      c[Counter.waits]++;
      await sleep(d.pollIntervalMs);
    }
    ctx.setState('drain');
    return { sink: d.sink, partition: d.partition, nextIndex: next };
  } finally {
    tailer.close();
    if (producer) await (producer as BusProducer).close().catch(() => undefined);
    await bus.close().catch(() => undefined);
  }
});
