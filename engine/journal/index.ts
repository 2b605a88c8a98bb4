/**
 * engine/journal: durable queues. A queue partition is a directory of append-only segment
 * files, each with a dense offset index; one Appender writes it, any number of Tailers (any
 * thread or process) read it forwards or backwards. Records are checksummed frames; batches
 * are atomic; on open the appender cuts off a torn tail. Design after Chronicle Queue
 * (appender, tailer, excerpt, index, roll cycles), over write(2)/pread instead of mmap.
 *
 * Layouts: frame.ts (record frame), segment.ts (file names, segment header), offset-index.ts
 * (index entries), notifier.ts (same-process wakeups).
 */
export { Appender, type RecoveryReport } from './appender.js';
export { Tailer, type JournalRecord, type TailerStats } from './tailer.js';
export {
  createQueueNotifier,
  registerQueueNotifier,
  registeredQueueNotifier,
  watchQueueAppends,
} from './notifier.js';
export { JournalCorruptionError, JournalLockedError } from './errors.js';
export { acquireAppenderLock, type AppenderLock } from './lock.js';
export {
  JOURNAL_DEFAULTS,
  type FsyncPolicy,
  type JournalOptions,
  type TailerOptions,
} from './options.js';
export { RECORD_BYTES_MAX } from './frame.js';
export { listSegments } from './segment.js';
export { rewriteSealedSegment, removeRewriteLeftovers, type RewriteStepHook } from './rewrite.js';
export {
  retentionCutoff,
  removeSegmentsBefore,
  removeOrphanIndexes,
  type MayDropBefore,
  type RetentionStepHook,
  type SegmentRetention,
} from './retention.js';
