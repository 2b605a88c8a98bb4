/**
 * Worker-side runtime shared by every actor: reads `workerData`, exposes counters, control
 * and lifecycle reporting, and turns an uncaught failure into a `failed` message plus a
 * non-zero exit so the supervisor can restart the actor's group.
 */
import fs from 'node:fs';
import path from 'node:path';
import {
  parentPort,
  workerData,
  isMainThread,
  threadId,
  type MessagePort,
} from 'node:worker_threads';
import { Command, Control, LOG_LEVELS, type LogLevelName } from './control.js';
import { Counter, osThreadId, setState, type ActorState } from './counters.js';
import type { ActorMessage, ActorWorkerData } from './protocol.js';
import { heapProbe } from './heap-probe.js';

/** Everything an actor body needs from its runtime. */
export interface ActorContext<D> {
  readonly name: string;
  readonly data: D;
  readonly restarts: number;
  /** Shared buffers by name (rings, doorbells, notifiers). Throws if the name is unknown. */
  shared(name: string): SharedArrayBuffer;
  /** A MessagePort its spec handed over, by name. Throws if the name is unknown. */
  port(name: string): MessagePort;
  /** Raw counters; index with {@link Counter}. */
  readonly counters: Float64Array;
  /** True once the supervisor asked for a drain (or a stop). */
  draining(): boolean;
  /** True once the supervisor asked to stop now. */
  stopping(): boolean;
  /** Moves the lifecycle state shown in the counters. */
  setState(state: ActorState): void;
  /** Sends a typed message to the supervisor. */
  send(message: ActorMessage): void;
  /** Stamps the heartbeat (ms since epoch). Call once per loop iteration. */
  heartbeat(): void;
  /**
   * Sends a log line to the supervisor (which writes it with the actor's name and topology)
   * when `level` is at or above the actor's log level, changeable at runtime. `fields` must be
   * structured-clone-able plain data.
   */
  log(level: LogLevelName, msg: string, fields?: Record<string, unknown>): void;
}

/**
 * Test-only fault hook (the fault suite, faults/): when this environment variable names a
 * directory, every actor looks there at most every {@link WORKER_FAULT_POLL_MS} ms, from its
 * heartbeat (once per loop iteration, so mid-stream), for a file named
 * `encodeURIComponent(<actor name>)`. The first actor to rename it away takes the fault: content
 * `exit` ends the worker thread at once with `process.exit(70)` (a thread dying without a word),
 * `throw` throws from the heartbeat (an actor crashing). Unset (the default), it costs nothing.
 */
export const WORKER_FAULT_DIR_ENV = 'SLUICE_FAULT_WORKER_DIR';

/** How often an actor looks for an injected fault, ms. */
export const WORKER_FAULT_POLL_MS = 20;

/** Exit code of a worker ended by an injected `exit` fault. */
export const WORKER_FAULT_EXIT_CODE = 70;

/** Returns the heartbeat-time fault check for actor `name`, or null when the hook is off. */
function workerFaultCheck(name: string): (() => void) | null {
  const dir = process.env[WORKER_FAULT_DIR_ENV];
  if (!dir) return null;
  const file = path.join(dir, encodeURIComponent(name));
  let checkedMs = 0;
  return () => {
    const now = Date.now();
    if (now - checkedMs < WORKER_FAULT_POLL_MS) return;
    checkedMs = now;
    const taken = `${file}.taken-${process.pid}-${threadId}-${now}`;
    try {
      fs.renameSync(file, taken);
    } catch {
      return; // no fault for this actor
    }
    const mode = fs.readFileSync(taken, 'utf8').trim();
    if (mode === 'throw')
      throw new Error(`actor ${name}: injected fault (${WORKER_FAULT_DIR_ENV})`);
    process.exit(WORKER_FAULT_EXIT_CODE);
  };
}

/**
 * Runs an actor body inside a worker thread.
 * The body returns a summary (sent with `stopped`) when it has drained. A thrown error or
 * rejected promise is reported as `failed` and the worker exits with code 1.
 * @throws Error when called outside a worker thread.
 */
export function runActor<D>(body: (ctx: ActorContext<D>) => Promise<unknown> | unknown): void {
  if (isMainThread || !parentPort)
    throw new Error('runActor must be called inside a worker thread');
  const port = parentPort;
  const wd = workerData as ActorWorkerData<D>;
  const control = new Control(wd.control);
  const counters = new Float64Array(wd.counters);
  const faultCheck = workerFaultCheck(wd.name);
  const probe = heapProbe(wd.name);
  const ctx: ActorContext<D> = {
    name: wd.name,
    data: wd.data,
    restarts: wd.restarts,
    counters,
    shared(name) {
      const sab = wd.shared[name];
      if (!sab) throw new Error(`actor ${wd.name}: no shared buffer named "${name}"`);
      return sab;
    },
    port(name) {
      const port = wd.ports?.[name];
      if (!port) throw new Error(`actor ${wd.name}: no port named "${name}"`);
      return port;
    },
    draining: () => control.command() >= Command.drain,
    stopping: () => control.command() >= Command.stop,
    setState: (state) => setState(counters, state),
    send: (message) => port.postMessage(message),
    heartbeat: () => {
      counters[Counter.heartbeatMs] = Date.now();
      if (faultCheck) faultCheck();
      if (probe) probe();
    },
    log: (level, msg, fields) => {
      const n = LOG_LEVELS[level];
      if (n === undefined || n < control.logLevel() || level === 'silent') return;
      port.postMessage({ type: 'log', level: n, msg, fields } satisfies ActorMessage);
    },
  };
  ctx.setState('init');
  counters[Counter.threadId] = osThreadId();
  ctx.heartbeat();
  Promise.resolve()
    .then(() => body(ctx))
    .then(
      (summary) => {
        ctx.setState('stopped');
        port.postMessage({ type: 'stopped', summary: summary ?? null } satisfies ActorMessage);
      },
      (err: unknown) => {
        ctx.setState('failed');
        const e = err instanceof Error ? err : new Error(String(err));
        // The cause's message too (when the message does not already carry it): the log is one line.
        const cause =
          e.cause instanceof Error ? e.cause.message : e.cause !== undefined ? String(e.cause) : '';
        const message =
          cause && !e.message.includes(cause) ? `${e.message} (cause: ${cause})` : e.message;
        port.postMessage({ type: 'failed', message, stack: e.stack } satisfies ActorMessage);
        // Let the message flush before the exit; the supervisor treats the exit as the crash.
        setImmediate(() => process.exit(1));
      },
    );
}
