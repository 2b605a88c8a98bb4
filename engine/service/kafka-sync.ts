/**
 * A blocking Kafka client for actor threads whose loops are synchronous (the service host runs
 * handlers, replays and its live loop without awaiting; the queue reader and the timer park in
 * Atomics.wait). kafkajs is asynchronous, so it runs in a helper worker started here
 * (./kafka-sync.worker.ts); each call posts a request to it and blocks in Atomics.wait until the
 * answer is there (the shape of synckit). The caller's event loop is never needed: kafkajs'
 * sockets, timers and retries live in the helper's own loop.
 *
 * Bounds: a call waits at most `callTimeoutMs` (default {@link SYNC_KAFKA_DEFAULTS}); while it
 * waits, `onWait` runs every `waitSliceMs` (the host's heartbeat, so a slow broker is waited out
 * instead of being taken for a hung actor).
 */
import {
  MessageChannel,
  Worker,
  receiveMessageOnPort,
  type MessagePort,
} from 'node:worker_threads';
import { kafkaBusOptionsOf as busOptionsOf, type KafkaBusOptions } from '../bus/index.js';

/** How an actor reaches the topology's Kafka cluster (topology `bus` with kind kafka). */
export interface KafkaConnection {
  /** Bootstrap servers, `host:port`. */
  brokers: string[];
  clientId: string;
  /** TLS; files are PEM, read by the helper when it connects. Absent: plaintext. */
  tls?: { caFile?: string; certFile?: string; keyFile?: string; rejectUnauthorized: boolean };
  /** SASL; exactly one of password and passwordFile. Absent: no authentication. */
  sasl?: {
    mechanism: 'plain' | 'scram-sha-256' | 'scram-sha-512';
    username: string;
    password?: string;
    passwordFile?: string;
  };
}

/**
 * engine/bus createKafkaBus options for `c` (engine/bus kafkaBusOptionsOf): reads the TLS files
 * and the SASL password file now.
 * @throws BusError 'bad-input' naming the setting and file when one cannot be read.
 */
export function kafkaBusOptionsOf(c: KafkaConnection): KafkaBusOptions {
  return busOptionsOf({ kind: 'kafka', ...c });
}

/** Defaults of {@link SyncKafka}. */
export const SYNC_KAFKA_DEFAULTS = {
  /** Longest one call may block, ms: longer than kafkajs' producer retries (about 25 s). */
  callTimeoutMs: 120_000,
  /** How often a blocked call runs `onWait`, ms. */
  waitSliceMs: 500,
  /**
   * Longest close() waits for the helper to close its clients, ms; the helper is ended after it
   * either way. kafkajs' disconnect waits on a cluster that answers nothing (LeaveGroup, request
   * timeouts), and a reader closes its client while draining: unbounded, the drain outlasted the
   * supervisor's drainTimeoutMs (fault seed 45). Clients left unclosed cost nothing lasting: a
   * private group expires, an open transaction is fenced at the next start.
   */
  closeTimeoutMs: 5_000,
  /**
   * Longest a lookup (partitionCount, offsets) waits for the cluster, ms; then it fails as the
   * broker being away (isBrokerAway). kafkajs retries a metadata or ListOffsets request that
   * meets a dead node for minutes: a restarted reader's first lookup, unbounded but by the call
   * timeout, kept it from reading for the fault suite's whole 90 s recovery window.
   */
  lookupTimeoutMs: 30_000,
} as const;

/** Bounds of one {@link SyncKafka} (defaults: SYNC_KAFKA_DEFAULTS). */
export interface SyncKafkaOptions {
  callTimeoutMs?: number;
  closeTimeoutMs?: number;
  lookupTimeoutMs?: number;
}

/** Records as the helper sends them: values back to back, `ends[i]` the end of value i. */
export interface PackedRecords {
  bytes: ArrayBuffer;
  ends: ArrayBuffer;
  offsets: ArrayBuffer;
  /** The consumer's position after these records (past markers and aborted records). */
  position: number;
}

/** A request to the helper (one per call). */
export type SyncKafkaRequest =
  | { op: 'offsets'; topic: string; partition: number }
  | { op: 'partitions'; topic: string }
  | {
      op: 'read';
      topic: string;
      partition: number;
      from: number;
      recordsMax: number;
      waitMs: number;
    }
  | { op: 'range'; topic: string; partition: number; lo: number; hi: number }
  | { op: 'producer'; transactionalId: string }
  | {
      op: 'commit';
      transactionalId: string;
      topic: string;
      partition: number;
      bytes: ArrayBuffer;
      ends: ArrayBuffer;
    }
  | { op: 'send'; topic: string; partition: number; bytes: ArrayBuffer; ends: ArrayBuffer }
  | { op: 'deleteRecords'; topic: string; partition: number; before: number }
  | { op: 'close' };

/** The helper's answer. */
export type SyncKafkaReply =
  | {
      ok: true;
      value: PackedRecords | { start: number; end: number } | { count: number | null } | null;
    }
  | { ok: false; error: string; code?: string; sent?: SentBeforeFailure; brokerAway?: boolean };

/**
 * Of a failed send (plain idempotent producer): how many of its records the broker acknowledged
 * before the failure (they are written, in order), and whether the failure is the broker being
 * away (kafkajs retriable: connection refused or lost, request timeout, no leader) rather than a
 * refusal that a resend would meet again (message too large, out-of-order sequence).
 */
export interface SentBeforeFailure {
  records: number;
  brokerAway: boolean;
}

/** A record read by {@link SyncKafka.read} / {@link SyncKafka.range}; `bytes` is its own copy. */
export interface KafkaLogRecord {
  /** The record's offset (the queue index of the journal). */
  index: number;
  bytes: Uint8Array;
}

/**
 * A failed call; `code` is the bus's BusError code when the bus gave one (e.g. 'fenced'); `sent`
 * is set for a send that the helper answered (nothing of it is in flight any more); `brokerAway`
 * is true when the helper answered that the failure is the broker being away (kafkajs
 * retriable, as SentBeforeFailure.brokerAway), false for a refusal, a bad request or a call the
 * helper did not answer in time.
 */
export class SyncKafkaError extends Error {
  override readonly name = 'SyncKafkaError';
  constructor(
    message: string,
    readonly code: string | undefined,
    readonly sent?: SentBeforeFailure,
    readonly brokerAway: boolean = false,
  ) {
    super(message);
  }
}

/**
 * Whether `e` is a failed plain send (SyncKafka.send, a KafkaAppender without transactional id)
 * of a broker that is away, answered by the helper: the appender kept the records the broker did
 * not acknowledge, and flushing again with the same client resends them under their sequence
 * numbers, so the broker drops the copy of any that were written after all (idempotent producer).
 */
export function isBrokerAwaySend(e: unknown): boolean {
  return e instanceof SyncKafkaError && e.sent?.brokerAway === true;
}

/**
 * Whether `e` is a failed call (any op) that the helper answered with the broker being away
 * (connection refused or lost, request timeout, no leader): a lookup such as partitionCount can
 * simply be made again once the broker answers. A send needs {@link isBrokerAwaySend} instead.
 */
export function isBrokerAway(e: unknown): boolean {
  return e instanceof SyncKafkaError && e.brokerAway;
}

const helperFile = new URL('./kafka-sync.worker.js', import.meta.url);

/** See the module comment. One helper worker per instance; close() ends it. */
export class SyncKafka {
  private readonly worker: Worker;
  private readonly port: MessagePort;
  private readonly flag = new Int32Array(new SharedArrayBuffer(4));
  private closed = false;
  private readonly callTimeoutMs: number;
  private readonly closeTimeoutMs: number;

  /**
   * Starts the helper (it connects lazily, at the first call).
   * @param onWait runs while a call is blocked, every waitSliceMs (e.g. an actor heartbeat).
   * @param options.callTimeoutMs longest one call blocks, ms; then it throws SyncKafkaError
   *   'backend'. options.closeTimeoutMs: longest close() waits for the helper's clients, ms.
   *   options.lookupTimeoutMs: longest partitionCount() and offsets() wait for the cluster, ms;
   *   then they throw a SyncKafkaError that isBrokerAway().
   */
  constructor(
    readonly connection: KafkaConnection,
    private readonly onWait: () => void = () => undefined,
    options: SyncKafkaOptions = {},
  ) {
    this.callTimeoutMs = options.callTimeoutMs ?? SYNC_KAFKA_DEFAULTS.callTimeoutMs;
    this.closeTimeoutMs = options.closeTimeoutMs ?? SYNC_KAFKA_DEFAULTS.closeTimeoutMs;
    const lookupTimeoutMs = options.lookupTimeoutMs ?? SYNC_KAFKA_DEFAULTS.lookupTimeoutMs;
    const { port1, port2 } = new MessageChannel();
    this.port = port1;
    this.worker = new Worker(helperFile, {
      workerData: { connection, port: port2, flag: this.flag.buffer, lookupTimeoutMs },
      transferList: [port2],
    });
    this.worker.unref();
  }

  private call(
    req: SyncKafkaRequest,
    transfer: ArrayBuffer[] = [],
    timeoutMs = this.callTimeoutMs,
  ): SyncKafkaReply & { ok: true } {
    if (this.closed) throw new SyncKafkaError('kafka client is closed', 'closed');
    Atomics.store(this.flag, 0, 0);
    this.port.postMessage(req, transfer);
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      Atomics.wait(this.flag, 0, 0, SYNC_KAFKA_DEFAULTS.waitSliceMs);
      if (Atomics.load(this.flag, 0) === 1) {
        const m = receiveMessageOnPort(this.port);
        if (m) {
          const reply = m.message as SyncKafkaReply;
          if (!reply.ok)
            throw new SyncKafkaError(reply.error, reply.code, reply.sent, reply.brokerAway);
          return reply;
        }
      }
      if (Date.now() > deadline) {
        throw new SyncKafkaError(
          `kafka ${req.op} did not answer within ${timeoutMs} ms (brokers ${this.connection.brokers.join(',')})`,
          'backend',
        );
      }
      this.onWait();
    }
  }

  /** Partition count of a topic; null when it does not exist. */
  partitionCount(topic: string): number | null {
    return (this.call({ op: 'partitions', topic }).value as { count: number | null }).count;
  }

  /** First offset still stored and last stable offset of a partition. */
  offsets(topic: string, partition: number): { start: number; end: number } {
    return this.call({ op: 'offsets', topic, partition }).value as { start: number; end: number };
  }

  /**
   * Up to recordsMax committed records from offset `from` on, waiting up to waitMs for the first
   * (longer when the broker has records there), and the position after them.
   */
  read(
    topic: string,
    partition: number,
    from: number,
    recordsMax: number,
    waitMs: number,
  ): { records: KafkaLogRecord[]; position: number } {
    return unpack(
      this.call({ op: 'read', topic, partition, from, recordsMax, waitMs }).value as PackedRecords,
    );
  }

  /** Every committed record with lo <= offset < hi (hi at most the last stable offset), oldest first. */
  range(topic: string, partition: number, lo: number, hi: number): KafkaLogRecord[] {
    return unpack(this.call({ op: 'range', topic, partition, lo, hi }).value as PackedRecords)
      .records;
  }

  /**
   * Opens the transactional producer `transactionalId` (InitProducerId): every older producer
   * with that id, in any process, is fenced and its open transaction aborted before this returns.
   */
  openProducer(transactionalId: string): void {
    this.call({ op: 'producer', transactionalId });
  }

  /**
   * Sends `values` to topic/partition in one transaction of producer `transactionalId` and
   * commits it: read_committed consumers see all of them or, after a crash, none.
   * @throws SyncKafkaError code 'fenced' when a newer producer with that id exists.
   */
  commit(
    transactionalId: string,
    topic: string,
    partition: number,
    values: readonly Uint8Array[],
  ): void {
    const { bytes, ends } = packValues(values);
    this.call({ op: 'commit', transactionalId, topic, partition, bytes, ends }, [bytes, ends]);
  }

  /**
   * Sends `values` to topic/partition with the client's plain idempotent producer (no
   * transaction: the broker drops resent duplicates, offsets stay contiguous) and waits for
   * the acknowledgement of every one.
   * @throws SyncKafkaError with `sent` (records acknowledged before the failure, whether the
   *   broker is away) when the helper answers with a failure; without it when the call timed out.
   */
  send(topic: string, partition: number, values: readonly Uint8Array[]): void {
    const { bytes, ends } = packValues(values);
    this.call({ op: 'send', topic, partition, bytes, ends }, [bytes, ends]);
  }

  /**
   * Deletes the records of topic/partition before offset `before` (Kafka DeleteRecords; see
   * engine/bus deleteRecordsBefore).
   */
  deleteRecords(topic: string, partition: number, before: number): void {
    this.call({ op: 'deleteRecords', topic, partition, before });
  }

  /** Closes producers and consumers, then ends the helper. Idempotent. */
  /**
   * Closes the helper's clients, waiting at most `closeTimeoutMs` (SYNC_KAFKA_DEFAULTS), and ends
   * the helper. Never throws. Idempotent.
   */
  close(): void {
    if (this.closed) return;
    try {
      this.call({ op: 'close' }, [], Math.min(this.closeTimeoutMs, this.callTimeoutMs));
    } catch {
      // the helper is ended below either way
    } finally {
      this.closed = true;
      void this.worker.terminate();
      this.port.close();
    }
  }
}

function packValues(values: readonly Uint8Array[]): { bytes: ArrayBuffer; ends: ArrayBuffer } {
  let total = 0;
  for (const v of values) total += v.length;
  const bytes = new Uint8Array(total);
  const ends = new Float64Array(values.length);
  let o = 0;
  values.forEach((v, i) => {
    bytes.set(v, o);
    ends[i] = o += v.length;
  });
  return { bytes: bytes.buffer, ends: ends.buffer };
}

function unpack(p: PackedRecords): { records: KafkaLogRecord[]; position: number } {
  const bytes = new Uint8Array(p.bytes);
  const ends = new Float64Array(p.ends);
  const offsets = new Float64Array(p.offsets);
  const records: KafkaLogRecord[] = new Array(ends.length);
  let start = 0;
  for (let i = 0; i < ends.length; i++) {
    records[i] = { index: offsets[i], bytes: bytes.subarray(start, ends[i]) };
    start = ends[i];
  }
  return { records, position: p.position };
}
