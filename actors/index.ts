/** Ready-made actors built on engine/: queue reader, service host, capture pump, and the planner. */
export { actorBusOf } from '../engine/service/index.js';
export {
  planTopology,
  transactionalIdOf,
  partitionDir,
  busDir,
  type PlanOptions,
  ACTOR_MODULES,
  type TopologyPlan,
} from './plan.js';
export {
  processorModuleProblems,
  checkProcessorModules,
  checkServiceModules,
  serviceModuleEntries,
  serviceModuleProblems,
  serviceWarnings,
  type ServiceModuleEntry,
} from './module-checks.js';
export { createKafkaTopics } from './kafka-topics.js';
export type {
  ServiceHostData,
  ServiceReadyInfo,
  ServiceSummary,
  HostInput,
  QueueReaderData,
  PumpData,
  ProcessorData,
  ProcessorSummary,
} from './contracts.js';
export { processorTopics, openTopologyBus, type TopologyBusHost } from './processor-bus.js';
