/**
 * engine/patterns: message patterns written once against the bus API (engine/bus), so they run
 * unchanged on the journal, memory and kafka backends. After Corda 5's messaging patterns
 * (durable, pub/sub, compacted, state-and-event, RPC subscriptions). Application code writes a
 * typed processor; the pattern owns polling, positions and transactions.
 *
 * ```ts
 * const sub = startDurable({ bus, groupId: 'billing', topics: ['orders'], transactionalId: 'billing-1',
 *   codec: jsonCodec<Order>(), processor: { onNext: (orders) => orders.map(toInvoice) } })
 * await sub.ready; ...; await sub.stop()
 * ```
 */
export { bytesCodec, jsonCodec, stringCodec, type Codec } from './codec.js';
export { PATTERN_DEFAULTS, type PatternRecord, type Subscription } from './subscription.js';
export {
  partitionTransactionalId,
  startDurable,
  type DurableOptions,
  type DurableOutcome,
  type DurableProcessor,
  type DurableStats,
} from './durable.js';
export { startPubSub, type PubSubOptions, type PubSubProcessor } from './pubsub.js';
export { startCompacted, type CompactedOptions, type CompactedProcessor } from './compacted.js';
export {
  startStateAndEvent,
  type StateAndEventListener,
  type StateAndEventOptions,
  type StateAndEventProcessor,
  type StateAndEventResult,
} from './state-and-event.js';
export {
  RPC_TIMEOUT_MS_DEFAULT,
  RpcConnectionError,
  RpcRemoteError,
  RpcTimeoutError,
  startRpcResponder,
  startRpcSender,
  type RpcProcessor,
  type RpcResponderOptions,
  type RpcSender,
  type RpcSenderOptions,
} from './rpc.js';
export type { ProcessorContext } from './processor.js';
