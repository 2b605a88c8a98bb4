/**
 * Service host actor (worker entry): runs one service module.
 *
 * Start protocol (the supervisor's group start drives it):
 *  1. open the output queue's appender (recovering a torn tail) and compute LAST_WRITTEN by
 *     reading the output backwards (engine/service/last-written.ts);
 *  2. build the state with `init`; with inputsReplay INPUTS, replay every input partition from
 *     index 0 through LAST_WRITTEN straight from the journal, outputs suppressed;
 *  3. send `ready` with the positions; the supervisor starts one queue reader per input
 *     partition at LAST_WRITTEN + 1 (startFrom LAST_WRITTEN), 0 (START) or the end (END);
 *  4. live: read every input ring in batches, run handlers in place (zero-copy), append the
 *     batch's outputs atomically and flush (fsync per the queue's policy), repeat.
 *
 * Exactness: outputs of one batch are one atomic appendBatch, each stamped with its input, so
 * after any crash LAST_WRITTEN names the last input whose outputs are durable; inputs after it
 * had no durable effect and are processed again.
 */
import * as hdr from 'hdr-histogram-js';
import { pathToFileURL } from 'node:url';
import { HOST_SHARED, type HostInput, type ServiceHostData, type ServiceReadyInfo, type ServiceSummary } from './contracts.js';
import { runActor, Counter, Doorbell, FrameCodec, FRAME_HEADER_BYTES, type ActorContext } from '../engine/actor/index.js';
import { RingConsumer } from '../engine/ring/index.js';
import { Appender, Tailer } from '../engine/journal/index.js';
import {
  EnvelopeView,
  EnvelopeWriter,
  decodeChange,
  decodeJson,
  encodeJson,
  queueId,
  EVENT_TYPE_CHANGE,
  EVENT_TYPE_JSON,
  type Change,
} from '../engine/codec/index.js';
import {
  assertServiceDefinition,
  computeLastWritten,
  inputKey,
  type ServiceContext,
  type ServiceDefinition,
  type ServiceEvent,
  type ServiceHandler,
} from '../engine/service/index.js';


const PARK_TIMEOUT_MS = 50;

/** Mutable event object reused for every input (handlers must not keep it). */
class HostEvent implements ServiceEvent {
  type = 0;
  key = '';
  eventTimeMs = 0;
  queue = '';
  partition = 0;
  index = 0;
  payload: Uint8Array = new Uint8Array(0);
  change(): Change {
    if (this.type !== EVENT_TYPE_CHANGE) throw new Error(`event ${this.queue}/${this.partition}#${this.index} is type ${this.type}, not a change`);
    return decodeChange(this.payload);
  }
  json<T>(): T {
    if (this.type !== EVENT_TYPE_JSON) throw new Error(`event ${this.queue}/${this.partition}#${this.index} is type ${this.type}, not json`);
    return decodeJson(this.payload) as T;
  }
}

runActor<ServiceHostData>(async (ctx: ActorContext<ServiceHostData>) => {
  const d = ctx.data;
  const mod: unknown = await import(pathToFileURL(d.moduleFile).href);
  const def: ServiceDefinition = assertServiceDefinition(mod, d.moduleFile);
  const c = ctx.counters;

  const outKey = inputKey(d.output.queue, 0);
  const appender = Appender.open({
    dir: d.output.dir,
    segmentBytes: d.output.segmentBytes,
    fsync: d.output.fsync,
    notifier: ctx.shared(HOST_SHARED.notifier(outKey)),
  });
  try {
    // 1. LAST_WRITTEN
    const back = Tailer.open({ dir: d.output.dir });
    back.moveToEnd();
    const { positions, scanned } = computeLastWritten(back, d.inputs);
    back.close();

    // 2. state, replay
    const state = def.init({ service: d.service, settings: d.settings });
    const writer = new EnvelopeWriter();
    const pending: Uint8Array[] = [];
    let replaying = false;
    let cause = { queue: 0, partition: 0, index: 0 };
    const sctx: ServiceContext = {
      service: d.service,
      get replaying() {
        return replaying;
      },
      emit(key, value, eventTimeMs) {
        if (replaying) return;
        pending.push(
          writer.encode({ type: EVENT_TYPE_JSON, key, eventTimeMs: eventTimeMs ?? Date.now(), causeQueue: cause.queue, causePartition: cause.partition, causeIndex: cause.index, payload: encodeJson(value) }),
        );
      },
      emitBytes(type, key, payload, eventTimeMs) {
        if (type < 100) throw new Error(`emitBytes: user event types are >= 100, type=${type}`);
        if (replaying) return;
        pending.push(
          writer.encode({ type, key, eventTimeMs: eventTimeMs ?? Date.now(), causeQueue: cause.queue, causePartition: cause.partition, causeIndex: cause.index, payload }),
        );
      },
    };
    const handlers = new Map<number, ServiceHandler<unknown>>();
    for (const [k, h] of Object.entries(def.handlers)) {
      if (!h) continue;
      handlers.set(k === 'change' ? EVENT_TYPE_CHANGE : k === 'json' ? EVENT_TYPE_JSON : Number(k), h as ServiceHandler<unknown>);
    }
    const ev = new HostEvent();
    const view = new EnvelopeView();
    /** Runs the handler for the envelope currently wrapped by `view`. */
    const dispatch = (input: HostInput, qid: number, index: number) => {
      ev.type = view.type;
      ev.key = view.key ?? '';
      ev.eventTimeMs = view.eventTimeMs;
      ev.queue = input.queue;
      ev.partition = input.partition;
      ev.index = index;
      ev.payload = view.payload;
      cause = { queue: qid, partition: input.partition, index };
      const h = handlers.get(ev.type);
      if (h) h(state, ev, sctx);
    };

    let replayed = 0;
    if (d.inputsReplay === 'INPUTS') {
      ctx.setState('replay');
      replaying = true;
      let total = 0;
      for (const input of d.inputs) total += positions[inputKey(input.queue, input.partition)] + 1;
      c[Counter.replayTotal] = total;
      for (const input of d.inputs) {
        const last = positions[inputKey(input.queue, input.partition)];
        if (last < 0) continue;
        const qid = queueId(input.queue);
        const t = Tailer.open({ dir: input.dir });
        try {
          t.moveToStart();
          for (;;) {
            if (t.index > last) break;
            const rec = t.next();
            if (!rec) throw new Error(`service ${d.service}: input ${input.queue}/${input.partition} ends at ${t.index} but LAST_WRITTEN is ${last}`);
            view.wrap(rec.bytes, 0, rec.bytes.length);
            dispatch(input, qid, rec.index);
            replayed++;
            if ((replayed & 0xfff) === 0) {
              c[Counter.replayed] = replayed;
              ctx.heartbeat();
            }
          }
        } finally {
          t.close();
        }
      }
      c[Counter.replayed] = replayed;
      replaying = false;
    }

    // 3. ready: tell the supervisor where readers start
    const from: Record<string, number> = {};
    for (const input of d.inputs) {
      const key = inputKey(input.queue, input.partition);
      if (d.startFrom === 'START') from[key] = 0;
      else if (d.startFrom === 'LAST_WRITTEN') from[key] = positions[key] + 1;
      else {
        const t = Tailer.open({ dir: input.dir });
        t.moveToEnd();
        from[key] = t.index;
        t.close();
      }
    }
    ctx.send({ type: 'ready', info: { from, lastWritten: positions, replayed, scannedOutputs: scanned } satisfies ServiceReadyInfo });

    // 4. live
    const rings = d.inputs.map((input) => {
      const consumer = new RingConsumer(ctx.shared(HOST_SHARED.ring(inputKey(input.queue, input.partition))));
      return { input, qid: queueId(input.queue), consumer, frames: new FrameCodec(consumer.bytes) };
    });
    const bell = new Doorbell(ctx.shared(HOST_SHARED.doorbell));
    const lag = hdr.build({ lowestDiscernibleValue: 1, highestTrackableValue: 3_600_000, numberOfSignificantValueDigits: 3 });
    let eventsIn = 0;
    let eventsOut = 0;
    ctx.setState('live');
    ctx.send({ type: 'live' });
    if (def.onLive) def.onLive(state, sctx);
    let nowMs = Date.now();
    let current = rings[0];
    const onRecord = (_typeId: number, bytes: Uint8Array, offset: number, length: number) => {
      const index = current.frames.readIndex(offset);
      view.wrap(bytes, offset + FRAME_HEADER_BYTES, length - FRAME_HEADER_BYTES);
      dispatch(current.input, current.qid, index);
      const l = nowMs - ev.eventTimeMs;
      lag.recordValue(l > 0 ? l : 0);
    };
    for (;;) {
      ctx.heartbeat();
      const seen = bell.value();
      let n = 0;
      nowMs = Date.now();
      for (const r of rings) {
        current = r;
        n += r.consumer.read(onRecord, d.batchSizeMax);
      }
      if (pending.length > 0) {
        appender.appendBatch(pending);
        appender.flush();
        eventsOut += pending.length;
        c[Counter.eventsOut] = eventsOut;
        pending.length = 0;
      }
      if (n > 0) {
        eventsIn += n;
        c[Counter.eventsIn] = eventsIn;
        c[Counter.batches]++;
        continue;
      }
      if (rings.every((r) => r.consumer.isClosed())) break;
      if (ctx.stopping()) break;
      c[Counter.waits]++;
      bell.park(seen, PARK_TIMEOUT_MS);
    }
    ctx.setState('drain');
    appender.flush();
    const summary: ServiceSummary = {
      service: d.service,
      eventsIn,
      eventsOut,
      replayed,
      lagMs: { count: lag.totalCount, p50: lag.getValueAtPercentile(50), p99: lag.getValueAtPercentile(99), max: lag.maxValue },
    };
    return summary;
  } finally {
    appender.close();
  }
});
