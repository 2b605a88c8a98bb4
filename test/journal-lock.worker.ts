/**
 * Worker thread of test/journal-lock.test.ts: opens what `workerData.op` names on `dir` in this
 * (second) thread and reports how that went. `hold` keeps the opened thing open until the
 * parent sends 'close'; `leak` exits the thread without closing it (a crashed actor worker).
 */
import { parentPort, workerData } from 'node:worker_threads';
import { Appender, acquireAppenderLock } from '../engine/journal/index.js';
import { createJournalBus } from '../engine/bus/journal/index.js';

export interface LockWorkerData {
  op: 'appender' | 'bus' | 'topology-lock';
  dir: string;
  /** After a successful open: 'close' at once, 'hold' until told, 'leak' (exit, never close). */
  then: 'close' | 'hold' | 'leak';
  /** Records the worker appends (and flushes) if its open succeeds. */
  append?: string[];
}

export type LockWorkerResult = { opened: true } | { opened: false; name: string; message: string };

const data = workerData as LockWorkerData;

async function main(): Promise<void> {
  let close: () => Promise<void> | void;
  try {
    if (data.op === 'appender') {
      const a = Appender.open({ dir: data.dir });
      for (const s of data.append ?? []) a.append(Buffer.from(s));
      a.flush();
      close = () => a.close();
    } else if (data.op === 'bus') {
      const bus = await createJournalBus({ dir: data.dir });
      close = () => bus.close();
    } else {
      const lock = acquireAppenderLock(data.dir, 'topology.lock');
      close = () => lock.release();
    }
  } catch (e) {
    const err = e as Error;
    parentPort!.postMessage({
      opened: false,
      name: err.name,
      message: err.message,
    } satisfies LockWorkerResult);
    return;
  }
  parentPort!.postMessage({ opened: true } satisfies LockWorkerResult);
  if (data.then === 'close') await close();
  else if (data.then === 'leak') process.exit(0);
  else
    parentPort!.once(
      'message',
      () => void Promise.resolve(close()).then(() => parentPort!.close()),
    );
}

void main();
