/**
 * Main-side supervisor: starts actor groups in worker threads, watches them, restarts a failed
 * group with capped exponential backoff (forever by default; with `restartsMax`, the topology
 * stops after too many restarts in a window), and drains the topology stage by stage on stop.
 * A failing group never stops the other groups: they keep running while it restarts, and
 * {@link Supervisor.groupStatus} reports it `restarting`.
 *
 * A group is the unit of restart: actors that share rings (a service and its queue readers)
 * fail together, because a ring's in-flight records die with either side. Each (re)start gets
 * fresh rings from the group's own `start` function; durable positions (LAST_WRITTEN) make the
 * restart exact. The restart policy follows Erlang/OTP supervisors (intensity = restartsMax
 * within period = restartWindowMs) with the backoff of Akka's BackoffSupervisor.
 */
import { EventEmitter } from 'node:events';
import { Worker, type MessagePort } from 'node:worker_threads';
import {
  Command,
  Control,
  createControl,
  createCounters,
  readCounters,
  LOG_LEVEL_DEFAULT,
  type ActorMessage,
  type ActorWorkerData,
  type CounterSnapshot,
  type Outage,
} from '../actor/index.js';

/** One actor to run in its own worker thread. */
export interface ActorSpec<D = unknown> {
  /** Unique across the topology, e.g. `reader:history-changes/0>branch-balances`. */
  name: string;
  /** Worker entry file (compiled JavaScript) as a path or file URL. */
  module: string | URL;
  /** Plain, structured-clone-able start data. */
  data: D;
  /** Shared buffers (rings, doorbells, queue notifiers) the actor may open by name. */
  shared?: Record<string, SharedArrayBuffer>;
  /** Drain order inside the group: lower drains (and must finish) first. Default 0. */
  drainOrder?: number;
  /**
   * MessagePorts handed to the actor (transferred: they belong to this launch only; a restart
   * makes new ones in the group's start), e.g. a processor's connection to the topology's bus.
   */
  ports?: Record<string, MessagePort>;
}

/** Handle to a launched actor, for the group's start protocol. */
export interface ActorHandle {
  readonly name: string;
  /** Resolves with the actor's `ready` info; rejects if the actor fails first. */
  ready(): Promise<unknown>;
}

/** What a group's start function may do. */
export interface GroupLauncher {
  /** Restarts of this group so far (0 on the first start). */
  readonly restarts: number;
  /** Starts one actor now. */
  launch<D>(spec: ActorSpec<D>): ActorHandle;
}

/** A restartable set of actors. */
export interface GroupSpec {
  name: string;
  /** Drain stage: stage 0 groups drain completely before stage 1 groups start draining. */
  stage: number;
  /** Launches the group's actors (called at start and after every restart). */
  start(launcher: GroupLauncher): Promise<void>;
}

/** Restart and drain limits, all with defaults in {@link SUPERVISOR_DEFAULTS}. */
export interface SupervisorOptions {
  /**
   * Restarts allowed per group within `restartWindowMs` before the topology stops; Infinity
   * (the default): restart forever, the delay capped at `backoffMaxMs`.
   */
  restartsMax: number;
  /** Sliding window for `restartsMax`, in ms. */
  restartWindowMs: number;
  /** First restart delay, in ms; doubles per consecutive restart. */
  backoffInitialMs: number;
  /** Upper bound of the restart delay, in ms. */
  backoffMaxMs: number;
  /** Time one actor gets to drain before it is terminated, in ms. */
  drainTimeoutMs: number;
}

/** Defaults of {@link SupervisorOptions}. */
export const SUPERVISOR_DEFAULTS: SupervisorOptions = {
  restartsMax: Infinity,
  restartWindowMs: 60_000,
  backoffInitialMs: 100,
  backoffMaxMs: 5_000,
  drainTimeoutMs: 10_000,
};

/** Emitted as `restart` before a group is restarted. */
export interface RestartEvent {
  group: string;
  actor: string;
  error: string;
  attempt: number;
  delayMs: number;
}

/** One group's health, from {@link Supervisor.groupStatus}. */
export interface GroupStatus {
  /** `up`: started and running; `restarting`: failed, waiting for or in its next start. */
  state: 'starting' | 'up' | 'restarting' | 'stopped';
  /** Restarts so far. */
  restarts: number;
  /** The last failure's message (null: none yet). */
  lastError: string | null;
  /** Delay before the pending restart, ms (0 when none is pending). */
  restartDelayMs: number;
}

/** Result of {@link Supervisor.stop}. */
export interface StopResult {
  /** Per actor, the summary it sent with `stopped` (null if it was terminated). */
  summaries: Record<string, unknown>;
  /** Per actor, its counters at the end. */
  counters: Record<string, CounterSnapshot>;
  /** Actors that did not drain within drainTimeoutMs and were terminated. */
  terminated: string[];
}

interface RunningActor {
  spec: ActorSpec;
  /** Date.now() at launch. */
  startedMs: number;
  worker: Worker;
  control: Control;
  counters: SharedArrayBuffer;
  stopped: boolean;
  summary: unknown;
  lastError: string | null;
  /** What its outage is about, as it last said (an `outage` message); null while up. */
  outage: Outage | null;
  exited: Promise<number>;
  readyWaiters: { resolve: (v: unknown) => void; reject: (e: Error) => void }[];
  readyInfo: { value: unknown } | null;
}

interface GroupState {
  spec: GroupSpec;
  generation: number;
  actors: RunningActor[];
  /** performance.now() of the restarts within restartWindowMs. */
  restartTimes: number[];
  restarts: number;
  timer: NodeJS.Timeout | null;
  status: GroupStatus;
  /** The first failure since the group was last all live; null while it is healthy. */
  failure: GroupFailure | null;
  /** Generation whose start function resolved (its actors were all launched). */
  startedGeneration: number;
  /**
   * The actors of the generation that failed last, until the restart launches each again: what
   * actors() reports for them meanwhile (an actor that fails in its init every time is never in
   * `actors` for long, and must not vanish from GET /actors and the metrics).
   */
  previous: RunningActor[];
}

/**
 * Emitted as `retired` for each actor of a group that replaceGroups retired, once it stopped:
 * its name, Date.now() of its launch, and its counters as it left them.
 */
export interface RetiredEvent {
  name: string;
  startedMs: number;
  counters: CounterSnapshot;
}

/** Why a group is degraded: the actor that failed first, its error, and since when. */
export interface GroupFailure {
  actor: string;
  error: string;
  /** Date.now() of that failure. */
  sinceMs: number;
}

/** One running (or last run) actor as the operations layer sees it. */
export interface ActorInfo {
  name: string;
  group: string;
  stage: number;
  /** Restarts of its group so far. */
  restarts: number;
  /** Start data of the actor (e.g. a queue reader's queue and partition). */
  data: unknown;
  /** Its shared buffers by name (rings, notifiers), for read-only inspection. */
  shared: Record<string, SharedArrayBuffer>;
  counters: CounterSnapshot;
  /** Date.now() at its (last) launch. */
  startedMs: number;
  lastError: string | null;
  /**
   * What it cannot reach while its downSinceMs counter is set (a pump's capture source or its
   * target), as the actor last said; null while up, and until the actor's message arrives.
   */
  outage: Outage | null;
}

/** Health of one group: live when its start finished and every actor of it is live. */
export interface GroupHealth {
  name: string;
  stage: number;
  restarts: number;
  live: boolean;
  /** Set from the first failure until the group is live again. */
  failure: GroupFailure | null;
}

/** A log line an actor sent (ActorContext.log), with the actor's name. */
export interface ActorLogEvent {
  actor: string;
  level: number;
  msg: string;
  fields?: Record<string, unknown>;
}

/**
 * Runs groups of actors. Events: `restart` ({@link RestartEvent}), `fatal` (Error: the topology
 * stopped because a group failed too often), `log` (string), `actorLog` ({@link ActorLogEvent}).
 */
export class Supervisor extends EventEmitter {
  readonly options: SupervisorOptions;
  private readonly groups = new Map<string, GroupState>();
  private readonly finalCounters = new Map<string, SharedArrayBuffer>();
  private state: 'idle' | 'running' | 'draining' | 'stopped' | 'failed' = 'idle';
  private fatalError: Error | null = null;
  /** Log level (pino's numbers) for every actor without its own, and per-actor overrides. */
  private logLevelAll = LOG_LEVEL_DEFAULT;
  private readonly logLevels = new Map<string, number>();
  private doneResolve!: () => void;
  private doneReject!: (e: Error) => void;
  /** Settles when the topology has stopped: resolves after stop(), rejects on a fatal failure. */
  readonly done: Promise<void>;

  /** @throws Error when an option is out of range. */
  constructor(options: Partial<SupervisorOptions> = {}) {
    super();
    this.options = { ...SUPERVISOR_DEFAULTS, ...options };
    for (const [k, v] of Object.entries(this.options)) {
      if (k === 'restartsMax' && v === Infinity) continue;
      if (!Number.isFinite(v) || v < 0)
        throw new Error(`supervisor option ${k} must be a number >= 0, ${k}=${v}`);
    }
    this.done = new Promise<void>((res, rej) => {
      this.doneResolve = res;
      this.doneReject = rej;
    });
    this.done.catch(() => undefined); // callers observe it via await; avoid an unhandled rejection
  }

  /**
   * Starts every group in stage order and waits for each group's start function.
   * @throws Error if the topology fails (too many restarts) before it is up.
   */
  async start(groups: GroupSpec[]): Promise<void> {
    if (this.state !== 'idle') throw new Error(`supervisor already started (state=${this.state})`);
    this.state = 'running';
    const names = new Set<string>();
    for (const g of groups) {
      if (names.has(g.name)) throw new Error(`duplicate group name "${g.name}"`);
      names.add(g.name);
      this.groups.set(g.name, {
        spec: g,
        generation: 0,
        actors: [],
        restartTimes: [],
        restarts: 0,
        timer: null,
        status: { state: 'starting', restarts: 0, lastError: null, restartDelayMs: 0 },
        failure: null,
        previous: [],
        startedGeneration: 0,
      });
    }
    const ordered = [...this.groups.values()].sort((a, b) => b.spec.stage - a.spec.stage);
    // Consumers first (higher stage), so that a producer's first records find their readers.
    for (const g of ordered) {
      await this.startGroup(g);
      if (this.fatalError) throw this.fatalError;
    }
  }

  /** Health of every group, by group name (a copy). */
  groupStatus(): Record<string, GroupStatus> {
    const out: Record<string, GroupStatus> = {};
    for (const [name, g] of this.groups) out[name] = { ...g.status };
    return out;
  }

  /** Counters of every actor that is or was running, by actor name. */
  counters(): Record<string, CounterSnapshot> {
    const out: Record<string, CounterSnapshot> = {};
    for (const [name, sab] of this.finalCounters) out[name] = readCounters(sab);
    return out;
  }

  /** Lifecycle of the supervisor itself. */
  status(): 'idle' | 'running' | 'draining' | 'stopped' | 'failed' {
    return this.state;
  }

  /** The fatal error that stopped the topology, or null. */
  failure(): Error | null {
    return this.fatalError;
  }

  /** Every actor of the current generation of every group, in group order. */
  actors(): ActorInfo[] {
    const out: ActorInfo[] = [];
    for (const g of this.groups.values()) {
      const info = (a: RunningActor, counters: CounterSnapshot, lastError: string | null) => ({
        name: a.spec.name,
        group: g.spec.name,
        stage: g.spec.stage,
        restarts: g.restarts,
        data: a.spec.data,
        shared: a.spec.shared ?? {},
        counters,
        startedMs: a.startedMs,
        lastError,
        outage: a.outage,
      });
      for (const a of g.actors) out.push(info(a, readCounters(a.counters), a.lastError));
      // Actors of the failed generation not launched again yet: the one that failed as
      // `failed` with the group's failure, the others as `new` (waiting for their launch).
      const current = new Set(g.actors.map((a) => a.spec.name));
      for (const a of g.previous) {
        if (current.has(a.spec.name)) continue;
        const failed = g.failure?.actor === a.spec.name;
        const counters = { ...readCounters(a.counters), state: failed ? 'failed' : 'new' } as const;
        out.push(info(a, counters, failed ? (g.failure?.error ?? a.lastError) : a.lastError));
      }
    }
    return out;
  }

  /** Health of every group (see {@link GroupHealth}); clears a failure once the group is live. */
  health(): GroupHealth[] {
    return [...this.groups.values()].map((g) => {
      const live =
        g.startedGeneration === g.generation &&
        g.actors.length > 0 &&
        g.actors.every((a) => readCounters(a.counters).state === 'live');
      if (live) {
        g.failure = null;
        g.previous = [];
      }
      return {
        name: g.spec.name,
        stage: g.spec.stage,
        restarts: g.restarts,
        live,
        failure: g.failure,
      };
    });
  }

  /** Log level of one actor (its own, else the global one), as pino's number. */
  logLevel(actor?: string): number {
    return (actor !== undefined ? this.logLevels.get(actor) : undefined) ?? this.logLevelAll;
  }

  /**
   * Sets the log level (pino's numbers: 10 trace .. 60 fatal, Infinity silent) of one actor, or
   * of every actor without its own (`actor` undefined; also clears nothing). Applies at once to
   * running actors (a shared cell) and to later restarts.
   * @throws Error when the actor is unknown or the level is not a number.
   */
  setLogLevel(level: number, actor?: string): void {
    if (typeof level !== 'number' || Number.isNaN(level))
      throw new Error(`log level must be a number, level=${level}`);
    if (actor !== undefined) {
      if (!this.actors().some((a) => a.name === actor)) throw new Error(`unknown actor "${actor}"`);
      this.logLevels.set(actor, level);
    } else {
      this.logLevelAll = level;
    }
    for (const g of this.groups.values()) {
      for (const a of g.actors) a.control.setLogLevel(this.logLevel(a.spec.name));
    }
  }

  /**
   * Drains the topology: stage by stage (ascending), and inside a group by drainOrder
   * (ascending), asks actors to drain and waits for them to stop. An actor that has not
   * stopped after drainTimeoutMs is terminated (its durable state is still exact: that is
   * what LAST_WRITTEN is for).
   */
  async stop(): Promise<StopResult> {
    const result: StopResult = { summaries: {}, counters: {}, terminated: [] };
    if (this.state === 'stopped' || this.state === 'failed') {
      result.counters = this.counters();
      return result;
    }
    this.state = 'draining';
    for (const g of this.groups.values()) {
      if (g.timer) clearTimeout(g.timer);
      g.timer = null;
    }
    const stages = [...new Set([...this.groups.values()].map((g) => g.spec.stage))].sort(
      (a, b) => a - b,
    );
    for (const stage of stages) {
      const inStage = [...this.groups.values()].filter((g) => g.spec.stage === stage);
      await Promise.all(inStage.map((g) => this.drainGroup(g, result)));
    }
    result.counters = this.counters();
    for (const g of this.groups.values()) g.status.state = 'stopped';
    this.state = 'stopped';
    this.doneResolve();
    return result;
  }

  /**
   * Replaces running groups at runtime (a capture source's pumps for a new pump count): asks
   * every actor of the groups named in `retire` to stop now (Command.stop: finish the work in
   * flight, leave the backlog), waits until all of them have exited (an actor that has not
   * after drainTimeoutMs is terminated, like in a drain), removes those groups, and only then
   * starts the groups of `add` in stage order (descending, as {@link start} does). Neither a
   * retired actor's exit nor its failure restarts anything. Resolves with the retired actors'
   * summaries and final counters.
   * @throws Error when the supervisor is not running, a retired group is unknown, or an added
   *   group's name is already taken by a group that stays.
   */
  async replaceGroups(retire: string[], add: GroupSpec[]): Promise<StopResult> {
    if (this.state !== 'running')
      throw new Error(`supervisor is not running (state=${this.state}); groups cannot change`);
    const old = retire.map((name) => {
      const g = this.groups.get(name);
      if (!g) throw new Error(`unknown group "${name}"`);
      return g;
    });
    for (const g of add) {
      if (this.groups.has(g.name) && !retire.includes(g.name))
        throw new Error(`duplicate group name "${g.name}"`);
    }
    const result: StopResult = { summaries: {}, counters: {}, terminated: [] };
    await Promise.all(
      old.map(async (g) => {
        if (g.timer) clearTimeout(g.timer);
        g.timer = null;
        // Supersedes the running generation: its actors' exits and failures are stale events.
        g.generation++;
        const actors = g.actors;
        for (const a of actors) a.control.request(Command.stop);
        await Promise.all(
          actors.map(async (a) => {
            const timeout = new Promise<'timeout'>((res) => {
              const t = setTimeout(() => res('timeout'), this.options.drainTimeoutMs);
              t.unref();
            });
            if ((await Promise.race([a.exited, timeout])) === 'timeout') {
              result.terminated.push(a.spec.name);
              this.emit(
                'log',
                `actor ${a.spec.name} did not stop within ${this.options.drainTimeoutMs} ms; terminated`,
              );
              await a.worker.terminate();
            }
            result.summaries[a.spec.name] = a.stopped ? a.summary : null;
            result.counters[a.spec.name] = readCounters(a.counters);
            // Its last counters, for whoever keeps per-interval deltas (ops/stats.ts): what it
            // did after their last sample would be lost otherwise.
            this.emit('retired', {
              name: a.spec.name,
              startedMs: a.startedMs,
              counters: result.counters[a.spec.name],
            } satisfies RetiredEvent);
          }),
        );
        this.groups.delete(g.spec.name);
      }),
    );
    if (this.state !== 'running') return result;
    const added: GroupState[] = add.map((spec) => ({
      spec,
      generation: 0,
      actors: [],
      restartTimes: [],
      restarts: 0,
      timer: null,
      status: { state: 'starting', restarts: 0, lastError: null, restartDelayMs: 0 },
      failure: null,
      startedGeneration: 0,
      previous: [],
    }));
    for (const g of added) this.groups.set(g.spec.name, g);
    for (const g of [...added].sort((a, b) => b.spec.stage - a.spec.stage)) {
      await this.startGroup(g);
      if (this.fatalError) throw this.fatalError;
    }
    return result;
  }

  private async drainGroup(g: GroupState, result: StopResult): Promise<void> {
    // A group whose start the drain cut short (its later actors are never launched once the
    // supervisor drains, e.g. a service's readers after a Ctrl-C in the first moments) cannot
    // drain: its actors would wait for rings no reader will close. They are stopped instead
    // (Command.stop: the work in flight is finished, the backlog stays for the next start),
    // which keeps their durable state exact as a drain does.
    const command = g.startedGeneration === g.generation ? Command.drain : Command.stop;
    const orders = [...new Set(g.actors.map((a) => a.spec.drainOrder ?? 0))].sort((a, b) => a - b);
    for (const order of orders) {
      const batch = g.actors.filter((a) => (a.spec.drainOrder ?? 0) === order);
      await Promise.all(
        batch.map(async (a) => {
          a.control.request(command);
          const timeout = new Promise<'timeout'>((res) => {
            const t = setTimeout(() => res('timeout'), this.options.drainTimeoutMs);
            t.unref();
          });
          const outcome = await Promise.race([a.exited, timeout]);
          if (outcome === 'timeout') {
            result.terminated.push(a.spec.name);
            this.emit(
              'log',
              `actor ${a.spec.name} did not drain within ${this.options.drainTimeoutMs} ms; terminated`,
            );
            await a.worker.terminate();
          }
          result.summaries[a.spec.name] = a.stopped ? a.summary : null;
        }),
      );
    }
  }

  private async startGroup(g: GroupState): Promise<void> {
    const generation = ++g.generation;
    g.actors = [];
    const launcher: GroupLauncher = {
      restarts: g.restarts,
      launch: <D>(spec: ActorSpec<D>) => {
        if (g.generation !== generation || this.state !== 'running') {
          throw new Error(`group ${g.spec.name} was restarted or stopped while starting`);
        }
        return this.launch(g, generation, spec as ActorSpec);
      },
    };
    try {
      await g.spec.start(launcher);
      if (g.generation === generation && this.state === 'running') {
        g.status.state = 'up';
        g.status.restartDelayMs = 0;
      }
      if (g.generation === generation) g.startedGeneration = generation;
    } catch (err) {
      // A failed actor during start already scheduled a restart; anything else is a crash of the
      // group's start protocol itself, handled the same way.
      if (g.generation === generation && this.state === 'running') {
        this.onFailure(g, generation, `group ${g.spec.name}`, (err as Error).message);
      }
    }
  }

  private launch(g: GroupState, generation: number, spec: ActorSpec): ActorHandle {
    if (g.actors.some((a) => a.spec.name === spec.name))
      throw new Error(`duplicate actor name "${spec.name}"`);
    const counters = createCounters();
    const controlSab = createControl();
    const wd: ActorWorkerData = {
      name: spec.name,
      data: spec.data,
      counters,
      control: controlSab,
      shared: spec.shared ?? {},
      ports: spec.ports ?? {},
      restarts: g.restarts,
    };
    const worker = new Worker(spec.module, {
      workerData: wd,
      stdout: false,
      stderr: false,
      transferList: Object.values(spec.ports ?? {}),
    });
    let exitResolve!: (code: number) => void;
    const control = new Control(controlSab);
    control.setLogLevel(this.logLevel(spec.name));
    const running: RunningActor = {
      spec,
      startedMs: Date.now(),
      worker,
      control,
      counters,
      stopped: false,
      summary: null,
      lastError: null,
      outage: null,
      exited: new Promise<number>((res) => (exitResolve = res)),
      readyWaiters: [],
      readyInfo: null,
    };
    this.finalCounters.set(spec.name, counters);
    g.actors.push(running);
    const fail = (message: string) => {
      running.lastError = message;
      for (const w of running.readyWaiters.splice(0))
        w.reject(new Error(`actor ${spec.name} failed: ${message}`));
      if (g.generation === generation && this.state === 'running')
        this.onFailure(g, generation, spec.name, message);
    };
    worker.on('message', (m: ActorMessage) => {
      switch (m.type) {
        case 'ready':
          running.readyInfo = { value: m.info };
          for (const w of running.readyWaiters.splice(0)) w.resolve(m.info);
          break;
        case 'stopped':
          running.stopped = true;
          running.summary = m.summary;
          break;
        case 'failed':
          running.lastError = m.message;
          // One line unless SLUICE_DEBUG is set (then the worker's stack trace too).
          this.emit(
            'log',
            `actor ${spec.name} failed: ${process.env.SLUICE_DEBUG ? (m.stack ?? m.message) : m.message}`,
          );
          break;
        case 'live':
          break;
        case 'outage':
          running.outage = m.outage;
          break;
        case 'log':
          this.emit('actorLog', {
            actor: spec.name,
            level: m.level,
            msg: m.msg,
            fields: m.fields,
          } satisfies ActorLogEvent);
          break;
      }
    });
    worker.on('error', (err) => {
      running.lastError = err.message;
      this.emit(
        'log',
        `actor ${spec.name} threw: ${process.env.SLUICE_DEBUG ? (err.stack ?? err.message) : err.message}`,
      );
    });
    worker.on('exit', (code) => {
      exitResolve(code);
      if (running.stopped && code === 0) return;
      if (this.state === 'draining' || this.state === 'stopped') {
        // An actor that exits during a drain without a clean stop is reported, not restarted.
        if (!running.stopped)
          this.emit('log', `actor ${spec.name} exited with code ${code} while draining`);
        for (const w of running.readyWaiters.splice(0))
          w.reject(new Error(`actor ${spec.name} exited while draining`));
        return;
      }
      fail(
        running.lastError ??
          `exited with code ${code}${running.stopped ? ' after stopping' : ' unexpectedly'}`,
      );
    });
    return {
      name: spec.name,
      ready: () =>
        running.readyInfo
          ? Promise.resolve(running.readyInfo.value)
          : new Promise((resolve, reject) => {
              if (running.lastError)
                reject(new Error(`actor ${spec.name} failed: ${running.lastError}`));
              else running.readyWaiters.push({ resolve, reject });
            }),
    };
  }

  private onFailure(g: GroupState, generation: number, actor: string, message: string): void {
    if (g.generation !== generation) return;
    if (!g.failure) g.failure = { actor, error: message, sinceMs: Date.now() };
    g.generation++; // supersede the failed start; stale events of the old actors are ignored
    const old = g.actors;
    g.actors = [];
    g.previous = old;
    // Restarted only once the old threads are gone: their queues' appender locks are released
    // with their threads (a lock of a live thread is never taken over).
    const terminated = Promise.all(old.map((a) => a.worker.terminate().catch(() => -1)));
    // The restart window is on the monotonic clock: a wall-clock step back must not keep old
    // restarts in the window (and a step forward must not forget recent ones).
    const now = performance.now();
    g.restartTimes = g.restartTimes.filter((t) => now - t < this.options.restartWindowMs);
    if (g.restartTimes.length >= this.options.restartsMax) {
      const err = new Error(
        `group ${g.spec.name} failed ${g.restartTimes.length + 1} times within ${this.options.restartWindowMs} ms ` +
          `(restartsMax=${this.options.restartsMax}); last failure in ${actor}: ${message}`,
      );
      this.fatal(err);
      return;
    }
    g.restartTimes.push(now);
    g.restarts++;
    // Capped before the power, so that restarting forever never overflows to Infinity.
    const doublings = Math.min(g.restartTimes.length - 1, 40);
    const { backoffMaxMs, backoffInitialMs } = this.options;
    const delayMs = Math.min(backoffMaxMs, backoffInitialMs * 2 ** doublings);
    g.status = {
      state: 'restarting',
      restarts: g.restarts,
      lastError: `${actor}: ${message}`,
      restartDelayMs: delayMs,
    };
    this.emit('restart', {
      group: g.spec.name,
      actor,
      error: message,
      attempt: g.restarts,
      delayMs,
    } satisfies RestartEvent);
    const superseded = g.generation;
    g.timer = setTimeout(() => {
      g.timer = null;
      void terminated.then(() => {
        if (this.state === 'running' && g.generation === superseded) void this.startGroup(g);
      });
    }, delayMs);
  }

  private fatal(err: Error): void {
    if (this.fatalError) return;
    this.fatalError = err;
    this.state = 'failed';
    for (const g of this.groups.values()) {
      if (g.timer) clearTimeout(g.timer);
      for (const a of g.actors) void a.worker.terminate();
    }
    this.emit('fatal', err);
    this.doneReject(err);
  }
}
