/**
 * The owner side: serves one bus to one client over a MessagePort (protocol: ./protocol.ts).
 * Everything the client made (producers, their open transactions, consumers and their group
 * memberships) belongs to the port: when the port closes (the client closed it, or its worker
 * thread exited or was terminated) it is all closed, as if the client's process had died: open
 * transactions are aborted and the group hands the partitions to its other members.
 */
import type { MessagePort } from 'node:worker_threads';
import {
  BusError,
  type BusBackend,
  type BusConsumer,
  type BusProducer,
  type BusTransaction,
  type ProducerRecord,
  type RebalanceListener,
  type TopicPartition,
} from '../types.js';
import {
  fromWireProduced,
  toWire,
  toWireRecords,
  type ConsumerState,
  type WireError,
  type WireRecords,
} from './protocol.js';

/** A served port; `close()` closes what the client made and the port. */
export interface BusServing {
  /** Resolves once everything the client made is closed (after the port closed). */
  readonly closed: Promise<void>;
  close(): Promise<void>;
}

/** An answer with buffers to transfer rather than clone. */
class Transferring {
  constructor(
    readonly value: unknown,
    readonly transfer: ArrayBuffer[],
  ) {}
}

function stateOf(c: BusConsumer): ConsumerState {
  const assignment = c.assignment();
  return {
    assignment,
    positions: assignment.map((tp) => c.position(tp)),
    group: c.groupMetadata(),
  };
}

function recordsIn(w: WireRecords): ProducerRecord[] {
  return fromWireProduced(w) as ProducerRecord[];
}

/**
 * Serves `bus` on `port` until the port closes. The bus itself stays open (it is shared with
 * other ports and with its owner); only what this client made is closed.
 */
export function serveBus(bus: BusBackend, port: MessagePort): BusServing {
  const producers = new Map<number, BusProducer>();
  // A producer's last transaction stays here after its commit or abort (until the producer's next
  // begin or close), so a late call on it gets the bus's own answer ('txn-state'), not 'closed'.
  const txns = new Map<number, BusTransaction>();
  const lastTxn = new Map<number, number>();
  const consumers = new Map<number, BusConsumer>();
  const callbacks = new Map<number, { resolve: () => void; reject: (e: Error) => void }>();
  let nextId = 1;
  let open = true;
  let closedResolve!: () => void;
  const closed = new Promise<void>((r) => (closedResolve = r));

  const get = <T>(m: Map<number, T>, id: number, what: string): T => {
    const x = m.get(id);
    if (x === undefined)
      throw new BusError('closed', `${what} ${id} is closed or unknown to this bus connection`);
    return x;
  };
  const callback = (
    consumer: number,
    kind: 'assigned' | 'revoked',
    tps: TopicPartition[],
    c: BusConsumer,
  ): Promise<void> => {
    if (!open) return Promise.resolve();
    const cb = nextId++;
    return new Promise<void>((resolve, reject) => {
      callbacks.set(cb, { resolve, reject });
      port.postMessage({ cb, consumer, kind, tps, state: stateOf(c) });
    });
  };

  const ops: Record<string, (...args: any[]) => unknown> = {
    createTopics: (specs) => bus.createTopics(specs),
    partitionCount: (topic) => bus.partitionCount(topic),
    offsets: (tps) => bus.offsets(tps),
    committed: (group, tps) => bus.committed(group, tps),
    producer: async (opts) => {
      const p = await bus.producer(opts);
      const id = nextId++;
      producers.set(id, p);
      return id;
    },
    consumer: async (opts) => {
      const c = await bus.consumer(opts);
      const id = nextId++;
      consumers.set(id, c);
      return id;
    },
    'p.send': (pid, w: WireRecords) => get(producers, pid, 'producer').send(recordsIn(w)),
    'p.begin': async (pid) => {
      const t = await get(producers, pid, 'producer').begin();
      const id = nextId++;
      const previous = lastTxn.get(pid);
      if (previous !== undefined) txns.delete(previous);
      txns.set(id, t);
      lastTxn.set(pid, id);
      return id;
    },
    'p.close': async (pid) => {
      const p = producers.get(pid);
      producers.delete(pid);
      const t = lastTxn.get(pid);
      lastTxn.delete(pid);
      if (t !== undefined) txns.delete(t);
      await p?.close();
    },
    't.send': (tid, w: WireRecords) => get(txns, tid, 'transaction').send(recordsIn(w)),
    't.sendOffsets': (tid, group, positions) =>
      get(txns, tid, 'transaction').sendOffsets(group, positions),
    't.commit': (tid) => get(txns, tid, 'transaction').commit(),
    't.abort': async (tid) => {
      await txns.get(tid)?.abort();
    },
    'c.subscribe': async (cid, topics: string[], withListener: boolean) => {
      const c = get(consumers, cid, 'consumer');
      const listener: RebalanceListener | undefined = withListener
        ? {
            assigned: (tps) => callback(cid, 'assigned', tps, c),
            revoked: (tps) => callback(cid, 'revoked', tps, c),
          }
        : undefined;
      await c.subscribe(topics, listener);
      return stateOf(c);
    },
    'c.assign': async (cid, tps) => {
      const c = get(consumers, cid, 'consumer');
      await c.assign(tps);
      return stateOf(c);
    },
    'c.seekToBeginning': async (cid, tps) => {
      const c = get(consumers, cid, 'consumer');
      await c.seekToBeginning(tps);
      return stateOf(c);
    },
    'c.seekToEnd': async (cid, tps) => {
      const c = get(consumers, cid, 'consumer');
      await c.seekToEnd(tps);
      return stateOf(c);
    },
    'c.poll': async (cid, opts) => {
      const c = get(consumers, cid, 'consumer');
      const { wire, transfer } = toWireRecords(await c.poll(opts));
      return new Transferring({ records: wire, state: stateOf(c) }, transfer);
    },
    'c.commit': async (cid, positions) => {
      const c = get(consumers, cid, 'consumer');
      await c.commit(positions);
      return stateOf(c);
    },
    'c.committed': (cid, tps) => get(consumers, cid, 'consumer').committed(tps),
    'c.close': async (cid) => {
      const c = consumers.get(cid);
      consumers.delete(cid);
      await c?.close();
    },
  };
  // Synchronous in the bus API: applied on arrival, no answer (errors show at the next call).
  const syncOps: Record<string, (c: BusConsumer, args: any[]) => void> = {
    seek: (c, [tp, offset]) => c.seek(tp, offset),
    pause: (c, [tps]) => c.pause(tps),
    resume: (c, [tps]) => c.resume(tps),
  };

  const closeAll = async (): Promise<void> => {
    if (!open) return closed;
    open = false;
    for (const cb of callbacks.values())
      cb.reject(new BusError('closed', 'bus connection closed during a rebalance callback'));
    callbacks.clear();
    const all: Promise<unknown>[] = [];
    for (const t of txns.values()) all.push(t.abort().catch(() => {}));
    for (const c of consumers.values()) all.push(c.close().catch(() => {}));
    for (const p of producers.values()) all.push(p.close().catch(() => {}));
    txns.clear();
    lastTxn.clear();
    consumers.clear();
    producers.clear();
    await Promise.all(all);
    closedResolve();
  };

  port.on(
    'message',
    (m: {
      id?: number;
      op?: string;
      args?: unknown[];
      cbDone?: number;
      error?: WireError;
      consumer?: number;
    }) => {
      if (m.cbDone !== undefined) {
        const cb = callbacks.get(m.cbDone);
        callbacks.delete(m.cbDone);
        if (m.error) cb?.reject(new Error(m.error.message));
        else cb?.resolve();
        return;
      }
      const op = m.op ?? '';
      if (m.id === undefined) {
        const c = consumers.get(m.consumer ?? -1);
        if (c) {
          try {
            syncOps[op]?.(c, m.args ?? []);
          } catch {
            // The client checked ownership before sending; a partition revoked meanwhile is the
            // same race as in-process, and the next poll shows the new assignment.
          }
        }
        return;
      }
      const id = m.id;
      const fn = ops[op];
      const run = async (): Promise<unknown> => {
        if (!fn) throw new BusError('bad-input', `unknown bus operation "${op}"`);
        return fn(...(m.args ?? []));
      };
      run().then(
        (value) => {
          if (!open) return;
          if (value instanceof Transferring)
            port.postMessage({ id, ok: true, value: value.value }, value.transfer);
          else port.postMessage({ id, ok: true, value });
        },
        (e: unknown) => {
          if (open) port.postMessage({ id, ok: false, error: toWire(e) });
        },
      );
    },
  );
  port.on('close', () => void closeAll());
  port.start();
  return {
    closed,
    async close() {
      await closeAll();
      port.close();
    },
  };
}
