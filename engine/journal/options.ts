/**
 * Options of engine/journal and their defaults, in one place.
 */
import { checkNotifier } from './notifier.js';

/** When the appender calls fdatasync on the segment file. */
export type FsyncPolicy = 'none' | 'batch' | 'record';

/**
 * Options shared by Appender and Tailer of one queue partition.
 */
export interface JournalOptions {
  /** One directory per queue partition. The appender creates it; a tailer may open before it exists. */
  dir: string;
  /**
   * Roll size in bytes: a new segment starts when the next record or batch would take the
   * current one past this size (a single record or batch larger than it gets a segment to
   * itself). Default 64 MiB; range 256 B .. 1 GiB (tiny values are for tests).
   */
  segmentBytes?: number;
  /**
   * Optional time-based roll, in ms: the appender starts a new segment when the clock has moved
   * to a later window `floor(clockMs / rollIntervalMs)` than the one the current segment was
   * created in, checked at each append (also right after a restart: case Q5). Default: none.
   */
  rollIntervalMs?: number;
  /**
   * Durability: 'none' never fsyncs (data reaches the disk when the kernel writes it back; a
   * process crash loses nothing flushed, a power loss may), 'batch' fdatasyncs once per write of
   * the buffer (each flush(), and when the write buffer fills), 'record' writes and fdatasyncs
   * every append/appendBatch before it returns. Default 'batch'. Sealing a segment and close()
   * fsync whatever the policy, except 'none' skips the fsync at roll.
   */
  fsync?: FsyncPolicy;
  /** From createQueueNotifier(): same-process tailers park on it instead of polling. */
  notifier?: SharedArrayBuffer;
  /** Wall clock in ms, used for time rolls and segment creation times. Default Date.now. Tests fake it. */
  clock?: () => number;
  /** Appender: buffered frames are written once they exceed this many bytes, even without flush(). Default 1 MiB. */
  writeBufferBytes?: number;
  /** Tailer: read-ahead size of one pread. Default 1 MiB (grows to fit one unit when a batch is larger). */
  readBufferBytes?: number;
  /** Tailer without notifier: sleep between file checks in waitForAppend. Default 1 ms. */
  pollIntervalMs?: number;
}

/** Options of Tailer.open. */
export interface TailerOptions extends JournalOptions {
  /** Where the tailer starts: 'start' (first record, the default) or 'end' (after the last complete record). */
  from?: 'start' | 'end';
}

/** Every default of the journal. */
export const JOURNAL_DEFAULTS = {
  segmentBytes: 64 * 1024 * 1024,
  fsync: 'batch' as FsyncPolicy,
  writeBufferBytes: 1024 * 1024,
  readBufferBytes: 1024 * 1024,
  pollIntervalMs: 1,
  /**
   * A tailer parked on the notifier re-checks the file at least this often, so an appender in
   * another process (which cannot bump this process's notifier) is still seen, with this latency.
   */
  notifierRecheckMs: 100,
} as const;

export const SEGMENT_BYTES_MIN = 256;
export const SEGMENT_BYTES_MAX = 1024 * 1024 * 1024;
const BUFFER_BYTES_MIN = 4096;
const BUFFER_BYTES_MAX = 1024 * 1024 * 1024;

export interface ResolvedOptions {
  dir: string;
  segmentBytes: number;
  rollIntervalMs: number | null;
  fsync: FsyncPolicy;
  notifier: Int32Array | null;
  clock: () => number;
  writeBufferBytes: number;
  readBufferBytes: number;
  pollIntervalMs: number;
}

function intInRange(name: string, v: unknown, min: number, max: number): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
    throw new Error(`${name} must be an integer in [${min}, ${max}], ${name}=${String(v)}`);
  }
  return v;
}

/** Validates `opts` up front and fills defaults. Throws Error naming the bad option. */
export function resolveOptions(opts: JournalOptions): ResolvedOptions {
  if (opts === null || typeof opts !== 'object')
    throw new Error('journal options must be an object');
  if (typeof opts.dir !== 'string' || opts.dir === '')
    throw new Error(`dir must be a non-empty string, dir=${String(opts.dir)}`);
  const fsync = opts.fsync ?? JOURNAL_DEFAULTS.fsync;
  if (fsync !== 'none' && fsync !== 'batch' && fsync !== 'record') {
    throw new Error(`fsync must be 'none', 'batch' or 'record', fsync=${String(fsync)}`);
  }
  if (opts.clock !== undefined && typeof opts.clock !== 'function')
    throw new Error('clock must be a function returning ms');
  return {
    dir: opts.dir,
    segmentBytes: intInRange(
      'segmentBytes',
      opts.segmentBytes ?? JOURNAL_DEFAULTS.segmentBytes,
      SEGMENT_BYTES_MIN,
      SEGMENT_BYTES_MAX,
    ),
    rollIntervalMs:
      opts.rollIntervalMs === undefined
        ? null
        : intInRange('rollIntervalMs', opts.rollIntervalMs, 1, Number.MAX_SAFE_INTEGER),
    fsync,
    notifier: opts.notifier === undefined ? null : checkNotifier(opts.notifier),
    clock: opts.clock ?? Date.now,
    writeBufferBytes: intInRange(
      'writeBufferBytes',
      opts.writeBufferBytes ?? JOURNAL_DEFAULTS.writeBufferBytes,
      BUFFER_BYTES_MIN,
      BUFFER_BYTES_MAX,
    ),
    readBufferBytes: intInRange(
      'readBufferBytes',
      opts.readBufferBytes ?? JOURNAL_DEFAULTS.readBufferBytes,
      BUFFER_BYTES_MIN,
      BUFFER_BYTES_MAX,
    ),
    pollIntervalMs: intInRange(
      'pollIntervalMs',
      opts.pollIntervalMs ?? JOURNAL_DEFAULTS.pollIntervalMs,
      1,
      60_000,
    ),
  };
}
