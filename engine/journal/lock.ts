/**
 * The appender lock: exactly one Appender per queue directory, across processes and across the
 * worker threads of one process.
 *
 * `appender.lock` is created with O_CREAT|O_EXCL and holds its owner: `<pid> thread=<threadId>
 * tid=<os thread id>`. Who may take a lock file over:
 * - another process's lock, only when that process is dead (`process.kill(pid, 0)` fails with
 *   ESRCH, as after `kill -9`);
 * - this process's lock written by another worker thread, only when that thread is dead: its OS
 *   thread (`/proc/self/task/<tid>`, Linux) is gone. A crashed actor worker's queues are thus
 *   reopened by its replacement, and a second appender opened by a live worker thread is refused
 *   (JournalLockedError naming the directory and the owning thread). Where the OS does not tell
 *   thread ids (no `/proc/thread-self`), a lock of another thread of this process is always
 *   refused: refusing can stall a restart, taking over a live thread's lock loses data;
 * - this thread's own lock not held by any open Appender of this thread (a module-level set):
 *   left by an appender that was never closed.
 * Other limits: a lock left by a dead process (or thread) whose pid (tid) has since been reused
 * by an unrelated live process (thread) is refused (remove the file by hand); two processes
 * taking over the same stale lock at the same instant can race (unlink + create are two steps),
 * which a supervisor that starts one appender per partition does not do.
 */
import fs from 'node:fs';
import path from 'node:path';
import { threadId } from 'node:worker_threads';
import { JournalLockedError } from './errors.js';

export const LOCK_FILE_NAME = 'appender.lock';
/** A lock file without a pid younger than this is assumed to be mid-creation by its owner. */
const EMPTY_LOCK_GRACE_MS = 1000;
const TAKEOVER_ATTEMPTS_MAX = 3;

/** Locks held by open appenders of this thread (module state is per worker thread). */
const heldInThisThread = new Set<string>();

export interface AppenderLock {
  readonly file: string;
  /** Pid of the dead owner whose stale lock was taken over, or null. */
  readonly takenOverFromPid: number | null;
  release(): void;
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * The OS thread id of the calling thread (Linux: `/proc/thread-self` -> `<pid>/task/<tid>`;
 * synchronous fs calls run on the calling JS thread), or null where the OS does not tell.
 */
function osThreadId(): number | null {
  try {
    const m = /\/task\/(\d+)$/.exec(fs.readlinkSync('/proc/thread-self'));
    return m ? Number(m[1]) : null;
  } catch {
    return null;
  }
}

const OWN_TID = osThreadId();

/** Whether OS thread `tid` of this process is alive; null when it cannot be told. */
function isThreadAlive(tid: number): boolean | null {
  if (OWN_TID === null) return null;
  return fs.existsSync(`/proc/self/task/${tid}`);
}

interface LockOwner {
  /** NaN: no pid written yet. */
  pid: number;
  /** Worker thread id (node:worker_threads threadId), null for a lock written without one. */
  thread: number | null;
  /** OS thread id, null when the writer's OS did not tell. */
  tid: number | null;
  ageMs: number;
}

function readOwner(file: string): LockOwner | null {
  try {
    const text = fs.readFileSync(file, 'utf8');
    const ageMs = Date.now() - fs.statSync(file).mtimeMs;
    const m = /^(\d+)\b/.exec(text);
    const thread = /\bthread=(\d+)\b/.exec(text);
    const tid = /\btid=(\d+)\b/.exec(text);
    return {
      pid: m && Number(m[1]) > 0 ? Number(m[1]) : NaN,
      thread: thread ? Number(thread[1]) : null,
      tid: tid ? Number(tid[1]) : null,
      ageMs,
    };
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw e;
  }
}

/** Throws JournalLockedError unless the lock of `owner` may be taken over (module doc). */
function checkStale(file: string, owner: LockOwner): void {
  if (Number.isNaN(owner.pid)) {
    if (owner.ageMs < EMPTY_LOCK_GRACE_MS) throw new JournalLockedError(file, 0);
    return;
  }
  if (owner.pid !== process.pid) {
    if (isAlive(owner.pid)) throw new JournalLockedError(file, owner.pid);
    return;
  }
  if (owner.thread === threadId) return;
  // Another worker thread of this process: stale only if its OS thread is known to be gone.
  const alive = owner.tid === null ? null : isThreadAlive(owner.tid);
  if (alive !== false) throw new JournalLockedError(file, owner.pid, owner.thread ?? -1);
}

/**
 * Takes the lock of queue directory `dir` (which must exist). Throws JournalLockedError (naming
 * the lock file, hence the directory, and the owner) if a live process, another live worker
 * thread of this process, or an open Appender of this thread holds it. `fileName` names the lock
 * file: other single-owner directories (a running topology's dataDir) use the same protocol.
 */
export function acquireAppenderLock(dir: string, fileName = LOCK_FILE_NAME): AppenderLock {
  const file = path.resolve(dir, fileName);
  if (heldInThisThread.has(file)) {
    throw new Error(`${file}: an Appender is already open on this queue directory in this process`);
  }
  let takenOverFromPid: number | null = null;
  for (let attempt = 0; attempt < TAKEOVER_ATTEMPTS_MAX; attempt++) {
    let fd: number;
    try {
      fd = fs.openSync(file, 'wx');
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
      const owner = readOwner(file);
      if (owner === null) continue;
      checkStale(file, owner);
      takenOverFromPid = Number.isNaN(owner.pid) ? null : owner.pid;
      try {
        fs.unlinkSync(file);
      } catch (u) {
        if ((u as NodeJS.ErrnoException).code !== 'ENOENT') throw u;
      }
      continue;
    }
    try {
      fs.writeSync(
        fd,
        `${process.pid} thread=${threadId}${OWN_TID === null ? '' : ` tid=${osThreadId()}`}\n`,
      );
    } catch (e) {
      // A full disk creates the file but refuses its pid: an empty lock left behind would read
      // as "being created" and refuse the next opener (the restart after the outage).
      fs.closeSync(fd);
      fs.rmSync(file, { force: true });
      throw e;
    }
    fs.closeSync(fd);
    heldInThisThread.add(file);
    let released = false;
    return {
      file,
      takenOverFromPid,
      release() {
        if (released) return;
        released = true;
        heldInThisThread.delete(file);
        try {
          fs.unlinkSync(file);
        } catch (e) {
          if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
        }
      },
    };
  }
  throw new Error(
    `${file}: could not take the appender lock after ${TAKEOVER_ATTEMPTS_MAX} attempts (another process is taking it over)`,
  );
}
