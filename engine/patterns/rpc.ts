/**
 * RPC pattern: after Corda 5's RPCSubscription / RPCSender. The sender publishes a request (header
 * `correlationId`) to a chosen partition of the request topic and gets a promise; the responder
 * reads every request partition from the position it had at start (latest: requests sent while
 * no responder ran are lost) and writes the response to the SAME partition number of the response
 * topic, with the same correlationId. The sender reads the response topic from its start position
 * and settles the matching promise. Lost requests and slow responders surface as RpcTimeoutError
 * after `timeoutMs`, never as a hang; a response arriving after its timeout is dropped
 * (counted in `stats.lateResponses`). Requests pending when the sender's consumer loses its
 * connection to the bus (a Kafka broker went away) reject at once with RpcConnectionError.
 * At most once; no transactions.
 */
import { randomUUID } from 'node:crypto';
import type { BusBackend, BusConsumer, BusProducer } from '../bus/index.js';
import type { Codec } from './codec.js';
import {
  decodeRecord,
  deferred,
  settleLoop,
  PATTERN_DEFAULTS,
  type PatternRecord,
  type Subscription,
} from './subscription.js';

/** A request that got no response within its timeout. */
export class RpcTimeoutError extends Error {
  constructor(
    readonly correlationId: string,
    readonly timeoutMs: number,
  ) {
    super(`no response within ${timeoutMs} ms, correlationId=${correlationId}`);
    this.name = 'RpcTimeoutError';
  }
}

/** A request the responder's processor failed on: `message` is the processor's error message. */
export class RpcRemoteError extends Error {
  constructor(
    readonly correlationId: string,
    message: string,
  ) {
    super(message);
    this.name = 'RpcRemoteError';
  }
}

/**
 * A request that was pending when the sender's consumer lost its connection to the bus (kafka: a
 * broker went away): its response may never come, so it is rejected at once instead of at its
 * timeout. `cause` is the bus's BusError. The sender keeps running and reconnects; send again.
 */
export class RpcConnectionError extends Error {
  constructor(
    readonly correlationId: string,
    cause: Error,
  ) {
    super(
      `the connection to the bus was lost while the request was pending (${cause.message}), correlationId=${correlationId}`,
      { cause },
    );
    this.name = 'RpcConnectionError';
  }
}

/** Default bound of an RPC wait, ms. */
export const RPC_TIMEOUT_MS_DEFAULT = 5000;

async function allPartitionsAtEnd(bus: BusBackend, topic: string): Promise<BusConsumer> {
  const n = await bus.partitionCount(topic);
  if (n === null) throw new Error(`rpc topic does not exist, topic=${topic}`);
  const tps = Array.from({ length: n }, (_, partition) => ({ topic, partition }));
  const c = await bus.consumer({ autoOffsetReset: 'latest' });
  await c.assign(tps);
  await c.seekToEnd(tps);
  return c;
}

/** The responder's application side. */
export interface RpcProcessor<Req, Resp> {
  /** Throwing sends an error response (RpcRemoteError at the sender). */
  onRequest(request: PatternRecord<Req>): Resp | Promise<Resp>;
}

export interface RpcResponderOptions<Req, Resp> {
  bus: BusBackend;
  requestTopic: string;
  responseTopic: string;
  requestCodec: Codec<Req>;
  responseCodec: Codec<Resp>;
  processor: RpcProcessor<Req, Resp>;
}

/** Starts a responder; `ready` resolves once it reads from the end of every request partition. */
export function startRpcResponder<Req, Resp>(opts: RpcResponderOptions<Req, Resp>): Subscription {
  const ready = deferred();
  const done = deferred();
  let stopping = false;
  let consumer: BusConsumer | null = null;
  let producer: BusProducer | null = null;
  const run = async (): Promise<void> => {
    consumer = await allPartitionsAtEnd(opts.bus, opts.requestTopic);
    producer = await opts.bus.producer();
    ready.resolve();
    while (!stopping) {
      for (const r of await consumer.poll({ timeoutMs: PATTERN_DEFAULTS.pollTimeoutMs })) {
        const correlationId = r.headers.correlationId;
        if (correlationId === undefined) continue;
        let value: Uint8Array | null = null;
        const headers: Record<string, string> = { correlationId };
        try {
          value = opts.responseCodec.encode(
            await opts.processor.onRequest(decodeRecord(r, opts.requestCodec)),
          );
        } catch (e) {
          headers.error = String((e as Error).message);
        }
        await producer.send([
          { topic: opts.responseTopic, key: r.key, value, headers, partition: r.partition },
        ]);
      }
    }
  };
  const closeAll = async (): Promise<void> => {
    await consumer?.close().catch(() => {});
    await producer?.close().catch(() => {});
  };
  return settleLoop(run(), closeAll, ready, done, () => {
    stopping = true;
  });
}

export interface RpcSenderOptions<Req, Resp> {
  bus: BusBackend;
  requestTopic: string;
  responseTopic: string;
  requestCodec: Codec<Req>;
  responseCodec: Codec<Resp>;
  /** Default {@link RPC_TIMEOUT_MS_DEFAULT}. */
  timeoutMs?: number;
}

/** A running sender. */
export interface RpcSender<Req, Resp> extends Subscription {
  /**
   * Publishes `request` (to `partition`, else the key's partition) and resolves with the response.
   * Rejects RpcTimeoutError after `timeoutMs`, RpcRemoteError when the processor threw.
   */
  send(
    request: Req,
    opts?: { key?: string; partition?: number; timeoutMs?: number },
  ): Promise<Resp>;
  readonly stats: { lateResponses: number };
}

/** Starts a sender; await `ready` before the first send (its response reader starts at the end). */
export function startRpcSender<Req, Resp>(opts: RpcSenderOptions<Req, Resp>): RpcSender<Req, Resp> {
  const ready = deferred();
  const done = deferred();
  const pending = new Map<
    string,
    { resolve(v: Resp): void; reject(e: Error): void; timer: NodeJS.Timeout }
  >();
  const stats = { lateResponses: 0 };
  let stopping = false;
  let consumer: BusConsumer | null = null;
  let producer: BusProducer | null = null;
  const run = async (): Promise<void> => {
    consumer = await allPartitionsAtEnd(opts.bus, opts.responseTopic);
    // A lost connection may have lost the responses of every pending request: reject them now.
    consumer.onConnectionLost?.((e) => {
      for (const [id, p] of pending) {
        clearTimeout(p.timer);
        p.reject(new RpcConnectionError(id, e));
      }
      pending.clear();
    });
    producer = await opts.bus.producer();
    ready.resolve();
    while (!stopping) {
      for (const r of await consumer.poll({ timeoutMs: PATTERN_DEFAULTS.pollTimeoutMs })) {
        const id = r.headers.correlationId;
        const p = id === undefined ? undefined : pending.get(id);
        if (!p) {
          stats.lateResponses++;
          continue;
        }
        pending.delete(id);
        clearTimeout(p.timer);
        if (r.headers.error !== undefined) p.reject(new RpcRemoteError(id, r.headers.error));
        else {
          try {
            p.resolve(opts.responseCodec.decode(r.value!));
          } catch (e) {
            p.reject(e as Error);
          }
        }
      }
    }
  };
  const closeAll = async (): Promise<void> => {
    for (const [id, p] of pending) {
      clearTimeout(p.timer);
      p.reject(new Error(`rpc sender stopped, correlationId=${id}`));
    }
    pending.clear();
    await consumer?.close().catch(() => {});
    await producer?.close().catch(() => {});
  };
  return {
    stats,
    ...settleLoop(run(), closeAll, ready, done, () => {
      stopping = true;
    }),
    async send(request, o = {}) {
      await ready.promise;
      if (!producer) throw new Error('rpc sender is not running');
      if (stopping) throw new Error(`rpc sender is stopped, requestTopic=${opts.requestTopic}`);
      const id = randomUUID();
      const timeoutMs = o.timeoutMs ?? opts.timeoutMs ?? RPC_TIMEOUT_MS_DEFAULT;
      const result = new Promise<Resp>((resolve, reject) => {
        const timer = setTimeout(() => {
          pending.delete(id);
          reject(new RpcTimeoutError(id, timeoutMs));
        }, timeoutMs);
        pending.set(id, { resolve, reject, timer });
      });
      try {
        await producer.send([
          {
            topic: opts.requestTopic,
            key: o.key ?? id,
            value: opts.requestCodec.encode(request),
            headers: { correlationId: id },
            ...(o.partition === undefined ? {} : { partition: o.partition }),
          },
        ]);
      } catch (e) {
        const p = pending.get(id);
        if (p) {
          pending.delete(id);
          clearTimeout(p.timer);
        }
        throw e;
      }
      return result;
    },
  };
}
