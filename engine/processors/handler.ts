/**
 * A processor's handler module, loaded: in the processor's own thread (./host.ts) and,
 * for a pool stage, in each pool thread (actors/pool-worker.ts). See engine/patterns/processor.ts
 * for the shape a module exports.
 */
import { pathToFileURL } from 'node:url';
import type { ProcessorContext } from '../patterns/index.js';

/** A loaded handler: the pattern's methods, and optional `listener` and `onError`. */
export type Handler = Record<string, unknown> & {
  listener?: unknown;
  onError?: (e: unknown, r: unknown) => void;
};

/**
 * The module's default export as a handler (a factory is called with `ctx`).
 * @throws Error naming the processor and the file when it exports no object or lacks a method.
 */
export async function loadHandler(file: string, ctx: ProcessorContext): Promise<Handler> {
  const mod = (await import(pathToFileURL(file).href)) as { default?: unknown };
  const exported = mod.default;
  const handler =
    typeof exported === 'function'
      ? await (exported as (c: ProcessorContext) => unknown)(ctx)
      : exported;
  if (typeof handler !== 'object' || handler === null) {
    throw new Error(
      `processor ${ctx.name}: module ${file} must export default a processor object or a function returning one, got ${handler === null ? 'null' : typeof handler}`,
    );
  }
  const needs: Record<string, string[]> = {
    durable: ['onNext'],
    'state-and-event': ['onNext'],
    pubsub: ['onNext'],
    compacted: ['onSnapshot', 'onNext'],
    rpc: ['onRequest'],
  };
  for (const m of needs[ctx.pattern] ?? []) {
    if (typeof (handler as Record<string, unknown>)[m] !== 'function') {
      throw new Error(
        `processor ${ctx.name}: the ${ctx.pattern} handler of ${file} has no ${m} function`,
      );
    }
  }
  return handler as Handler;
}
