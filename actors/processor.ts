/**
 * Processor actor (worker entry): runs one topology processor with engine/processors' host
 * (engine/processors/host.ts: bus connection, handler, pattern, counts, drain; documented
 * there). Its pool threads, when it has `pool:`, run ./pool-worker.ts.
 */
import { runActor } from '../engine/actor/index.js';
import { runProcessorHost } from '../engine/processors/index.js';
import type { ProcessorData } from './contracts.js';

runActor<ProcessorData>((ctx) =>
  runProcessorHost(ctx, new URL('./pool-worker.js', import.meta.url).href),
);
