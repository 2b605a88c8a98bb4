/**
 * `sluice/service`: what a service module imports. A service is a module whose default export
 * is `defineService({ init, handlers, ... })`; the topology names it under `services[].module`.
 *
 * ```ts
 * import { defineService } from 'sluice/service';
 * export default defineService<{ n: number }>({
 *   init: () => ({ n: 0 }),
 *   handlers: { json(state, event, ctx) { state.n++; ctx.emit(event.key, event.json()); } },
 * });
 * ```
 */
export {
  defineService,
  type ServiceContext,
  type ServiceDefinition,
  type ServiceEvent,
  type ServiceHandler,
  type ServiceInit,
  type ServiceSnapshot,
} from './engine/service/index.js';
export type { KeyValueStore } from './engine/replay/index.js';
export {
  EVENT_TYPE_CHANGE,
  EVENT_TYPE_JSON,
  USER_EVENT_TYPE_MIN,
  type Change,
  type ChangeOp,
} from './engine/codec/index.js';
