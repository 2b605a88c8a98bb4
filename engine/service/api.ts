/**
 * The service API: what an application writes. A service module's default export is a
 * {@link ServiceDefinition}: an `init` that builds the state, and handlers per event type.
 * The runtime (engine/service/host.ts, in the actors/service-host worker) feeds it events from its input queues and appends what it
 * emits to its output queue, each output stamped with the input that caused it.
 *
 * Follows Chronicle Services' model: a service is a deterministic function of its inputs, so
 * replaying inputs rebuilds its state; outputs carry their cause so a restart resumes exactly.
 */
import type { Change } from '../codec/index.js';
import type { KeyValueStore } from '../replay/index.js';

/** One input event as a handler sees it. Its views are valid only during the handler call. */
export interface ServiceEvent {
  /** Event type id (1 = change, 2 = json, >= 100 user-defined). */
  readonly type: number;
  /** Partitioning key. */
  readonly key: string;
  /** When the event happened, ms since epoch (CDC: capture time in the database). */
  readonly eventTimeMs: number;
  /** Input queue name, partition and index this event was read from. */
  readonly queue: string;
  readonly partition: number;
  readonly index: number;
  /** Raw payload bytes (a view into the ring: copy it to keep it). */
  readonly payload: Uint8Array;
  /** Decodes a change event (type 1). @throws Error if the event is not a change. */
  change(): Change;
  /** Decodes a JSON event (type 2). @throws Error if the event is not JSON. */
  json<T = unknown>(): T;
}

/** What a handler may do besides updating state. */
export interface ServiceContext {
  /** Service name from the topology. */
  readonly service: string;
  /** True while state is being rebuilt by replay: emits are suppressed then. */
  readonly replaying: boolean;
  /**
   * Appends a JSON event (type 2) to the service's output queue, stamped with the current input.
   * Suppressed during replay. Outputs of one input batch become durable together.
   */
  emit(key: string, value: unknown, eventTimeMs?: number): void;
  /** Appends a raw event of a user type (>= 100). Suppressed during replay. */
  emitBytes(type: number, key: string, payload: Uint8Array, eventTimeMs?: number): void;
  /**
   * The service's key-value store (definition `kvStore`): every put/remove is an event in the
   * output queue, written with the current input's batch. @throws Error if not declared.
   */
  readonly kv: KeyValueStore;
  /**
   * Writes a structured log line (JSON through the supervisor's logger, with the service's actor
   * name and topology) when `level` is at or above the actor's log level, which can be changed
   * while running (`PUT /log-level`, `sluice log-level`). Levels: trace, debug, info, warn,
   * error, fatal. `fields` must be plain data. Logs nothing during replay below `warn`.
   */
  log(
    level: 'trace' | 'debug' | 'info' | 'warn' | 'error' | 'fatal',
    msg: string,
    fields?: Record<string, unknown>,
  ): void;
}

/** Handler for one event type. */
export type ServiceHandler<S> = (state: S, event: ServiceEvent, ctx: ServiceContext) => void;

/** What `init` receives. */
export interface ServiceInit {
  readonly service: string;
  /** The service's free-form `settings` from the topology file. */
  readonly settings: Record<string, unknown>;
}

/** A service module's default export. */
export interface ServiceDefinition<S = unknown> {
  /** Builds the empty state (before any replay). */
  init(init: ServiceInit): S;
  /** Handlers by event type: `change`, `json`, or a numeric user type id (>= 100). */
  handlers: {
    change?: ServiceHandler<S>;
    json?: ServiceHandler<S>;
    [userType: number]: ServiceHandler<S> | undefined;
  };
  /** Called once the service is live (after any replay), e.g. to log the rebuilt state size. */
  onLive?(state: S, ctx: ServiceContext): void;
  /**
   * Output-replay handler, required by `inputsReplay: OUTPUT_REVERSE`: the runtime hands it the
   * service's own output events newest first (`event.queue`/`index` name the output record;
   * Sluice's own records are skipped) until it returns true (the state is complete) or the
   * output queue's start is reached. Then the service goes live at LAST_WRITTEN (or END).
   * After Chronicle Services' OUTPUT_REVERSE replay.
   */
  replayOutput?(state: S, event: ServiceEvent): boolean;
  /** Snapshots: see {@link ServiceSnapshot}. */
  snapshot?: ServiceSnapshot<S>;
  /**
   * Declares the idempotent key-value store (`ctx.kv`). Each periodic update (timer) event
   * writes the next `snapshotBatchSize` entries (default 1000; `settings.kvSnapshotBatchSize`
   * overrides) of a snapshot cycle; a restart rebuilds the store from the newest complete
   * cycle's start (engine/replay/kv.ts), with inputsReplay NONE.
   */
  kvStore?: { snapshotBatchSize?: number };
  /**
   * Called for each periodic update event (type 9, from the service's timer queue: settings
   * `timerQueue` and `timerIntervalMs` make the runtime append them). Runs during replays too,
   * with `ctx.replaying` set.
   */
  onTimer?(state: S, event: ServiceEvent, ctx: ServiceContext): void;
}

/**
 * A service's snapshot source. Every `everyInputs` processed inputs (checked at batch ends, so
 * the interval is at least that), or every `everyTimerEvents` periodic update events, the
 * runtime appends `write(state)` to the output queue as
 * events of `type`, with the input positions the state includes, in the same atomic batch as
 * the outputs. On restart it reads the output backwards to the newest complete snapshot,
 * `restore`s it and replays only the inputs after it (in the recorded interleaving with
 * inputsReplay OUTPUT, else per input partition), so restart time is bounded by the interval,
 * not by history. After Chronicle Services' snapshot restart strategy.
 */
export interface ServiceSnapshot<S> {
  /** Envelope type of the snapshot events: a user type id >= 100 with no handler. */
  type: number;
  /**
   * Inputs between snapshots; default 10000 (engine/replay SNAPSHOT_DEFAULTS). The topology's
   * `settings.snapshotEveryInputs` overrides it.
   */
  everyInputs?: number;
  /**
   * Periodic update (timer) events between snapshots: a snapshot is written at the end of the
   * batch that holds the M-th timer event since the last one (a time-based interval, e.g. every
   * 60 events of a 1 s timer). Needs the service's `settings.timerQueue`. Without `everyInputs`
   * the input count then triggers nothing; with both, whichever comes first.
   * `settings.snapshotEveryTimerEvents` overrides it.
   */
  everyTimerEvents?: number;
  /** Serializes the state (called between batches, never during replay). */
  write(state: S): Uint8Array;
  /** Rebuilds the state from bytes `write` returned (a copy the state may keep). */
  restore(bytes: Uint8Array, init: ServiceInit): S;
}

/** How a topology runs a service, as far as its definition must support it. */
export interface ServiceReplayConfig {
  service: string;
  inputsReplay: string;
  settings: Record<string, unknown>;
}

/**
 * Checks that a definition supports its configured restart strategy.
 * @returns problems as `[field, message]` pairs (field relative to the topology's service entry,
 *          e.g. `inputsReplay`, `snapshot.type`); empty when it is fine.
 */
export function replayProblems(
  def: ServiceDefinition,
  cfg: ServiceReplayConfig,
): [string, string][] {
  const problems: [string, string][] = [];
  const s = `service "${cfg.service}"`;
  if (cfg.inputsReplay === 'OUTPUT_REVERSE' && typeof def.replayOutput !== 'function') {
    problems.push([
      'inputsReplay',
      `${s}: inputsReplay OUTPUT_REVERSE needs an output-replay handler replayOutput(state, event) => boolean in the service definition`,
    ]);
  }
  const every = cfg.settings.snapshotEveryInputs;
  const everyTimers = cfg.settings.snapshotEveryTimerEvents;
  if (def.snapshot !== undefined) {
    const snap = def.snapshot as Partial<ServiceSnapshot<unknown>>;
    if (snap === null || typeof snap !== 'object') {
      problems.push(['snapshot', `${s}: snapshot must be an object { type, write, restore }`]);
    } else {
      if (snap.type === undefined)
        problems.push([
          'snapshot.type',
          `${s}: snapshot.type is not declared: declare the snapshot event type, a user type id >= 100`,
        ]);
      else if (!(Number.isInteger(snap.type) && snap.type >= 100 && snap.type <= 0xffffffff))
        problems.push([
          'snapshot.type',
          `${s}: snapshot.type must be a user type id >= 100, type=${String(snap.type)}`,
        ]);
      else if (def.handlers[snap.type])
        problems.push([
          'snapshot.type',
          `${s}: snapshot.type ${snap.type} also has a handler; snapshot events must have a type of their own`,
        ]);
      if (typeof snap.write !== 'function')
        problems.push(['snapshot.write', `${s}: snapshot.write(state) => Uint8Array is missing`]);
      if (typeof snap.restore !== 'function')
        problems.push([
          'snapshot.restore',
          `${s}: snapshot.restore(bytes, init) => state is missing`,
        ]);
      if (
        snap.everyInputs !== undefined &&
        !(Number.isInteger(snap.everyInputs) && snap.everyInputs >= 1)
      )
        problems.push([
          'snapshot.everyInputs',
          `${s}: snapshot.everyInputs must be an integer >= 1, everyInputs=${String(snap.everyInputs)}`,
        ]);
      const perTimers = snap.everyTimerEvents;
      if (perTimers !== undefined && !(Number.isInteger(perTimers) && perTimers >= 1)) {
        problems.push([
          'snapshot.everyTimerEvents',
          `${s}: snapshot.everyTimerEvents must be an integer >= 1, ` +
            `everyTimerEvents=${String(perTimers)}`,
        ]);
      }
      if ((everyTimers ?? perTimers) !== undefined && cfg.settings.timerQueue === undefined) {
        const field =
          everyTimers !== undefined
            ? 'settings.snapshotEveryTimerEvents'
            : 'snapshot.everyTimerEvents';
        problems.push([
          field,
          `${s}: snapshots every N periodic update events need them: ` +
            'set settings.timerQueue and settings.timerIntervalMs',
        ]);
      }
    }
    if (cfg.inputsReplay === 'OUTPUT_REVERSE')
      problems.push([
        'inputsReplay',
        `${s}: snapshots and inputsReplay OUTPUT_REVERSE are alternatives; use NONE, INPUTS or OUTPUT with snapshots`,
      ]);
  } else if (every !== undefined) {
    // (snapshotEveryInputs without a snapshot)
    problems.push([
      'settings.snapshotEveryInputs',
      `${s}: settings.snapshotEveryInputs is set but the service definition declares no snapshot`,
    ]);
  } else if (everyTimers !== undefined) {
    problems.push([
      'settings.snapshotEveryTimerEvents',
      `${s}: settings.snapshotEveryTimerEvents is set but the service definition declares ` +
        'no snapshot',
    ]);
  }
  const timersValid = Number.isInteger(everyTimers) && (everyTimers as number) >= 1;
  if (everyTimers !== undefined && !timersValid) {
    problems.push([
      'settings.snapshotEveryTimerEvents',
      `${s}: settings.snapshotEveryTimerEvents ` +
        `must be an integer >= 1, snapshotEveryTimerEvents=${String(everyTimers)}`,
    ]);
  }
  if (def.kvStore !== undefined) {
    const b = cfg.settings.kvSnapshotBatchSize ?? def.kvStore?.snapshotBatchSize;
    if (b !== undefined && !(Number.isInteger(b) && (b as number) >= 1))
      problems.push([
        'kvStore.snapshotBatchSize',
        `${s}: the key-value store's snapshotBatchSize must be an integer >= 1, snapshotBatchSize=${String(b)}`,
      ]);
    if (cfg.inputsReplay !== 'NONE')
      problems.push([
        'inputsReplay',
        `${s}: a service with a key-value store rebuilds it from its output; inputsReplay must be NONE, not ${cfg.inputsReplay}`,
      ]);
    if (def.snapshot !== undefined)
      problems.push(['snapshot', `${s}: snapshots and the key-value store are alternatives`]);
  } else if (cfg.settings.kvSnapshotBatchSize !== undefined) {
    problems.push([
      'settings.kvSnapshotBatchSize',
      `${s}: settings.kvSnapshotBatchSize is set but the service definition declares no kvStore`,
    ]);
  }
  if (
    cfg.settings.timerQueue !== undefined &&
    typeof def.onTimer !== 'function' &&
    def.kvStore === undefined
  ) {
    problems.push([
      'settings.timerQueue',
      `${s}: settings.timerQueue is set but the service definition has no onTimer(state, event, ctx) and no kvStore, so its timer events would be dropped`,
    ]);
  }
  const tq = cfg.settings.timerQueue;
  const ti = cfg.settings.timerIntervalMs;
  if ((tq === undefined) !== (ti === undefined))
    problems.push([
      tq === undefined ? 'settings.timerQueue' : 'settings.timerIntervalMs',
      `${s}: settings.timerQueue and settings.timerIntervalMs go together`,
    ]);
  if (tq !== undefined && typeof tq !== 'string')
    problems.push(['settings.timerQueue', `${s}: settings.timerQueue must be a queue name`]);
  if (ti !== undefined && !(typeof ti === 'number' && Number.isInteger(ti) && ti >= 1))
    problems.push([
      'settings.timerIntervalMs',
      `${s}: settings.timerIntervalMs must be an integer >= 1 (ms), timerIntervalMs=${String(ti)}`,
    ]);
  if (every !== undefined && !(Number.isInteger(every) && (every as number) >= 1)) {
    problems.push([
      'settings.snapshotEveryInputs',
      `${s}: settings.snapshotEveryInputs must be an integer >= 1, snapshotEveryInputs=${String(every)}`,
    ]);
  }
  return problems;
}

/** Identity helper that gives a service module full type inference. */
export function defineService<S>(definition: ServiceDefinition<S>): ServiceDefinition<S> {
  return definition;
}

/**
 * Checks that a loaded module's default export looks like a {@link ServiceDefinition}.
 * @throws Error naming the module file and what is missing.
 */
export function assertServiceDefinition(mod: unknown, file: string): ServiceDefinition {
  const def = (mod as { default?: unknown })?.default as Partial<ServiceDefinition> | undefined;
  if (!def || typeof def !== 'object')
    throw new Error(
      `${file}: a service module must have a default export made with defineService({ init, handlers })`,
    );
  if (typeof def.init !== 'function')
    throw new Error(`${file}: service definition has no init(init) function`);
  if (!def.handlers || typeof def.handlers !== 'object')
    throw new Error(`${file}: service definition has no handlers object`);
  for (const [k, h] of Object.entries(def.handlers)) {
    if (typeof h !== 'function') throw new Error(`${file}: handlers.${k} must be a function`);
    if (k !== 'change' && k !== 'json' && !(Number(k) >= 100)) {
      throw new Error(
        `${file}: handlers.${k}: handler keys are "change", "json" or a user type id >= 100`,
      );
    }
    assertNotAsync(h, `${file}: handlers.${k}`);
  }
  for (const k of ['init', 'onLive', 'onTimer', 'replayOutput'] as const)
    if (typeof def[k] === 'function') assertNotAsync(def[k], `${file}: ${k}`);
  return def as ServiceDefinition;
}

/**
 * Service callbacks run synchronously in the service's thread: what a handler emits is committed
 * with its input batch when the handler returns, and the thread runs no event loop while live, so
 * whatever an `await` defers would run only at shutdown, its outputs lost. An `async` function is
 * refused at load; a plain function that returns a promise fails at run time
 * ({@link assertNotThenable}). @throws Error naming `what`.
 */
function assertNotAsync(f: unknown, what: string): void {
  const kind = (f as { constructor?: { name?: string } }).constructor?.name;
  if (kind === 'AsyncFunction' || kind === 'AsyncGeneratorFunction')
    throw new Error(
      `${what} is an async function; service handlers run synchronously (outputs are committed with their input when the handler returns, and nothing after an await would run until shutdown): make it a plain function`,
    );
}

/**
 * @throws Error when a service callback returned a promise (or any thenable): see
 * {@link assertNotAsync}. The promise's own rejection is swallowed (it is reported by this error).
 */
export function assertNotThenable(result: unknown, what: string): void {
  if (result === null || (typeof result !== 'object' && typeof result !== 'function')) return;
  const then = (result as { then?: unknown }).then;
  if (typeof then !== 'function') return;
  (then as (ok: () => void, fail: () => void) => void).call(
    result,
    () => undefined,
    () => undefined,
  );
  throw new Error(
    `${what} returned a promise; service handlers run synchronously (outputs are committed with their input when the handler returns, and nothing the promise defers would run until shutdown): make it a plain function that returns nothing`,
  );
}
