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
    throw new Error(`notifier must be a SharedArrayBuffer from createQueueNotifier() (>= ${NOTIFIER_BYTES} bytes)`);
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
