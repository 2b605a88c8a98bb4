/**
 * Worker entry of {@link SyncKafka} (./kafka-sync.ts): owns one kafka bus (kafkajs, async) and
 * answers the blocking calls of the actor thread that started it. Each request is one message on
 * the channel's port; the answer is posted back, then the shared flag is set and notified, so the
 * caller (blocked in Atomics.wait) takes it with receiveMessageOnPort.
 *
 * Record values cross the boundary packed: one ArrayBuffer with every value back to back plus
 * an offsets array, transferred (not cloned), because kafkajs' values are views into a fetch
 * response and cloning each would copy that whole response per record.
 */
import { workerData, type MessagePort } from 'node:worker_threads';
import {
  createKafkaBus,
  deleteRecordsBefore,
  BusError,
  type BusConsumer,
  type BusProducer,
  type BusBackend,
} from '../bus/index.js';
import {
  kafkaBusOptionsOf,
  type KafkaConnection,
  type SyncKafkaReply,
  type SyncKafkaRequest,
  type PackedRecords,
  type SentBeforeFailure,
} from './kafka-sync.js';

const { connection, port, flag, lookupTimeoutMs } = workerData as {
  connection: KafkaConnection;
  port: MessagePort;
  flag: SharedArrayBuffer;
  /** Bound of the partitions and offsets ops, ms (SYNC_KAFKA_DEFAULTS.lookupTimeoutMs). */
  lookupTimeoutMs: number;
};
const done = new Int32Array(flag);

/** Longest wait for records the broker already has (below the last stable offset), ms. */
const CATCH_UP_WAIT_MS_MAX = 30_000;

/** Largest sum of record bytes in one send of a transaction (see the commit op). */
const SEND_BYTES_MAX = 512 * 1024;

/** A failed send op: the failure and what of the send the broker acknowledged before it. */
class SendFailure extends Error {
  constructor(
    readonly failure: unknown,
    readonly sent: SentBeforeFailure,
  ) {
    super(failure instanceof Error ? failure.message : String(failure));
  }
}

/**
 * kafkajs calls a failure retriable when the broker is away (connection refused or closed,
 * request timeout, leader not available); retries exhausted wrap it (originalError), and the
 * bus wraps that (cause). A refusal (MESSAGE_TOO_LARGE, OUT_OF_ORDER_SEQUENCE_NUMBER) is not.
 */
function retriable(e: unknown): boolean {
  for (let cur: unknown = e, depth = 0; cur && depth < 6; depth++) {
    const c = cur as { retriable?: unknown; originalError?: unknown; cause?: unknown };
    if (c.retriable === true) return true;
    cur = c.originalError ?? c.cause;
  }
  return false;
}

let bus: BusBackend | null = null;
const consumers = new Map<string, Promise<BusConsumer>>();
const producers = new Map<string, BusProducer>();
let plain: BusProducer | null = null;

function busOf(): BusBackend {
  return (bus ??= createKafkaBus(kafkaBusOptionsOf(connection)));
}

/** One assigned (group-less) read_committed consumer per topic partition. */
function consumerOf(topic: string, partition: number): Promise<BusConsumer> {
  const k = `${topic}/${partition}`;
  let c = consumers.get(k);
  if (!c) {
    c = busOf()
      .consumer({ clientId: connection.clientId })
      .then(async (x) => {
        await x.assign([{ topic, partition }]);
        return x;
      });
    c.catch(() => consumers.delete(k));
    consumers.set(k, c);
  }
  return c;
}

/**
 * {@link consumerOf}, bounded: a consumer whose first join has not finished within
 * CATCH_UP_WAIT_MS_MAX (kafkajs can retry a join for minutes while a cluster's group
 * coordinators move, seen after a controller kill) is dropped, closed once it settles, and the
 * call fails, so the caller (an actor) fails and is restarted instead of waiting without end;
 * the next call makes a new consumer.
 */
async function joinedConsumerOf(topic: string, partition: number): Promise<BusConsumer> {
  const k = `${topic}/${partition}`;
  const pending = consumerOf(topic, partition);
  try {
    return await beforeDeadline(
      pending,
      Date.now() + CATCH_UP_WAIT_MS_MAX,
      () =>
        new Error(
          `kafka ${k}: the read_committed consumer did not join within ${CATCH_UP_WAIT_MS_MAX} ms`,
        ),
    );
  } catch (e) {
    if (consumers.get(k) === pending) {
      consumers.delete(k);
      pending.then((c) => c.close()).catch(() => undefined);
    }
    throw e;
  }
}

function pack(values: (Uint8Array | null)[], offsets: number[], position: number): PackedRecords {
  let total = 0;
  for (const v of values) total += v ? v.length : 0;
  const bytes = new Uint8Array(total);
  const ends = new Float64Array(values.length);
  let o = 0;
  values.forEach((v, i) => {
    if (v) {
      bytes.set(v, o);
      o += v.length;
    }
    ends[i] = o;
  });
  return {
    bytes: bytes.buffer,
    ends: ends.buffer,
    offsets: Float64Array.from(offsets).buffer,
    position,
  };
}

/**
 * The packed values of a commit or send as records, in sends of at most SEND_BYTES_MAX bytes:
 * kafkajs puts one send's records for a partition in one record batch, and the broker refuses
 * batches over message.max.bytes (1 MiB by default).
 */
function sendChunks(req: {
  topic: string;
  partition: number;
  bytes: ArrayBuffer;
  ends: ArrayBuffer;
}) {
  const all = new Uint8Array(req.bytes);
  const chunks: { topic: string; partition: number; key: null; value: Uint8Array }[][] = [];
  let chunk: { topic: string; partition: number; key: null; value: Uint8Array }[] = [];
  let start = 0;
  let sent = 0;
  for (const end of new Float64Array(req.ends)) {
    const value = all.subarray(start, end);
    start = end;
    if (chunk.length > 0 && sent + value.length > SEND_BYTES_MAX) {
      chunks.push(chunk);
      chunk = [];
      sent = 0;
    }
    chunk.push({ topic: req.topic, partition: req.partition, key: null, value });
    sent += value.length;
  }
  if (chunk.length > 0) chunks.push(chunk);
  return chunks;
}

/**
 * `p`, or a rejection with `late()` once `deadlineMs` (Date.now() ms) has passed, whichever comes
 * first; `p` goes on and its outcome is then ignored.
 */
function beforeDeadline<T>(p: Promise<T>, deadlineMs: number, late: () => Error): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(late()), Math.max(0, deadlineMs - Date.now()));
  });
  p.catch(() => undefined);
  return Promise.race([p, expired]).finally(() => clearTimeout(timer));
}

/**
 * `p` within lookupTimeoutMs, or a failure that counts as the broker being away (retriable, so
 * callers that wait for the broker retry it, and an actor fails and restarts with new clients).
 */
function lookup<T>(p: Promise<T>, what: string): Promise<T> {
  return beforeDeadline(p, Date.now() + lookupTimeoutMs, () =>
    Object.assign(
      new Error(
        `kafka ${connection.brokers.join(',')}: the cluster did not answer for ${what} within ${lookupTimeoutMs} ms`,
      ),
      { retriable: true },
    ),
  );
}

async function endOf(topic: string, partition: number): Promise<number> {
  return (await busOf().offsets([{ topic, partition }]))[0].end;
}

async function handle(req: SyncKafkaRequest): Promise<(SyncKafkaReply & { ok: true })['value']> {
  switch (req.op) {
    case 'partitions':
      return {
        count: await lookup(busOf().partitionCount(req.topic), `the partitions of ${req.topic}`),
      };
    case 'offsets':
      return (
        await lookup(
          busOf().offsets([{ topic: req.topic, partition: req.partition }]),
          `the offsets of ${req.topic}/${req.partition}`,
        )
      )[0];
    case 'read': {
      // Up to recordsMax records from `from`, waiting up to waitMs for the first; records the
      // broker already has (below its last stable offset) are waited for longer, so an empty
      // answer means `from` is at the end.
      const tp = { topic: req.topic, partition: req.partition };
      const c = await joinedConsumerOf(req.topic, req.partition);
      if (c.position(tp) !== req.from) c.seek(tp, req.from);
      let recs = await c.poll({ timeoutMs: req.waitMs, recordsMax: req.recordsMax });
      if (recs.length === 0) {
        const deadline = Date.now() + CATCH_UP_WAIT_MS_MAX;
        const stalled = () =>
          new Error(
            `kafka ${req.topic}/${req.partition}: no record from offset ${c.position(tp)} within ${CATCH_UP_WAIT_MS_MAX} ms although the partition's last stable offset is beyond it`,
          );
        // The bound holds for the ListOffsets calls too: one that meets a dead node may wait
        // kafkajs' request timeout (30 s) per attempt.
        while (
          recs.length === 0 &&
          c.position(tp) <
            (await beforeDeadline(
              endOf(req.topic, req.partition),
              deadline,
              () =>
                new Error(
                  `kafka ${req.topic}/${req.partition}: reading from offset ${c.position(tp)}, the cluster did not answer ListOffsets within ${CATCH_UP_WAIT_MS_MAX} ms`,
                ),
            ))
        ) {
          if (Date.now() > deadline) throw stalled();
          recs = await c.poll({ timeoutMs: 500, recordsMax: req.recordsMax });
        }
      }
      return pack(
        recs.map((r) => r.value),
        recs.map((r) => r.offset),
        c.position(tp),
      );
    }
    case 'range': {
      // Every record with lo <= offset < hi (hi at most the last stable offset).
      const tp = { topic: req.topic, partition: req.partition };
      const c = await joinedConsumerOf(req.topic, req.partition);
      c.seek(tp, req.lo);
      const values: (Uint8Array | null)[] = [];
      const offsets: number[] = [];
      const deadline = Date.now() + CATCH_UP_WAIT_MS_MAX;
      while (c.position(tp) < req.hi) {
        const recs = await c.poll({ timeoutMs: 500 });
        for (const r of recs) {
          if (r.offset >= req.hi) break;
          values.push(r.value);
          offsets.push(r.offset);
        }
        if (recs.length > 0 && recs[recs.length - 1].offset >= req.hi) break;
        if (recs.length === 0 && Date.now() > deadline) {
          throw new Error(
            `kafka ${req.topic}/${req.partition}: reading offsets ${req.lo}..${req.hi - 1} stalled at ${c.position(tp)} for ${CATCH_UP_WAIT_MS_MAX} ms`,
          );
        }
      }
      return pack(values, offsets, c.position(tp));
    }
    case 'producer': {
      // Creating it sends InitProducerId: older producers with this id are fenced and their open
      // transaction is aborted before this returns.
      const old = producers.get(req.transactionalId);
      if (old) await old.close();
      producers.set(
        req.transactionalId,
        await busOf().producer({
          transactionalId: req.transactionalId,
          clientId: connection.clientId,
        }),
      );
      return null;
    }
    case 'commit': {
      const p = producers.get(req.transactionalId);
      if (!p) throw new Error(`kafka: no producer ${req.transactionalId} (open it first)`);
      const txn = await p.begin();
      try {
        for (const chunk of sendChunks(req)) await txn.send(chunk);
        await txn.commit();
      } catch (e) {
        await txn.abort().catch(() => undefined);
        throw e;
      }
      return null;
    }
    case 'send': {
      // Records acknowledged before a failure: the caller resends only the rest. kafkajs rolls a
      // failed request's sequence numbers back, so the resent first chunk has the sequence
      // numbers it had, and the broker drops it if it was written after all.
      let records = 0;
      try {
        plain ??= await busOf().producer({ clientId: connection.clientId });
        for (const chunk of sendChunks(req)) {
          await plain.send(chunk);
          records += chunk.length;
        }
      } catch (e) {
        throw new SendFailure(e, { records, brokerAway: retriable(e) });
      }
      return null;
    }
    case 'deleteRecords':
      await deleteRecordsBefore(
        busOf(),
        { topic: req.topic, partition: req.partition },
        req.before,
      );
      return null;
    case 'close': {
      const b = bus;
      bus = null;
      consumers.clear();
      producers.clear();
      plain = null;
      await b?.close();
      return null;
    }
  }
}

port.on('message', (req: SyncKafkaRequest) => {
  void handle(req)
    .then(
      (value) => {
        const reply: SyncKafkaReply = { ok: true, value };
        const transfer =
          value && typeof value === 'object' && 'bytes' in value
            ? [value.bytes, value.ends, value.offsets]
            : [];
        port.postMessage(reply, transfer as ArrayBuffer[]);
      },
      (e: unknown) => {
        const sent = e instanceof SendFailure ? e.sent : undefined;
        if (e instanceof SendFailure) e = e.failure;
        const code = e instanceof BusError ? e.code : undefined;
        const reply: SyncKafkaReply = {
          ok: false,
          error: e instanceof Error ? e.message : String(e),
          code,
          ...(sent ? { sent } : {}),
          brokerAway: retriable(e),
        };
        port.postMessage(reply);
      },
    )
    .finally(() => {
      Atomics.store(done, 0, 1);
      Atomics.notify(done, 0);
    });
});
