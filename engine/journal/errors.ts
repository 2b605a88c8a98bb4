/**
 * Errors of engine/journal that callers may want to tell apart. Programmer errors (bad
 * arguments, use after close) are plain `Error`s with the violated invariant.
 */

/**
 * Damage that is not a torn tail: a frame that fails its checksum (or seq, flags, length) while
 * complete frames follow it, a segment whose header is damaged while later segments exist, and
 * the like. The journal refuses to read past it instead of dropping records silently; the
 * message names the file and byte offset so an operator can inspect it (`xxd -s <offset>`).
 */
export class JournalCorruptionError extends Error {
  /** Absolute path of the damaged file. */
  readonly file: string;
  /** Byte offset of the damaged frame or header in `file`. */
  readonly offset: number;

  constructor(file: string, offset: number, problem: string) {
    super(`${file}: offset ${offset}: ${problem}`);
    this.name = 'JournalCorruptionError';
    this.file = file;
    this.offset = offset;
  }
}

/**
 * Another live process, or another live worker thread of this process, holds the queue's
 * appender lock. The message names the lock file (inside the queue directory) and the owner.
 */
export class JournalLockedError extends Error {
  /** The lock file. */
  readonly file: string;
  /** Pid recorded in the lock file (0: a lock being created). */
  readonly ownerPid: number;
  /** Worker thread id of the owner when it is another thread of this process, else null. */
  readonly ownerThreadId: number | null;

  constructor(file: string, ownerPid: number, ownerThreadId: number | null = null) {
    const owner =
      ownerThreadId === null
        ? `live process ${ownerPid}`
        : `live worker thread ${ownerThreadId} of this process (pid ${ownerPid})`;
    super(
      `${file}: queue is locked by ${owner}; exactly one Appender may be open per queue directory`,
    );
    this.name = 'JournalLockedError';
    this.file = file;
    this.ownerPid = ownerPid;
    this.ownerThreadId = ownerThreadId;
  }
}
