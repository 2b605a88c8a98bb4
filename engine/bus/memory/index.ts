/**
 * Memory bus backend: in-process topics for tests and development. Same semantics as the kafka
 * backend where they can differ: murmur2 partitioning, transaction markers taking offsets,
 * read_committed visibility with a last stable offset, consumer groups with a range assignor and
 * rebalance callbacks inside poll(). Nothing survives the process. Records are stored and returned
 * by reference (values are copied once at send, into shared slabs): treat consumed values and
 * headers as read-only (the headers of records sent without any are one frozen object).
 */
import { PartitionResolver, tpKey } from '../partitioner.js';
import {
  BUS_DEFAULTS,
  BusError,
  type BusBackend,
  type BusConsumer,
  type BusProducer,
  type BusRecord,
  type BusTransaction,
  type ConsumedRecord,
  type ConsumerOptions,
  type GroupMetadata,
  type PartitionPosition,
  type PollOptions,
  type ProducerOptions,
  type ProducerRecord,
  type RebalanceListener,
  type RecordMetadata,
  type TopicPartition,
  type TopicSpec,
} from '../types.js';
import { MemoryGroup, type GroupMember } from './group.js';
import { ValueSlab } from './slab.js';
import { PartitionLog, type TxnState } from './log.js';
import type { BusStore, GroupWrite, PartitionWrite, RestoredBus } from '../store.js';

interface MemoryTopic {
  spec: TopicSpec;
  logs: PartitionLog[];
}

/** Creates an empty memory bus. Every call is a separate bus (nothing shared). */
export function createMemoryBus(): BusBackend {
  return new MemoryBus();
}

/**
 * The memory model over a durable store (engine/bus/journal): starts from `restored`, and hands
 * every decided write to `store` before it becomes visible. Internal to engine/bus.
 */
export function createStoredBus(kind: string, store: BusStore, restored: RestoredBus): BusBackend {
  return new MemoryBus(kind, store, restored);
}

function storeFailure(e: unknown, what: string): BusError {
  return e instanceof BusError
    ? e
    : new BusError('backend', `${what}: ${(e as Error).message}`, { cause: e });
}

class MemoryBus implements BusBackend {
  readonly topics = new Map<string, MemoryTopic>();
  readonly groups = new Map<string, MemoryGroup>();
  /** transactionalId -> current epoch; older producers are fenced. */
  readonly txnEpochs = new Map<string, number>();
  readonly producers = new Set<MemoryProducer>();
  readonly consumers = new Set<MemoryConsumer>();
  /** Copies of sent values (see ./slab.ts). */
  readonly values = new ValueSlab();
  private waiters = new Set<() => void>();
  private memberSeq = 0;
  private closed = false;

  constructor(
    readonly kind = 'memory',
    readonly store: BusStore | null = null,
    restored?: RestoredBus,
  ) {
    if (!restored) return;
    for (const t of restored.topics) {
      const logs = t.partitions.map((p) => {
        const log = new PartitionLog();
        log.attachCold(p.cold, p.endOffset, store!.hotWindow);
        return log;
      });
      this.topics.set(t.spec.name, { spec: { ...t.spec }, logs });
    }
    for (const [groupId, positions] of restored.committed) {
      const g = this.group(groupId);
      for (const [k, o] of positions) g.committed.set(k, o);
    }
  }

  readonly partitionCountOf = (topic: string): number => this.topics.get(topic)?.logs.length ?? 0;

  async createTopics(specs: TopicSpec[]): Promise<void> {
    this.checkOpen();
    for (const spec of specs) {
      if (!Number.isInteger(spec.partitions) || spec.partitions < 1) {
        throw new BusError(
          'bad-input',
          `partitions must be an integer >= 1, topic=${spec.name} partitions=${spec.partitions}`,
        );
      }
      const existing = this.topics.get(spec.name);
      if (existing) {
        if (existing.logs.length !== spec.partitions) {
          throw new BusError(
            'bad-input',
            `topic exists with ${existing.logs.length} partitions, topic=${spec.name} partitions=${spec.partitions}`,
          );
        }
        continue;
      }
      try {
        this.store?.createTopic({ ...spec });
      } catch (e) {
        throw storeFailure(e, `createTopics: topic=${spec.name}`);
      }
      const logs = Array.from({ length: spec.partitions }, (_, p) => {
        const log = new PartitionLog();
        if (this.store)
          log.attachCold(this.store.coldPartition(spec.name, p), 0, this.store.hotWindow);
        return log;
      });
      this.topics.set(spec.name, { spec: { ...spec }, logs });
      for (const g of this.groups.values()) {
        if ([...g.members.values()].some((m) => m.topics.includes(spec.name)))
          g.rebalance(this.partitionCountOf);
      }
    }
    this.notify();
  }

  async partitionCount(topic: string): Promise<number | null> {
    return this.topics.get(topic)?.logs.length ?? null;
  }

  async offsets(tps: TopicPartition[]): Promise<{ start: number; end: number }[]> {
    return tps.map((tp) => {
      const log = this.log(tp);
      return { start: log.startOffset, end: log.lastStableOffset };
    });
  }

  /**
   * Committed offsets of `groupId` for `tps` (null: none), stable: a transaction committing
   * offsets for one of them is waited for first (MemoryGroup.pending), whatever its outcome.
   */
  async committed(groupId: string, tps: TopicPartition[]): Promise<(number | null)[]> {
    for (;;) {
      const g = this.groups.get(groupId);
      const waits = g
        ? tps.flatMap((tp) => g.pending.get(tpKey(tp.topic, tp.partition)) ?? [])
        : [];
      if (waits.length === 0)
        return tps.map((tp) => g?.committed.get(tpKey(tp.topic, tp.partition)) ?? null);
      await Promise.allSettled(waits);
    }
  }

  async producer(opts: ProducerOptions = {}): Promise<BusProducer> {
    this.checkOpen();
    const p = new MemoryProducer(this, opts.transactionalId ?? null);
    this.producers.add(p);
    return p;
  }

  /** See {@link BusBackend.allocValue}: a view of this bus's value slab (./slab.ts). */
  allocValue(bytes: number): Uint8Array {
    this.checkOpen();
    return this.values.alloc(bytes);
  }

  async consumer(opts: ConsumerOptions = {}): Promise<BusConsumer> {
    this.checkOpen();
    const c = new MemoryConsumer(
      this,
      opts,
      `${opts.clientId ?? 'consumer'}-${String(++this.memberSeq).padStart(6, '0')}`,
    );
    this.consumers.add(c);
    return c;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    for (const c of [...this.consumers]) await c.close();
    for (const p of [...this.producers]) await p.close();
    this.closed = true;
    this.store?.close();
    this.notify();
  }

  checkOpen(): void {
    if (this.closed) throw new BusError('closed', `${this.kind} bus is closed`);
  }

  /** The topic; throws 'unknown-topic'. */
  topicOf(topic: string): MemoryTopic {
    const t = this.topics.get(topic);
    if (!t) throw new BusError('unknown-topic', `topic does not exist, topic=${topic}`);
    return t;
  }

  /** The partition's log; throws 'unknown-topic' / 'bad-input'. */
  log(tp: TopicPartition): PartitionLog {
    const t = this.topics.get(tp.topic);
    if (!t) throw new BusError('unknown-topic', `topic does not exist, topic=${tp.topic}`);
    const log = t.logs[tp.partition];
    if (!log)
      throw new BusError(
        'bad-input',
        `partition out of range [0, ${t.logs.length}), topic=${tp.topic} partition=${tp.partition}`,
      );
    return log;
  }

  group(groupId: string): MemoryGroup {
    let g = this.groups.get(groupId);
    if (!g) this.groups.set(groupId, (g = new MemoryGroup(groupId)));
    return g;
  }

  /** Wakes every poll() waiting for data or a rebalance. */
  notify(): void {
    const ws = this.waiters;
    this.waiters = new Set();
    for (const w of ws) w();
  }

  /** Resolves on the next notify() or after timeoutMs. */
  waitForChange(timeoutMs: number): Promise<void> {
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
}

/**
 * Headers of every record sent without any: one frozen object instead of one per record (records
 * are returned by reference and must not be changed; frozen, a change throws instead of silently
 * editing the stored record).
 */
const NO_HEADERS: Record<string, string> = Object.freeze({});

/** The stored copy of a sent record; `nowMs` is the send's time (one clock read per send). */
function toStored(r: ProducerRecord, nowMs: number, values: ValueSlab): BusRecord {
  return {
    key: r.key,
    value: r.value === null ? null : values.store(r.value),
    // NO_HEADERS is frozen: a forwarded record's (consumed) empty headers need no copy.
    headers: r.headers && r.headers !== NO_HEADERS ? { ...r.headers } : NO_HEADERS,
    timestampMs: r.timestampMs ?? nowMs,
  };
}

class MemoryProducer implements BusProducer {
  private readonly resolver: PartitionResolver;
  private readonly epoch: number;
  open: MemoryTransaction | null = null;
  private closed = false;

  constructor(
    private readonly bus: MemoryBus,
    readonly transactionalId: string | null,
  ) {
    this.resolver = new PartitionResolver((t) =>
      bus.topics.has(t) ? bus.partitionCountOf(t) : null,
    );
    this.epoch = 0;
    if (transactionalId !== null) {
      this.epoch = (bus.txnEpochs.get(transactionalId) ?? 0) + 1;
      bus.txnEpochs.set(transactionalId, this.epoch);
      // As Kafka's InitProducerId: the fenced producer's open transaction is aborted.
      for (const p of bus.producers)
        if (p.transactionalId === transactionalId && p.open) p.open.decide('aborted');
    }
  }

  checkUsable(): void {
    if (this.closed)
      throw new BusError('closed', `producer is closed, transactionalId=${this.transactionalId}`);
    this.bus.checkOpen();
    if (
      this.transactionalId !== null &&
      this.bus.txnEpochs.get(this.transactionalId) !== this.epoch
    ) {
      throw new BusError(
        'fenced',
        `a newer producer uses this transactionalId, transactionalId=${this.transactionalId}`,
      );
    }
  }

  async send(records: ProducerRecord[]): Promise<RecordMetadata[]> {
    this.checkUsable();
    if (this.transactionalId !== null) {
      throw new BusError(
        'txn-state',
        `transactional producer sends inside begin()/commit(), transactionalId=${this.transactionalId}`,
      );
    }
    const partitions = await this.resolver.resolve(records);
    this.checkUsable();
    const logs = partitions.map((partition, i) =>
      this.bus.log({ topic: records[i].topic, partition }),
    );
    const nowMs = Date.now();
    const stored = records.map((r) => toStored(r, nowMs, this.bus.values));
    if (this.bus.store) {
      // Durable before visible: offsets are the ones the appends below will assign.
      const writes = new Map<PartitionLog, PartitionWrite>();
      for (let i = 0; i < records.length; i++) {
        let w = writes.get(logs[i]);
        if (!w) {
          const log = logs[i];
          w = {
            topic: records[i].topic,
            partition: partitions[i],
            records: [],
            offsets: [],
            endOffset: log.endOffset,
            stableOffset: log.lastStableOffset,
          };
          writes.set(log, w);
        }
        w.records.push(stored[i]);
        w.offsets.push(w.endOffset++);
      }
      try {
        this.bus.store.appendRecords([...writes.values()]);
      } catch (e) {
        throw storeFailure(e, 'send');
      }
    }
    const out = stored.map((r, i) => ({
      topic: records[i].topic,
      partition: partitions[i],
      offset: logs[i].append(r, null),
    }));
    this.bus.notify();
    return out;
  }

  async append(
    records: ProducerRecord[],
    txn: TxnState,
    touched: Map<PartitionLog, PartitionWrite>,
  ): Promise<RecordMetadata[]> {
    const partitions = await this.resolver.resolve(records);
    const out = new Array<RecordMetadata>(records.length);
    const nowMs = Date.now();
    // Without a store nothing reads the records of `touched`: only its partitions (for markers).
    const keep = this.bus.store !== null;
    let topic: string | null = null;
    let logs: PartitionLog[] = [];
    let log: PartitionLog | null = null;
    let w: PartitionWrite | undefined;
    for (let i = 0; i < records.length; i++) {
      const r = records[i];
      // Records of one send mostly share a topic: one topic lookup per run of them.
      if (r.topic !== topic) {
        logs = this.bus.topicOf(r.topic).logs;
        topic = r.topic;
        log = null;
      }
      // One `touched` lookup per change of partition, not per record.
      if (logs[partitions[i]] !== log) {
        log = logs[partitions[i]];
        w = touched.get(log);
        if (!w)
          touched.set(
            log,
            (w = {
              topic: r.topic,
              partition: partitions[i],
              records: [],
              offsets: [],
              endOffset: 0,
              stableOffset: 0,
            }),
          );
      }
      const stored = toStored(r, nowMs, this.bus.values);
      const offset = log!.append(stored, txn);
      if (keep) {
        w!.records.push(stored);
        w!.offsets.push(offset);
      }
      out[i] = { topic: r.topic, partition: partitions[i], offset };
    }
    return out;
  }

  async begin(): Promise<BusTransaction> {
    this.checkUsable();
    if (this.transactionalId === null)
      throw new BusError('txn-state', 'begin() needs a producer with a transactionalId');
    if (this.open)
      throw new BusError(
        'txn-state',
        `a transaction is already open, transactionalId=${this.transactionalId}`,
      );
    return (this.open = new MemoryTransaction(this.bus, this));
  }

  async close(): Promise<void> {
    if (this.closed) return;
    if (this.open) this.open.decide('aborted');
    this.closed = true;
    this.bus.producers.delete(this);
  }
}

class MemoryTransaction implements BusTransaction {
  private readonly state: TxnState = { status: 'open' };
  /** Partitions written, with the records sent to each (for the durable store). */
  private readonly touched = new Map<PartitionLog, PartitionWrite>();
  private readonly offsets: { group: string | GroupMetadata; positions: PartitionPosition[] }[] =
    [];
  private markersWritten = false;
  /** Handed to the durable store, which has not confirmed it yet: it can no longer be aborted. */
  private committing = false;

  constructor(
    private readonly bus: MemoryBus,
    private readonly producer: MemoryProducer,
  ) {}

  private checkOpen(): void {
    if (this.state.status !== 'open')
      throw new BusError(
        'txn-state',
        `transaction is ${this.state.status}, transactionalId=${this.producer.transactionalId}`,
      );
    if (this.committing)
      throw new BusError(
        'txn-state',
        `transaction is committing, transactionalId=${this.producer.transactionalId}`,
      );
    this.producer.checkUsable();
  }

  /** Appends this transaction's marker to every partition it wrote, once. */
  private writeMarkers(): void {
    if (this.markersWritten) return;
    this.markersWritten = true;
    for (const log of this.touched.keys()) log.appendMarker(this.state);
  }

  async send(records: ProducerRecord[]): Promise<RecordMetadata[]> {
    this.checkOpen();
    return this.producer.append(records, this.state, this.touched);
  }

  async sendOffsets(group: string | GroupMetadata, positions: PartitionPosition[]): Promise<void> {
    this.checkOpen();
    for (const p of positions) this.bus.log(p);
    this.offsets.push({ group, positions: positions.map((p) => ({ ...p })) });
  }

  async commit(): Promise<void> {
    this.checkOpen();
    for (const { group, positions } of this.offsets) {
      if (typeof group === 'string') continue;
      const g = this.bus.groups.get(group.groupId);
      const keys = positions.map((p) => tpKey(p.topic, p.partition));
      if (!g || !g.owns(group.memberId, keys)) {
        this.decide('aborted');
        throw new BusError(
          'not-assigned',
          `transaction aborted: member no longer owns the partitions of its offsets, group=${group.groupId} member=${group.memberId} partitions=${keys.join(',')}`,
        );
      }
    }
    if (this.bus.store) {
      // The store's commit is the commit point: each partition's end includes the marker.
      const writes = [...this.touched].map(([log, w]) => ({
        ...w,
        endOffset: log.endOffset + 1,
        stableOffset: log.stableOffsetWithout(this.state),
      }));
      const groups: GroupWrite[] = this.offsets.map(({ group, positions }) => ({
        groupId: typeof group === 'string' ? group : group.groupId,
        positions: positions.map((p) => ({
          topic: p.topic,
          partition: p.partition,
          offset: p.offset,
        })),
      }));
      let durable: Promise<void>;
      try {
        durable = this.bus.store.commitTransaction(writes, groups);
      } catch (e) {
        this.decide('aborted');
        throw storeFailure(
          e,
          `transaction aborted, transactionalId=${this.producer.transactionalId}`,
        );
      }
      // The markers take the offsets `writes` counted, before anything else can be appended while
      // the store syncs; the transaction stays invisible until decided below.
      this.writeMarkers();
      this.committing = true;
      // Its offsets are unstable until decided: committed() reads of them wait (KIP-447).
      const unstable: [MemoryGroup, string][] = [];
      for (const { group, positions } of this.offsets) {
        const g = this.bus.group(typeof group === 'string' ? group : group.groupId);
        for (const p of positions) {
          const k = tpKey(p.topic, p.partition);
          g.pending.set(k, durable);
          unstable.push([g, k]);
        }
      }
      const settle = () => {
        for (const [g, k] of unstable) if (g.pending.get(k) === durable) g.pending.delete(k);
      };
      try {
        await durable;
      } catch (e) {
        this.committing = false;
        settle();
        this.decide('aborted');
        throw storeFailure(
          e,
          `transaction aborted (the store failed after writing it: its outcome is known after reopening), transactionalId=${this.producer.transactionalId}`,
        );
      }
      this.committing = false;
      for (const { group, positions } of this.offsets) {
        const g = this.bus.group(typeof group === 'string' ? group : group.groupId);
        for (const p of positions) g.committed.set(tpKey(p.topic, p.partition), p.offset);
      }
      settle();
      this.decide('committed');
      return;
    }
    for (const { group, positions } of this.offsets) {
      const g = this.bus.group(typeof group === 'string' ? group : group.groupId);
      for (const p of positions) g.committed.set(tpKey(p.topic, p.partition), p.offset);
    }
    this.decide('committed');
  }

  async abort(): Promise<void> {
    this.decide('aborted');
  }

  /** Decides the transaction and writes its markers; no-op once decided. */
  decide(status: 'committed' | 'aborted'): void {
    if (this.state.status !== 'open') return;
    // A fencing producer or close() cannot abort a commit the store already has: it completes,
    // as a Kafka transaction past PrepareCommit does.
    if (this.committing && status === 'aborted') return;
    this.writeMarkers();
    this.state.status = status;
    for (const log of this.touched.keys()) log.endTxn(this.state);
    if (this.producer.open === this) this.producer.open = null;
    this.bus.notify();
  }
}

interface Owned {
  tp: TopicPartition;
  position: number;
  paused: boolean;
}

class MemoryConsumer implements BusConsumer, GroupMember {
  readonly groupId: string | null;
  topics: readonly string[] = [];
  target = new Map<string, TopicPartition>();
  generationId = 0;
  private mode: 'none' | 'assign' | 'subscribe' = 'none';
  private listener: RebalanceListener = {};
  private readonly owned = new Map<string, Owned>();
  private readonly pollRecordsMax: number;
  private readonly reset: 'earliest' | 'latest';
  private cursor = 0;
  private closed = false;

  constructor(
    private readonly bus: MemoryBus,
    opts: ConsumerOptions,
    readonly memberId: string,
  ) {
    this.groupId = opts.groupId ?? null;
    this.pollRecordsMax = opts.pollRecordsMax ?? BUS_DEFAULTS.pollRecordsMax;
    this.reset = opts.autoOffsetReset ?? 'earliest';
    if (!(this.pollRecordsMax >= 1))
      throw new BusError(
        'bad-input',
        `pollRecordsMax must be >= 1, pollRecordsMax=${this.pollRecordsMax}`,
      );
  }

  private checkOpen(): void {
    if (this.closed) throw new BusError('closed', `consumer is closed, member=${this.memberId}`);
    this.bus.checkOpen();
  }

  async subscribe(topics: string[], listener: RebalanceListener = {}): Promise<void> {
    this.checkOpen();
    if (this.groupId === null)
      throw new BusError('bad-input', 'subscribe() needs a consumer with a groupId');
    if (this.mode === 'assign') this.owned.clear();
    this.mode = 'subscribe';
    this.topics = [...topics];
    this.listener = listener;
    this.bus.group(this.groupId).join(this, this.bus.partitionCountOf);
    this.bus.notify();
  }

  async assign(partitions: TopicPartition[]): Promise<void> {
    this.checkOpen();
    if (this.mode === 'subscribe')
      throw new BusError(
        'bad-input',
        `assign() after subscribe() on one consumer, member=${this.memberId}`,
      );
    this.mode = 'assign';
    const next = new Map<string, Owned>();
    for (const tp of partitions) {
      this.bus.log(tp);
      const k = tpKey(tp.topic, tp.partition);
      next.set(
        k,
        this.owned.get(k) ?? {
          tp: { topic: tp.topic, partition: tp.partition },
          position: await this.initialPosition(tp),
          paused: false,
        },
      );
    }
    this.owned.clear();
    for (const [k, o] of next) this.owned.set(k, o);
  }

  private async initialPosition(tp: TopicPartition): Promise<number> {
    const committed =
      this.groupId === null ? null : (await this.bus.committed(this.groupId, [tp]))[0];
    if (committed !== null) return committed;
    return this.reset === 'earliest'
      ? this.bus.log(tp).startOffset
      : this.bus.log(tp).lastStableOffset;
  }

  assignment(): TopicPartition[] {
    return [...this.owned.values()].map((o) => ({ ...o.tp }));
  }

  private ownedOf(tp: TopicPartition): Owned {
    const o = this.owned.get(tpKey(tp.topic, tp.partition));
    if (!o)
      throw new BusError(
        'not-assigned',
        `partition not assigned to this consumer, topic=${tp.topic} partition=${tp.partition} member=${this.memberId}`,
      );
    return o;
  }

  position(tp: TopicPartition): number {
    return this.ownedOf(tp).position;
  }

  seek(tp: TopicPartition, offset: number): void {
    if (!Number.isInteger(offset) || offset < 0)
      throw new BusError('bad-input', `offset must be an integer >= 0, offset=${offset}`);
    this.ownedOf(tp).position = offset;
  }

  async seekToBeginning(tps: TopicPartition[]): Promise<void> {
    for (const tp of tps) this.ownedOf(tp).position = this.bus.log(tp).startOffset;
  }

  async seekToEnd(tps: TopicPartition[]): Promise<void> {
    for (const tp of tps) this.ownedOf(tp).position = this.bus.log(tp).lastStableOffset;
  }

  pause(tps: TopicPartition[]): void {
    for (const tp of tps) this.ownedOf(tp).paused = true;
  }

  resume(tps: TopicPartition[]): void {
    for (const tp of tps) this.ownedOf(tp).paused = false;
  }

  /** Revokes partitions the group moved away, then takes the free ones of the target (callbacks in order). */
  private async reconcile(): Promise<void> {
    if (this.mode !== 'subscribe' || this.groupId === null) return;
    const g = this.bus.group(this.groupId);
    const revoked: TopicPartition[] = [];
    for (const [k, o] of this.owned) if (!this.target.has(k)) revoked.push(o.tp);
    if (revoked.length > 0) {
      await this.listener.revoked?.(revoked.map((tp) => ({ ...tp })));
      for (const tp of revoked) {
        const k = tpKey(tp.topic, tp.partition);
        this.owned.delete(k);
        if (g.owner.get(k) === this.memberId) g.owner.delete(k);
      }
      this.bus.notify();
    }
    const assigned: TopicPartition[] = [];
    for (const [k, tp] of this.target) {
      if (this.owned.has(k) || g.owner.has(k)) continue;
      g.owner.set(k, this.memberId);
      this.owned.set(k, { tp: { ...tp }, position: await this.initialPosition(tp), paused: false });
      assigned.push({ ...tp });
    }
    if (assigned.length > 0) await this.listener.assigned?.(assigned);
  }

  async poll(opts: PollOptions = {}): Promise<ConsumedRecord[]> {
    this.checkOpen();
    const recordsMax = Math.min(opts.recordsMax ?? this.pollRecordsMax, this.pollRecordsMax);
    const deadline = Date.now() + (opts.timeoutMs ?? BUS_DEFAULTS.pollTimeoutMs);
    const out: ConsumedRecord[] = [];
    for (;;) {
      // Closed while this poll waited: it must not reconcile, which would take the partitions of
      // its stale target for a member that has left the group.
      this.checkOpen();
      await this.reconcile();
      this.checkOpen();
      const owned = [...this.owned.values()];
      // Rotate the starting partition so one busy partition cannot starve the others.
      for (let i = 0; i < owned.length && out.length < recordsMax; i++) {
        const o = owned[(this.cursor + i) % owned.length];
        if (o.paused) continue;
        o.position = this.bus
          .log(o.tp)
          .read(o.tp.topic, o.tp.partition, o.position, recordsMax - out.length, out);
      }
      this.cursor++;
      const left = deadline - Date.now();
      if (out.length > 0 || left <= 0) return out;
      await this.bus.waitForChange(left);
    }
  }

  async commit(positions?: PartitionPosition[]): Promise<void> {
    this.checkOpen();
    if (this.groupId === null)
      throw new BusError('bad-input', 'commit() needs a consumer with a groupId');
    const list =
      positions ?? [...this.owned.values()].map((o) => ({ ...o.tp, offset: o.position }));
    for (const p of list) this.ownedOf(p);
    if (this.bus.store) {
      try {
        this.bus.store.commitOffsets({
          groupId: this.groupId,
          positions: list.map((p) => ({
            topic: p.topic,
            partition: p.partition,
            offset: p.offset,
          })),
        });
      } catch (e) {
        throw storeFailure(e, `commit, group=${this.groupId}`);
      }
    }
    const g = this.bus.group(this.groupId);
    for (const p of list) g.committed.set(tpKey(p.topic, p.partition), p.offset);
  }

  async committed(tps: TopicPartition[]): Promise<(number | null)[]> {
    if (this.groupId === null)
      throw new BusError('bad-input', 'committed() needs a consumer with a groupId');
    return this.bus.committed(this.groupId, tps);
  }

  groupMetadata(): GroupMetadata | null {
    if (this.mode !== 'subscribe' || this.groupId === null) return null;
    return { groupId: this.groupId, memberId: this.memberId, generationId: this.generationId };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.mode === 'subscribe' && this.groupId !== null)
      this.bus.group(this.groupId).leave(this.memberId, this.bus.partitionCountOf);
    this.owned.clear();
    this.bus.consumers.delete(this);
    this.bus.notify();
  }
}
