/**
 * Topology processors: a message pattern of engine/patterns run as an actor from a topology's
 * `processors[]` entry (./host.ts, the worker entry is actors/processor.ts), its patterns as a
 * table of starters (./patterns.ts), the handler's error rules (./records.ts) and its optional
 * pool of handler threads (./pool-stage.ts, threads run actors/pool-worker.ts).
 */
export {
  PROCESSOR_PORTS,
  type ProcessorData,
  type ProcessorSummary,
  type PoolWorkerData,
  type PoolTask,
  type PoolResult,
} from './contract.js';
export { runProcessorHost } from './host.js';
export {
  PROCESSOR_PATTERNS,
  startProcessorPattern,
  outputLimitOf,
  type PatternStart,
  type PatternStarter,
  type RunningPattern,
} from './patterns.js';
export { loadHandler, type Handler } from './handler.js';
export { startPoolStage, type PoolStage } from './pool-stage.js';
export {
  durableSegments,
  pubsubFailures,
  resolveSegments,
  errorText,
  type DurableOnNext,
  type OutputLimit,
  type RecordErrorRules,
  type RecordSegment,
} from './records.js';
export {
  INJECTED_COMMIT_FAILURE,
  PROCESSOR_FAULT_DIR_ENV,
  takeProcessorFault,
  commitFaultHook,
  type ProcessorFault,
} from './faults.js';
