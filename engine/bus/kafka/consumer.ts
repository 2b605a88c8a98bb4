/**
 * Pull-style {@link BusConsumer} over kafkajs' push consumer.
 *
 * Why pull: the patterns (and Kafka's own Java client, and Corda's CordaConsumer) are poll loops
 * that own their positions, seek back after a failed commit and get rebalance callbacks between
 * two polls, never during processing. kafkajs only offers `run({ eachBatch })`, which drives the
 * caller. Blocking inside eachBatch until the caller polls would stall kafkajs' heartbeats and
 * rebalance handling behind slow processing, so instead:
 *
 * - eachBatch only appends the batch's kafkajs messages to a per-partition buffer and returns;
 *   kafkajs resolves the batch's last offset itself (eachBatchAutoResolve) and fetches on. A
 *   partition whose buffer holds `fetchBufferRecordsMax` records is paused in kafkajs
 *   (backpressure) and resumed when poll() has taken it down to half of that, so the next fetch
 *   is under way while the rest is consumed (resuming only once it is empty left the partition
 *   idle for a whole fetch round trip each time). Nothing is ever committed by kafkajs
 *   (autoCommit: false).
 * - Hot path: kafkajs fetches one broker at a time and sends the next Fetch only after every
 *   eachBatch of the previous response returned, so work done inside eachBatch stretches every
 *   fetch round trip. The messages are therefore converted into ConsumedRecords by poll(), only
 *   for the records it returns, and a waiting poll() is woken with setImmediate: kafkajs' microtask
 *   chain writes the next Fetch first, and the conversion overlaps the broker's work on it.
 * - This adapter owns the positions. Every position change (assignment, seek, rejoin) is pushed
 *   into kafkajs with consumer.seek(), and a batch is accepted only if it was fetched from the
 *   offset the adapter expects (`fetchOffset`), so batches fetched before a seek are dropped.
 *   kafkajs resets fetch offsets to the group's committed ones on every (re)join; the GROUP_JOIN
 *   handler re-seeks retained partitions to the adapter's positions before the first fetch.
 * - Group membership: kafkajs' REBALANCING event stops delivery (buffers are dropped, positions
 *   kept); GROUP_JOIN carries the new assignment, and the next poll() runs `revoked` for the
 *   partitions that left and `assigned` for the new ones (diff of the two assignments, as Kafka's
 *   cooperative protocol; kafkajs itself rebalances eagerly). Limit: kafkajs rejoins without
 *   waiting for the `revoked` callback, so a commit made for a revoked partition after the
 *   rebalance started fails with 'not-assigned' instead of being allowed as in Java's eager
 *   protocol.
 * - Manual assignment (assign()): kafkajs has none (kafkajs#373). The adapter subscribes a private
 *   single-member group (`<groupId or clientId>.assign.<uuid>`), which the default assigner gives
 *   every partition of the topics, and pauses the partitions not assigned. commit() is refused in
 *   this mode (kafkajs cannot commit to a group it is not a member of); committed() works.
 * - Fetch stalls (assign mode): kafkajs can stop fetching without an error, a crash or a rejoin
 *   (seen on a 3-broker cluster after the group's coordinator moved: "not the correct
 *   coordinator", then "the coordinator is loading", then nothing for minutes; docs/FAULTS.md,
 *   defect 8; kafkajs#267 reports the same). A timer every `fetchStallMs / 2` looks for partitions
 *   the caller wants (not paused, nothing buffered, not paused for backpressure) with no fetched
 *   batch for `fetchStallMs`, asks the broker for their last stable offsets, and if one is beyond
 *   the partition's position, replaces the kafkajs client with a new one on a new private group;
 *   GROUP_JOIN seeks it to the adapter's positions, so nothing is skipped or read twice. A
 *   partition at its end is asked again only after another `fetchStallMs`. Subscribe mode has no
 *   such watchdog: a replaced member would rebalance the whole group.
 * - Crashes kafkajs does not restart (assign mode): kafkajs ends a consumer for good when it
 *   cannot find its group's coordinator within its retries (KafkaJSGroupCoordinatorNotFound, a
 *   non-retriable error: after a broker restart, the coordinator loads the offsets topic for
 *   seconds on a loaded machine; fault seed 43, docs/FAULTS.md defect 11). The private group is
 *   only kafkajs' way of fetching, so the adapter starts a new client on a new private group from
 *   its positions, after 0.5 s and then up to 5 s between tries ({@link crashRestartable}); the
 *   connection-lost listeners hear of it. Other non-retriable crashes (authorization, a deleted
 *   topic) still fail the consumer: poll() throws them.
 *
 * Records are read_committed (readUncommitted: false).
 */
import { randomUUID } from 'node:crypto';
import type { Consumer, EachBatchPayload, KafkaMessage } from 'kafkajs';
import { tpKey } from '../partitioner.js';
import {
  BUS_DEFAULTS,
  BusError,
  type BusConsumer,
  type ConsumedRecord,
  type ConsumerOptions,
  type GroupMetadata,
  type PartitionPosition,
  type PollOptions,
  type RebalanceListener,
  type TopicPartition,
} from '../types.js';
import { toBusError } from './errors.js';
import type { KafkaBusInternals } from './index.js';

interface PartState {
  tp: TopicPartition;
  /** Next offset poll() returns. */
  position: number;
  /** Caller's pause(). */
  paused: boolean;
  /** kafkajs messages fetched ahead of poll(), from `head` on, in offset order; converted by take(). */
  buffer: KafkaMessage[];
  head: number;
  /** Offset the next accepted kafkajs batch must have been fetched from. */
  fetchOffset: number;
  /** A seek to fetchOffset was pushed into kafkajs and no batch from it arrived yet. */
  seekPending: boolean;
  /** Paused in kafkajs because the buffer is full. */
  fetchPaused: boolean;
  /**
   * Date.now() of the last accepted batch, of the caller's last seek, or of the last stall check
   * that found the partition at its end.
   */
  progressAt: number;
}

function headerString(v: Buffer | string | (Buffer | string)[] | undefined): string | undefined {
  if (v === undefined) return undefined;
  // Kafka allows repeated header keys; kafkajs groups them in an array: the last one wins.
  const last = Array.isArray(v) ? v[v.length - 1] : v;
  return typeof last === 'string' ? last : last?.toString('utf8');
}

/**
 * The number in a decimal string kafkajs made from one of its Longs (offset, timestamp), e.g.
 * '1764468000000' -> 1764468000000. Strings of 1 to 15 digits are summed here (< 10^15 < 2^53, so
 * exact); anything else (a sign as in '-1', 16+ digits, '') gives Number(s). Why: for an offset
 * plus a 13-digit timestamp, Number() took ~100 ns per record in a micro-benchmark on kafkajs'
 * own messages, this loop ~40 ns. Never throws.
 */
export function decimal(s: string): number {
  const n = s.length;
  if (n === 0 || n > 15) return Number(s);
  let v = 0;
  for (let i = 0; i < n; i++) {
    const d = s.charCodeAt(i) - 48;
    if (d < 0 || d > 9) return Number(s);
    v = v * 10 + d;
  }
  return v;
}

const fromCharCode = String.fromCharCode;

/**
 * A consumed key's bytes as a string: the same string as `b.toString('utf8')` (bytes 0x00-0x7f
 * are the same characters in UTF-8 and in String.fromCharCode), built in JavaScript when the key
 * is at most 12 bytes of ASCII. Why: Buffer#toString costs a call into C++ through several
 * wrappers (~90 ns for a 4-byte key in a micro-benchmark, ~110 ns per record in a CPU profile of
 * the consume bench, about a third of the backend's consume overhead over raw kafkajs); one
 * String.fromCharCode call with one argument per byte took ~25 ns. At most 12 bytes, so the
 * result is one flat string (V8 builds strings of 13+ characters made by concatenation as
 * ropes). Longer or non-ASCII keys go through toString. Never throws.
 */
export function keyString(b: Buffer): string {
  const n = b.length;
  if (n > 12) return b.toString('utf8');
  let or = 0;
  for (let i = 0; i < n; i++) or |= b[i];
  if (or > 0x7f) return b.toString('utf8');
  const c = fromCharCode;
  switch (n) {
    case 0:
      return '';
    case 1:
      return c(b[0]);
    case 2:
      return c(b[0], b[1]);
    case 3:
      return c(b[0], b[1], b[2]);
    case 4:
      return c(b[0], b[1], b[2], b[3]);
    case 5:
      return c(b[0], b[1], b[2], b[3], b[4]);
    case 6:
      return c(b[0], b[1], b[2], b[3], b[4], b[5]);
    case 7:
      return c(b[0], b[1], b[2], b[3], b[4], b[5], b[6]);
    case 8:
      return c(b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]);
    case 9:
      return c(b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8]);
    case 10:
      return c(b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9]);
    case 11:
      return c(b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10]);
    default:
      return c(b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11]);
  }
}

/**
 * Headers of every consumed record that has none: one frozen object, as on the journal and memory
 * backends (consumed headers are read-only on every backend). Saves an allocation per record.
 */
const NO_HEADERS: Record<string, string> = Object.freeze({});

/**
 * One kafkajs message as a Sluice record, with its offset and timestamp already parsed by the
 * caller (take(), which parses most of them without reading the message's strings). Runs once
 * per returned record, so it allocates only the record, the key string and, when the message has
 * headers, its headers object: `for...in` instead of Object.entries (one array per record), and
 * the value stays kafkajs' Buffer (a view into the fetch response, no copy).
 */
function toRecord(
  topic: string,
  partition: number,
  m: KafkaMessage,
  offset: number,
  timestampMs: number,
): ConsumedRecord {
  let headers = NO_HEADERS;
  const h = m.headers;
  if (h) {
    for (const k in h) {
      const s = headerString(h[k]);
      if (s === undefined) continue;
      if (headers === NO_HEADERS) headers = {};
      headers[k] = s;
    }
  }
  const key = m.key;
  return {
    topic,
    partition,
    offset,
    key: key === null || key === undefined ? null : keyString(key),
    value: m.value ?? null,
    headers,
    timestampMs,
  };
}

/**
 * Runs `f`, a seek, pause or resume of a kafkajs consumer, unless kafkajs is between a crash and
 * its restart (a broker killed under it): it has no consumer group then and throws `Consumer
 * group was not initialized`. Nothing is lost: the restart's GROUP_JOIN seeks every owned
 * partition to its position and sets the pauses again (onJoin). Before, a reader's seek in that
 * window failed its read.
 */
function whileRunning(f: () => void): void {
  try {
    f();
  } catch (e) {
    if (!/Consumer group was not initialized/.test((e as Error).message)) throw e;
  }
}

/**
 * Whether an assign-mode consumer restarts kafkajs itself after a crash kafkajs will not restart
 * (`error` is the CRASH event's): true for a group coordinator that could not be found (the
 * private group's coordinator moving or loading), whatever the wrapping; false for everything
 * else (those are real failures, or kafkajs restarts them itself).
 */
export function crashRestartable(error: unknown): boolean {
  for (let e = error as { name?: string; cause?: unknown } | undefined; e;) {
    if (e.name === 'KafkaJSGroupCoordinatorNotFound') return true;
    e = e.cause as typeof e;
  }
  return false;
}

/**
 * The offsets of a batch kafkajs resolved without calling eachBatch (END_BATCH_PROCESS with
 * batchSize 0: only markers, aborted records, or records below the fetched offset), as
 * onFilteredBatch takes them. kafkajs' Batch (src/consumer/batch.js) reports `firstOffset` null
 * (its types say string) when no record of the fetch is at or after the fetched offset, and then
 * `lastOffset` is the fetched offset itself; `first` is then that offset too. Read as a number,
 * null was 0: a stale batch of that kind coming in after a seek to offset 0 matched the seek
 * and moved the position to the stale fetch's offset, skipping every record before it (a fault
 * run's reader of a whole topic, seed 8 after a leader kill: "input 2975 processed where 0 was
 * due").
 */
export function filteredBatchRange(p: { firstOffset: string | null; lastOffset: string }): {
  first: number;
  last: number;
} {
  const last = decimal(p.lastOffset);
  return { first: p.firstOffset === null ? last : decimal(p.firstOffset), last };
}

export class KafkaConsumer implements BusConsumer {
  readonly groupId: string | null;
  private kc: Consumer | null = null;
  private kcTopics: string[] = [];
  private mode: 'none' | 'assign' | 'subscribe' = 'none';
  private listener: RebalanceListener = {};
  private readonly owned = new Map<string, PartState>();
  /** Assignment from the last GROUP_JOIN, not yet reconciled by poll() (subscribe mode). */
  private joined: Map<string, TopicPartition> | null = null;
  private rebalancing = false;
  private memberId = '';
  private generationId = 0;
  private failure: Error | null = null;
  private waiters = new Set<() => void>();
  /** A setImmediate that will run notify() is scheduled (see wakeSoon). */
  private wakeScheduled = false;
  private cursor = 0;
  private closed = false;
  private readonly pollRecordsMax: number;
  private readonly reset: 'earliest' | 'latest';
  private readonly sessionTimeoutMs: number;
  private readonly lostListeners = new Set<(error: BusError) => void>();
  private stallTimer: NodeJS.Timeout | null = null;
  private stallChecking = false;
  private restarts = 0;
  /** Bumped by each assign() and by its timeout: a late step of an older one stops there. */
  private assignAttempt = 0;

  constructor(
    private readonly bus: KafkaBusInternals,
    opts: ConsumerOptions,
    private readonly onClose: () => void,
  ) {
    this.groupId = opts.groupId ?? null;
    this.pollRecordsMax = opts.pollRecordsMax ?? BUS_DEFAULTS.pollRecordsMax;
    this.reset = opts.autoOffsetReset ?? 'earliest';
    this.sessionTimeoutMs = opts.sessionTimeoutMs ?? BUS_DEFAULTS.sessionTimeoutMs;
    if (!(this.pollRecordsMax >= 1))
      throw new BusError(
        'bad-input',
        `pollRecordsMax must be >= 1, pollRecordsMax=${this.pollRecordsMax}`,
      );
  }

  private checkOpen(): void {
    if (this.closed) throw new BusError('closed', `consumer is closed, groupId=${this.groupId}`);
    if (this.failure) throw toBusError(this.failure, 'kafka consumer crashed');
  }

  private notify(): void {
    const ws = this.waiters;
    this.waiters = new Set();
    for (const w of ws) w();
  }

  /**
   * notify() on the next turn of the event loop instead of now: called from eachBatch, whose
   * caller (kafkajs) still has to send the next Fetch; waking poll() synchronously would convert
   * and hand out records first and delay that Fetch by the conversion time. One wake-up covers
   * every batch of a fetch response.
   */
  private wakeSoon(): void {
    if (this.wakeScheduled || this.waiters.size === 0) return;
    this.wakeScheduled = true;
    setImmediate(() => {
      this.wakeScheduled = false;
      this.notify();
    });
  }

  private waitForChange(timeoutMs: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.waiters.delete(done);
        resolve();
      }, timeoutMs);
      const done = (): void => {
        clearTimeout(timer);
        resolve();
      };
      this.waiters.add(done);
    });
  }

  /**
   * (Re)starts the kafkajs consumer for `groupId` on `topics`; resolves once it has joined. With
   * `attempt` (an assign()'s), makes no client once that assign is superseded (timed out).
   */
  private async startKafka(groupId: string, topics: string[], attempt?: number): Promise<void> {
    await this.stopKafka();
    if (attempt !== undefined) this.checkAttempt(attempt);
    const kc = this.bus.kafka.consumer({
      groupId,
      sessionTimeout: this.sessionTimeoutMs,
      rebalanceTimeout: Math.max(this.sessionTimeoutMs, 10_000),
      heartbeatInterval: Math.min(
        this.bus.opts.heartbeatIntervalMs,
        Math.floor(this.sessionTimeoutMs / 3),
      ),
      maxWaitTimeInMs: this.bus.opts.fetchMaxWaitMs,
      // A partition whose metadata has no live leader is fetched by no one: see metadataMaxAgeMs.
      metadataMaxAge: this.bus.opts.metadataMaxAgeMs,
      readUncommitted: false,
      allowAutoTopicCreation: false,
      // kafkajs restarts a crashed runner on a timer even when the crash comes while
      // disconnect() runs (seen in CI: a closed consumer restarting forever against a stopped
      // cluster, keeping the process alive); a replaced or closed consumer never restarts.
      retry: {
        retries: 5,
        initialRetryTime: 100,
        restartOnFailure: async () => kc === this.kc && !this.closed,
      },
      ...(this.bus.opts.partitionAssigners
        ? { partitionAssigners: this.bus.opts.partitionAssigners }
        : {}),
    });
    this.kc = kc;
    this.kcTopics = [...topics].sort();
    kc.on(kc.events.GROUP_JOIN, (e) => {
      if (kc === this.kc) this.onJoin(kc, e.payload.memberId, e.payload.memberAssignment);
    });
    kc.on(kc.events.REBALANCING, () => {
      if (kc === this.kc) this.onRebalancing();
    });
    kc.on(kc.events.CRASH, (e) => {
      if (kc !== this.kc) return;
      if (!e.payload.restart && this.mode === 'assign' && crashRestartable(e.payload.error)) {
        if (this.closed) return;
        const lost = toBusError(
          e.payload.error,
          `kafka consumer lost its private group's coordinator (a new client is started), groupId=${this.groupId}`,
        );
        for (const l of [...this.lostListeners]) l(lost);
        this.restartAfterCrash(kc, 500);
      } else if (!e.payload.restart) this.failure = e.payload.error;
      else if (!this.closed) {
        const lost = toBusError(
          e.payload.error,
          `connection to the kafka cluster lost (the consumer reconnects), groupId=${this.groupId}`,
        );
        for (const l of [...this.lostListeners]) l(lost);
      }
      this.notify();
    });
    kc.on(kc.events.END_BATCH_PROCESS, (e) => {
      if (kc === this.kc && e.payload.batchSize === 0) {
        const { first, last } = filteredBatchRange(e.payload);
        this.onFilteredBatch(e.payload.topic, e.payload.partition, first, last);
      }
    });
    try {
      await kc.connect();
      await kc.subscribe({ topics, fromBeginning: true });
      await kc.run({
        autoCommit: false,
        eachBatchAutoResolve: true,
        partitionsConsumedConcurrently: 1,
        eachBatch: async (payload) => this.onBatch(kc, payload),
      });
    } catch (e) {
      throw toBusError(e, `starting kafka consumer of group ${groupId}`);
    }
  }

  /** A new private group of an assigned consumer (module comment, "Manual assignment"). */
  private privateGroupId(): string {
    return `${this.groupId ?? this.bus.opts.clientId}.assign.${randomUUID()}`;
  }

  /**
   * Replaces the kafkajs client by one on a new private group from the adapter's positions
   * (GROUP_JOIN seeks them), for the stall watchdog and after a crash kafkajs does not restart;
   * the stall clock starts again.
   */
  private async replaceClient(): Promise<void> {
    const topics = [...new Set([...this.owned.values()].map((st) => st.tp.topic))].sort();
    await this.startKafka(this.privateGroupId(), topics);
    const now = Date.now();
    for (const st of this.owned.values()) st.progressAt = now;
    this.syncKafkaPauses();
  }

  /**
   * Replaces `crashed` (still this.kc) with a new client on a new private group, from the
   * adapter's positions, `delayMs` from now; tries again with a longer delay (up to 5 s) while
   * that fails. Nothing when the consumer was closed or its client replaced meanwhile.
   */
  private restartAfterCrash(crashed: Consumer, delayMs: number): void {
    const t = setTimeout(() => {
      if (this.closed || this.kc !== crashed || this.mode !== 'assign') return;
      process.emitWarning(
        `kafka consumer${this.groupId ? ` of group ${this.groupId}` : ''} crashed (its private group's coordinator was not found): its kafkajs client is replaced`,
        { code: 'SLUICE_KAFKA_CONSUMER_RESTART' },
      );
      void this.replaceClient()
        .then(() => this.notify())
        .catch(() => {
          const kc = this.kc;
          if (kc) this.restartAfterCrash(kc, Math.min(delayMs * 2, 5000));
        });
    }, delayMs);
    t.unref();
  }

  private async stopKafka(): Promise<void> {
    const kc = this.kc;
    this.kc = null;
    this.kcTopics = [];
    if (kc) await kc.disconnect().catch(() => undefined);
  }

  private onJoin(kc: Consumer, memberId: string, assignment: Record<string, number[]>): void {
    this.memberId = memberId;
    this.generationId++;
    this.rebalancing = false;
    const next = new Map<string, TopicPartition>();
    for (const [topic, partitions] of Object.entries(assignment)) {
      for (const partition of partitions) next.set(tpKey(topic, partition), { topic, partition });
    }
    // kafkajs restarted its fetch offsets from the group's committed ones: restore ours.
    for (const [k, st] of this.owned) {
      if (this.mode === 'assign' || next.has(k)) this.seekKafka(kc, st);
      else this.dropBuffer(st);
    }
    if (this.mode === 'subscribe') this.joined = next;
    this.syncKafkaPauses();
    this.notify();
  }

  private onRebalancing(): void {
    this.rebalancing = true;
    for (const st of this.owned.values()) this.dropBuffer(st);
    this.notify();
  }

  private dropBuffer(st: PartState): void {
    st.buffer = [];
    st.head = 0;
    st.fetchOffset = st.position;
  }

  /** Moves kafkajs' fetch position of `st` to st.position, discarding records fetched ahead. */
  private seekKafka(kc: Consumer, st: PartState): void {
    this.dropBuffer(st);
    st.seekPending = true;
    if (st.fetchPaused) st.fetchPaused = false;
    whileRunning(() =>
      kc.seek({ topic: st.tp.topic, partition: st.tp.partition, offset: String(st.position) }),
    );
  }

  private onBatch(kc: Consumer, { batch, isStale }: EachBatchPayload): void {
    if (kc !== this.kc || this.rebalancing || isStale()) return;
    const st = this.owned.get(tpKey(batch.topic, batch.partition));
    if (!st) return;
    // fetchedOffset is set by kafkajs' Batch (src/consumer/batch.js) but missing from its types.
    const fetched = Number((batch as typeof batch & { fetchedOffset: string }).fetchedOffset);
    if (fetched !== st.fetchOffset) {
      // A batch from before our last seek, or kafkajs lost the seek: (re)issue it. Forward jumps
      // too: kafkajs moves past batches of markers/aborted records only through
      // END_BATCH_PROCESS (onFilteredBatch follows it), so a batch fetched from beyond
      // fetchOffset is a stale one. kafkajs fetches a partition from each node that led it while
      // a fetch was in flight, and drops a response only while a seek is pending in kafkajs
      // itself: once one fetcher applied the seek and its batch came in, a response of another
      // fetcher to a request made before the seek passed as new (a fault run's reader of a whole
      // topic after a leader kill: the records after the first batch skipped up to the old
      // position, "input 2975 processed where 0 was due").
      this.seekKafka(kc, st);
      return;
    }
    st.seekPending = false;
    st.progressAt = Date.now();
    const messages = batch.messages;
    // kafkajs builds a fresh filtered array per batch and never touches it after eachBatch: an
    // empty buffer adopts it instead of copying.
    if (st.head === st.buffer.length) {
      st.buffer = messages;
      st.head = 0;
    } else {
      // Drop the records already returned first: with the low-watermark resume the buffer may
      // never run empty, and its returned prefix would grow without bound.
      if (st.head > 0) {
        st.buffer = st.buffer.slice(st.head);
        st.head = 0;
      }
      for (let i = 0; i < messages.length; i++) st.buffer.push(messages[i]);
    }
    st.fetchOffset = Number(batch.lastOffset()) + 1;
    if (st.buffer.length - st.head >= BUS_DEFAULTS.fetchBufferRecordsMax) {
      st.fetchPaused = true;
      kc.pause([{ topic: st.tp.topic, partitions: [st.tp.partition] }]);
    }
    this.wakeSoon();
  }

  /**
   * kafkajs resolved a batch holding only markers/aborted records without calling eachBatch.
   * After a seek, such a batch is accepted when its first record is at the seek's offset: only a
   * fetch from that offset starts there (kafkajs drops records below the fetched offset), so it
   * is not a batch fetched before the seek. Without this, a seek to an offset followed only by
   * an aborted transaction (a producer killed mid-transaction, then fenced) never advanced.
   */
  private onFilteredBatch(
    topic: string,
    partition: number,
    firstOffset: number,
    lastOffset: number,
  ): void {
    const st = this.owned.get(tpKey(topic, partition));
    if (!st || this.rebalancing || firstOffset < st.fetchOffset) return;
    if (st.seekPending) {
      if (firstOffset !== st.fetchOffset) return;
      st.seekPending = false;
    }
    st.fetchOffset = Math.max(st.fetchOffset, lastOffset + 1);
    st.progressAt = Date.now();
    if (st.head === st.buffer.length) st.position = Math.max(st.position, st.fetchOffset);
  }

  /** Pauses in kafkajs every fetched partition that is not owned or whose buffer is full. */
  private syncKafkaPauses(): void {
    const kc = this.kc;
    if (!kc) return;
    const pause: { topic: string; partitions: number[] }[] = [];
    const resume: { topic: string; partitions: number[] }[] = [];
    for (const topic of this.kcTopics) {
      const p: number[] = [];
      const r: number[] = [];
      for (const tp of this.joinedAll(topic)) {
        const st = this.owned.get(tpKey(topic, tp));
        (!st || st.fetchPaused ? p : r).push(tp);
      }
      if (p.length) pause.push({ topic, partitions: p });
      if (r.length) resume.push({ topic, partitions: r });
    }
    whileRunning(() => {
      if (pause.length) kc.pause(pause);
      if (resume.length) kc.resume(resume);
    });
  }

  /** Partitions of `topic` kafkajs may fetch: every partition in assign mode, the assignment otherwise. */
  private joinedAll(topic: string): number[] {
    if (this.mode === 'assign') return this.partitionsOf.get(topic) ?? [];
    return [...this.owned.values()].filter((s) => s.tp.topic === topic).map((s) => s.tp.partition);
  }

  private readonly partitionsOf = new Map<string, number[]>();

  async subscribe(topics: string[], listener: RebalanceListener = {}): Promise<void> {
    this.checkOpen();
    if (this.groupId === null)
      throw new BusError('bad-input', 'subscribe() needs a consumer with a groupId');
    if (this.mode === 'assign')
      throw new BusError(
        'bad-input',
        `subscribe() after assign() on one consumer, groupId=${this.groupId}`,
      );
    for (const t of topics)
      if ((await this.bus.partitionCount(t)) === null)
        throw new BusError('unknown-topic', `topic does not exist, topic=${t}`);
    this.mode = 'subscribe';
    this.listener = listener;
    if (this.owned.size > 0) {
      await this.listener.revoked?.(this.assignment());
      this.owned.clear();
    }
    await this.startKafka(this.groupId, topics);
  }

  /**
   * See {@link BusConsumer.assign}. Bounded by `assignTimeoutMs` (KafkaBusOptions, default
   * 30,000): when the cluster does not answer its metadata, offset and join requests within it
   * (a node that accepts connections and answers nothing: stopped, cut off, overloaded; kafkajs
   * would wait its request timeout per attempt, for minutes), assign() rejects with BusError
   * 'backend' and leaves the consumer with no partitions and no kafkajs client; it may be called
   * again. The steps of the timed-out call still under way stop at their next one.
   */
  async assign(partitions: TopicPartition[]): Promise<void> {
    this.checkOpen();
    if (this.mode === 'subscribe')
      throw new BusError(
        'bad-input',
        `assign() after subscribe() on one consumer, groupId=${this.groupId}`,
      );
    this.mode = 'assign';
    const attempt = ++this.assignAttempt;
    const work = this.assignNow(partitions, attempt);
    const ms = this.bus.opts.assignTimeoutMs;
    if (ms <= 0) return work;
    let timer: NodeJS.Timeout | undefined;
    const expired = new Promise<'expired'>((resolve) => {
      timer = setTimeout(() => resolve('expired'), ms);
    });
    try {
      if ((await Promise.race([work.then(() => 'done' as const), expired])) === 'done') return;
    } finally {
      clearTimeout(timer);
    }
    work.catch(() => undefined);
    if (attempt === this.assignAttempt) this.assignAttempt++;
    this.owned.clear();
    await this.stopKafka();
    throw new BusError(
      'backend',
      `kafka consumer${this.groupId ? ` of group ${this.groupId}` : ''}: assign() of ${partitions.map((tp) => `${tp.topic}/${tp.partition}`).join(', ')} got no answer from the cluster within ${ms} ms (metadata, offsets, or the join of its private group); brokers ${this.bus.brokers.join(',')}`,
    );
  }

  /** Throws once assign() `attempt` is superseded (timed out, or a later assign() began). */
  private checkAttempt(attempt: number): void {
    if (attempt !== this.assignAttempt)
      throw new BusError('backend', 'assign() superseded: it timed out or a later one began');
  }

  private async assignNow(partitions: TopicPartition[], attempt: number): Promise<void> {
    const topics = [...new Set(partitions.map((tp) => tp.topic))].sort();
    for (const t of topics) {
      const n = await this.bus.partitionCount(t);
      this.checkAttempt(attempt);
      if (n === null) throw new BusError('unknown-topic', `topic does not exist, topic=${t}`);
      this.partitionsOf.set(
        t,
        Array.from({ length: n }, (_, i) => i),
      );
    }
    for (const tp of partitions) {
      if (!this.partitionsOf.get(tp.topic)!.includes(tp.partition)) {
        throw new BusError(
          'bad-input',
          `no such partition, topic=${tp.topic} partition=${tp.partition}`,
        );
      }
    }
    const wanted = new Map(partitions.map((tp) => [tpKey(tp.topic, tp.partition), tp]));
    for (const k of [...this.owned.keys()]) if (!wanted.has(k)) this.owned.delete(k);
    if (topics.length === 0) {
      await this.stopKafka();
      return;
    }
    const restart = !this.kc || topics.join('\n') !== this.kcTopics.join('\n');
    if (restart) await this.stopKafka();
    this.checkAttempt(attempt);
    // Own the new partitions before kafkajs joins: GROUP_JOIN then seeks them and leaves them
    // unpaused, so the first Fetch already reads them. Owned after the join, they would be paused
    // by the join and kafkajs' first fetch would find no partition and sleep fetchMaxWaitMs.
    const fresh = [...wanted].filter(([k]) => !this.owned.has(k)).map(([, tp]) => tp);
    const positions = await this.initialPositions(fresh);
    this.checkAttempt(attempt);
    fresh.forEach((tp, i) => this.own(tp, positions[i]));
    if (restart) {
      try {
        await this.startKafka(this.privateGroupId(), topics, attempt);
        this.checkAttempt(attempt);
      } catch (e) {
        for (const tp of fresh) this.owned.delete(tpKey(tp.topic, tp.partition));
        throw e;
      }
    }
    this.syncKafkaPauses();
    this.startStallWatch();
  }

  /**
   * Times kafkajs restarted by the fetch-stall watchdog (module comment, "Fetch stalls"). Assign
   * mode only; 0 otherwise.
   */
  get stallRestarts(): number {
    return this.restarts;
  }

  private startStallWatch(): void {
    const stallMs = this.bus.opts.fetchStallMs;
    if (this.stallTimer || stallMs <= 0 || this.mode !== 'assign' || this.closed) return;
    this.stallTimer = setInterval(() => void this.checkStall(stallMs), Math.max(stallMs / 2, 50));
    this.stallTimer.unref();
  }

  /** One watchdog round (module comment, "Fetch stalls"); a failure is retried next round. */
  private async checkStall(stallMs: number): Promise<void> {
    if (this.stallChecking || this.closed || this.mode !== 'assign' || this.owned.size === 0)
      return;
    const now = Date.now();
    const idle = [...this.owned.values()].filter(
      (st) =>
        !st.paused &&
        !st.fetchPaused &&
        st.head === st.buffer.length &&
        now - st.progressAt >= stallMs,
    );
    if (idle.length === 0) return;
    this.stallChecking = true;
    try {
      const ends = await this.bus.offsets(idle.map((st) => st.tp));
      const behind = idle.filter(
        (st, i) =>
          this.owned.get(tpKey(st.tp.topic, st.tp.partition)) === st && ends[i].end > st.position,
      );
      for (const st of idle) if (!behind.includes(st)) st.progressAt = Date.now();
      // Re-check: a batch may have come while ListOffsets was under way.
      const stalled = behind.filter(
        (st) => st.head === st.buffer.length && Date.now() - st.progressAt >= stallMs,
      );
      if (stalled.length === 0 || this.closed || this.mode !== 'assign') return;
      this.restarts++;
      const at = stalled.map((st) => `${st.tp.topic}/${st.tp.partition}@${st.position}`).join(', ');
      // A process warning (stderr, or process.on('warning')): the bus has no logger of its own.
      process.emitWarning(
        `kafka consumer${this.groupId ? ` of group ${this.groupId}` : ''} got no fetched batch for ${stallMs} ms although the last stable offset is beyond ${at}: its kafkajs client is replaced (stall restart ${this.restarts})`,
        { code: 'SLUICE_KAFKA_FETCH_STALL' },
      );
      await this.replaceClient();
    } catch {
      // The broker is away (ListOffsets or the new client's join failed): the next round retries.
    } finally {
      this.stallChecking = false;
    }
  }

  private own(tp: TopicPartition, position: number): void {
    const st: PartState = {
      tp: { topic: tp.topic, partition: tp.partition },
      position,
      paused: false,
      buffer: [],
      head: 0,
      fetchOffset: position,
      seekPending: false,
      fetchPaused: false,
      progressAt: Date.now(),
    };
    this.owned.set(tpKey(tp.topic, tp.partition), st);
    if (this.kc) this.seekKafka(this.kc, st);
  }

  /** Committed offset of the group, else the reset policy's end of the partition. */
  private async initialPositions(tps: TopicPartition[]): Promise<number[]> {
    if (tps.length === 0) return [];
    const committed =
      this.groupId === null ? tps.map(() => null) : await this.bus.committed(this.groupId, tps);
    const need = tps.filter((_, i) => committed[i] === null);
    const ends = need.length ? await this.bus.offsets(need) : [];
    let j = 0;
    return committed.map((c) => {
      if (c !== null) return c;
      const e = ends[j++];
      return this.reset === 'earliest' ? e.start : e.end;
    });
  }

  assignment(): TopicPartition[] {
    return [...this.owned.values()].map((s) => ({ ...s.tp }));
  }

  private stateOf(tp: TopicPartition): PartState {
    const st = this.owned.get(tpKey(tp.topic, tp.partition));
    if (!st)
      throw new BusError(
        'not-assigned',
        `partition not assigned to this consumer, topic=${tp.topic} partition=${tp.partition} groupId=${this.groupId}`,
      );
    return st;
  }

  position(tp: TopicPartition): number {
    return this.stateOf(tp).position;
  }

  seek(tp: TopicPartition, offset: number): void {
    if (!Number.isInteger(offset) || offset < 0)
      throw new BusError('bad-input', `offset must be an integer >= 0, offset=${offset}`);
    const st = this.stateOf(tp);
    st.position = offset;
    // A seek of the caller's starts the stall clock again; the re-seeks of onBatch and onJoin do
    // not: kafkajs answering each of them from another offset is a stall too.
    st.progressAt = Date.now();
    // Without a kafkajs client (being replaced) the buffer still goes: the next GROUP_JOIN seeks.
    if (this.kc) this.seekKafka(this.kc, st);
    else this.dropBuffer(st);
    this.syncKafkaPauses();
  }

  async seekToBeginning(tps: TopicPartition[]): Promise<void> {
    const o = await this.bus.offsets(tps);
    tps.forEach((tp, i) => this.seek(tp, o[i].start));
  }

  async seekToEnd(tps: TopicPartition[]): Promise<void> {
    const o = await this.bus.offsets(tps);
    tps.forEach((tp, i) => this.seek(tp, o[i].end));
  }

  pause(tps: TopicPartition[]): void {
    for (const tp of tps) this.stateOf(tp).paused = true;
  }

  resume(tps: TopicPartition[]): void {
    for (const tp of tps) this.stateOf(tp).paused = false;
  }

  /** Applies the last GROUP_JOIN's assignment: revoked callback, new positions, assigned callback. */
  private async reconcile(): Promise<void> {
    const next = this.joined;
    if (next === null) return;
    this.joined = null;
    const revoked = [...this.owned].filter(([k]) => !next.has(k)).map(([, st]) => ({ ...st.tp }));
    if (revoked.length > 0) {
      for (const tp of revoked) this.owned.delete(tpKey(tp.topic, tp.partition));
      await this.listener.revoked?.(revoked);
    }
    const fresh = [...next].filter(([k]) => !this.owned.has(k)).map(([, tp]) => tp);
    if (fresh.length > 0) {
      const positions = await this.initialPositions(fresh);
      fresh.forEach((tp, i) => this.own(tp, positions[i]));
      this.syncKafkaPauses();
      await this.listener.assigned?.(fresh.map((tp) => ({ ...tp })));
    }
  }

  async poll(opts: PollOptions = {}): Promise<ConsumedRecord[]> {
    const recordsMax = Math.min(opts.recordsMax ?? this.pollRecordsMax, this.pollRecordsMax);
    const deadline = Date.now() + (opts.timeoutMs ?? BUS_DEFAULTS.pollTimeoutMs);
    const out: ConsumedRecord[] = [];
    for (;;) {
      this.checkOpen();
      await this.reconcile();
      if (!this.rebalancing) this.take(recordsMax, out);
      const left = deadline - Date.now();
      if (out.length > 0 || left <= 0) return out;
      await this.waitForChange(left);
    }
  }

  private take(recordsMax: number, out: ConsumedRecord[]): void {
    const states = [...this.owned.values()];
    let resumed = false;
    for (let i = 0; i < states.length && out.length < recordsMax; i++) {
      const st = states[(this.cursor + i) % states.length];
      if (st.paused || st.seekPending) continue;
      const n = Math.min(st.buffer.length - st.head, recordsMax - out.length);
      if (n > 0) {
        const { topic, partition } = st.tp;
        const buffer = st.buffer;
        const head = st.head;
        const end = head + n;
        // The buffer's offsets strictly increase (onBatch accepts a batch only when fetched from
        // the offset after the previous one's last, and kafkajs' batches are in offset order): n
        // of them spanning n - 1 are consecutive, so each is the first plus its index, without
        // parsing its string (~30 ns per record). Gaps (compaction, transaction markers, aborted
        // records) parse every offset.
        const first = decimal(buffer[head].offset);
        const last = n === 1 ? first : decimal(buffer[end - 1].offset);
        const consecutive = last - first === n - 1;
        // Records of one produce batch mostly share a timestamp: parse a string only when it is
        // not the previous record's (the same string gives the same number).
        let ts = '';
        let tsMs = 0;
        for (let j = head; j < end; j++) {
          const m = buffer[j];
          if (m.timestamp !== ts) {
            ts = m.timestamp;
            tsMs = decimal(ts);
          }
          const offset = consecutive ? first + (j - head) : decimal(m.offset);
          out.push(toRecord(topic, partition, m, offset, tsMs));
        }
        st.head = end;
        st.position = last + 1;
      }
      // Low watermark: fetch again while half a buffer is still to be returned.
      if (st.fetchPaused && st.buffer.length - st.head <= BUS_DEFAULTS.fetchBufferRecordsMax / 2) {
        st.fetchPaused = false;
        resumed = true;
      }
      if (st.head === st.buffer.length) {
        st.buffer = [];
        st.head = 0;
        // Skip markers/aborted records that followed the last returned record.
        if (st.fetchOffset > st.position) st.position = st.fetchOffset;
        if (st.fetchPaused) {
          st.fetchPaused = false;
          resumed = true;
        }
      }
    }
    this.cursor++;
    if (resumed) this.syncKafkaPauses();
  }

  async commit(positions?: PartitionPosition[]): Promise<void> {
    this.checkOpen();
    if (this.groupId === null)
      throw new BusError('bad-input', 'commit() needs a consumer with a groupId');
    if (this.mode !== 'subscribe' || !this.kc) {
      throw new BusError(
        'bad-input',
        `commit() needs subscribe() on the kafka backend (kafkajs cannot commit for a group it is not a member of), groupId=${this.groupId}`,
      );
    }
    const list =
      positions ?? [...this.owned.values()].map((s) => ({ ...s.tp, offset: s.position }));
    for (const p of list) this.stateOf(p);
    if (this.rebalancing)
      throw new BusError('not-assigned', `group is rebalancing, groupId=${this.groupId}`);
    try {
      await this.kc.commitOffsets(
        list.map((p) => ({ topic: p.topic, partition: p.partition, offset: String(p.offset) })),
      );
    } catch (e) {
      throw toBusError(e, `commit of group ${this.groupId}`);
    }
  }

  async committed(tps: TopicPartition[]): Promise<(number | null)[]> {
    if (this.groupId === null)
      throw new BusError('bad-input', 'committed() needs a consumer with a groupId');
    return this.bus.committed(this.groupId, tps);
  }

  onConnectionLost(listener: (error: BusError) => void): () => void {
    this.lostListeners.add(listener);
    return () => void this.lostListeners.delete(listener);
  }

  groupMetadata(): GroupMetadata | null {
    if (this.mode !== 'subscribe' || this.groupId === null) return null;
    return { groupId: this.groupId, memberId: this.memberId, generationId: this.generationId };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.stallTimer) clearInterval(this.stallTimer);
    this.stallTimer = null;
    this.owned.clear();
    this.onClose();
    await this.stopKafka();
    this.notify();
  }
}
