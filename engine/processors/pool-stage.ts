/**
 * Pool stage of a stateless processor (`pool: { threads }` in a topology's `processors:` entry):
 * the processor's thread keeps the pattern (group membership, positions, the transaction that
 * commits outputs with consumed positions); this stage only computes, on a piscina pool whose
 * threads run the processor's own handler module (actors/pool-worker.ts).
 *
 * Order. durable: a poll's records are cut into consecutive batches of `batchSize` records,
 * and the outputs are concatenated in batch order whatever order the threads finish in: the
 * outputs keep the poll's total input order, the order the inline handler gives, hence per-key
 * order. pubsub (no outputs): records are grouped by key hash into batches, so one key's records
 * are handled by one call sequence in offset order; different keys run in parallel.
 *
 * Backpressure: at most `batchesInFlightMax` tasks are in the pool; cutting a poll waits for a
 * free slot, and the pattern polls again only when the whole poll is computed, so the consumer
 * waits while the pool is full.
 *
 * Errors: see ./records.ts (the same rules as the inline path). A task that
 * rejects (the handler threw without a dead-letter topic, or the thread died) rejects the poll's
 * computation after every task of it has settled, failing the pattern's batch.
 */
import { Piscina } from 'piscina';
import type { ProducerRecord } from '../bus/index.js';
import { keyHash } from '../cdc/key-hash.js';
import type { TopologyProcessor, TopologyProcessorPool } from '../config/index.js';
import type { PatternRecord } from '../patterns/index.js';
import type { PoolResult, PoolTask, PoolWorkerData } from './contract.js';
import type { OutputLimit, RecordSegment } from './records.js';

/** A running pool stage. */
export interface PoolStage {
  /** durable: the segments of `records`, in input order. Rejects when a task rejects. */
  durable(records: PatternRecord<unknown>[], isolate: boolean): Promise<RecordSegment[]>;
  /** durable: one record's outputs (a retry); rejects with the handler's error. */
  one(record: PatternRecord<unknown>): Promise<ProducerRecord[]>;
  /** pubsub: the records of `records` that threw, with the error message. */
  pubsub(
    records: PatternRecord<unknown>[],
  ): Promise<{ record: PatternRecord<unknown>; error: string }[]>;
  /** Tasks in the pool now (for tests and counters). */
  inFlight(): number;
  /** Stops the threads (tasks still running are rejected); idempotent. */
  close(): Promise<void>;
}

/** A counting semaphore: at most `max` holders; `acquire` waits in FIFO order. */
function semaphore(max: number): { acquire(): Promise<void>; release(): void; held(): number } {
  let held = 0;
  const waiting: (() => void)[] = [];
  return {
    acquire: () => {
      if (held < max) {
        held++;
        return Promise.resolve();
      }
      return new Promise<void>((r) => waiting.push(r));
    },
    release: () => {
      const next = waiting.shift();
      if (next) next();
      else held--;
    },
    held: () => held,
  };
}

/**
 * Records as a task carries them: a byte value is copied into a buffer of its own and that
 * buffer transferred (a value read from the bus is often a view into a larger buffer, which
 * structured cloning would copy whole).
 */
function taskOf(
  records: PatternRecord<unknown>[],
  isolate: boolean,
): {
  task: PoolTask;
  transferList: ArrayBuffer[];
} {
  const transferList: ArrayBuffer[] = [];
  const copied = records.map((r) => {
    if (!(r.value instanceof Uint8Array)) return r;
    const value = r.value.slice();
    transferList.push(value.buffer as ArrayBuffer);
    return { ...r, value };
  });
  return { task: { records: copied, isolate }, transferList };
}

/**
 * Starts the pool stage of processor `p` (which must have `pool`): `pool.threads` piscina
 * threads running `workerFile` (the processor actor passes actors/pool-worker.ts's URL), each
 * loading `p.module`. Threads beyond the machine's cores only time-share them.
 */
export function startPoolStage(
  p: TopologyProcessor & { pool: TopologyProcessorPool },
  limit: OutputLimit,
  workerFile: string,
): PoolStage {
  if (p.pattern !== 'durable' && p.pattern !== 'pubsub')
    throw new Error(`processor ${p.name}: pool applies to durable and pubsub, not ${p.pattern}`);
  const data: PoolWorkerData = {
    name: p.name,
    pattern: p.pattern,
    module: p.module,
    inputs: [...p.inputs],
    outputs: [...p.outputs],
    settings: p.settings,
    limit,
  };
  const pool = new Piscina({
    filename: workerFile,
    minThreads: p.pool.threads,
    maxThreads: p.pool.threads,
    // Threads live as long as the stage: a poll's tasks must not wait for a thread to start.
    idleTimeout: Number.MAX_SAFE_INTEGER,
    workerData: data,
  });
  const slots = semaphore(p.pool.batchesInFlightMax);
  const size = p.pool.batchSize;
  let closed: Promise<void> | null = null;

  /** Runs one task once a slot is free; the returned promise settles when the task does. */
  const submit = async (
    records: PatternRecord<unknown>[],
    isolate: boolean,
  ): Promise<PoolResult> => {
    await slots.acquire();
    const { task, transferList } = taskOf(records, isolate);
    try {
      return (await pool.run(task, { transferList })) as PoolResult;
    } finally {
      slots.release();
    }
  };

  /** Settles every task before answering, so no task of a failed poll still runs afterwards. */
  const all = async <T>(tasks: Promise<T>[]): Promise<T[]> => {
    const settled = await Promise.allSettled(tasks);
    const failed = settled.find((s) => s.status === 'rejected');
    if (failed) throw (failed as PromiseRejectedResult).reason;
    return settled.map((s) => (s as PromiseFulfilledResult<T>).value);
  };

  return {
    durable: async (records, isolate) => {
      // Each task waits for a slot before it enters the pool; the poll's answer waits for all.
      const tasks: Promise<PoolResult>[] = [];
      for (let i = 0; i < records.length; i += size)
        tasks.push(submit(records.slice(i, i + size), isolate));
      const results = await all(tasks);
      const segments: RecordSegment[] = [];
      for (const r of results)
        for (const s of (r as { segments: RecordSegment[] }).segments) segments.push(s);
      return segments;
    },
    one: async (record) => {
      const r = (await submit([record], false)) as { segments: RecordSegment[] };
      return r.segments.flatMap((s) => s.outputs ?? []);
    },
    pubsub: async (records) => {
      const groups = Math.max(1, Math.ceil(records.length / size));
      const byGroup: PatternRecord<unknown>[][] = Array.from({ length: groups }, () => []);
      for (const r of records) byGroup[groups === 1 ? 0 : keyHash(r.key ?? '') % groups]!.push(r);
      const batches = byGroup.filter((g) => g.length > 0);
      const results = await all(batches.map((b) => submit(b, false)));
      const failed: { record: PatternRecord<unknown>; error: string }[] = [];
      results.forEach((r, i) => {
        for (const f of (r as { failed: { index: number; error: string }[] }).failed)
          failed.push({ record: batches[i]![f.index]!, error: f.error });
      });
      return failed;
    },
    inFlight: () => slots.held(),
    close: () => (closed ??= pool.destroy()),
  };
}
