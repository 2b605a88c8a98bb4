/**
 * Service host actor (worker entry): runs one service module.
 *
 * Start protocol (the supervisor's group start drives it); restart strategies after Chronicle
 * Services:
 *  1. check that the definition supports the configured strategy (engine/service
 *     replayProblems); open the output queue's appender (recovering a torn tail); find the
 *     positions by reading the output backwards: the newest processed record (engine/replay)
 *     when the service writes them (inputsReplay OUTPUT, or snapshots), else LAST_WRITTEN from
 *     the outputs' causes (engine/service/last-written.ts); and the newest complete snapshot;
 *  2. build the state: restore the snapshot, or `init`; then replay, outputs suppressed:
 *     - OUTPUT: the inputs in the order the processed records list them (after the snapshot);
 *     - INPUTS (or a snapshot without OUTPUT): each input partition from index 0 (or the
 *       snapshot's position + 1) through its position, straight from the journal;
 *     - OUTPUT_REVERSE: the output newest first, to `replayOutput` until it returns true;
 *     - a key-value store (`kvStore`): its puts/removes from the newest complete snapshot
 *       cycle's start (engine/replay/kv.ts); timer events advance its snapshot cycles;
 *  3. send `ready` with the positions; the supervisor starts one queue reader per input
 *     partition at position + 1 (startFrom LAST_WRITTEN), 0 (START) or the end (END);
 *  4. live: read every input ring in batches, run handlers in place (zero-copy), append the
 *     batch's outputs, its processed record and any due snapshot atomically, repeat; flush
 *     (fsync per the queue's policy) once a pass finds no new input, or after
 *     GROUP_COMMIT_BATCHES_MAX batches or GROUP_COMMIT_MS_MAX (group commit: under load one
 *     fdatasync covers many batches, each still its own atomic unit).
 *
 * Exactness: outputs of one batch are one atomic appendBatch, each stamped with its input, so
 * after any crash the positions name the last inputs whose effects are durable; inputs after
 * them had no durable effect and are processed again. Inputs appended while the service
 * replays are read live: readers start at position + 1, whatever the replay did.
 */
import * as hdr from 'hdr-histogram-js';
import { pathToFileURL } from 'node:url';
import {
  HOST_SHARED,
  type HostInput,
  type ServiceHostData,
  type ServiceReadyInfo,
  type ServiceSummary,
} from './contracts.js';
import {
  runActor,
  Counter,
  Doorbell,
  FrameCodec,
  FRAME_HEADER_BYTES,
  FRAME_TYPE_EVENT_REF,
  type ActorContext,
} from '../engine/actor/index.js';
import { RingConsumer } from '../engine/ring/index.js';
import { RECORD_BYTES_MAX } from '../engine/journal/index.js';
import { checkRecordBytes } from '../engine/bus/index.js';
import {
  EnvelopeView,
  EnvelopeWriter,
  decodeChange,
  decodeJson,
  encodeJson,
  queueId,
  EVENT_TYPE_CHANGE,
  EVENT_TYPE_JSON,
  USER_EVENT_TYPE_MIN,
  type Change,
} from '../engine/codec/index.js';
import {
  EVENT_TYPE_PROCESSED,
  EVENT_TYPE_TIMER,
  KV_DEFAULTS,
  KvStore,
  restoreKvStore,
  ProcessedRecorder,
  SNAPSHOT_DEFAULTS,
  encodeSnapshot,
  replayProcessed,
  replayRange,
  scanOutput,
  type OutputScan,
} from '../engine/replay/index.js';
import {
  assertServiceDefinition,
  assertNotThenable,
  computeLastWritten,
  deadLetteredPositions,
  encodeDeadLetter,
  EVENT_TYPE_DEAD_LETTERED,
  replayProblems,
  inputKey,
  type ServiceContext,
  type ServiceDefinition,
  type ServiceEvent,
  type ServiceHandler,
  openQueueLogs,
  startFromStrategy,
  type QueuePartition,
  type PartitionTailer,
} from '../engine/service/index.js';

const PARK_TIMEOUT_MS = 50;
/**
 * Group commit bounds of the live loop: the outputs of at most this many ring reads (batches of
 * batchSizeMax inputs), appended over at most GROUP_COMMIT_MS_MAX, share one flush (write and
 * fdatasync). Below the rate the disk syncs at, every batch is flushed at once.
 */
const GROUP_COMMIT_BATCHES_MAX = 32;
const GROUP_COMMIT_MS_MAX = 2;

/** Mutable event object reused for every input (handlers must not keep it). */
class HostEvent implements ServiceEvent {
  type = 0;
  /** The key, or null until first read from `keySource` (a handler that never reads it costs no UTF-8 decoding). */
  private keyText: string | null = '';
  private keySource: EnvelopeView | null = null;
  get key(): string {
    if (this.keyText === null) this.keyText = this.keySource!.key ?? '';
    return this.keyText;
  }
  set key(key: string) {
    this.keyText = key;
  }
  /** The key is `view`'s, decoded on first use (while `view` still wraps this event). */
  keyFrom(view: EnvelopeView): void {
    this.keyText = null;
    this.keySource = view;
  }
  eventTimeMs = 0;
  queue = '';
  partition = 0;
  index = 0;
  payload: Uint8Array = new Uint8Array(0);
  change(): Change {
    if (this.type !== EVENT_TYPE_CHANGE)
      throw new Error(
        `event ${this.queue}/${this.partition}#${this.index} is type ${this.type}, not a change`,
      );
    return decodeChange(this.payload);
  }
  json<T>(): T {
    if (this.type !== EVENT_TYPE_JSON)
      throw new Error(
        `event ${this.queue}/${this.partition}#${this.index} is type ${this.type}, not json`,
      );
    return decodeJson(this.payload) as T;
  }
}

runActor<ServiceHostData>(async (ctx: ActorContext<ServiceHostData>) => {
  const d = ctx.data;
  const mod: unknown = await import(pathToFileURL(d.moduleFile).href);
  const def: ServiceDefinition = assertServiceDefinition(mod, d.moduleFile);
  const c = ctx.counters;

  const outKey = inputKey(d.output.queue, 0);
  // The queues' bus (journal or Kafka): every tailer and appender below comes from here.
  const logs = openQueueLogs(d.bus, () => ctx.heartbeat());
  const outPart: QueuePartition = { queue: d.output.queue, partition: 0, dir: d.output.dir };
  // Kafka: opening the output's transactional producer fences a zombie of this service and
  // aborts its open transaction, so the scans below see committed outputs only.
  const appender = logs.appender(
    { ...outPart, ...d.output, transactionalId: d.transactionalId },
    ctx.shared(HOST_SHARED.notifier(outKey)),
  );
  const dl = d.deadLetter;
  const dlPart: QueuePartition | null = dl ? { queue: dl.queue, partition: 0, dir: dl.dir } : null;
  const dlqAppender = dl
    ? logs.appender(
        {
          ...dlPart!,
          segmentBytes: dl.segmentBytes,
          fsync: dl.fsync,
          transactionalId: `${d.transactionalId}.dlq`,
        },
        ctx.shared(HOST_SHARED.notifier(inputKey(dl.queue, 0))),
      )
    : null;
  /**
   * Largest record the bus takes, bytes: on Kafka the topology's bus.recordBytesMax (under the
   * broker's message.max.bytes, which refuses larger ones with MESSAGE_TOO_LARGE), else the
   * journal's.
   */
  const recordLimit = d.bus.kind === 'kafka' ? d.bus.recordBytesMax : RECORD_BYTES_MAX;
  const busName = logs.kind === 'kafka' ? 'kafka' : 'journal';
  /** Snapshot chunk payload, bytes: on Kafka small enough that a chunk's record fits the limit. */
  const snapshotChunkBytes =
    logs.kind === 'kafka'
      ? Math.min(SNAPSHOT_DEFAULTS.chunkBytes, recordLimit >>> 1)
      : SNAPSHOT_DEFAULTS.chunkBytes;
  /** Tailers of the replays: the output's (no ordinal) or input ordinal n's. */
  const replaySource = (n?: number) => logs.tailer(n === undefined ? outPart : d.inputs[n]);
  try {
    const startedMs = Date.now();
    const where = `service ${d.service}: output ${d.output.queue}/0`;
    const problems = replayProblems(def, {
      service: d.service,
      inputsReplay: d.inputsReplay,
      settings: d.settings,
    });
    if (problems.length > 0)
      throw new Error(problems.map(([field, m]) => `${field}: ${m} (${d.moduleFile})`).join('\n'));
    const snap = def.snapshot;
    // Processed records are written when a restart needs exact positions or the interleaving.
    // With emitDuringReplay the output also holds outputs of replayed (old) inputs, so the
    // positions cannot come from the outputs' causes.
    const recordProcessed =
      d.inputsReplay === 'OUTPUT' ||
      snap !== undefined ||
      def.kvStore !== undefined ||
      d.emitDuringReplay;
    const keys = d.inputs.map((i) => inputKey(i.queue, i.partition));

    // 1. positions: LAST_WRITTEN from the newest processed record, else from output causes;
    //    the newest complete snapshot, if the service declares them.
    let scanned = 0;
    let last: number[];
    let found: OutputScan['snapshot'] = null;
    {
      let fromProcessed: number[] | null = null;
      if (recordProcessed) {
        const back = logs.tailer(outPart);
        back.moveToEnd();
        const scan = scanOutput(back, d.inputs, snap?.type, where);
        back.close();
        scanned += scan.scanned;
        fromProcessed = scan.positions;
        found = scan.snapshot;
      }
      const back = logs.tailer(outPart);
      back.moveToEnd();
      const lw = fromProcessed ? null : computeLastWritten(back, d.inputs);
      back.close();
      if (lw) scanned += lw.scanned;
      last = fromProcessed ?? keys.map((k) => lw!.positions[k]);
      if (d.inputsReplay === 'OUTPUT' && !fromProcessed && last.some((p) => p >= 0)) {
        throw new Error(
          `${where}: inputsReplay OUTPUT needs processed records, but the output has outputs and none (it was written with another inputsReplay; replay it once with INPUTS, or start a new output queue)`,
        );
      }
      if (found) last = last.map((p, n) => Math.max(p, found!.positions[n]));
    }
    // Where this run resumes, for the operations API's consumer lag while the replay runs (the
    // slots are NaN, "not known", until now; a restarted service is not lagging by its history).
    const handledShared = new Float64Array(ctx.shared(HOST_SHARED.positions));
    last.forEach((p, i) => (handledShared[i] = p));

    // 2. state, replay
    const init = { service: d.service, settings: d.settings };
    const state = found ? snap!.restore(found.bytes, init) : def.init(init);
    const writer = new EnvelopeWriter();
    const pending: Uint8Array[] = [];
    /**
     * An output record over the bus's record limit fails the handler that emitted it (so it is
     * retried and dead-lettered like any handler error) instead of the whole batch at the broker.
     * @throws RecordTooLargeError naming the size, the limit, the bus and the output queue.
     */
    const checkOutputSize = (bytes: Uint8Array): Uint8Array => {
      checkRecordBytes(bytes.length, recordLimit, busName, `output queue ${d.output.queue}`);
      return bytes;
    };
    let replaying = false;
    const cause = { queue: 0, partition: 0, index: 0 };
    const kv = def.kvStore
      ? new KvStore(
          writer,
          (e) => pending.push(e),
          () => cause,
          Number(
            d.settings.kvSnapshotBatchSize ??
              def.kvStore.snapshotBatchSize ??
              KV_DEFAULTS.snapshotBatchSize,
          ),
        )
      : null;
    const sctx: ServiceContext = {
      service: d.service,
      get replaying() {
        return replaying;
      },
      get kv(): KvStore {
        if (!kv)
          throw new Error(`service ${d.service}: ctx.kv needs kvStore in the service definition`);
        return kv;
      },
      emit(key, value, eventTimeMs) {
        if (replaying && !d.emitDuringReplay) return;
        pending.push(
          checkOutputSize(
            writer.encode({
              type: EVENT_TYPE_JSON,
              key,
              eventTimeMs: eventTimeMs ?? Date.now(),
              causeQueue: cause.queue,
              causePartition: cause.partition,
              causeIndex: cause.index,
              payload: encodeJson(value),
            }),
          ),
        );
      },
      log(level, msg, fields) {
        if (replaying && level !== 'warn' && level !== 'error' && level !== 'fatal') return;
        ctx.log(level, msg, fields);
      },
      emitBytes(type, key, payload, eventTimeMs) {
        if (type < 100) throw new Error(`emitBytes: user event types are >= 100, type=${type}`);
        if (replaying && !d.emitDuringReplay) return;
        pending.push(
          checkOutputSize(
            writer.encode({
              type,
              key,
              eventTimeMs: eventTimeMs ?? Date.now(),
              causeQueue: cause.queue,
              causePartition: cause.partition,
              causeIndex: cause.index,
              payload,
            }),
          ),
        );
      },
    };
    const handlers = new Map<number, ServiceHandler<unknown>>();
    for (const [k, h] of Object.entries(def.handlers)) {
      if (!h) continue;
      handlers.set(
        k === 'change' ? EVENT_TYPE_CHANGE : k === 'json' ? EVENT_TYPE_JSON : Number(k),
        h as ServiceHandler<unknown>,
      );
    }
    // Periodic update events since the last snapshot (counted in replays too: the replay after a
    // snapshot sees the same events the live run did).
    let timersSinceSnapshot = 0;
    const ev = new HostEvent();
    // Per input, the newest source index already in the dead-letter queue: a restart after a
    // crash between the dead-letter append and the output append does not append it twice.
    const dlqNewest = dl ? deadLetteredPositions(dl.dir, d.inputs, () => logs.tailer(dlPart!)) : {};
    let deadLettered = 0;
    /** The envelope bytes `view` wraps, for the dead-letter record. */
    const raw: { bytes: Uint8Array<ArrayBufferLike>; offset: number; length: number } = {
      bytes: new Uint8Array(0),
      offset: 0,
      length: 0,
    };
    const retrySleeper = new Int32Array(new SharedArrayBuffer(4));
    const view = new EnvelopeView();
    const qids = d.inputs.map((i) => queueId(i.queue));
    /** Runs the handler for the envelope currently wrapped by `view`. */
    const dispatch = (input: HostInput, qid: number, index: number) => {
      ev.type = view.type;
      ev.keyFrom(view);
      ev.eventTimeMs = view.eventTimeMs;
      ev.queue = input.queue;
      ev.partition = input.partition;
      ev.index = index;
      ev.payload = view.payload;
      // Mutated in place: one object for the service's life, not one per input event.
      cause.queue = qid;
      cause.partition = input.partition;
      cause.index = index;
      if (ev.type === EVENT_TYPE_TIMER) {
        timersSinceSnapshot++;
        if (kv && !replaying) kv.onTimer();
        if (def.onTimer)
          assertNotThenable(def.onTimer(state, ev, sctx), `service ${d.service}: onTimer`);
        return;
      }
      const h = handlers.get(ev.type);
      if (!h) return;
      // What the failed attempts emitted is dropped; what they did to the state is not undone.
      const mark = pending.length;
      for (let attempts = 1; ; attempts++) {
        let result: unknown;
        try {
          result = h(state, ev, sctx);
        } catch (err) {
          pending.length = mark;
          c[Counter.errors]++;
          const e = err instanceof Error ? err : new Error(String(err));
          // During a replay the live run already dead-lettered the input: skip it again.
          if (replaying && dl) return;
          if (!replaying && attempts <= d.errors.retriesMax) {
            Atomics.wait(retrySleeper, 0, 0, d.errors.retryBackoffMs * 2 ** (attempts - 1));
            continue;
          }
          if (!dl) {
            // Name the input: the supervisor restarts the group, and the same input fails
            // again, so the operator needs to know which event it is.
            const during = replaying ? ' during replay' : '';
            const at = `${input.queue}/${input.partition} index ${index}`;
            throw new Error(
              `service ${d.service}: handler for type ${ev.type} failed${during} on ${at} ` +
                `(key ${JSON.stringify(ev.key)}): ${e.message}`,
              { cause: e },
            );
          }
          deadLetter(input, qid, index, attempts, e.message);
          return;
        }
        // A promise is a programming error, not a failure of this input: not retried or
        // dead-lettered; the group fails with the reason (and `sluice check` refuses an async
        // function at load).
        assertNotThenable(result, `service ${d.service}: handler for type ${ev.type}`);
        return;
      }
      // Sluice's own records (types 3..99: replay metadata) have no handler and are skipped.
    };
    /** Parks the current event in the dead-letter queue and marks it processed in the output. */
    const deadLetter = (
      input: HostInput,
      qid: number,
      index: number,
      attempts: number,
      error: string,
      keepEvent = true,
    ) => {
      const key = inputKey(input.queue, input.partition);
      if (index > (dlqNewest[key] ?? -1)) {
        const { bytes, offset, length } = raw;
        const original = Buffer.from(bytes.buffer, bytes.byteOffset + offset, length);
        const letter = {
          service: d.service,
          error,
          attempts,
          queue: input.queue,
          partition: input.partition,
          index,
          key: ev.key,
          type: ev.type,
          eventTimeMs: ev.eventTimeMs,
          failedAtMs: Date.now(),
          event: keepEvent ? original.toString('base64') : '',
        };
        let record = encodeDeadLetter(writer, letter);
        if (record.length > recordLimit) {
          // The event in base64 is 4/3 of its size: a dead letter that would not fit the bus
          // keeps the error and the event's position (where the event still is), not its bytes.
          letter.error +=
            ` (the event's ${length} bytes are not kept: the dead letter would be ` +
            `${record.length} bytes, over the ${busName} record limit of ${recordLimit})`;
          letter.event = '';
          record = encodeDeadLetter(writer, letter);
        }
        dlqAppender!.append(record);
        // Durable before the output's marker: the marker says the input needs no more work.
        dlqAppender!.flush();
        dlqNewest[key] = index;
      }
      pending.push(
        writer.encode({
          type: EVENT_TYPE_DEAD_LETTERED,
          key: ev.key,
          eventTimeMs: Date.now(),
          causeQueue: qid,
          causePartition: input.partition,
          causeIndex: index,
        }),
      );
      deadLettered++;
      ctx.log(
        'warn',
        `service ${d.service}: dead-lettered ${key} index ${index} ` +
          `(key ${JSON.stringify(ev.key)}) to ${dl!.queue} after ${attempts} attempts: ${error}`,
      );
    };

    let replayed = 0;
    let outputsReplayed = 0;
    const progress = (n: number) => {
      c[Counter.replayed] = n;
      ctx.heartbeat();
      // A drain (Ctrl-C) during a long replay: stop here; a replay writes nothing durable.
      if (ctx.draining()) throw new DrainDuringReplay(n);
    };
    const replayBase = found ? found.positions : d.inputs.map(() => -1);
    let replayEmitted = 0;
    /** Appends what replayed inputs emitted (emitDuringReplay), in batches of batchSizeMax. */
    const flushReplayed = () => {
      if (pending.length === 0) return;
      appender.appendBatch(pending);
      appender.flush();
      replayEmitted += pending.length;
      c[Counter.eventsOut] = replayEmitted;
      pending.length = 0;
    };
    /** A record over rings.recordBytesMax: dead-lettered without its bytes, or a failure. */
    const overLimit = (input: HostInput, qid: number, index: number, length: number): void => {
      const error = `record of ${length} bytes exceeds rings.recordBytesMax=${d.recordBytesMax}`;
      const at = `${input.queue}/${input.partition} index ${index}`;
      if (!dl) throw new Error(`service ${d.service}: ${at}: ${error}`);
      if (replaying) return;
      ev.type = view.type;
      ev.key = view.key ?? '';
      ev.eventTimeMs = view.eventTimeMs;
      c[Counter.errors]++;
      deadLetter(input, qid, index, 0, error, false);
    };
    const applyInput = (input: number, index: number, bytes: Uint8Array) => {
      view.wrap(bytes, 0, bytes.length);
      if (bytes.length > d.recordBytesMax) {
        return overLimit(d.inputs[input], qids[input], index, bytes.length);
      }
      raw.bytes = bytes;
      raw.offset = 0;
      raw.length = bytes.length;
      dispatch(d.inputs[input], qids[input], index);
      if (pending.length >= d.batchSizeMax) flushReplayed();
    };
    if (kv) {
      // The key-value store comes from the output alone (inputsReplay is NONE, checked above).
      ctx.setState('replay');
      const t = logs.tailer(outPart);
      try {
        const r = restoreKvStore(kv, t, where);
        scanned += r.scanned;
        outputsReplayed = r.applied;
      } finally {
        t.close();
      }
      c[Counter.replayed] = outputsReplayed;
    } else if (d.inputsReplay === 'OUTPUT') {
      ctx.setState('replay');
      replaying = true;
      c[Counter.replayTotal] = last.reduce((a, p, n) => a + p - replayBase[n], 0);
      const r = replayProcessed(
        d.output.dir,
        found ? found.markerIndex + 1 : 0,
        d.inputs,
        replayBase,
        applyInput,
        where,
        progress,
        replaySource,
      );
      replayed = r.replayed;
      for (let n = 0; n < keys.length; n++) {
        if (r.positions[n] !== last[n])
          throw new Error(
            `${where}: OUTPUT replay of ${keys[n]} ended at ${r.positions[n]}, the newest processed record says ${last[n]}`,
          );
      }
      c[Counter.replayed] = replayed;
      flushReplayed();
      replaying = false;
    } else if (d.inputsReplay === 'INPUTS' || found) {
      // With a snapshot and no OUTPUT order, inputs after it are replayed per partition.
      ctx.setState('replay');
      replaying = true;
      c[Counter.replayTotal] = last.reduce((a, p, n) => a + p - replayBase[n], 0);
      for (let n = 0; n < d.inputs.length; n++) {
        const base = replayed;
        replayed += replayRange(
          d.inputs,
          n,
          replayBase[n] + 1,
          last[n],
          applyInput,
          where,
          (k) => progress(base + k),
          replaySource,
        );
      }
      c[Counter.replayed] = replayed;
      flushReplayed();
      replaying = false;
    } else if (d.inputsReplay === 'OUTPUT_REVERSE') {
      ctx.setState('replay');
      replaying = true;
      const back = logs.tailer(outPart);
      try {
        back.moveToEnd();
        const replayOutput = def.replayOutput!;
        for (let rec = back.previous(); rec; rec = back.previous()) {
          view.wrap(rec.bytes, 0, rec.bytes.length);
          if (
            view.type < USER_EVENT_TYPE_MIN &&
            view.type !== EVENT_TYPE_CHANGE &&
            view.type !== EVENT_TYPE_JSON
          )
            continue;
          ev.type = view.type;
          ev.key = view.key ?? '';
          ev.eventTimeMs = view.eventTimeMs;
          ev.queue = d.output.queue;
          ev.partition = 0;
          ev.index = rec.index;
          ev.payload = view.payload;
          outputsReplayed++;
          if ((outputsReplayed & 0xff) === 0) progress(outputsReplayed);
          if (replayOutput(state, ev)) break;
        }
      } finally {
        back.close();
      }
      c[Counter.replayed] = outputsReplayed;
      replaying = false;
    }
    const positions: Record<string, number> = {};
    keys.forEach((k, n) => (positions[k] = last[n]));

    // 3. ready: tell the supervisor where readers start. START without a rebuilt state processes
    // every input again, for real; with one (a replay, a snapshot, a key-value store) the replay
    // was the pass from START through LAST_WRITTEN, and live reading continues after it
    // (Chronicle Services' startFrom START with inputsReplay INPUTS).
    const rebuilt = d.inputsReplay !== 'NONE' || found !== null || kv !== null;
    const startFrom = startFromStrategy(d.startFrom);
    const from: Record<string, number> = {};
    for (const input of d.inputs) {
      const key = inputKey(input.queue, input.partition);
      const end = () => {
        const t = logs.tailer(input);
        t.moveToEnd();
        const index = t.index;
        t.close();
        return index;
      };
      from[key] = startFrom.from({ lastWritten: positions[key], rebuilt, end });
    }
    const restartMs = Date.now() - startedMs;
    ctx.send({
      type: 'ready',
      info: {
        from,
        lastWritten: positions,
        replayed,
        scannedOutputs: scanned,
        snapshotIndex: found ? found.markerIndex : -1,
        outputsReplayed,
        restartMs,
      } satisfies ServiceReadyInfo,
    });

    // Replay metadata written with the outputs: runs of processed inputs, periodic snapshots.
    const recorder = recordProcessed
      ? new ProcessedRecorder(
          d.inputs,
          keys.map((k) => from[k] - 1),
          logs.kind === 'kafka',
        )
      : null;
    // Snapshot triggers: every N inputs and/or every M periodic update events; inputs only
    // (default interval) when neither is declared.
    const snapshotEveryTimers = snap
      ? Number(d.settings.snapshotEveryTimerEvents ?? snap.everyTimerEvents ?? 0)
      : 0;
    const everyInputs = d.settings.snapshotEveryInputs ?? snap?.everyInputs;
    const snapshotEvery = !snap
      ? 0
      : everyInputs !== undefined
        ? Number(everyInputs)
        : snapshotEveryTimers > 0
          ? Infinity
          : SNAPSHOT_DEFAULTS.everyInputs;
    let sinceSnapshot = found ? replayed : 0;

    // 4. live
    const rings = d.inputs.map((input, ordinal) => {
      const consumer = new RingConsumer(
        ctx.shared(HOST_SHARED.ring(inputKey(input.queue, input.partition))),
      );
      return {
        input,
        ordinal,
        qid: qids[ordinal],
        consumer,
        frames: new FrameCodec(consumer.bytes),
      };
    });
    const bell = new Doorbell(ctx.shared(HOST_SHARED.doorbell));
    const handled = handledShared;
    keys.forEach((k, i) => (handled[i] = from[k] - 1));
    const lag = hdr.build({
      lowestDiscernibleValue: 1,
      highestTrackableValue: 3_600_000,
      numberOfSignificantValueDigits: 3,
    });
    let eventsIn = 0;
    let eventsOut = replayEmitted;
    ctx.setState('live');
    ctx.send({ type: 'live' });
    if (def.onLive) def.onLive(state, sctx);
    let nowMs = Date.now();
    let current = rings[0];
    // Inputs whose outputs are appended but not yet flushed, and since when (performance.now()).
    let unflushedInputs = 0;
    let unflushedSinceMs = 0;
    const groupCommitInputsMax = d.batchSizeMax * GROUP_COMMIT_BATCHES_MAX;
    // Records too large for a ring come by reference: read from the input's journal here.
    const refTailers: (PartitionTailer | null)[] = d.inputs.map(() => null);
    const onRecord = (typeId: number, bytes: Uint8Array, offset: number, length: number) => {
      const index = current.frames.readIndex(offset);
      raw.bytes = bytes;
      raw.offset = offset + FRAME_HEADER_BYTES;
      raw.length = length - FRAME_HEADER_BYTES;
      if (typeId === FRAME_TYPE_EVENT_REF) {
        const t = (refTailers[current.ordinal] ??= logs.tailer(current.input));
        const rec = t.moveToIndex(index) ? t.next() : null;
        if (!rec || rec.index !== index) {
          const at = `${current.input.queue}/${current.input.partition}`;
          throw new Error(
            `service ${d.service}: ${at} has no record ${index} (handed over by reference)`,
          );
        }
        raw.bytes = rec.bytes;
        raw.offset = 0;
        raw.length = rec.bytes.length;
      }
      view.wrap(raw.bytes, raw.offset, raw.length);
      if (raw.length > d.recordBytesMax) overLimit(current.input, current.qid, index, raw.length);
      else dispatch(current.input, current.qid, index);
      handled[current.ordinal] = index;
      if (recorder) recorder.note(current.ordinal, index);
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
      if (recorder && recorder.runs > 0) {
        pending.push(
          writer.encode({
            type: EVENT_TYPE_PROCESSED,
            eventTimeMs: nowMs,
            payload: recorder.take(),
          }),
        );
        sinceSnapshot += n;
        const timersDue = snapshotEveryTimers > 0 && timersSinceSnapshot >= snapshotEveryTimers;
        if (snap && (sinceSnapshot >= snapshotEvery || timersDue)) {
          const at: Record<string, number> = {};
          keys.forEach((k, i) => (at[k] = recorder.positions[i]));
          for (const e of encodeSnapshot(
            writer,
            snap.type,
            snap.write(state),
            at,
            nowMs,
            snapshotChunkBytes,
          ))
            pending.push(e);
          sinceSnapshot = 0;
          timersSinceSnapshot = 0;
        }
      }
      if (pending.length > 0) {
        appender.appendBatch(pending);
        eventsOut += pending.length;
        c[Counter.eventsOut] = eventsOut;
        pending.length = 0;
        if (unflushedInputs === 0) unflushedSinceMs = performance.now();
        unflushedInputs += n > 0 ? n : 1;
      }
      // Group commit: while inputs keep coming, several atomic batches share one write and
      // fdatasync; the flush comes as soon as a pass finds nothing new, or at the bounds.
      if (
        unflushedInputs > 0 &&
        (n === 0 ||
          unflushedInputs >= groupCommitInputsMax ||
          performance.now() - unflushedSinceMs >= GROUP_COMMIT_MS_MAX)
      ) {
        // Kafka: the batches may wait in the open transaction up to its commit interval.
        appender.flush(true);
        unflushedInputs = 0;
      }
      if (n > 0) {
        eventsIn += n;
        c[Counter.eventsIn] = eventsIn;
        c[Counter.batches]++;
        continue;
      }
      // Nothing to read: commit a deferred batch before waiting (Kafka).
      if (appender.deferred) appender.flush();
      if (rings.every((r) => r.consumer.isClosed())) break;
      if (ctx.stopping()) break;
      c[Counter.waits]++;
      bell.park(seen, PARK_TIMEOUT_MS);
    }
    ctx.setState('drain');
    for (const t of refTailers) t?.close();
    appender.flush();
    const summary: ServiceSummary = {
      service: d.service,
      eventsIn,
      eventsOut,
      replayed,
      deadLettered,
      lagMs: {
        count: lag.totalCount,
        p50: lag.getValueAtPercentile(50),
        p99: lag.getValueAtPercentile(99),
        max: lag.maxValue,
      },
    };
    return summary;
  } catch (err) {
    if (!(err instanceof DrainDuringReplay)) throw err;
    ctx.setState('drain');
    return {
      service: d.service,
      eventsIn: 0,
      eventsOut: 0,
      replayed: err.replayed,
      deadLettered: 0,
      lagMs: { count: 0, p50: 0, p99: 0, max: 0 },
    } satisfies ServiceSummary;
  } finally {
    appender.close();
    dlqAppender?.close();
    logs.close();
  }
});

/** Thrown from the replay's progress callback when the supervisor asks for a drain. */
class DrainDuringReplay extends Error {
  constructor(readonly replayed: number) {
    super(`drain requested after ${replayed} replayed events`);
  }
}
