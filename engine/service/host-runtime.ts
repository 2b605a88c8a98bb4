/**
 * What a service host does with one input event, the same in replay and live: runs the
 * service's handler for it (retries with backoff, then the dead-letter queue or a failure naming
 * the input), offers the handler its ServiceContext (emit, emitBytes, kv, log), and collects what
 * the handler emitted into `pending` for the host to append as one atomic batch. No worker, no
 * ring: engine/service/host.ts drives it from a replay strategy and the live loop.
 */
import { Counter, type LogLevelName } from '../actor/index.js';
import { checkRecordBytes } from '../bus/index.js';
import {
  EnvelopeView,
  EnvelopeWriter,
  encodeJson,
  queueId,
  EVENT_TYPE_CHANGE,
  EVENT_TYPE_JSON,
} from '../codec/index.js';
import { EVENT_TYPE_TIMER, KV_DEFAULTS, KvStore } from '../replay/index.js';
import {
  assertNotThenable,
  type ServiceContext,
  type ServiceDefinition,
  type ServiceHandler,
} from './api.js';
import { EVENT_TYPE_DEAD_LETTERED, encodeDeadLetter } from './dead-letter.js';
import type { HostInput, ServiceHostData } from './host-contract.js';
import { HostEvent } from './host-event.js';
import { inputKey } from './last-written.js';
import type { PartitionAppender } from './queue-logs.js';

/** What a {@link ServiceRuntime} is built from. */
export interface ServiceRuntimeOptions {
  data: ServiceHostData;
  def: ServiceDefinition;
  /** The actor's counters (engine/actor Counter): errors and eventsOut are written. */
  counters: Float64Array;
  log(level: LogLevelName, msg: string, fields?: Record<string, unknown>): void;
  /** Largest record the bus takes, bytes (Kafka: bus.recordBytesMax; else the journal's). */
  recordLimit: number;
  /** 'kafka' or 'journal', for messages. */
  busName: 'journal' | 'kafka';
  /** The output's appender: what replayed inputs emit goes there (emitDuringReplay). */
  appender: PartitionAppender;
  /** The dead-letter queue's appender; null with errors.onFailure stop. */
  dlqAppender: PartitionAppender | null;
  /**
   * Per input key, the newest source index already in the dead-letter queue (engine/service
   * deadLetteredPositions): a restart after a crash between the dead-letter append and the
   * output append does not append it twice.
   */
  dlqNewest: Record<string, number>;
}

/**
 * One service's handler side. Built once per (re)start, after the state is restored or
 * initialized; `replaying` is set by the replay strategies around their pass.
 */
export class ServiceRuntime {
  readonly writer = new EnvelopeWriter();
  /** Encoded output records of the current batch, appended by the host as one atomic batch. */
  readonly pending: Uint8Array[] = [];
  /** The envelope of the event being handled (wrapped by the caller before dispatch). */
  readonly view = new EnvelopeView();
  readonly ev = new HostEvent();
  /** The cause stamped on every output: the input being handled (mutated in place). */
  readonly cause = { queue: 0, partition: 0, index: 0 };
  /** The envelope bytes `view` wraps, for the dead-letter record. */
  readonly raw: { bytes: Uint8Array<ArrayBufferLike>; offset: number; length: number } = {
    bytes: new Uint8Array(0),
    offset: 0,
    length: 0,
  };
  /** Queue ids of the inputs, by ordinal (codec queueId). */
  readonly qids: number[];
  readonly kv: KvStore | null;
  readonly sctx: ServiceContext;
  /** True while a replay strategy runs: emits are dropped unless emitDuringReplay. */
  replaying = false;
  /** Periodic update events since the last snapshot (counted in replays too). */
  timersSinceSnapshot = 0;
  /** Inputs parked in the dead-letter queue (live). */
  deadLettered = 0;
  /** Outputs appended during the replay (emitDuringReplay). */
  replayEmitted = 0;
  private readonly handlers = new Map<number, ServiceHandler<unknown>>();
  private readonly retrySleeper = new Int32Array(new SharedArrayBuffer(4));

  /** @param state the service's state (restored from a snapshot or from `def.init`). */
  constructor(
    private readonly o: ServiceRuntimeOptions,
    readonly state: unknown,
  ) {
    const d = o.data;
    const def = o.def;
    this.qids = d.inputs.map((i) => queueId(i.queue));
    this.kv = def.kvStore
      ? new KvStore(
          this.writer,
          (e) => this.pending.push(e),
          () => this.cause,
          Number(
            d.settings.kvSnapshotBatchSize ??
              def.kvStore.snapshotBatchSize ??
              KV_DEFAULTS.snapshotBatchSize,
          ),
        )
      : null;
    for (const [k, h] of Object.entries(def.handlers)) {
      if (!h) continue;
      this.handlers.set(
        k === 'change' ? EVENT_TYPE_CHANGE : k === 'json' ? EVENT_TYPE_JSON : Number(k),
        h as ServiceHandler<unknown>,
      );
    }
    const rt = this;
    const kv = this.kv;
    this.sctx = {
      service: d.service,
      get replaying() {
        return rt.replaying;
      },
      get kv(): KvStore {
        if (!kv)
          throw new Error(`service ${d.service}: ctx.kv needs kvStore in the service definition`);
        return kv;
      },
      emit(key, value, eventTimeMs) {
        if (rt.replaying && !d.emitDuringReplay) return;
        rt.pending.push(
          rt.checkOutputSize(
            rt.writer.encode({
              type: EVENT_TYPE_JSON,
              key,
              eventTimeMs: eventTimeMs ?? Date.now(),
              causeQueue: rt.cause.queue,
              causePartition: rt.cause.partition,
              causeIndex: rt.cause.index,
              payload: encodeJson(value),
            }),
          ),
        );
      },
      log(level, msg, fields) {
        if (rt.replaying && level !== 'warn' && level !== 'error' && level !== 'fatal') return;
        o.log(level, msg, fields);
      },
      emitBytes(type, key, payload, eventTimeMs) {
        if (type < 100) throw new Error(`emitBytes: user event types are >= 100, type=${type}`);
        if (rt.replaying && !d.emitDuringReplay) return;
        rt.pending.push(
          rt.checkOutputSize(
            rt.writer.encode({
              type,
              key,
              eventTimeMs: eventTimeMs ?? Date.now(),
              causeQueue: rt.cause.queue,
              causePartition: rt.cause.partition,
              causeIndex: rt.cause.index,
              payload,
            }),
          ),
        );
      },
    };
  }

  /**
   * An output record over the bus's record limit fails the handler that emitted it (so it is
   * retried and dead-lettered like any handler error) instead of the whole batch at the broker.
   * @throws RecordTooLargeError naming the size, the limit, the bus and the output queue.
   */
  private checkOutputSize(bytes: Uint8Array): Uint8Array {
    checkRecordBytes(
      bytes.length,
      this.o.recordLimit,
      this.o.busName,
      `output queue ${this.o.data.output.queue}`,
    );
    return bytes;
  }

  /**
   * Runs the handler for the envelope `view` wraps, input `input` (ordinal's queue id `qid`)
   * at `index`. Timer events advance the snapshot cycle and go to onTimer. A failing handler is
   * retried errors.retriesMax times (live), then dead-lettered; during a replay with a
   * dead-letter queue it is skipped (the live run dead-lettered it).
   * @throws Error naming the service, type, input, index and key when it fails without a
   *   dead-letter queue; the handler's returned promise (assertNotThenable).
   */
  dispatch(input: HostInput, qid: number, index: number): void {
    const d = this.o.data;
    const def = this.o.def;
    const { ev, view, cause, kv, pending } = this;
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
      this.timersSinceSnapshot++;
      if (kv && !this.replaying) kv.onTimer();
      if (def.onTimer)
        assertNotThenable(def.onTimer(this.state, ev, this.sctx), `service ${d.service}: onTimer`);
      return;
    }
    // Sluice's own records (types 3..99: replay metadata) have no handler and are skipped.
    const h = this.handlers.get(ev.type);
    if (!h) return;
    // What the failed attempts emitted is dropped; what they did to the state is not undone.
    const mark = pending.length;
    for (let attempts = 1; ; attempts++) {
      let result: unknown;
      try {
        result = h(this.state, ev, this.sctx);
      } catch (err) {
        pending.length = mark;
        this.o.counters[Counter.errors]++;
        const e = err instanceof Error ? err : new Error(String(err));
        // During a replay the live run already dead-lettered the input: skip it again.
        if (this.replaying && this.o.dlqAppender) return;
        if (!this.replaying && attempts <= d.errors.retriesMax) {
          Atomics.wait(this.retrySleeper, 0, 0, d.errors.retryBackoffMs * 2 ** (attempts - 1));
          continue;
        }
        if (!this.o.dlqAppender) {
          // Name the input: the supervisor restarts the group, and the same input fails
          // again, so the operator needs to know which event it is.
          const during = this.replaying ? ' during replay' : '';
          const at = `${input.queue}/${input.partition} index ${index}`;
          throw new Error(
            `service ${d.service}: handler for type ${ev.type} failed${during} on ${at} ` +
              `(key ${JSON.stringify(ev.key)}): ${e.message}`,
            { cause: e },
          );
        }
        this.deadLetter(input, qid, index, attempts, e.message);
        return;
      }
      // A promise is a programming error, not a failure of this input: not retried or
      // dead-lettered; the group fails with the reason (and `sluice check` refuses an async
      // function at load).
      assertNotThenable(result, `service ${d.service}: handler for type ${ev.type}`);
      return;
    }
  }

  /**
   * Parks the current event (`raw`, `ev`) in the dead-letter queue (durable at once) and marks
   * it processed in the output (an EVENT_TYPE_DEAD_LETTERED record in `pending`). A dead letter
   * over the bus's record limit keeps the error and the event's position, not its bytes.
   */
  deadLetter(
    input: HostInput,
    qid: number,
    index: number,
    attempts: number,
    error: string,
    keepEvent = true,
  ): void {
    const d = this.o.data;
    const { ev, writer } = this;
    const key = inputKey(input.queue, input.partition);
    const dlqAppender = this.o.dlqAppender!;
    if (index > (this.o.dlqNewest[key] ?? -1)) {
      const { bytes, offset, length } = this.raw;
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
      if (record.length > this.o.recordLimit) {
        // The event in base64 is 4/3 of its size: a dead letter that would not fit the bus
        // keeps the error and the event's position (where the event still is), not its bytes.
        letter.error +=
          ` (the event's ${length} bytes are not kept: the dead letter would be ` +
          `${record.length} bytes, over the ${this.o.busName} record limit of ${this.o.recordLimit})`;
        letter.event = '';
        record = encodeDeadLetter(writer, letter);
      }
      dlqAppender.append(record);
      // Durable before the output's marker: the marker says the input needs no more work.
      dlqAppender.flush();
      this.o.dlqNewest[key] = index;
    }
    this.pending.push(
      writer.encode({
        type: EVENT_TYPE_DEAD_LETTERED,
        key: ev.key,
        eventTimeMs: Date.now(),
        causeQueue: qid,
        causePartition: input.partition,
        causeIndex: index,
      }),
    );
    this.deadLettered++;
    this.o.log(
      'warn',
      `service ${d.service}: dead-lettered ${key} index ${index} ` +
        `(key ${JSON.stringify(ev.key)}) to ${d.deadLetter!.queue} after ${attempts} attempts: ${error}`,
    );
  }

  /**
   * A record over rings.recordBytesMax (`view` wraps it): dead-lettered without its bytes;
   * skipped in a replay (the live run dead-lettered it).
   * @throws Error naming the input and the limit when the service has no dead-letter queue.
   */
  overLimit(input: HostInput, qid: number, index: number, length: number): void {
    const d = this.o.data;
    const error = `record of ${length} bytes exceeds rings.recordBytesMax=${d.recordBytesMax}`;
    const at = `${input.queue}/${input.partition} index ${index}`;
    if (!this.o.dlqAppender) throw new Error(`service ${d.service}: ${at}: ${error}`);
    if (this.replaying) return;
    const { ev, view } = this;
    ev.type = view.type;
    ev.key = view.key ?? '';
    ev.eventTimeMs = view.eventTimeMs;
    this.o.counters[Counter.errors]++;
    this.deadLetter(input, qid, index, 0, error, false);
  }

  /**
   * Wraps `view` over `raw` (the input record at `index`); false when the record is not a Sluice
   * envelope (a value a producer of its own wrote to a Kafka topic, a JSON capture record), which
   * then went the way of a failing handler ({@link malformed}).
   * @throws Error naming the input when it is not an envelope and there is no dead-letter queue.
   */
  open(input: HostInput, qid: number, index: number): boolean {
    const { raw } = this;
    try {
      this.view.wrap(raw.bytes, raw.offset, raw.length);
      return true;
    } catch (e) {
      this.malformed(input, qid, index, e);
      return false;
    }
  }

  /**
   * A record that is not a Sluice envelope (`raw`): dead-lettered with its bytes (so it is not
   * lost and the inputs after it are handled), skipped in a replay (the live run dead-lettered
   * it). Counted in `errors`.
   * @throws Error naming the service, the input, the index and the cause without a dead-letter
   *   queue (errors.onFailure stop).
   */
  malformed(input: HostInput, qid: number, index: number, cause: unknown): void {
    const d = this.o.data;
    const why = cause instanceof Error ? cause.message : String(cause);
    const error =
      `record is not a Sluice envelope (${why}); a service reads what sluice append, ` +
      `openQueueAppender, services and capture with format envelope write`;
    const at = `${input.queue}/${input.partition} index ${index}`;
    if (!this.o.dlqAppender) throw new Error(`service ${d.service}: ${at}: ${error}`);
    if (this.replaying) return;
    const { ev } = this;
    ev.type = 0;
    ev.key = '';
    ev.eventTimeMs = 0;
    this.o.counters[Counter.errors]++;
    this.deadLetter(input, qid, index, 0, error);
  }

  /**
   * Handles input ordinal `input`'s record `index` (`bytes`, one envelope) in a replay; what it
   * emitted (emitDuringReplay) is appended once batchSizeMax records are pending.
   */
  readonly applyInput = (input: number, index: number, bytes: Uint8Array): void => {
    const d = this.o.data;
    this.raw.bytes = bytes;
    this.raw.offset = 0;
    this.raw.length = bytes.length;
    if (!this.open(d.inputs[input], this.qids[input], index)) return;
    if (bytes.length > d.recordBytesMax) {
      return this.overLimit(d.inputs[input], this.qids[input], index, bytes.length);
    }
    this.dispatch(d.inputs[input], this.qids[input], index);
    if (this.pending.length >= d.batchSizeMax) this.flushReplayed();
  };

  /** Appends and flushes what replayed inputs emitted (emitDuringReplay). */
  flushReplayed(): void {
    if (this.pending.length === 0) return;
    this.o.appender.appendBatch(this.pending);
    this.o.appender.flush();
    this.replayEmitted += this.pending.length;
    this.o.counters[Counter.eventsOut] = this.replayEmitted;
    this.pending.length = 0;
  }
}
