/**
 * The two ways the pattern conformance suite runs a processor (test/patterns-conformance.ts):
 * `libraryRunner` imports the handler module in this thread and calls the pattern library
 * (startDurable, ...) on the test's bus; `actorRunner` writes a topology file declaring the same
 * handler module as a `processors:` entry, loads it (parseTopology), plans it (planTopology) and
 * runs it under a real Supervisor: the processor actor in its own worker thread, on the test's
 * journal bus (served to the worker over a MessagePort, as startTopology does) or on the broker.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { MessageChannel } from 'node:worker_threads';
import { planTopology } from '../actors/index.js';
import { serveBus, type BusBackend, type ProducerRecord } from '../engine/bus/index.js';
import { parseTopology } from '../engine/config/index.js';
import {
  commitFaultHook,
  PROCESSOR_FAULT_DIR_ENV,
  type ProcessorFault,
} from '../engine/processors/faults.js';
import {
  jsonCodec,
  startCompacted,
  startDurable,
  startPubSub,
  startRpcResponder,
  startStateAndEvent,
  stringCodec,
  type Codec,
  type ProcessorContext,
} from '../engine/patterns/index.js';
import { Supervisor, type ActorLogEvent } from '../engine/supervisor/index.js';

/** A processor as the suite declares it: the fields of a topology's `processors[]` entry. */
export interface ProcessorSpec {
  pattern: 'durable' | 'state-and-event' | 'pubsub' | 'compacted' | 'rpc';
  /** File name under test/fixtures/processors, without extension. */
  handler: string;
  inputs: string[];
  outputs?: string[];
  group?: string;
  stateTopic?: string;
  deadLetterTopic?: string;
  codec: 'json' | 'string';
  batchSizeMax?: number;
  sessionTimeoutMs?: number;
  settings?: Record<string, unknown>;
  /**
   * Durable only: an injected commit fault (engine/processors/faults.ts). Actor: through the
   * processor actor's test-only SLUICE_FAULT_PROCESSOR_DIR hook; library: the same hook as the
   * pattern's `faults.beforeCommit`.
   */
  faults?: ProcessorFault;
}

/** A started processor. */
export interface RunningProcessor {
  stop(): Promise<void>;
  /** Log lines it reported: actor: the supervisor's `log` and `actorLog` events; library: none. */
  logs(): string[];
}

/** Runs processors one way. */
export interface ProcessorRunner {
  readonly mode: 'library' | 'actor';
  /** Starts `spec` on `bus` and resolves once it reads (its `ready`). */
  start(bus: BusBackend, spec: ProcessorSpec): Promise<RunningProcessor>;
}

const here = path.dirname(new URL(import.meta.url).pathname);
/** The handler's TypeScript source (a topology names the source; it runs the dist/ twin). */
const handlerSource = (handler: string): string =>
  path.resolve(here, '..', '..', 'test', 'fixtures', 'processors', `${handler}.ts`);
const handlerCompiled = (handler: string): string =>
  path.join(here, 'fixtures', 'processors', `${handler}.js`);

let seq = 0;

/** The pattern library, in this thread, with the handler module imported here. */
export const libraryRunner: ProcessorRunner = {
  mode: 'library',
  async start(bus, spec) {
    const mod = (await import(pathToFileURL(handlerCompiled(spec.handler)).href)) as {
      default: unknown;
    };
    const ctx: ProcessorContext = {
      name: spec.handler,
      pattern: spec.pattern,
      inputs: spec.inputs,
      outputs: spec.outputs ?? [],
      stateTopic: spec.stateTopic,
      settings: spec.settings ?? {},
      bus,
    };
    const h = (
      typeof mod.default === 'function'
        ? await (mod.default as (c: ProcessorContext) => unknown)(ctx)
        : mod.default
    ) as never;
    const codec = (spec.codec === 'json' ? jsonCodec<unknown>() : stringCodec) as Codec<never>;
    const group = spec.group ?? `g-${process.pid}-${++seq}`;
    const loop = { batchSizeMax: spec.batchSizeMax, sessionTimeoutMs: spec.sessionTimeoutMs };
    const sub =
      spec.pattern === 'durable'
        ? startDurable({
            bus,
            groupId: group,
            topics: spec.inputs,
            transactionalId: group,
            codec,
            processor: h,
            deadLetterTopic: spec.deadLetterTopic,
            ...(spec.faults ? { faults: { beforeCommit: commitFaultHook(spec.faults) } } : {}),
            ...loop,
          })
        : spec.pattern === 'state-and-event'
          ? startStateAndEvent({
              bus,
              groupId: group,
              eventTopic: spec.inputs[0]!,
              stateTopic: spec.stateTopic!,
              transactionalId: group,
              eventCodec: codec,
              stateCodec: codec,
              processor: h,
              ...loop,
            })
          : spec.pattern === 'pubsub'
            ? startPubSub({ bus, topic: spec.inputs[0]!, codec, processor: h })
            : spec.pattern === 'compacted'
              ? startCompacted({ bus, topic: spec.inputs[0]!, codec, processor: h })
              : startRpcResponder({
                  bus,
                  requestTopic: spec.inputs[0]!,
                  responseTopic: spec.outputs![0]!,
                  requestCodec: codec,
                  responseCodec: codec,
                  processor: h,
                });
    await sub.ready;
    return { stop: () => sub.stop(), logs: () => [] };
  },
};

/**
 * A processor actor from a topology file. `kafkaBrokers` set: the topology's bus is kafka and the
 * actor connects to the broker itself; else the test's (journal or memory) bus is served to it.
 */
export function actorRunner(kafkaBrokers?: string[]): ProcessorRunner {
  return {
    mode: 'actor',
    async start(bus, spec) {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'processors_actor-'));
      const topics = [
        ...new Set([
          ...spec.inputs,
          ...(spec.outputs ?? []),
          ...(spec.stateTopic ? [spec.stateTopic] : []),
          ...(spec.deadLetterTopic ? [spec.deadLetterTopic] : []),
        ]),
      ];
      const queues = await Promise.all(
        topics.map(async (t) => ({ name: t, partitions: (await bus.partitionCount(t)) ?? 1 })),
      );
      const name = `p${process.pid}-${++seq}`;
      const entry: Record<string, unknown> = {
        name,
        pattern: spec.pattern,
        module: handlerSource(spec.handler),
        inputs: spec.inputs,
        codec: spec.codec,
        ...(spec.outputs && spec.outputs.length > 0 ? { outputs: spec.outputs } : {}),
        ...(spec.group ? { group: spec.group } : {}),
        ...(spec.stateTopic ? { stateTopic: spec.stateTopic } : {}),
        ...(spec.deadLetterTopic ? { deadLetterTopic: spec.deadLetterTopic } : {}),
        ...(spec.batchSizeMax ? { batchSizeMax: spec.batchSizeMax } : {}),
        ...(spec.sessionTimeoutMs ? { sessionTimeoutMs: spec.sessionTimeoutMs } : {}),
        ...(spec.settings ? { settings: spec.settings } : {}),
      };
      // JSON is YAML: the file is what a user would write, in flow style.
      const text = JSON.stringify(
        {
          name: 'conformance',
          dataDir: dir,
          ...(kafkaBrokers ? { bus: { kind: 'kafka', brokers: kafkaBrokers } } : {}),
          // A worker that dies is restarted (the crash test), a few times at most.
          supervisor: { restartsMax: 3, backoffInitialMs: 50, drainTimeoutMs: 15000 },
          queues,
          processors: [entry],
        },
        null,
        2,
      );
      const file = path.join(dir, 'topology.yaml');
      fs.writeFileSync(file, text);
      const topology = parseTopology(text, file, { env: {} });
      const plan = planTopology(topology, {
        connectBus: () => {
          const { port1, port2 } = new MessageChannel();
          serveBus(bus, port1);
          return port2;
        },
      });
      const supervisor = new Supervisor(topology.supervisor);
      const logs: string[] = [];
      supervisor.on('log', (l: string) => logs.push(l));
      supervisor.on('actorLog', (l: ActorLogEvent) => logs.push(`${l.actor}: ${l.msg}`));
      // A worker copies the environment when it is created: the hook is set for this start only.
      const env = process.env[PROCESSOR_FAULT_DIR_ENV];
      if (spec.faults) {
        fs.writeFileSync(
          path.join(dir, encodeURIComponent(name)),
          `commit ${spec.faults.commitFailsAt}\n`,
        );
        process.env[PROCESSOR_FAULT_DIR_ENV] = dir;
      }
      try {
        await supervisor.start(plan.groups);
      } catch (e) {
        throw new Error(`${(e as Error).message}; ${logs.join('; ')}`);
      } finally {
        if (spec.faults) {
          if (env === undefined) delete process.env[PROCESSOR_FAULT_DIR_ENV];
          else process.env[PROCESSOR_FAULT_DIR_ENV] = env;
        }
      }
      return {
        stop: async () => {
          await supervisor.stop();
          fs.rmSync(dir, { recursive: true, force: true });
        },
        logs: () => [...logs],
      };
    },
  };
}

/** Lines a log-records handler wrote (JSON per line), [] before it wrote any. */
export function readLog(file: string): Record<string, unknown>[] {
  if (!fs.existsSync(file)) return [];
  return fs
    .readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l.length > 0)
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

/** A fresh log file path for a log-records handler. */
export function logFile(): string {
  return path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'processors_log-')), 'seen.jsonl');
}

export type { ProducerRecord };
