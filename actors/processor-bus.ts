/**
 * Main side of the processors' bus: opens the topology's bus once, creates every topic a
 * processor reads or writes (partition counts from `queues`), and, on the journal bus, serves
 * it to each processor actor over a MessagePort of its own.
 *
 * Why one owner on the journal bus: a journal bus is one in-process instance per directory (each
 * partition's appender lock refuses a second opener, in another process or another worker thread
 * of this one, with JournalLockedError), and its consumer groups, fencing epochs and last stable
 * offsets are that instance's memory. So processors in several workers cannot each open it; the
 * thread that starts the topology owns it and every processor uses it through engine/bus/remote.
 * On Kafka each processor connects to the brokers itself, and this bus only creates topics and is
 * handed to the embedding application (RunningTopology.bus).
 */
import { MessageChannel, type MessagePort } from 'node:worker_threads';
import {
  createJournalBus,
  createKafkaBus,
  kafkaBusOptionsOf,
  serveBus,
  type BusBackend,
  type BusServing,
  type TopicSpec,
} from '../engine/bus/index.js';
import type { Topology } from '../engine/config/index.js';
import { busDir } from './plan.js';

/**
 * The topics of a topology's processors: inputs, outputs, state topics and dead-letter topics,
 * each once, with its queue's partition count; a state topic, and the input of a compacted
 * processor, is a compacted topic.
 */
export function processorTopics(topology: Topology): TopicSpec[] {
  const compacted = new Set<string>();
  const names = new Set<string>();
  for (const p of topology.processors) {
    for (const t of [...p.inputs, ...p.outputs]) names.add(t);
    if (p.stateTopic !== undefined) {
      names.add(p.stateTopic);
      compacted.add(p.stateTopic);
    }
    if (p.deadLetterTopic !== undefined) names.add(p.deadLetterTopic);
    if (p.pattern === 'compacted') compacted.add(p.inputs[0]!);
  }
  return [...names].map((name) => {
    const q = topology.queues.find((x) => x.name === name);
    if (!q) throw new Error(`processor topic "${name}" is not declared in queues`);
    return { name, partitions: q.partitions, ...(compacted.has(name) ? { compacted: true } : {}) };
  });
}

/** The topology's bus as the processors use it. */
export interface TopologyBusHost {
  /** The bus (journal: the one instance; kafka: a connection for topics and the application). */
  readonly bus: BusBackend;
  /** Journal bus: a new port served by this bus, for one processor actor. Absent on kafka. */
  readonly connect?: () => MessagePort;
  /** Closes every served port, then the bus. */
  close(): Promise<void>;
}

/**
 * Opens the topology's bus and creates the processors' topics. Journal: `<dataDir>/bus`, with
 * fsync 'none' only when every processor topic's queue says fsync none, else one fdatasync per
 * commit ('batch'). @throws JournalLockedError when another process has the bus directory open;
 * BusError 'bad-input' when a topic exists with another partition count.
 */
export async function openTopologyBus(topology: Topology): Promise<TopologyBusHost> {
  const topics = processorTopics(topology);
  if (topology.bus.kind === 'kafka') {
    const bus = createKafkaBus(kafkaBusOptionsOf(topology.bus));
    try {
      await bus.createTopics(topics);
    } catch (e) {
      await bus.close().catch(() => {});
      throw e;
    }
    return { bus, close: () => bus.close() };
  }
  const queues = topology.queues.filter((q) => topics.some((t) => t.name === q.name));
  const fsync = queues.length > 0 && queues.every((q) => q.fsync === 'none') ? 'none' : 'batch';
  const bus = await createJournalBus({ dir: busDir(topology), fsync });
  try {
    await bus.createTopics(topics);
  } catch (e) {
    await bus.close().catch(() => {});
    throw e;
  }
  const served = new Set<BusServing>();
  return {
    bus,
    connect: () => {
      const { port1, port2 } = new MessageChannel();
      const s = serveBus(bus, port1);
      served.add(s);
      void s.closed.then(() => served.delete(s));
      return port2;
    },
    close: async () => {
      await Promise.all([...served].map((s) => s.close()));
      await bus.close();
    },
  };
}
