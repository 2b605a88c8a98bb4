/**
 * The message patterns a topology processor can run (engine/patterns), as a table of small
 * starter objects in the manner of engine/ring/idle.ts: {@link PROCESSOR_PATTERNS}, one per
 * `processors[].pattern` value. Each starts its pattern on the processor's bus with the
 * processor's handler and options, and counts what it does into the actor's counters; the
 * handler's errors follow ./records.ts (inline or on a pool stage).
 */
import { Counter } from '../actor/index.js';
import {
  checkRecordBytes,
  recordPlace,
  type BusBackend,
  type ProducerRecord,
} from '../bus/index.js';
import type { TopologyProcessor } from '../config/index.js';
import { RECORD_BYTES_MAX } from '../journal/index.js';
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
} from '../patterns/index.js';
import type { ProcessorData } from './contract.js';
import { commitFaultHook, takeProcessorFault } from './faults.js';
import type { Handler } from './handler.js';
import type { PoolStage } from './pool-stage.js';
import {
  durableSegments,
  resolveSegments,
  type DurableOnNext,
  type OutputLimit,
  type RecordErrorRules,
} from './records.js';

const CODECS: Record<TopologyProcessor['codec'], Codec<unknown>> = {
  json: jsonCodec<unknown>(),
  string: stringCodec as Codec<unknown>,
  bytes: bytesCodec as Codec<unknown>,
};

/** The record limit of the processor's bus: on Kafka bus.recordBytesMax, else the journal's. */
export function outputLimitOf(d: ProcessorData): OutputLimit {
  return d.bus.kind === 'kafka'
    ? { bytesMax: d.bus.recordBytesMax, bus: 'kafka' }
    : { bytesMax: RECORD_BYTES_MAX, bus: 'journal' };
}

/**
 * A state-and-event output or an rpc response over the bus's record limit fails its handler
 * call (as a durable output does, engine/processors/records.ts) instead of the broker's send.
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

/** A started pattern. */
export interface RunningPattern {
  sub: Subscription;
  /** Copies the pattern's counts into the counters. */
  count(): void;
}

/** What a pattern starter gets. */
export interface PatternStart {
  d: ProcessorData;
  /** The processor's entry (d.processor). */
  p: TopologyProcessor;
  bus: BusBackend;
  h: Handler;
  /** The actor's counters (engine/actor Counter). */
  c: Float64Array;
  /** The pool stage (`pool:`), or null: handler calls in this thread. */
  stage: PoolStage | null;
  /** A `warn` line to the supervisor. */
  log: (msg: string, fields: Record<string, unknown>) => void;
  codec: Codec<unknown>;
  limit: OutputLimit;
  /** The loop options the processor sets (batchSizeMax, retries, sessionTimeoutMs). */
  loop: {
    batchSizeMax?: number;
    retriesMax?: number;
    retryBackoffMs?: number;
    sessionTimeoutMs?: number;
  };
  /** Counts `n` input records handled. */
  handled: (n: number) => void;
  /** A durable batch's outputs after the error rules (dead letters counted as errors). */
  durableOutputs: (records: PatternRecord<unknown>[]) => Promise<ProducerRecord[]>;
}

/** Starts one pattern. */
export type PatternStarter = (s: PatternStart) => RunningPattern;

/** durable: consume-process-produce in one transaction per batch (exactly-once). */
const durable: PatternStarter = (s) => {
  const { d, bus, h, c, log, p, codec, loop, handled, durableOutputs } = s;
  const fencing = p.fencing ?? (bus.kind === 'kafka' ? 'partition' : 'member');
  // Outputs per onNext call, in call order, until onOutcome says whether they committed.
  const outputs: number[] = [];
  // Test-only (engine/processors/faults.ts): null unless SLUICE_FAULT_PROCESSOR_DIR says so.
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
};

/** state-and-event: a state per key in the state topic, updated with each event. */
const stateAndEvent: PatternStarter = (s) => {
  const { d, bus, h, c, p, codec, loop, limit } = s;
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
          h.onNext as (s: unknown, e: unknown) => { state?: unknown; outputs?: ProducerRecord[] }
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
};

/** pubsub and compacted: every record to the handler; errors to onError, not retried. */
const pubsubOrCompacted: PatternStarter = (s) => {
  const { bus, h, c, stage, p, codec, handled } = s;
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
};

/** rpc: a response per request, to the response topic. */
const rpc: PatternStarter = (s) => {
  const { bus, h, c, p, codec, limit, handled } = s;
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
};

/** Every pattern's starter by its `processors[].pattern` name. */
export const PROCESSOR_PATTERNS: Readonly<Record<TopologyProcessor['pattern'], PatternStarter>> = {
  durable,
  'state-and-event': stateAndEvent,
  pubsub: pubsubOrCompacted,
  compacted: pubsubOrCompacted,
  rpc,
};

/**
 * Starts processor `d.processor`'s pattern on `bus` with handler `h` (and pool stage `stage`,
 * or null), counting into `c`; `log` takes `warn` lines (a failed durable transaction).
 */
export function startProcessorPattern(
  d: ProcessorData,
  bus: BusBackend,
  h: Handler,
  c: Float64Array,
  stage: PoolStage | null,
  log: (msg: string, fields: Record<string, unknown>) => void,
): RunningPattern {
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
  /** Rules 1-3 of ./records.ts, on the pool stage or in this thread. */
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
  return PROCESSOR_PATTERNS[p.pattern]({
    d,
    p,
    bus,
    h,
    c,
    stage,
    log,
    codec,
    limit,
    loop,
    handled,
    durableOutputs,
  });
}
