/**
 * Processor actor (worker entry): one message pattern of engine/patterns, with the handler module
 * of a topology's `processors[]` entry, on the topology's bus. The pattern runs unchanged, as it
 * does as a library: it owns its consumer group membership, positions and transactions (outputs
 * and consumed positions commit in one transaction; state-and-event loads a partition's states
 * before its first event).
 *
 * Steps: 1. connect the bus (journal: the port to the thread that owns the topology's journal
 * bus; kafka: the brokers); 2. import the module, build the handler; 3. start the pattern and
 * wait until it is ready (a missing topic fails the start: the supervisor restarts the group
 * with backoff); 4. live: copy the pattern's counts into the shared counters every
 * COUNTERS_MS; a pattern that ends by itself (retries exhausted, fenced) fails the actor;
 * 5. drain: stop the pattern after its current batch, close the bus connection. A durable
 * transaction that fails (and is retried from the committed position) counts in `errors` and
 * sends a `warn` log line to the supervisor. Test-only commit faults: actors/processor-faults.ts.
 *
 * With `pool: { threads }` (durable, pubsub) the pattern still runs here, and only the handler
 * calls go to a piscina pool running the same module (actors/pool-stage.ts); the outputs come
 * back in input order and commit here, in the pattern's transaction, as inline. A handler's
 * errors follow actors/processor-records.ts on both paths (with a deadLetterTopic: retried
 * alone, then dead-lettered; without: the batch fails).
 */
import { runActor, Counter } from '../engine/actor/index.js';
import { RECORD_BYTES_MAX } from '../engine/journal/index.js';
import {
  checkRecordBytes,
  connectBus,
  createKafkaBus,
  recordPlace,
  kafkaBusOptionsOf,
  type BusBackend,
  type ProducerRecord,
} from '../engine/bus/index.js';
import {
  bytesCodec,
  jsonCodec,
  startCompacted,
  startDurable,
  startPubSub,
  startRpcResponder,
  startStateAndEvent,
  stringCodec,
  PATTERN_DEFAULTS,
  type Codec,
  type PatternRecord,
  type Subscription,
} from '../engine/patterns/index.js';
import type { TopologyProcessor } from '../engine/config/index.js';
import { loadHandler, type Handler } from './processor-handler.js';
import {
  durableSegments,
  resolveSegments,
  type DurableOnNext,
  type OutputLimit,
  type RecordErrorRules,
} from './processor-records.js';
import { startPoolStage, type PoolStage } from './pool-stage.js';
import { commitFaultHook, takeProcessorFault } from './processor-faults.js';
import { PROCESSOR_PORTS, type ProcessorData, type ProcessorSummary } from './contracts.js';

/** How often the pattern's counts are copied into the shared counters, ms (bounds drain latency too). */
const COUNTERS_MS = 50;

const CODECS: Record<TopologyProcessor['codec'], Codec<unknown>> = {
  json: jsonCodec<unknown>(),
  string: stringCodec as Codec<unknown>,
  bytes: bytesCodec as Codec<unknown>,
};

/** The record limit of the processor's bus: on Kafka bus.recordBytesMax, else the journal's. */
function outputLimitOf(d: ProcessorData): OutputLimit {
  return d.bus.kind === 'kafka'
    ? { bytesMax: d.bus.recordBytesMax, bus: 'kafka' }
    : { bytesMax: RECORD_BYTES_MAX, bus: 'journal' };
}

/**
 * A state-and-event output or an rpc response over the bus's record limit fails its handler
 * call (as a durable output does, actors/processor-records.ts) instead of the broker's send.
 */
function checkOutput(name: string, limit: OutputLimit, r: ProducerRecord): void {
  const bytes = r.value?.length ?? 0;
  if (bytes > limit.bytesMax)
    checkRecordBytes(bytes, limit.bytesMax, limit.bus, `processor ${name}, ${recordPlace(r)}`);
}

/** Records to topics outside `outputs` fail the batch (the outputs are the processor's contract). */
function checkTopics(
  name: string,
  outputs: readonly string[],
  records: readonly ProducerRecord[],
): void {
  for (const r of records) {
    if (!outputs.includes(r.topic)) {
      throw new Error(
        `processor ${name}: output record to topic "${r.topic}", which is not in its outputs (${outputs.join(', ') || 'none'})`,
      );
    }
  }
}

interface Running {
  sub: Subscription;
  /** Copies the pattern's counts into the counters. */
  count(): void;
}

function start(
  d: ProcessorData,
  bus: BusBackend,
  h: Handler,
  c: Float64Array,
  stage: PoolStage | null,
  log: (msg: string, fields: Record<string, unknown>) => void,
): Running {
  const p = d.processor;
  const codec = CODECS[p.codec];
  const limit = outputLimitOf(d);
  const loop = {
    ...(p.batchSizeMax !== undefined ? { batchSizeMax: p.batchSizeMax } : {}),
    ...(p.retriesMax !== undefined ? { retriesMax: p.retriesMax } : {}),
    ...(p.retryBackoffMs !== undefined ? { retryBackoffMs: p.retryBackoffMs } : {}),
    ...(p.sessionTimeoutMs !== undefined ? { sessionTimeoutMs: p.sessionTimeoutMs } : {}),
  };
  const handled = (n: number) => (c[Counter.eventsIn] += n);
  const onNext = h.onNext as DurableOnNext;
  const rules: RecordErrorRules = {
    processor: p.name,
    ...(p.deadLetterTopic !== undefined ? { deadLetterTopic: p.deadLetterTopic } : {}),
    retriesMax: p.retriesMax ?? PATTERN_DEFAULTS.retriesMax,
    retryBackoffMs: p.retryBackoffMs ?? PATTERN_DEFAULTS.retryBackoffMs,
    encode: (v) => codec.encode(v),
    limit,
  };
  /** Rules 1-3 of actors/processor-records.ts, on the pool stage or in this thread. */
  const durableOutputs = async (records: PatternRecord<unknown>[]): Promise<ProducerRecord[]> => {
    const isolate = p.deadLetterTopic !== undefined;
    const segments = stage
      ? await stage.durable(records, isolate)
      : await durableSegments(p.name, onNext, records, isolate, limit);
    for (const s of segments) if (s.outputs) checkTopics(p.name, p.outputs, s.outputs);
    const retryOne = async (r: PatternRecord<unknown>): Promise<ProducerRecord[]> => {
      const out = stage
        ? await stage.one(r)
        : (await durableSegments(p.name, onNext, [r], false, limit)).flatMap(
            (x) => x.outputs ?? [],
          );
      checkTopics(p.name, p.outputs, out);
      return out;
    };
    const { outputs, deadLettered } = await resolveSegments(records, segments, retryOne, rules);
    c[Counter.errors] += deadLettered;
    return outputs;
  };
  switch (p.pattern) {
    case 'durable': {
      const fencing = p.fencing ?? (bus.kind === 'kafka' ? 'partition' : 'member');
      // Outputs per onNext call, in call order, until onOutcome says whether they committed.
      const outputs: number[] = [];
      // Test-only (actors/processor-faults.ts): null unless SLUICE_FAULT_PROCESSOR_DIR says so.
      const fault = takeProcessorFault(p.name);
      const sub = startDurable<unknown>({
        bus,
        groupId: p.group,
        topics: p.inputs,
        codec,
        fencing,
        ...loop,
        // 'partition': the prefix every member shares; 'member': this topology's one member.
        transactionalId: fencing === 'partition' ? p.group : `${p.group}:${d.topology}:${p.name}`,
        ...(p.deadLetterTopic !== undefined ? { deadLetterTopic: p.deadLetterTopic } : {}),
        ...(p.commitRecordsMax !== undefined ? { commitRecordsMax: p.commitRecordsMax } : {}),
        ...(h.listener !== undefined ? { listener: h.listener as never } : {}),
        ...(fault !== null ? { faults: { beforeCommit: commitFaultHook(fault) } } : {}),
        processor: {
          onNext: async (records) => {
            const out = await durableOutputs(records);
            outputs.push(out.length);
            return out;
          },
        },
        onOutcome: (o) => {
          const n = outputs.splice(0, o.batches).reduce((a, b) => a + b, 0);
          if (o.committed) {
            handled(o.records);
            c[Counter.eventsOut] += n;
            c[Counter.batches]++;
          } else {
            c[Counter.errors]++;
            const error = o.error instanceof Error ? o.error.message : String(o.error);
            log(
              `processor ${p.name}: transaction of ${o.records} records failed, rewinding to the committed position: ${error}`,
              { records: o.records, batches: o.batches, error },
            );
          }
        },
      });
      return { sub, count: () => {} };
    }
    case 'state-and-event': {
      const sub = startStateAndEvent<unknown, unknown>({
        bus,
        groupId: p.group,
        eventTopic: p.inputs[0]!,
        stateTopic: p.stateTopic!,
        eventCodec: codec,
        stateCodec: codec,
        ...loop,
        transactionalId: `${p.group}:${d.topology}:${p.name}`,
        ...(h.listener !== undefined ? { listener: h.listener as never } : {}),
        processor: {
          onNext: async (state, event) => {
            const result = await (
              h.onNext as (
                s: unknown,
                e: unknown,
              ) => { state?: unknown; outputs?: ProducerRecord[] }
            )(state, event);
            if (result?.outputs) {
              checkTopics(p.name, p.outputs, result.outputs);
              for (const r of result.outputs) checkOutput(p.name, limit, r);
              c[Counter.eventsOut] += result.outputs.length;
            }
            return result;
          },
        },
      });
      return {
        sub,
        count: () => {
          c[Counter.eventsIn] = sub.stats.eventsCommitted;
          c[Counter.errors] = sub.stats.batchesFailed;
        },
      };
    }
    case 'pubsub':
    case 'compacted': {
      const onError = (e: unknown, r: { topic: string; partition: number; offset: number }) => {
        c[Counter.errors]++;
        h.onError?.(e, r);
      };
      const processor = {
        ...h,
        onNext: async (...args: unknown[]) => {
          handled(1);
          await (h.onNext as (...a: unknown[]) => unknown)(...args);
        },
        ...(stage
          ? {
              onBatch: async (records: PatternRecord<unknown>[]) => {
                handled(records.length);
                for (const f of await stage.pubsub(records)) onError(new Error(f.error), f.record);
              },
            }
          : {}),
      };
      const sub =
        p.pattern === 'pubsub'
          ? startPubSub<unknown>({
              bus,
              topic: p.inputs[0]!,
              codec,
              processor: processor as never,
              onError,
            })
          : startCompacted<unknown>({
              bus,
              topic: p.inputs[0]!,
              codec,
              processor: processor as never,
              onError,
            });
      return { sub, count: () => {} };
    }
    case 'rpc': {
      const sub = startRpcResponder<unknown, unknown>({
        bus,
        requestTopic: p.inputs[0]!,
        responseTopic: p.outputs[0]!,
        requestCodec: codec,
        responseCodec: codec,
        processor: {
          onRequest: async (request) => {
            handled(1);
            c[Counter.eventsOut]++;
            try {
              const response = await (h.onRequest as (r: unknown) => unknown)(request);
              // Encoded once more here (the pattern encodes what this returns): an rpc response
              // is one record per request, and an oversized one becomes the response's error.
              const value = response === null ? null : codec.encode(response);
              checkOutput(p.name, limit, {
                topic: p.outputs[0]!,
                key: request.key,
                value,
                partition: request.partition,
              });
              return response;
            } catch (e) {
              c[Counter.errors]++;
              throw e;
            }
          },
        },
      });
      return { sub, count: () => {} };
    }
  }
}

runActor<ProcessorData>(async (ctx) => {
  const d = ctx.data;
  const p = d.processor;
  const bus: BusBackend =
    d.bus.kind === 'kafka'
      ? createKafkaBus(kafkaBusOptionsOf(d.bus, p.name))
      : connectBus(ctx.port(PROCESSOR_PORTS.bus), 'journal');
  const c = ctx.counters;
  let running: Running | null = null;
  let stage: PoolStage | null = null;
  try {
    const handler = await loadHandler(p.module, {
      name: p.name,
      pattern: p.pattern,
      inputs: [...p.inputs],
      outputs: [...p.outputs],
      ...(p.stateTopic !== undefined ? { stateTopic: p.stateTopic } : {}),
      settings: p.settings,
      bus,
    });
    // Before the pattern starts: its first poll's records go straight to the pool.
    if (p.pool !== undefined) stage = startPoolStage({ ...p, pool: p.pool }, outputLimitOf(d));
    running = start(d, bus, handler, c, stage, (msg, fields) => ctx.log('warn', msg, fields));
    const { sub } = running;
    let ended: { error: unknown } | null = null;
    sub.done.then(
      () => (ended ??= { error: null }),
      (e: unknown) => (ended ??= { error: e }),
    );
    await sub.ready;
    ctx.send({ type: 'ready', info: { processor: p.name, pattern: p.pattern } });
    ctx.setState('live');
    ctx.send({ type: 'live' });
    while (!ctx.draining() && ended === null) {
      ctx.heartbeat();
      running.count();
      await new Promise((r) => setTimeout(r, COUNTERS_MS));
    }
    if (ended !== null) {
      const e = (ended as { error: unknown }).error;
      throw e ?? new Error(`processor ${p.name}: the ${p.pattern} pattern ended by itself`);
    }
    ctx.setState('drain');
    await sub.stop();
    await stage?.close();
    running.count();
    const summary: ProcessorSummary = {
      processor: p.name,
      pattern: p.pattern,
      eventsIn: c[Counter.eventsIn],
      eventsOut: c[Counter.eventsOut],
      errors: c[Counter.errors],
    };
    return summary;
  } finally {
    await running?.sub.stop({ abandon: true }).catch(() => {});
    await stage?.close().catch(() => {});
    await bus.close().catch(() => {});
  }
});
