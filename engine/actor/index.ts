/** Worker-side actor runtime: lifecycle, control cells, doorbells, counters, typed messages. */
export { runActor, type ActorContext } from './runtime.js';
export {
  Command,
  Control,
  Doorbell,
  createControl,
  createDoorbell,
  LOG_LEVELS,
  LOG_LEVEL_DEFAULT,
  logLevelName,
  type LogLevelName,
} from './control.js';
export {
  Counter,
  COUNTER_SLOTS,
  ACTOR_STATES,
  createCounters,
  readCounters,
  osThreadId,
  setState,
  type ActorState,
  type CounterSnapshot,
} from './counters.js';
export type { ActorMessage, ActorWorkerData, Outage } from './protocol.js';
export { FRAME_TYPE_EVENT, FRAME_TYPE_EVENT_REF, FRAME_HEADER_BYTES, FrameCodec } from './frame.js';
