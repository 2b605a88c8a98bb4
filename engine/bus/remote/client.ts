/**
 * The client side: a {@link BusBackend} whose every call goes over a MessagePort to the thread
 * that owns the bus ({@link serveBus}; protocol in ./protocol.ts). A consumer's synchronous
 * methods (assignment, position, groupMetadata, seek, pause, resume) work on a copy of its state
 * that the owner sends with every answer and rebalance callback; a seek updates the copy at once
 * and reaches the owner before the next call (port order).
 */
import type { MessagePort } from 'node:worker_threads';
import {
  BusError,
  type BusBackend,
  type BusConsumer,
  type BusProducer,
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
import { tpKey } from '../partitioner.js';
import {
  fromWire,
  fromWireConsumed,
  toWire,
  toWireRecords,
  type ConsumerState,
  type WireError,
  type WireRecords,
} from './protocol.js';

/** Largest value allocValue hands out, bytes (as the other backends). */
const VALUE_BYTES_MAX = 2 ** 30;

interface Pending {
  resolve(v: unknown): void;
  reject(e: Error): void;
}

/**
 * A bus over `port` (the other end served by serveBus). `kind` is the served bus's kind (the
 * patterns choose defaults by it, e.g. the durable pattern's fencing). Closing it closes what
 * it made on the owner's side and the port; the owner's bus stays open.
 */
export function connectBus(port: MessagePort, kind: string): BusBackend {
  const pending = new Map<number, Pending>();
  const consumers = new Map<number, RemoteConsumer>();
  let nextId = 1;
  let closed = false;

  const call = <T>(op: string, args: unknown[], transfer: ArrayBuffer[] = []): Promise<T> => {
    if (closed) return Promise.reject(new BusError('closed', `bus is closed (op ${op})`));
    const id = nextId++;
    return new Promise<T>((resolve, reject) => {
      pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
      port.postMessage({ id, op, args }, transfer);
    });
  };
  const tell = (op: string, consumer: number, args: unknown[]): void => {
    if (!closed) port.postMessage({ op, consumer, args });
  };
  const wireRecords = (records: ProducerRecord[]): [WireRecords, ArrayBuffer[]] => {
    const { wire, transfer } = toWireRecords(records);
    return [wire, transfer];
  };

  port.on(
    'message',
    (m: {
      id?: number;
      ok?: boolean;
      value?: unknown;
      error?: WireError;
      cb?: number;
      consumer?: number;
      kind?: 'assigned' | 'revoked';
      tps?: TopicPartition[];
      state?: ConsumerState;
    }) => {
      if (m.cb !== undefined) {
        const c = consumers.get(m.consumer!);
        const done = (error?: unknown) =>
          port.postMessage({
            cbDone: m.cb,
            ...(error === undefined ? {} : { error: toWire(error) }),
          });
        if (!c) return done();
        c.apply(m.state!);
        Promise.resolve()
          .then(() =>
            m.kind === 'assigned' ? c.listener?.assigned?.(m.tps!) : c.listener?.revoked?.(m.tps!),
          )
          .then(
            () => done(),
            (e: unknown) => done(e),
          );
        return;
      }
      const p = pending.get(m.id!);
      if (!p) return;
      pending.delete(m.id!);
      if (m.ok) p.resolve(m.value);
      else p.reject(fromWire(m.error!));
    },
  );
  port.on('close', () => {
    closed = true;
    for (const p of pending.values())
      p.reject(new BusError('closed', 'the bus owner closed the connection'));
    pending.clear();
  });
  port.start();

  class RemoteTransaction implements BusTransaction {
    constructor(private readonly id: number) {}
    send(records: ProducerRecord[]): Promise<RecordMetadata[]> {
      const [w, transfer] = wireRecords(records);
      return call('t.send', [this.id, w], transfer);
    }
    sendOffsets(group: string | GroupMetadata, positions: PartitionPosition[]): Promise<void> {
      return call('t.sendOffsets', [this.id, group, positions]);
    }
    commit(): Promise<void> {
      return call('t.commit', [this.id]);
    }
    abort(): Promise<void> {
      return call<void>('t.abort', [this.id]).catch((e: unknown) => {
        if (!(e instanceof BusError && e.code === 'closed')) throw e;
      });
    }
  }

  class RemoteProducer implements BusProducer {
    constructor(
      private readonly id: number,
      readonly transactionalId: string | null,
    ) {}
    send(records: ProducerRecord[]): Promise<RecordMetadata[]> {
      const [w, transfer] = wireRecords(records);
      return call('p.send', [this.id, w], transfer);
    }
    async begin(): Promise<BusTransaction> {
      return new RemoteTransaction(await call<number>('p.begin', [this.id]));
    }
    close(): Promise<void> {
      return call<void>('p.close', [this.id]).catch(() => {});
    }
  }

  class RemoteConsumer implements BusConsumer {
    listener: RebalanceListener | undefined;
    private owned: TopicPartition[] = [];
    private readonly positions = new Map<string, number>();
    private group: GroupMetadata | null = null;
    constructor(
      private readonly id: number,
      readonly groupId: string | null,
    ) {}
    apply(s: ConsumerState): void {
      this.owned = s.assignment;
      this.positions.clear();
      s.assignment.forEach((tp, i) =>
        this.positions.set(tpKey(tp.topic, tp.partition), s.positions[i]),
      );
      this.group = s.group;
    }
    private owns(tp: TopicPartition): string {
      const k = tpKey(tp.topic, tp.partition);
      if (!this.positions.has(k))
        throw new BusError(
          'not-assigned',
          `partition ${tp.topic}/${tp.partition} is not assigned to this consumer`,
        );
      return k;
    }
    async subscribe(topics: string[], listener?: RebalanceListener): Promise<void> {
      this.listener = listener;
      this.apply(
        await call<ConsumerState>('c.subscribe', [this.id, topics, listener !== undefined]),
      );
    }
    async assign(partitions: TopicPartition[]): Promise<void> {
      this.apply(await call<ConsumerState>('c.assign', [this.id, partitions]));
    }
    assignment(): TopicPartition[] {
      return this.owned.map((tp) => ({ ...tp }));
    }
    position(tp: TopicPartition): number {
      return this.positions.get(this.owns(tp))!;
    }
    seek(tp: TopicPartition, offset: number): void {
      this.positions.set(this.owns(tp), offset);
      tell('seek', this.id, [tp, offset]);
    }
    async seekToBeginning(tps: TopicPartition[]): Promise<void> {
      this.apply(await call<ConsumerState>('c.seekToBeginning', [this.id, tps]));
    }
    async seekToEnd(tps: TopicPartition[]): Promise<void> {
      this.apply(await call<ConsumerState>('c.seekToEnd', [this.id, tps]));
    }
    pause(tps: TopicPartition[]): void {
      tell('pause', this.id, [tps]);
    }
    resume(tps: TopicPartition[]): void {
      tell('resume', this.id, [tps]);
    }
    async poll(opts?: PollOptions): Promise<ConsumedRecord[]> {
      const r = await call<{ records: WireRecords; state: ConsumerState }>('c.poll', [
        this.id,
        opts,
      ]);
      this.apply(r.state);
      return fromWireConsumed(r.records);
    }
    async commit(positions?: PartitionPosition[]): Promise<void> {
      this.apply(await call<ConsumerState>('c.commit', [this.id, positions]));
    }
    committed(tps: TopicPartition[]): Promise<(number | null)[]> {
      return call('c.committed', [this.id, tps]);
    }
    groupMetadata(): GroupMetadata | null {
      return this.group;
    }
    async close(): Promise<void> {
      consumers.delete(this.id);
      await call<void>('c.close', [this.id]).catch(() => {});
    }
  }

  return {
    kind,
    createTopics: (topics: TopicSpec[]) => call('createTopics', [topics]),
    partitionCount: (topic: string) => call('partitionCount', [topic]),
    offsets: (tps: TopicPartition[]) => call('offsets', [tps]),
    committed: (groupId: string, tps: TopicPartition[]) => call('committed', [groupId, tps]),
    async producer(opts?: ProducerOptions): Promise<BusProducer> {
      return new RemoteProducer(
        await call<number>('producer', [opts]),
        opts?.transactionalId ?? null,
      );
    },
    async consumer(opts?: ConsumerOptions): Promise<BusConsumer> {
      const id = await call<number>('consumer', [opts]);
      const c = new RemoteConsumer(id, opts?.groupId ?? null);
      consumers.set(id, c);
      return c;
    },
    allocValue(bytes: number): Uint8Array {
      if (closed) throw new BusError('closed', 'bus is closed (allocValue)');
      if (!Number.isInteger(bytes) || bytes < 0 || bytes > VALUE_BYTES_MAX)
        throw new RangeError(`allocValue bytes must be an integer in [0, 2^30], bytes=${bytes}`);
      return new Uint8Array(bytes);
    },
    async close(): Promise<void> {
      if (closed) return;
      await Promise.all([...consumers.values()].map((c) => c.close()));
      closed = true;
      for (const p of pending.values()) p.reject(new BusError('closed', 'bus closed'));
      pending.clear();
      port.close();
    },
  };
}
