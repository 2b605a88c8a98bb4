/** Ready-made actors built on engine/: queue reader, service host, capture pump, and the planner. */
export { actorBusOf } from '../engine/service/index.js';
export {
  planTopology,
  transactionalIdOf,
  partitionDir,
  busDir,
  processorModuleProblems,
  checkProcessorModules,
  type PlanOptions,
  checkServiceModules,
  serviceModuleEntries,
  serviceModuleProblems,
  serviceWarnings,
  ACTOR_MODULES,
  type ServiceModuleEntry,
  type TopologyPlan,
} from './plan.js';
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
