/**
 * Test-only fault hook of the processor host (engine/processors/host.ts), in the convention of the
 * worker hook of engine/actor/runtime.ts (SLUICE_FAULT_WORKER_DIR): when the environment
 * variable {@link PROCESSOR_FAULT_DIR_ENV} names a directory, a durable processor actor looks
 * there once, when its worker starts, for a file named `encodeURIComponent(<processor name>)`.
 * The first worker to rename it away takes the fault; the file's content says which:
 * `commit <n>` makes the n-th transaction commit of that worker (n >= 1) throw once, after the
 * outputs and positions were sent and before the commit, so the transaction is aborted and the
 * pattern rewinds to the committed position and retries (engine/patterns/durable.ts `faults`).
 *
 * It cannot fire by accident: unset (the default) it costs nothing, a processor only takes a
 * file named after itself, and a file is taken once (a restarted worker does not see it again).
 * Separate from ./host.ts, so tests import it without the host's dependencies.
 */
import fs from 'node:fs';
import path from 'node:path';
import { threadId } from 'node:worker_threads';

/** Environment variable naming the directory of injected processor faults (tests only). */
export const PROCESSOR_FAULT_DIR_ENV = 'SLUICE_FAULT_PROCESSOR_DIR';

/** The message of the error an injected commit fault throws. */
export const INJECTED_COMMIT_FAILURE = 'injected commit failure';

/** A processor fault, parsed from its file. */
export interface ProcessorFault {
  /** The n-th transaction commit (1-based) throws once. */
  commitFailsAt: number;
}

/**
 * Takes the fault file of processor `name`, when the hook is on and the file is there.
 * @returns the fault, or null (hook off, no file for this processor, or another worker took it).
 * @throws Error naming the file when its content is not `commit <n>` with an integer n >= 1.
 */
export function takeProcessorFault(name: string): ProcessorFault | null {
  const dir = process.env[PROCESSOR_FAULT_DIR_ENV];
  if (!dir) return null;
  const file = path.join(dir, encodeURIComponent(name));
  const taken = `${file}.taken-${process.pid}-${threadId}-${Date.now()}`;
  try {
    fs.renameSync(file, taken);
  } catch {
    return null;
  }
  const text = fs.readFileSync(taken, 'utf8').trim();
  const m = /^commit (\d+)$/.exec(text);
  if (!m || Number(m[1]) < 1)
    throw new Error(
      `processor ${name}: fault file ${file} (${PROCESSOR_FAULT_DIR_ENV}) must hold "commit <n>" with n >= 1, got "${text}"`,
    );
  return { commitFailsAt: Number(m[1]) };
}

/**
 * The durable pattern's `faults.beforeCommit` for `fault`: the n-th call throws
 * {@link INJECTED_COMMIT_FAILURE}, once; every other call does nothing.
 */
export function commitFaultHook(fault: ProcessorFault): () => void {
  let commits = 0;
  return () => {
    if (++commits === fault.commitFailsAt)
      throw new Error(`${INJECTED_COMMIT_FAILURE} (${PROCESSOR_FAULT_DIR_ENV})`);
  };
}
