/**
 * Queue reader actor (worker entry): tails one queue partition from a given index and writes
 * each record into the ring of one consuming service, as an event frame (see
 * engine/actor/frame.ts). It parks on the queue's notifier when it has caught up, and the ring
 * makes it wait when the service is behind (backpressure; nothing is dropped).
 *
 * Drain: once asked, it reads up to the end of what is published (its producers are drained
 * first), closes the ring so the service knows the stream ended, and stops.
 */
import { READER_SHARED, type QueueReaderData } from './contracts.js';
import {
  runActor,
  Counter,
  Doorbell,
  FrameCodec,
  FRAME_HEADER_BYTES,
  FRAME_TYPE_EVENT,
  FRAME_TYPE_EVENT_REF,
} from '../engine/actor/index.js';
import { RingProducer } from '../engine/ring/index.js';
import { openQueueLogs } from '../engine/service/index.js';

const PARK_TIMEOUT_MS = 50;

runActor<QueueReaderData>((ctx) => {
  const d = ctx.data;
  const ring = new RingProducer(ctx.shared(READER_SHARED.ring));
  const frames = new FrameCodec(ring.bytes);
  const bell = new Doorbell(ctx.shared(READER_SHARED.doorbell));
  const logs = openQueueLogs(d.bus, () => ctx.heartbeat());
  const tailer = logs.tailer(d, ctx.shared(READER_SHARED.notifier));
  // [last index written to the ring, tailer index when caught up] for the operations layer.
  const position = new Float64Array(ctx.shared(READER_SHARED.position));
  try {
    if (!tailer.moveToIndex(d.from)) {
      throw new Error(
        `reader ${ctx.name}: start index ${d.from} is beyond the end of ${d.queue}/${d.partition} (next index ${tailer.index})`,
      );
    }
    ctx.setState('live');
    ctx.send({ type: 'live' });
    const c = ctx.counters;
    for (;;) {
      ctx.heartbeat();
      let n = 0;
      // Publish the tail once per batch (the ring also publishes before it would wait), not per record.
      ring.beginBatch();
      while (n < d.batchSizeMax) {
        const rec = tailer.next();
        if (!rec) {
          position[1] = tailer.index;
          break;
        }
        position[0] = rec.index;
        const len = FRAME_HEADER_BYTES + rec.bytes.length;
        if (len > ring.maxRecordBytes) {
          // Too large for the ring: the service reads it from the journal by its index.
          const ref = ring.claim(FRAME_TYPE_EVENT_REF, FRAME_HEADER_BYTES);
          frames.writeIndex(ref, rec.index);
          ring.commit(ref);
          n++;
          continue;
        }
        const off = ring.claim(FRAME_TYPE_EVENT, len);
        frames.writeIndex(off, rec.index);
        ring.bytes.set(rec.bytes, off + FRAME_HEADER_BYTES);
        ring.commit(off);
        n++;
      }
      ring.endBatch();
      if (n > 0) {
        bell.ring();
        c[Counter.eventsIn] += n; // read from the journal
        c[Counter.eventsOut] += n; // written to the ring
        c[Counter.batches]++;
        continue;
      }
      if (ctx.draining()) break;
      c[Counter.waits]++;
      tailer.waitForAppend(PARK_TIMEOUT_MS);
    }
    ctx.setState('drain');
    ring.close();
    bell.ring();
    return { queue: d.queue, partition: d.partition, nextIndex: tailer.index };
  } finally {
    tailer.close();
    logs.close();
  }
});
