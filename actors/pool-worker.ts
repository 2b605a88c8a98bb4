/**
 * Pool thread of a processor's pool stage (piscina worker entry; the main side, which cuts polls
 * into tasks and keeps their order, is engine/processors/pool-stage.ts). Loads the processor's handler
 * module once per thread, from `workerData` ({@link PoolWorkerData}), and runs each
 * {@link PoolTask} through engine/processors/records.ts, the rules the inline path follows too.
 *
 * The handler factory's context has no bus: a pool thread neither consumes nor produces (the
 * processor's thread commits outputs and positions); `ctx.bus` throws saying so.
 */
import { workerData } from 'node:worker_threads';
import type { ProcessorContext } from '../engine/patterns/index.js';
import type { PoolResult, PoolTask, PoolWorkerData } from './contracts.js';
import { loadHandler, type Handler } from '../engine/processors/handler.js';
import {
  durableSegments,
  pubsubFailures,
  type DurableOnNext,
} from '../engine/processors/records.js';

const data = workerData as PoolWorkerData;

const context: ProcessorContext = {
  name: data.name,
  pattern: data.pattern,
  inputs: data.inputs,
  outputs: data.outputs,
  settings: data.settings,
  get bus(): never {
    throw new Error(
      `processor ${data.name}: ctx.bus is not available in a pool thread (the processor's thread owns the bus); allocate output values with new Uint8Array`,
    );
  },
};

let handler: Promise<Handler> | null = null;

/** Runs one task (piscina calls the default export once per `run`). */
export default async function runTask(task: PoolTask): Promise<PoolResult> {
  const h = await (handler ??= loadHandler(data.module, context));
  if (data.pattern === 'durable')
    return {
      segments: await durableSegments(
        data.name,
        h.onNext as DurableOnNext,
        task.records,
        task.isolate,
        data.limit,
      ),
    };
  return { failed: await pubsubFailures(h.onNext as (r: unknown) => unknown, task.records) };
}
