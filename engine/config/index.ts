/**
 * engine/config: topology file loading and validation.
 *
 * `loadTopology(file)` reads a YAML topology (queues, services, capture sources, ring and
 * supervisor settings), substitutes `${VAR}` / `${VAR:-default}`, validates it (JSON Schema via
 * ajv, then cross-references), applies TOPOLOGY_DEFAULTS and resolves paths. Every problem is
 * reported at once in a ConfigError, one `file:line:col: path: message` line each.
 */
export { loadTopology, parseTopology, readServiceModules } from './load.js';
export type { TopologyLoadOptions, ServiceModuleRef } from './load.js';
export { ConfigError, formatProblem } from './errors.js';
export type { ConfigProblem } from './errors.js';
export { resolveModule } from './checks.js';
export { syntaxErrorText, locateSyntaxError, MODULE_SYNTAX_LIMITS } from './module-syntax.js';
export type { SyntaxErrorAt } from './module-syntax.js';
export { checkEnvironment, environmentProblemsOf, problemAt } from './locate.js';
export { TOPOLOGY_SCHEMA } from './schema.js';
export type { ModuleResolution } from './checks.js';
export {
  TOPOLOGY_DEFAULTS,
  TOPOLOGY_LIMITS,
  TOPOLOGY_SIZE_LIMITS,
  TOPOLOGY_NAME_PATTERN,
  QUEUE_NAME_PATTERN,
  SERVICE_NAME_PATTERN,
  START_FROM_VALUES,
  INPUTS_REPLAY_VALUES,
  QUEUE_FSYNC_VALUES,
  DIALECT_VALUES,
  BUS_KIND_VALUES,
  SASL_MECHANISM_VALUES,
  PROCESSOR_PATTERN_VALUES,
  PROCESSOR_CODEC_VALUES,
  POOL_DEFAULTS,
  SINK_FORMAT_VALUES,
} from './topology.js';
export type {
  Topology,
  TopologyQueue,
  TopologyQueueRetention,
  TopologyService,
  TopologyProcessor,
  TopologyProcessorPool,
  ProcessorPattern,
  ProcessorCodec,
  TopologyServiceErrors,
  OnFailure,
  TopologyRings,
  StartFrom,
  InputsReplay,
  QueueFsync,
  TopologyBus,
  TopologyBusTls,
  TopologyBusSasl,
  TopologySink,
} from './topology.js';
