/**
 * The appender lock: exactly one Appender per queue directory, across processes and threads.
 *
 * `appender.lock` is created with O_CREAT|O_EXCL and holds the owner's pid. A lock whose pid is
 * no longer alive (`process.kill(pid, 0)` fails with ESRCH, as after `kill -9`) is stale and is
 * taken over. Within one thread a module-level set catches a second Appender on the same
 * directory. A lock carrying this process's own pid but not held by this thread is taken over:
 * it was left by a worker thread that died (the supervisor restarts crashed actor workers in the
 * same process, and they must reopen their queues) or by a dead predecessor with a recycled pid;
 * worker threads cannot see each other's module state, so keeping two live workers of one
 * process off the same queue is the supervisor's job (one appender per partition). Other
 * limits: a lock file left by a dead process whose pid has since been reused by an unrelated
 * live process is refused (remove the file by hand); two processes taking over the same stale
 * lock at the same instant can race (unlink + create are two steps), which a supervisor that
 * starts one appender per partition does not do.
 */
import fs from 'node:fs';
import path from 'node:path';
import { threadId } from 'node:worker_threads';
import { JournalLockedError } from './errors.js';

export const LOCK_FILE_NAME = 'appender.lock';
/** A lock file without a pid younger than this is assumed to be mid-creation by its owner. */
const EMPTY_LOCK_GRACE_MS = 1000;
const TAKEOVER_ATTEMPTS_MAX = 3;

const heldInThisProcess = new Set<string>();

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

function readOwner(file: string): { pid: number; ageMs: number } | null {
  try {
    const text = fs.readFileSync(file, 'utf8');
    const ageMs = Date.now() - fs.statSync(file).mtimeMs;
    const m = /^(\d+)\b/.exec(text);
    return { pid: m && Number(m[1]) > 0 ? Number(m[1]) : NaN, ageMs };
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw e;
  }
}

/**
 * Takes the lock of queue directory `dir` (which must exist). Throws JournalLockedError if a
 * live process (or this process) holds it. `fileName` names the lock file: other single-owner
 * directories (a running topology's dataDir) use the same protocol under another name.
 */
export function acquireAppenderLock(dir: string, fileName = LOCK_FILE_NAME): AppenderLock {
  const file = path.resolve(dir, fileName);
  if (heldInThisProcess.has(file)) {
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
      if (Number.isNaN(owner.pid)) {
        if (owner.ageMs < EMPTY_LOCK_GRACE_MS) throw new JournalLockedError(file, 0);
      } else if (owner.pid !== process.pid && isAlive(owner.pid)) {
        throw new JournalLockedError(file, owner.pid);
      }
      // Stale: the owner died, or is a dead worker thread of this process (see the module doc).
      takenOverFromPid = Number.isNaN(owner.pid) ? null : owner.pid;
      try {
        fs.unlinkSync(file);
      } catch (u) {
        if ((u as NodeJS.ErrnoException).code !== 'ENOENT') throw u;
      }
      continue;
    }
    try {
      fs.writeSync(fd, `${process.pid} thread=${threadId}\n`);
    } finally {
      fs.closeSync(fd);
    }
    heldInThisProcess.add(file);
    let released = false;
    return {
      file,
      takenOverFromPid,
      release() {
        if (released) return;
        released = true;
        heldInThisProcess.delete(file);
        try {
          fs.unlinkSync(file);
        } catch (e) {
          if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
        }
      },
    };
  }
  throw new Error(`${file}: could not take the appender lock after ${TAKEOVER_ATTEMPTS_MAX} attempts (another process is taking it over)`);
}
