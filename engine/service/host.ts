/**
 * The service host: runs one service module in an actor (actors/service-host.ts is its worker
 * entry). Start protocol (the supervisor's group start drives it); restart strategies after
 * Chronicle Services:
 *  1. check that the definition supports the configured strategy (replayProblems); open the
 *     output queue's appender (recovering a torn tail); find the positions by reading the output
 *     backwards (./host-replay.ts findRestartPositions): the newest processed record when the
 *     service writes them (inputsReplay OUTPUT, snapshots, a key-value store, emitDuringReplay),
 *     else LAST_WRITTEN from the outputs' causes; and the newest complete snapshot;
 *  2. build the state: restore the snapshot, or `init`; then the replay strategy of
 *     ./host-replay.ts (KV_STORE, OUTPUT, INPUTS, OUTPUT_REVERSE or NONE), outputs suppressed;
 *  3. send `ready` with the positions; the supervisor starts one queue reader per input
 *     partition where the startFrom strategy (./start-from.ts) says;
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
import {
  Counter,
  Doorbell,
  FrameCodec,
  FRAME_HEADER_BYTES,
  FRAME_TYPE_EVENT_REF,
  type ActorContext,
} from '../actor/index.js';
import {
  EVENT_TYPE_PROCESSED,
  ProcessedRecorder,
  SNAPSHOT_DEFAULTS,
  encodeSnapshot,
} from '../replay/index.js';
import { RECORD_BYTES_MAX } from '../journal/index.js';
import { RingConsumer } from '../ring/index.js';
import { replayProblems, type ServiceDefinition } from './api.js';
import { deadLetteredPositions } from './dead-letter.js';
import {
  HOST_SHARED,
  type ServiceHostData,
  type ServiceReadyInfo,
  type ServiceSummary,
} from './host-contract.js';
import { findRestartPositions, replayStrategyOf } from './host-replay.js';
import { ServiceRuntime } from './host-runtime.js';
import { inputKey } from './last-written.js';
import { openQueueLogs, type PartitionTailer, type QueuePartition } from './queue-logs.js';
import { startFromStrategy } from './start-from.js';

/** Longest park of the live loop when no input arrives, ms (a doorbell ring ends it early). */
const PARK_TIMEOUT_MS = 50;
/**
 * Group commit bounds of the live loop: the outputs of at most this many ring reads (batches of
 * batchSizeMax inputs), appended over at most GROUP_COMMIT_MS_MAX, share one flush (write and
 * fdatasync). Below the rate the disk syncs at, every batch is flushed at once.
 */
const GROUP_COMMIT_BATCHES_MAX = 32;
const GROUP_COMMIT_MS_MAX = 2;

/**
 * Runs service `def` as the host actor of `ctx` (start data ServiceHostData, shared buffers
 * HOST_SHARED) until its input rings close or the supervisor stops it; returns the summary.
 * Sends `ready` (ServiceReadyInfo) after the restart and `live` before the live loop.
 * @throws Error when the definition does not support the configured restart (replayProblems),
 *   a replay finds the output inconsistent, a handler fails without a dead-letter queue, or the
 *   bus fails; a drain during the replay ends it without an error (summary with 0 events in).
 */
export async function runServiceHost(
  ctx: ActorContext<ServiceHostData>,
  def: ServiceDefinition,
): Promise<ServiceSummary> {
  const d = ctx.data;
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

    // 1. positions
    const positions = findRestartPositions(d, logs, outPart, recordProcessed, snap?.type, where);
    const { last, found } = positions;
    // Where this run resumes, for the operations API's consumer lag while the replay runs (the
    // slots are NaN, "not known", until now; a restarted service is not lagging by its history).
    const handled = new Float64Array(ctx.shared(HOST_SHARED.positions));
    last.forEach((p, i) => (handled[i] = p));

    // 2. state, replay
    const init = { service: d.service, settings: d.settings };
    const state = found ? snap!.restore(found.bytes, init) : def.init(init);
    const dlqNewest = dl ? deadLetteredPositions(dl.dir, d.inputs, () => logs.tailer(dlPart!)) : {};
    const rt = new ServiceRuntime(
      {
        data: d,
        def,
        counters: c,
        log: (level, msg, fields) => ctx.log(level, msg, fields),
        recordLimit,
        busName,
        appender,
        dlqAppender,
        dlqNewest,
      },
      state,
    );
    const strategy = replayStrategyOf(d.inputsReplay, found !== null, rt.kv !== null);
    if (strategy.replays) ctx.setState('replay');
    const replay = strategy.run({
      data: d,
      rt,
      logs,
      outPart,
      positions,
      base: found ? found.positions : d.inputs.map(() => -1),
      counters: c,
      progress: (n) => {
        c[Counter.replayed] = n;
        ctx.heartbeat();
        // A drain (Ctrl-C) during a long replay: stop here; a replay writes nothing durable.
        if (ctx.draining()) throw new DrainDuringReplay(n);
      },
      where,
      replayOutput: def.replayOutput as ((state: unknown, event: unknown) => boolean) | undefined,
    });
    const { replayed, outputsReplayed } = replay;
    const scanned = positions.scanned + replay.scanned;
    const lastWritten: Record<string, number> = {};
    keys.forEach((k, n) => (lastWritten[k] = last[n]));

    // 3. ready: tell the supervisor where readers start. START without a rebuilt state processes
    // every input again, for real; with one (a replay, a snapshot, a key-value store) the replay
    // was the pass from START through LAST_WRITTEN, and live reading continues after it
    // (Chronicle Services' startFrom START with inputsReplay INPUTS).
    const rebuilt = d.inputsReplay !== 'NONE' || found !== null || rt.kv !== null;
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
      from[key] = startFrom.from({ lastWritten: lastWritten[key], rebuilt, end });
    }
    ctx.send({
      type: 'ready',
      info: {
        from,
        lastWritten,
        replayed,
        scannedOutputs: scanned,
        snapshotIndex: found ? found.markerIndex : -1,
        outputsReplayed,
        restartMs: Date.now() - startedMs,
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
        qid: rt.qids[ordinal],
        consumer,
        frames: new FrameCodec(consumer.bytes),
      };
    });
    const bell = new Doorbell(ctx.shared(HOST_SHARED.doorbell));
    keys.forEach((k, i) => (handled[i] = from[k] - 1));
    const lag = hdr.build({
      lowestDiscernibleValue: 1,
      highestTrackableValue: 3_600_000,
      numberOfSignificantValueDigits: 3,
    });
    let eventsIn = 0;
    let eventsOut = rt.replayEmitted;
    ctx.setState('live');
    ctx.send({ type: 'live' });
    if (def.onLive) def.onLive(state, rt.sctx);
    let nowMs = Date.now();
    let current = rings[0];
    // Inputs whose outputs are appended but not yet flushed, and since when (performance.now()).
    let unflushedInputs = 0;
    let unflushedSinceMs = 0;
    const groupCommitInputsMax = d.batchSizeMax * GROUP_COMMIT_BATCHES_MAX;
    // Records too large for a ring come by reference: read from the input's journal here.
    const refTailers: (PartitionTailer | null)[] = d.inputs.map(() => null);
    const { raw, ev, pending, writer } = rt;
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
      // Not an envelope: dead-lettered by rt.open (rt.malformed), without an event time for the lag.
      const envelope = rt.open(current.input, current.qid, index);
      if (envelope && raw.length > d.recordBytesMax)
        rt.overLimit(current.input, current.qid, index, raw.length);
      else if (envelope) rt.dispatch(current.input, current.qid, index);
      handled[current.ordinal] = index;
      if (recorder) recorder.note(current.ordinal, index);
      if (envelope) {
        const l = nowMs - ev.eventTimeMs;
        lag.recordValue(l > 0 ? l : 0);
      }
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
        const timersDue = snapshotEveryTimers > 0 && rt.timersSinceSnapshot >= snapshotEveryTimers;
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
          rt.timersSinceSnapshot = 0;
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
    return {
      service: d.service,
      eventsIn,
      eventsOut,
      replayed,
      deadLettered: rt.deadLettered,
      lagMs: {
        count: lag.totalCount,
        p50: lag.getValueAtPercentile(50),
        p99: lag.getValueAtPercentile(99),
        max: lag.maxValue,
      },
    };
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
    };
  } finally {
    appender.close();
    dlqAppender?.close();
    logs.close();
  }
}

/** Thrown from the replay's progress callback when the supervisor asks for a drain. */
class DrainDuringReplay extends Error {
  constructor(readonly replayed: number) {
    super(`drain requested after ${replayed} replayed events`);
  }
}
