/**
 * Same-process wakeups from the appender to tailers: a 64-byte SharedArrayBuffer shared by the
 * appender and every tailer of one queue partition (any worker thread of the process).
 *
 * ```
 *  Int32 slot 0  publishSeq   bumped (Atomics.add) after each flush / roll has written its bytes
 *  Int32 slot 1  waiters      tailers currently parked in Atomics.wait on publishSeq
 *  slots 2..15   reserved (keeps the counters on their own cache line)
 * ```
 * Protocol (no lost wakeups): a tailer loads publishSeq, then looks at the file, and only if
 * nothing is there increments `waiters` and waits while publishSeq still equals the value it
 * loaded. The appender writes the file, then bumps publishSeq, then calls Atomics.notify only if
 * `waiters` > 0, so a flush with nobody waiting costs one atomic add and one load. If the bump
 * lands between the tailer's load and its wait, the wait returns at once ("not-equal").
 * After Agrona's ring-buffer "tail counter + park" idle strategy, with Atomics.wait as the park.
 */
import fs from 'node:fs';
import path from 'node:path';

const NOTIFIER_BYTES = 64;
const SEQ = 0;
const WAITERS = 1;

/**
 * Creates the notifier for one queue partition. Pass it as `notifier` to the partition's
 * Appender and to its same-process Tailers (post it to workers; SharedArrayBuffers are shared,
 * not copied).
 */
export function createQueueNotifier(): SharedArrayBuffer {
  return new SharedArrayBuffer(NOTIFIER_BYTES);
}

/** Throws unless `sab` looks like a queue notifier. */
export function checkNotifier(sab: unknown): Int32Array {
  if (!(sab instanceof SharedArrayBuffer) || sab.byteLength < NOTIFIER_BYTES) {
    throw new Error(
      `notifier must be a SharedArrayBuffer from createQueueNotifier() (>= ${NOTIFIER_BYTES} bytes)`,
    );
  }
  return new Int32Array(sab, 0, NOTIFIER_BYTES / 4);
}

/** Appender side: publish "new bytes are in the file". */
export function publish(n: Int32Array): void {
  Atomics.add(n, SEQ, 1);
  if (Atomics.load(n, WAITERS) > 0) Atomics.notify(n, SEQ);
}

/** Tailer side: the value to wait on; load it before looking at the file. */
export function loadPublishSeq(n: Int32Array): number {
  return Atomics.load(n, SEQ);
}

/** Tailer side: parks until publishSeq differs from `seen` or `timeoutMs` passes. */
export function parkUntilPublished(n: Int32Array, seen: number, timeoutMs: number): void {
  Atomics.add(n, WAITERS, 1);
  try {
    Atomics.wait(n, SEQ, seen, timeoutMs);
  } finally {
    Atomics.sub(n, WAITERS, 1);
  }
}

/**
 * Notifiers registered for queue partition directories in this thread (absolute paths). A
 * running topology registers the notifier of every partition it plans (startTopology), so an
 * Appender opened on one of those directories without a `notifier` option (a producer's,
 * `openQueueAppender`) wakes the topology's tailers at each flush instead of leaving them to
 * their park timeout. Per thread, like every module's state: an appender in another worker
 * thread passes the notifier explicitly.
 */
const registered = new Map<string, SharedArrayBuffer>();

/**
 * Registers `notifier` as the notifier of the queue partition in `dir` for appenders opened
 * later in this thread; returns a function that removes it again (if still the one registered).
 * @throws Error if `notifier` is not from createQueueNotifier().
 */
export function registerQueueNotifier(dir: string, notifier: SharedArrayBuffer): () => void {
  checkNotifier(notifier);
  const key = path.resolve(dir);
  registered.set(key, notifier);
  return () => {
    if (registered.get(key) === notifier) registered.delete(key);
  };
}

/** The notifier registered for the queue partition in `dir` in this thread, or undefined. */
export function registeredQueueNotifier(dir: string): SharedArrayBuffer | undefined {
  return registered.get(path.resolve(dir));
}

/**
 * Wakes this process's tailers of the queue partition in `dir` when an appender in another
 * process writes it: an inotify watch on the directory (fs.watch; the appender's writes to its
 * segment and offset index are the events), each event a publish on `notifier`. Needs this
 * thread's event loop to run (the main thread of a topology's process). Creates `dir` if it does
 * not exist yet. Returns a function that stops watching. Without it such tailers see the
 * records at their next recheck (JOURNAL_DEFAULTS.notifierRecheckMs, or their park timeout).
 * @throws Error if `notifier` is not from createQueueNotifier(); fs errors of fs.watch.
 */
export function watchQueueAppends(dir: string, notifier: SharedArrayBuffer): () => void {
  const n = checkNotifier(notifier);
  fs.mkdirSync(dir, { recursive: true });
  const watcher = fs.watch(dir, { persistent: false }, () => publish(n));
  // A watch that fails later (the directory removed) only costs the wakeups, not correctness.
  watcher.on('error', () => watcher.close());
  return () => watcher.close();
}
