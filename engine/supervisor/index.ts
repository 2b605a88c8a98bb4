/** Main-side supervisor: actor groups in worker threads, restart policy, staged drain. */
export {
  Supervisor,
  SUPERVISOR_DEFAULTS,
  type ActorSpec,
  type ActorHandle,
  type GroupLauncher,
  type GroupSpec,
  type SupervisorOptions,
  type RestartEvent,
  type RetiredEvent,
  type GroupStatus,
  type StopResult,
  type ActorInfo,
  type GroupHealth,
  type GroupFailure,
  type ActorLogEvent,
} from './supervisor.js';
