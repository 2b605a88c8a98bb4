/**
 * engine/replay: the replay metadata a service writes with its outputs (processed records,
 * snapshots) and the scans and replays a restart runs over them. Restart strategies after
 * Chronicle Services: LAST_WRITTEN, INPUTS, OUTPUT, OUTPUT_REVERSE, snapshots.
 */
export { EVENT_TYPE_PROCESSED, ProcessedRecorder, decodeProcessed, type ReplayInput, type ProcessedRecord } from './processed.js';
export { EVENT_TYPE_SNAPSHOT_END, SNAPSHOT_DEFAULTS, encodeSnapshot, decodeSnapshotMarker, type SnapshotMarker } from './snapshot.js';
export { scanOutput, type OutputScan, type OutputBackwardReader } from './scan.js';
export { replayProcessed, replayRange, type ReplayInputDir, type ReplayApply } from './replay.js';
