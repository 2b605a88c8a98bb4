/**
 * The service API: what an application writes. A service module's default export is a
 * {@link ServiceDefinition}: an `init` that builds the state, and handlers per event type.
 * The runtime (actors/service-host) feeds it events from its input queues and appends what it
 * emits to its output queue, each output stamped with the input that caused it.
 *
 * Follows Chronicle Services' model: a service is a deterministic function of its inputs, so
 * replaying inputs rebuilds its state; outputs carry their cause so a restart resumes exactly.
 */
import type { Change } from '../codec/index.js';

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
  if (!def || typeof def !== 'object') throw new Error(`${file}: a service module must have a default export made with defineService({ init, handlers })`);
  if (typeof def.init !== 'function') throw new Error(`${file}: service definition has no init(init) function`);
  if (!def.handlers || typeof def.handlers !== 'object') throw new Error(`${file}: service definition has no handlers object`);
  for (const [k, h] of Object.entries(def.handlers)) {
    if (typeof h !== 'function') throw new Error(`${file}: handlers.${k} must be a function`);
    if (k !== 'change' && k !== 'json' && !(Number(k) >= 100)) {
      throw new Error(`${file}: handlers.${k}: handler keys are "change", "json" or a user type id >= 100`);
    }
  }
  return def as ServiceDefinition;
}
