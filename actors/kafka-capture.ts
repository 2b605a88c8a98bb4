/**
 * Kafka wiring of capture pumps and sinks, shared by the planner (main thread) and the pump and
 * sink actors (workers): the connection options of a topology's kafka bus, the transactional.ids
 * (stable per topology, source and pump, or sink and partition: that is what fences a zombie),
 * and the main-side creation of the Kafka topics they write before any actor starts.
 * No side effects on import (worker entries import it).
 */
// engine/bus's face loads every backend (kafkajs); createKafkaBus is imported when needed, so a
// journal topology's start does not pay for it.
import { BusError, type BusBackend } from '../engine/bus/types.js';
import type { KafkaBusOptions } from '../engine/bus/index.js';
import { kafkaBusOptionsOf } from '../engine/bus/kafka/security.js';
import { ConfigError, problemAt, type Topology, type TopologyBus } from '../engine/config/index.js';

/** How an actor reaches a Kafka cluster: a topology's kafka bus, or a sink's `to`. */
export interface KafkaConnectionData {
  brokers: string[];
  clientId: string;
  tls?: { caFile?: string; certFile?: string; keyFile?: string; rejectUnauthorized: boolean };
  sasl?: {
    mechanism: 'plain' | 'scram-sha-256' | 'scram-sha-512';
    username: string;
    password?: string;
    passwordFile?: string;
  };
}

/** The connection of a kafka bus section. */
export function kafkaConnectionOf(
  bus: Extract<TopologyBus, { kind: 'kafka' }>,
): KafkaConnectionData {
  return {
    brokers: [...bus.brokers],
    clientId: bus.clientId,
    ...(bus.tls ? { tls: { ...bus.tls } } : {}),
    ...(bus.sasl ? { sasl: { ...bus.sasl } } : {}),
  };
}

/**
 * engine/bus createKafkaBus options of `c` (engine/bus kafkaBusOptionsOf); reads the TLS files
 * and the SASL password file now.
 * @throws BusError 'bad-input' naming the setting and file when one cannot be read.
 */
export function kafkaOptionsOf(c: KafkaConnectionData): KafkaBusOptions {
  return kafkaBusOptionsOf({ kind: 'kafka', ...c });
}

/** transactional.id (and reconciliation consumer group) of pump `pump` of capture source `source`. */
export function pumpTransactionalId(topology: string, source: string, pump: number): string {
  return `sluice.capture.${topology}.${source}.${pump}`;
}

/** transactional.id and consumer group (holding its position) of partition `partition` of sink `sink`. */
export function sinkTransactionalId(topology: string, sink: string, partition: number): string {
  return `sluice.sink.${topology}.${sink}.${partition}`;
}

/** How often a wait for an unreachable broker is reported, ms. */
const WAIT_REPORT_MS = 5_000;
/** Pause between two attempts while a broker is unreachable, ms. */
const RETRY_MS = 1_000;

/**
 * Main side, before any actor starts: creates the Kafka topics that capture pumps (on a kafka
 * bus: the capture targets, with their queue's partitions) and sinks (their `to.topic`, with
 * `to.partitions`) write, where missing. A broker that cannot be reached is waited out, one
 * `log` line every few seconds.
 * @throws ConfigError at the field that sets the partition count when a topic exists with
 *   another one (`queues[i].partitions`, `sinks[i].to`).
 */
export async function prepareKafkaTopics(
  topology: Topology,
  log: (line: string) => void,
): Promise<void> {
  const jobs: {
    connection: KafkaConnectionData;
    topic: string;
    partitions: number;
    at: (string | number)[];
    what: string;
  }[] = [];
  if (topology.bus.kind === 'kafka') {
    const connection = kafkaConnectionOf(topology.bus);
    const targets = new Set(topology.capture.flatMap((c) => c.tables.map((t) => t.target)));
    topology.queues.forEach((q, i) => {
      if (targets.has(q.name))
        jobs.push({
          connection,
          topic: q.name,
          partitions: q.partitions,
          at: ['queues', i, 'partitions'],
          what: `queue "${q.name}"`,
        });
    });
  }
  topology.sinks.forEach((k, i) => {
    jobs.push({
      connection: { brokers: k.to.brokers, clientId: k.to.clientId },
      topic: k.to.topic,
      partitions: k.to.partitions,
      at: ['sinks', i, 'to'],
      what: `sink "${k.name}"`,
    });
  });
  if (jobs.length === 0) return;
  const { createKafkaBus } = await import('../engine/bus/index.js');
  const buses = new Map<string, BusBackend>();
  try {
    for (const job of jobs) {
      const key = job.connection.brokers.join(',');
      let bus = buses.get(key);
      if (!bus) buses.set(key, (bus = createKafkaBus(kafkaOptionsOf(job.connection))));
      await createTopicWaiting(bus, job, topology, log);
    }
  } finally {
    for (const bus of buses.values()) await bus.close().catch(() => undefined);
  }
}

async function createTopicWaiting(
  bus: BusBackend,
  job: {
    connection: KafkaConnectionData;
    topic: string;
    partitions: number;
    at: (string | number)[];
    what: string;
  },
  topology: Topology,
  log: (line: string) => void,
): Promise<void> {
  const startedMs = Date.now();
  let reportedMs = startedMs;
  for (;;) {
    try {
      await bus.createTopics([{ name: job.topic, partitions: job.partitions }]);
      return;
    } catch (e) {
      if (e instanceof BusError && e.code === 'bad-input') {
        throw new ConfigError([
          problemAt(
            topology.file,
            job.at,
            `${job.what}: Kafka topic ${job.topic} on ${job.connection.brokers.join(',')}: ${e.message} (declare its partition count, or delete the topic)`,
          ),
        ]);
      }
      const now = Date.now();
      if (now - reportedMs >= WAIT_REPORT_MS) {
        reportedMs = now;
        log(
          `kafka ${job.connection.brokers.join(',')}: waiting ${Math.round((now - startedMs) / 1000)} s to create topic ${job.topic}: ${(e as Error).message}`,
        );
      }
      await new Promise((r) => setTimeout(r, RETRY_MS));
    }
  }
}
