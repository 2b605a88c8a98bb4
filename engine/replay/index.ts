/**
 * engine/replay: the replay metadata a service writes with its outputs (processed records,
 * snapshots) and the scans and replays a restart runs over them. Restart strategies after
 * Chronicle Services: LAST_WRITTEN, INPUTS, OUTPUT, OUTPUT_REVERSE, snapshots.
 */
export {
  EVENT_TYPE_PROCESSED,
  ProcessedRecorder,
  decodeProcessed,
  type ReplayInput,
  type ProcessedRecord,
} from './processed.js';
export {
  EVENT_TYPE_SNAPSHOT_END,
  SNAPSHOT_DEFAULTS,
  encodeSnapshot,
  decodeSnapshotMarker,
  type SnapshotMarker,
} from './snapshot.js';
export { scanOutput, type OutputScan, type OutputBackwardReader } from './scan.js';
export {
  replayProcessed,
  replayRange,
  journalReplaySource,
  type ReplayInputDir,
  type ReplayApply,
  type ReplaySource,
  type ReplayTailer,
} from './replay.js';
export {
  KvStore,
  restoreKvStore,
  KV_DEFAULTS,
  EVENT_TYPE_KV_PUT,
  EVENT_TYPE_KV_REMOVE,
  EVENT_TYPE_KV_CYCLE_START,
  EVENT_TYPE_KV_CYCLE_END,
  type KeyValueStore,
  type KvCause,
  type KvOutputReader,
} from './kv.js';
export { EVENT_TYPE_TIMER, TIMER_DEFAULTS, encodeTimer } from './timer.js';
