/**
 * Main side of queue retention (engine/service/retention.ts): loads what the pass needs of each
 * service module (its snapshot type, whether it has a key-value store) and runs the pass every
 * `intervalMs` in the thread that started the topology, until stopped.
 *
 * Crash tests: `SLUICE_RETENTION_FAULT=<step>@<n>` (step `segment-removed` or `index-removed`,
 * n counting removed files of that step from 1 in this process) kills the process by SIGKILL
 * right after that file is removed, as `kill -9` in the middle of a pass would.
 */
import { pathToFileURL } from 'node:url';
import type { Topology } from '../engine/config/index.js';
import type { RetentionStepHook } from '../engine/journal/index.js';
import { crashNow } from '../engine/journal/fault.js';
import {
  applyQueueRetention,
  assertServiceDefinition,
  queueRetentionPlan,
  QUEUE_RETENTION_DEFAULTS,
  type QueueRetentionReport,
  type ReaderDefinition,
} from '../engine/service/index.js';
import { partitionDir } from './plan.js';

/** Environment variable of the crash-test fault point. */
export const RETENTION_FAULT_ENV = 'SLUICE_RETENTION_FAULT';

/** A running retention pass. */
export interface QueueRetentionRunner {
  /** Runs one pass now (also what the timer runs); `nowMs` is the clock for ages. */
  pass(nowMs?: number): QueueRetentionReport;
  /** Stops the timer. Idempotent. */
  stop(): void;
}

function faultHook(env: NodeJS.ProcessEnv = process.env): RetentionStepHook | undefined {
  const raw = env[RETENTION_FAULT_ENV];
  if (raw === undefined || raw === '') return undefined;
  const m = /^(segment-removed|index-removed)@([1-9]\d*)$/.exec(raw);
  if (!m)
    throw new Error(
      `${RETENTION_FAULT_ENV} must be "segment-removed@<n>" or "index-removed@<n>", ${RETENTION_FAULT_ENV}=${JSON.stringify(raw)}`,
    );
  let seen = 0;
  return (step) => {
    if (step === m[1] && ++seen === Number(m[2])) crashNow();
  };
}

/**
 * Starts the retention pass of `topology`, or returns null when no queue sets retention.
 * `intervalMs` 0: no timer (passes only on pass()). Errors of a timed pass go to `onError` (the
 * topology goes on; the next pass retries). @throws Error when a service module does not load
 * (startTopology has checked them before).
 */
export async function startQueueRetention(
  topology: Topology,
  onError: (e: Error) => void,
  intervalMs: number = QUEUE_RETENTION_DEFAULTS.intervalMs,
): Promise<QueueRetentionRunner | null> {
  if (!topology.queues.some((q) => q.retention)) return null;
  const definitions = new Map<string, ReaderDefinition>();
  for (const s of topology.services) {
    const def = assertServiceDefinition(await import(pathToFileURL(s.module).href), s.module);
    definitions.set(s.name, {
      ...(def.snapshot ? { snapshotType: def.snapshot.type } : {}),
      kvStore: def.kvStore !== undefined,
    });
  }
  const plan = queueRetentionPlan(topology, definitions, (q, p) => partitionDir(topology, q, p));
  if (!plan) return null;
  const onStep = faultHook();
  const pass = (nowMs = Date.now()) => applyQueueRetention(plan, nowMs, onStep);
  const timer =
    intervalMs > 0
      ? setInterval(() => {
          try {
            pass();
          } catch (e) {
            onError(e instanceof Error ? e : new Error(String(e)));
          }
        }, intervalMs)
      : null;
  timer?.unref();
  return { pass, stop: () => timer && clearInterval(timer) };
}
