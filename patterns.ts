/**
 * `sluice/patterns`: message patterns written once against the bus API (`sluice/bus`): durable
 * (exactly once), pub/sub, compacted, state-and-event and RPC, with the value codecs.
 */
export * from './engine/patterns/index.js';
