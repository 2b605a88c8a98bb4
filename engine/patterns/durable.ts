/**
 * Durable pattern (consume-process-produce, exactly once): after Corda 5's DurableSubscription
 * and Kafka's transactional read-process-write loop (KIP-98, KIP-447).
 *
 * A member of consumer group `groupId` reads its partitions from the oldest unconsumed record in
 * batches. Per batch the processor returns output records (any topics); the outputs, the
 * dead-lettered undecodable inputs and the consumed positions are committed in ONE bus
 * transaction (journal: one atomic transaction-log append; kafka: a transaction carrying the
 * offsets, sendOffsetsToTransaction). A failed batch (processor error, commit error, partitions
 * revoked: 'not-assigned') is aborted, every owned partition is rewound to its committed position
 * and the batch is read and processed again, so each input's outputs appear exactly once to
 * read_committed readers. A crash before commit leaves nothing; the next member resumes at the
 * committed positions.
 *
 * Pipelined, with group commit: while a transaction's commit waits for the bus to make it durable
 * (journal: the fdatasync of the transaction log, on the thread pool), the next batches are
 * polled and processed, and committed together in the next transaction (at most
 * `commitRecordsMax` input records), so one sync covers what the CPU prepared during the last
 * one (after the group commit of database write-ahead logs). That transaction begins only after
 * the previous commit succeeded; if it failed, the prepared batches are dropped with it and read
 * again after the rewind (the processor contract already allows a batch to be processed more
 * than once). At most one commit is in flight, so outputs keep batch order.
 *
 * Fencing (`fencing`): which producer a transaction goes through decides who can fence a zombie,
 * a member that stalled past its session timeout and still commits for partitions the group gave
 * to another member.
 * - 'member' (memory, journal): one transactional producer per member; the bus refuses a commit
 *   whose GroupMetadata names a stale generation ('not-assigned'), so the zombie's commit fails.
 * - 'partition' (kafka): kafkajs 2.2 sends TxnOffsetCommit v0/v1 without member id and
 *   generation (it lacks KIP-447), so a broker accepts a zombie's offsets. Instead, as Kafka
 *   Streams' "exactly_once" (EOS v1, KIP-98 / KIP-129), one transactional producer per input
 *   partition, with a transactionalId derived from the partition ({@link partitionTransactionalId}):
 *   the partition's new owner creates its producer on assignment, and that InitProducerId bumps
 *   the epoch, aborting the zombie's open transaction and fencing its later ones
 *   (PRODUCER_FENCED / INVALID_PRODUCER_EPOCH -> BusError 'fenced'). Each onNext call then gets
 *   the records of one input partition, and each cycle commits one transaction per input
 *   partition (in parallel); no group commit across cycles. A fenced partition's prepared work
 *   is dropped, the partition is rewound and paused until the group revokes it (the member keeps
 *   its other partitions); a fresh producer is made only if the group assigns it again.
 */
import {
  BusError,
  type BusBackend,
  type BusConsumer,
  type BusProducer,
  type ConsumedRecord,
  type PartitionPosition,
  type ProducerRecord,
  type RebalanceListener,
  type TopicPartition,
} from '../bus/index.js';
import { tpKey } from '../bus/index.js';
import { bytesCodec, type Codec } from './codec.js';
import {
  checkLoopOptions,
  checkTopicsExist,
  decodeRecord,
  rewindToCommitted,
  deferred,
  settleLoop,
  PATTERN_DEFAULTS,
  sleep,
  type PatternRecord,
  type Subscription,
} from './subscription.js';

/** The application side of a durable subscription. */
export interface DurableProcessor<V> {
  /**
   * Processes one batch (records of several partitions, in offset order per partition) and
   * returns the outputs to commit with it. May be called again with the same records after a
   * failure, and for the next batch before the previous one's commit is confirmed: it must not
   * have effects outside its return value. Throwing fails the batch (retried).
   */
  onNext(records: PatternRecord<V>[]): ProducerRecord[] | Promise<ProducerRecord[]>;
}

/** Options of {@link startDurable}. */
export interface DurableOptions<V> {
  bus: BusBackend;
  groupId: string;
  topics: string[];
  /**
   * With `fencing: 'member'`: this member's producer's id; fences older instances of the member,
   * so unique per instance and stable across its restarts (e.g. `${groupId}-${host}-${n}`).
   * With `fencing: 'partition'`: the prefix of one id per input partition,
   * {@link partitionTransactionalId}(transactionalId, tp); it must be THE SAME in every member of
   * the group (e.g. the groupId), or a partition's new owner fences nobody.
   */
  transactionalId: string;
  /**
   * Who can fence a zombie member's commit (see the file comment). 'member': one producer per
   * member, relies on the bus refusing stale-generation offsets (memory, journal; KIP-447 on a
   * broker, which kafkajs does not send). 'partition': one producer per input partition, created
   * when the partition is assigned and closed when it is revoked or the subscription stops; its
   * creation fences the partition's previous owner (KIP-98, Kafka Streams EOS v1); onNext gets
   * one partition's records per call and onOutcome reports one transaction per call. Default:
   * 'partition' when `bus.kind === 'kafka'`, else 'member' (its pipelined group commit is faster).
   */
  fencing?: 'member' | 'partition';
  codec: Codec<V>;
  processor: DurableProcessor<V>;
  /** Records that fail to decode go here (raw, with header `error`), exactly once, in the batch's transaction. Without it a decode error fails the batch. */
  deadLetterTopic?: string;
  /** Most records per batch (one poll, one onNext call). Default: the bus's pollRecordsMax. */
  batchSizeMax?: number;
  /**
   * Most input records per transaction, >= 1: batches polled while the previous commit syncs are
   * committed together, up to this. Default {@link PATTERN_DEFAULTS.commitRecordsMax}.
   */
  commitRecordsMax?: number;
  /** Retries of a failed batch in a row, integer >= 0; the next failure rejects `done`. Default {@link PATTERN_DEFAULTS.retriesMax}. */
  retriesMax?: number;
  /** Default {@link PATTERN_DEFAULTS.retryBackoffMs}. */
  retryBackoffMs?: number;
  sessionTimeoutMs?: number;
  /**
   * Told which partitions this member gains and loses (run inside the pattern's poll, between
   * batches; `assigned` after the new partitions' positions are set to the group's committed
   * offsets). For observing how a group of processes splits the input, e.g. in logs.
   */
  listener?: RebalanceListener;
  /**
   * Told the outcome of every onNext call's outputs, in onNext order: once per transaction when
   * it commits or fails, and once per group of processed batches dropped without a transaction
   * (the previous commit failed, or a later batch of the group failed to decode or process; they
   * are read and processed again after the rewind). `batches` counts the onNext calls covered,
   * `records` their input records. Batches still prepared when the subscription stops are
   * reported as not committed. For logs and tests that must tell committed outputs from
   * aborted ones on a bus whose readers cannot (a broker without abort markers).
   * With `fencing: 'partition'` every outcome covers exactly one onNext call (`batches: 1`, one
   * input partition, one transaction); calls of one cycle are reported in onNext order after all
   * of the cycle's transactions settled; a fenced transaction reports `error` BusError 'fenced'.
   */
  onOutcome?(outcome: DurableOutcome): void;
  /** Test hooks: called after the transaction's sends, before its commit. */
  faults?: { beforeCommit?(records: ConsumedRecord[]): void | Promise<void> };
}

/** What happened to the outputs of `batches` consecutive onNext calls (see `onOutcome`). */
export interface DurableOutcome {
  committed: boolean;
  /** onNext calls covered, >= 1. */
  batches: number;
  /** Input records of those calls. */
  records: number;
  /** Why they were not committed (absent when committed). */
  error?: unknown;
}

/** Counters of a durable subscription. */
export interface DurableStats {
  /** Transactions committed (each holds one or more polled batches). */
  batchesCommitted: number;
  recordsCommitted: number;
  batchesFailed: number;
  /** 'partition' fencing: transactions refused because a newer producer took the partition's transactionalId. */
  partitionsFenced: number;
}

/** How long 'partition' fencing retries creating a partition's producer while the bus fails, ms. */
const PRODUCER_RETRY_MS = 60_000;

/**
 * The transactionalId of input partition `tp` under `fencing: 'partition'`:
 * `${prefix}:${topic}:${partition}`. Kafka topic names are [A-Za-z0-9._-], so ':' keeps the
 * three parts apart for any prefix without ':'. Every member of a group must compute the same id
 * for a partition: that is what lets the partition's new owner fence the old one.
 */
export function partitionTransactionalId(prefix: string, tp: TopicPartition): string {
  return `${prefix}:${tp.topic}:${tp.partition}`;
}

/**
 * The consumer's position in each partition `batch` read from (after the poll that read it), in
 * order of first appearance. A poll returns runs of records per partition, so the partition is
 * looked up only where it changes: no key built or hashed per record.
 */
function batchPositions(c: BusConsumer, batch: readonly ConsumedRecord[]): PartitionPosition[] {
  const positions: PartitionPosition[] = [];
  let topic: string | null = null;
  let partition = -1;
  for (let i = 0; i < batch.length; i++) {
    const r = batch[i];
    if (r.partition === partition && r.topic === topic) continue;
    topic = r.topic;
    partition = r.partition;
    if (positions.some((p) => p.partition === r.partition && p.topic === r.topic)) continue;
    positions.push({
      topic: r.topic,
      partition: r.partition,
      offset: c.position({ topic: r.topic, partition: r.partition }),
    });
  }
  return positions;
}

/** onNext's return value, if it is an array; else an Error naming the batch (a failed batch). */
function checkOutputs(
  outputs: unknown,
  batch: readonly PatternRecord<unknown>[],
): ProducerRecord[] {
  if (Array.isArray(outputs)) return outputs as ProducerRecord[];
  const first = batch[0];
  throw new Error(
    `durable onNext must return an array of output records (may be empty), got ${outputs === null ? 'null' : typeof outputs} for the batch of ${batch.length} records from ${first.topic}/${first.partition} at offset ${first.offset}`,
  );
}

/**
 * Starts a durable subscription. Returns at once; `ready` resolves once it is a group member
 * (rejects, as `done` does, when a topic does not exist). `done` rejects on the failure after
 * `retriesMax` retries in a row (retriesMax + 1 consecutive failed batches; with 'partition'
 * fencing: cycles with a failed transaction), or on 'closed', or ('member' fencing) 'fenced'. With 'partition'
 * fencing a 'fenced' transaction only takes its partition out of work (see `fencing`), and
 * `done` rejects if a partition's producer cannot be created on assignment. Throws
 * at once on empty `topics`, a bad `commitRecordsMax`, `fencing`, `retriesMax`,
 * `retryBackoffMs`, `sessionTimeoutMs` or `batchSizeMax` (see checkLoopOptions). onNext
 * returning anything but an array fails the batch with an error naming it.
 */
export function startDurable<V>(
  opts: DurableOptions<V>,
): Subscription & { readonly stats: DurableStats } {
  if (opts.topics.length === 0) throw new Error('topics must name at least one topic, topics=[]');
  const { retriesMax, retryBackoffMs } = checkLoopOptions(`durable ${opts.groupId}`, opts);
  const commitRecordsMax = opts.commitRecordsMax ?? PATTERN_DEFAULTS.commitRecordsMax;
  if (!(Number.isInteger(commitRecordsMax) && commitRecordsMax >= 1))
    throw new Error(
      `commitRecordsMax must be an integer >= 1, commitRecordsMax=${commitRecordsMax}`,
    );
  const stats: DurableStats = {
    batchesCommitted: 0,
    recordsCommitted: 0,
    batchesFailed: 0,
    partitionsFenced: 0,
  };
  const ready = deferred();
  const done = deferred();
  let stopping = false;
  let consumer: BusConsumer | null = null;
  let producer: BusProducer | null = null;

  const fencing = opts.fencing ?? (opts.bus.kind === 'kafka' ? 'partition' : 'member');
  if (fencing !== 'member' && fencing !== 'partition')
    throw new Error(`fencing must be 'member' or 'partition', fencing=${String(fencing)}`);
  /** 'partition' fencing: the producer of each owned input partition, by tpKey. */
  const partitionProducers = new Map<string, Promise<BusProducer>>();

  const closeAll = async (): Promise<void> => {
    await consumer?.close().catch(() => {});
    await producer?.close().catch(() => {});
    const ps = [...partitionProducers.values()];
    partitionProducers.clear();
    await Promise.all(ps.map((p) => p.then((x) => x.close()).catch(() => {})));
  };

  /** A batch decoded and processed, ready to commit. */
  interface Prepared {
    batch: ConsumedRecord[];
    positions: PartitionPosition[];
    outputs: ProducerRecord[];
  }

  /** onNext calls (and their input records) since the last reported outcome. */
  const calls = { batches: 0, records: 0 };
  /** Reports the outcome of the onNext calls counted since the last report, if any. */
  const report = (covered: { batches: number; records: number }, error: unknown): void => {
    if (covered.batches === 0 || opts.onOutcome === undefined) return;
    opts.onOutcome(
      error === null ? { committed: true, ...covered } : { committed: false, ...covered, error },
    );
  };
  const take = (): { batches: number; records: number } => {
    const t = { ...calls };
    calls.batches = 0;
    calls.records = 0;
    return t;
  };

  /** Decodes and processes a batch; its positions are the consumer's after the poll that read it. */
  const prepare = async (c: BusConsumer, batch: ConsumedRecord[]): Promise<Prepared> => {
    const positions = batchPositions(c, batch);
    // bytesCodec decodes a value to itself, so a decoded record would be a field-by-field copy of
    // the consumed one: hand the consumed records over as they are (read-only to the processor,
    // as every input), in an array of their own.
    if (opts.codec === (bytesCodec as Codec<unknown>)) {
      const good = batch.slice() as unknown as PatternRecord<V>[];
      if (good.length > 0) {
        calls.batches++;
        calls.records += good.length;
      }
      return {
        batch,
        positions,
        outputs: good.length > 0 ? checkOutputs(await opts.processor.onNext(good), good) : [],
      };
    }
    const good: PatternRecord<V>[] = [];
    const dead: ProducerRecord[] = [];
    for (const r of batch) {
      try {
        good.push(decodeRecord(r, opts.codec));
      } catch (e) {
        if (opts.deadLetterTopic === undefined) throw e;
        dead.push({
          topic: opts.deadLetterTopic,
          key: r.key,
          value: r.value,
          headers: {
            ...r.headers,
            error: String((e as Error).message),
            source: `${r.topic}:${r.partition}:${r.offset}`,
          },
        });
      }
    }
    if (good.length > 0) {
      calls.batches++;
      calls.records += good.length;
    }
    const outputs = good.length > 0 ? checkOutputs(await opts.processor.onNext(good), good) : [];
    return { batch, positions, outputs: dead.length === 0 ? outputs : [...outputs, ...dead] };
  };

  /** Commits a prepared batch in one transaction; aborts it on any error. */
  const commit = async (c: BusConsumer, p: BusProducer, b: Prepared): Promise<void> => {
    const txn = await p.begin();
    try {
      if (b.outputs.length > 0) await txn.send(b.outputs);
      await txn.sendOffsets(c.groupMetadata() ?? opts.groupId, b.positions);
      await opts.faults?.beforeCommit?.(b.batch);
      await txn.commit();
    } catch (e) {
      await txn.abort().catch(() => {});
      throw e;
    }
    stats.batchesCommitted++;
    stats.recordsCommitted += b.batch.length;
  };

  /** One transaction's worth of prepared batches as one (positions: the last of each partition). */
  const merge = (group: Prepared[]): Prepared => {
    if (group.length === 1) return group[0];
    const positions = new Map<string, PartitionPosition>();
    const batch: ConsumedRecord[] = [];
    const outputs: ProducerRecord[] = [];
    for (const g of group) {
      for (const p of g.positions) positions.set(`${p.topic}:${p.partition}`, p);
      // Loops, not flatMap: a group holds thousands of records and this runs once per commit.
      for (let i = 0; i < g.batch.length; i++) batch.push(g.batch[i]);
      for (let i = 0; i < g.outputs.length; i++) outputs.push(g.outputs[i]);
    }
    return { batch, positions: [...positions.values()], outputs };
  };

  const run = (): Promise<void> => (fencing === 'partition' ? runPartitions() : runMember());

  const runMember = async (): Promise<void> => {
    await checkTopicsExist(opts.bus, 'durable', opts.topics);
    consumer = await opts.bus.consumer({
      groupId: opts.groupId,
      pollRecordsMax: opts.batchSizeMax,
      sessionTimeoutMs: opts.sessionTimeoutMs,
      autoOffsetReset: 'earliest',
    });
    producer = await opts.bus.producer({ transactionalId: opts.transactionalId });
    await consumer.subscribe(opts.topics, opts.listener);
    ready.resolve();
    const c = consumer;
    const p = producer;
    let failures = 0;
    /**
     * The commit of the previous transaction, still in flight while the next batches are polled
     * and processed (at most one: the next transaction begins only once it succeeded). Resolves
     * to its error, or null; `inflightDone` turns true when it settles.
     */
    let inflight: Promise<unknown> | null = null;
    let inflightDone = true;
    let inflightCovers = { batches: 0, records: 0 };
    const settle = async (): Promise<unknown> => {
      const f = inflight;
      inflight = null;
      const e = f === null ? null : await f;
      if (f !== null) report(inflightCovers, e);
      if (f !== null && e === null) failures = 0;
      return e;
    };
    /** Counts a failed transaction, then rewinds every owned partition to its committed position. */
    const failed = async (e: unknown): Promise<void> => {
      if (e instanceof BusError && (e.code === 'fenced' || e.code === 'closed')) throw e;
      stats.batchesFailed++;
      if (++failures > retriesMax)
        throw new Error(
          `durable ${opts.groupId}: ${failures} consecutive failed batches, last: ${(e as Error).message}`,
          { cause: e },
        );
      await sleep(retryBackoffMs);
      await rewindToCommitted(opts.bus, c);
    };
    try {
      while (!stopping) {
        const group: Prepared[] = [];
        let records = 0;
        let error: unknown = null;
        const first = await c.poll({
          timeoutMs: PATTERN_DEFAULTS.pollTimeoutMs,
          recordsMax: commitRecordsMax,
        });
        if (stopping) break;
        if (first.length > 0) {
          try {
            group.push(await prepare(c, first));
            records += first.length;
          } catch (e) {
            error = e;
          }
          // Group commit: while the previous commit syncs, read and process what is already
          // there. A macrotask turn per round lets the sync's completion in, so the group grows
          // to what the CPU prepares in one sync (bounded by commitRecordsMax), not past it.
          while (error === null && !inflightDone && records < commitRecordsMax && !stopping) {
            await new Promise<void>((r) => setImmediate(r));
            if (inflightDone) break;
            const more = await c.poll({ timeoutMs: 0, recordsMax: commitRecordsMax - records });
            if (more.length === 0) break;
            try {
              group.push(await prepare(c, more));
              records += more.length;
            } catch (e) {
              error = e;
            }
          }
        }
        // A failed previous commit voids these batches too: they were read past uncommitted
        // positions, and the rewind reads them again.
        const previous = await settle();
        if (stopping) break;
        if (previous !== null) error = previous;
        if (error !== null) {
          report(take(), error);
          await failed(error);
          continue;
        }
        if (group.length > 0) {
          inflightDone = false;
          inflightCovers = take();
          inflight = commit(c, p, merge(group)).then(
            () => ((inflightDone = true), null),
            (e: unknown) => ((inflightDone = true), e),
          );
        }
      }
    } finally {
      await settle();
      report(take(), new Error('not committed: the subscription stopped'));
    }
  };

  /**
   * A transactional producer, retried while the bus fails with 'backend' (a broker failover: the
   * transaction coordinator moves) for up to {@link PRODUCER_RETRY_MS}; other errors at once.
   */
  const makeProducer = async (transactionalId: string): Promise<BusProducer> => {
    const deadline = Date.now() + PRODUCER_RETRY_MS;
    for (let delay = 200; ; delay = Math.min(delay * 2, 2000)) {
      try {
        return await opts.bus.producer({ transactionalId });
      } catch (e) {
        if (
          !(e instanceof BusError) ||
          e.code !== 'backend' ||
          stopping ||
          Date.now() + delay > deadline
        )
          throw e;
      }
      await sleep(delay);
    }
  };

  /**
   * 'partition' fencing. Each cycle: one poll, then one onNext call and one transaction per input
   * partition in the poll, through that partition's producer; the cycle's transactions commit in
   * parallel and are awaited before the next poll, so rebalance callbacks (inside poll) never
   * run with a transaction open.
   */
  const runPartitions = async (): Promise<void> => {
    await checkTopicsExist(opts.bus, 'durable', opts.topics);
    const c = await opts.bus.consumer({
      groupId: opts.groupId,
      pollRecordsMax: opts.batchSizeMax,
      sessionTimeoutMs: opts.sessionTimeoutMs,
      autoOffsetReset: 'earliest',
    });
    consumer = c;
    /** Partitions whose producer was fenced: paused, their records dropped, until revoked. */
    const fenced = new Set<string>();
    const listener: RebalanceListener = {
      assigned: async (tps) => {
        // Creating the producer is the fence (InitProducerId): it must happen before any record
        // of the partition is processed here, so the previous owner's open transaction is
        // aborted and its later commits refused.
        for (const tp of tps) {
          const k = tpKey(tp.topic, tp.partition);
          fenced.delete(k);
          if (!partitionProducers.has(k)) {
            const made = makeProducer(partitionTransactionalId(opts.transactionalId, tp));
            made.catch(() => {});
            partitionProducers.set(k, made);
          }
        }
        await Promise.all(tps.map((tp) => partitionProducers.get(tpKey(tp.topic, tp.partition))));
        // The consumer set the positions from the group's committed offsets before this callback,
        // possibly while the previous owner's last transaction was still being completed: a
        // broker moves TxnOffsetCommit offsets only when it writes the commit markers, after
        // EndTxn returned, and kafkajs cannot ask OffsetFetch for stable offsets (KIP-447).
        // InitProducerId above answers only once that transaction is complete (the broker
        // retries CONCURRENT_TRANSACTIONS), so the offsets read now are final.
        await rewindToCommitted(opts.bus, c, tps);
        await opts.listener?.assigned?.(tps);
      },
      revoked: async (tps) => {
        await Promise.all(
          tps.map(async (tp) => {
            const k = tpKey(tp.topic, tp.partition);
            fenced.delete(k);
            const made = partitionProducers.get(k);
            partitionProducers.delete(k);
            await made?.then((x) => x.close()).catch(() => {});
          }),
        );
        await opts.listener?.revoked?.(tps);
      },
    };
    await c.subscribe(opts.topics, listener);
    ready.resolve();
    let failures = 0;
    while (!stopping) {
      const polled = await c.poll({
        timeoutMs: PATTERN_DEFAULTS.pollTimeoutMs,
        recordsMax: commitRecordsMax,
      });
      if (stopping || polled.length === 0) continue;
      // Split by input partition, keeping offset order within each (a poll returns runs).
      const parts = new Map<string, { tp: TopicPartition; records: ConsumedRecord[] }>();
      for (const r of polled) {
        const k = tpKey(r.topic, r.partition);
        let part = parts.get(k);
        if (!part)
          parts.set(k, (part = { tp: { topic: r.topic, partition: r.partition }, records: [] }));
        part.records.push(r);
      }
      const cycle: {
        tp: TopicPartition;
        covers: { batches: number; records: number };
        result: Promise<unknown>;
      }[] = [];
      for (const [k, { tp, records }] of parts) {
        if (fenced.has(k)) continue;
        const made = partitionProducers.get(k);
        let prepared: Prepared | null = null;
        let error: unknown = null;
        try {
          prepared = await prepare(c, records);
        } catch (e) {
          error = e;
        }
        const covers = take();
        if (error !== null || made === undefined) {
          cycle.push({
            tp,
            covers,
            result: Promise.resolve(
              error ?? new BusError('not-assigned', `no producer for ${k}: not assigned`),
            ),
          });
          continue;
        }
        const b = prepared!;
        cycle.push({
          tp,
          covers,
          result: made
            .then((p) => commit(c, p, b))
            .then(
              () => null,
              (e: unknown) => e,
            ),
        });
      }
      const results = await Promise.all(cycle.map((x) => x.result));
      let failed: unknown = null;
      for (let i = 0; i < cycle.length; i++) {
        const { tp, covers } = cycle[i];
        const e = results[i];
        report(covers, e);
        if (e === null) continue;
        if (e instanceof BusError && e.code === 'closed' && stopping) continue;
        if (e instanceof BusError && e.code === 'fenced') {
          // Another producer took this partition's transactionalId: its new owner. Stop working
          // on it here (its open transaction was aborted by the fence), and never make a new
          // producer for it unless the group assigns it again, which would fence the new owner.
          stats.partitionsFenced++;
          const k = tpKey(tp.topic, tp.partition);
          fenced.add(k);
          c.pause([tp]);
          const made = partitionProducers.get(k);
          partitionProducers.delete(k);
          await made?.then((x) => x.close()).catch(() => {});
          await rewindToCommitted(opts.bus, c, [tp]).catch(() => {});
          continue;
        }
        if (e instanceof BusError && e.code === 'closed') throw e;
        stats.batchesFailed++;
        failed = e;
        await rewindToCommitted(opts.bus, c, [tp]);
      }
      if (failed === null) {
        if (cycle.length > 0) failures = 0;
        continue;
      }
      if (++failures > retriesMax)
        throw new Error(
          `durable ${opts.groupId}: ${failures} consecutive failed cycles, last: ${(failed as Error).message}`,
          { cause: failed },
        );
      await sleep(retryBackoffMs);
    }
    report(take(), new Error('not committed: the subscription stopped'));
  };

  return {
    stats,
    ...settleLoop(run(), closeAll, ready, done, () => {
      stopping = true;
    }),
  };
}
