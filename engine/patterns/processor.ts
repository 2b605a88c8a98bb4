/**
 * The handler module of a processor declared in a topology file (`processors:`): what its
 * `module` exports for the actor that runs the pattern (actors/processor.ts). The default export
 * is the processor object the pattern takes as a library (`{ onNext(records) }` for durable,
 * `{ onNext(state, event) }` for state-and-event, `{ onNext(record) }` for pubsub,
 * `{ onSnapshot(map), onNext(record, previous, map) }` for compacted, `{ onRequest(request) }`
 * for an rpc responder), or a function of a {@link ProcessorContext} returning it (or a promise
 * of it), for handlers that need their settings or topic names.
 *
 * ```ts
 * // invoices.ts: durable, orders in, invoices out
 * import type { ProcessorContext } from 'sluice/patterns'
 * export default (ctx: ProcessorContext) => ({
 *   onNext: (orders) => orders.map((o) => ({ topic: ctx.outputs[0], key: o.key, value: ... })),
 * })
 * ```
 * Optional members besides the handlers: `listener` (durable: a RebalanceListener;
 * state-and-event: a StateAndEventListener), `onError` (pubsub, compacted).
 *
 * With `pool: { threads }` (durable, pubsub; engine/processors/pool-stage.ts) the same module is also loaded
 * in each pool thread, and its default export (called there with a context whose `bus` throws:
 * a pool thread neither consumes nor produces) gets the handler calls: `onNext(records)` with a
 * batch of at most `pool.batchSize` consecutive records of one poll (durable, returning output
 * records whose values are structured-cloned back), `onNext(record)` (pubsub). `listener` and
 * `onError` still run in the processor's thread. A handler must therefore be stateless across
 * calls: consecutive batches run in different threads.
 */
import type { BusBackend } from '../bus/index.js';

/** What a handler factory is given. */
export interface ProcessorContext {
  /** The processor's name in the topology. */
  name: string;
  /** 'durable' | 'state-and-event' | 'pubsub' | 'compacted' | 'rpc'. */
  pattern: string;
  /** Input topics, as in the topology. */
  inputs: string[];
  /** Output topics the handler may write (a record to any other topic fails its batch). */
  outputs: string[];
  /** state-and-event: the state topic. */
  stateTopic?: string;
  /** `settings` of the topology entry (plain data). */
  settings: Record<string, unknown>;
  /** The bus the pattern runs on, for `allocValue`; do not consume or produce through it. */
  bus: BusBackend;
}
