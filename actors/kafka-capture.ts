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
import type { StartWaits } from './start-waits.js';

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

/** A Kafka topic the start creates before any actor starts, and what needs it. */
export interface TopicJob {
  connection: KafkaConnectionData;
  topic: string;
  partitions: number;
  /** The topology field that sets the partition count (named when the topic has another). */
  at: (string | number)[];
  /** The topology entry the topic is for: `queue "ledger"`, `sink "ship"`. */
  what: string;
  /**
   * What needs the topic, as the actors that use it name their target: `target of sink
   * "ship"`, `target of capture source "app"`, `queue "orders" of the kafka bus`.
   */
  role: string;
}

/** Where a start's topic creation reports: its log, and its waits (null: not reported there). */
export interface TopicWaitReport {
  /** Receives one line per WAIT_REPORT_MS while a broker cannot be reached. */
  log: (line: string) => void;
  /** Holds each wait while it lasts, for the operations API (ops/health.ts). */
  waits: StartWaits | null;
}

/**
 * What a wait for `job`'s topic is named by, in the log, the health and the actors' outages:
 * `Kafka 127.0.0.1:9092 topic ledger (target of sink "ship")`.
 */
export function topicJobName(job: TopicJob): string {
  return `Kafka ${job.connection.brokers.join(',')} topic ${job.topic} (${job.role})`;
}

/**
 * Main side, before any actor starts: creates the Kafka topics that capture pumps (on a kafka
 * bus: the capture targets, with their queue's partitions) and sinks (their `to.topic`, with
 * `to.partitions`) write, where missing. A broker that cannot be reached is waited out, without
 * end, one `log` line every few seconds naming the topic and what needs it, and held in
 * `report.waits` while it lasts.
 * @throws ConfigError at the field that sets the partition count when a topic exists with
 *   another one (`queues[i].partitions`, `sinks[i].to`).
 */
export async function prepareKafkaTopics(
  topology: Topology,
  report: TopicWaitReport,
): Promise<void> {
  const jobs: TopicJob[] = [];
  if (topology.bus.kind === 'kafka') {
    const connection = kafkaConnectionOf(topology.bus);
    topology.queues.forEach((q, i) => {
      const sources = captureSourcesInto(topology, q.name);
      if (sources.length > 0)
        jobs.push({
          connection,
          topic: q.name,
          partitions: q.partitions,
          at: ['queues', i, 'partitions'],
          what: `queue "${q.name}"`,
          role: `target of ${sources.join(', ')}`,
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
      role: `target of sink "${k.name}"`,
    });
  });
  await createTopicsWaiting(topology, jobs, report);
}

/** `capture source "app"` for each capture source with a table whose target is `queue`. */
export function captureSourcesInto(topology: Topology, queue: string): string[] {
  return topology.capture
    .filter((c) => c.tables.some((t) => t.target === queue))
    .map((c) => `capture source "${c.name}"`);
}

/**
 * Creates each job's topic where missing, in order, one client per broker list, waiting out
 * brokers that cannot be reached (see {@link prepareKafkaTopics}).
 * @throws ConfigError at `job.at` when a topic exists with another partition count.
 */
export async function createTopicsWaiting(
  topology: Topology,
  jobs: TopicJob[],
  report: TopicWaitReport,
): Promise<void> {
  if (jobs.length === 0) return;
  const { createKafkaBus } = await import('../engine/bus/index.js');
  const buses = new Map<string, BusBackend>();
  try {
    for (const job of jobs) {
      const key = job.connection.brokers.join(',');
      let bus = buses.get(key);
      if (!bus) buses.set(key, (bus = createKafkaBus(kafkaOptionsOf(job.connection))));
      const name = topicJobName(job);
      try {
        await createTopicWaiting(bus, job, topology, report);
      } finally {
        report.waits?.over(name);
      }
    }
  } finally {
    for (const bus of buses.values()) await bus.close().catch(() => undefined);
  }
}

async function createTopicWaiting(
  bus: BusBackend,
  job: TopicJob,
  topology: Topology,
  report: TopicWaitReport,
): Promise<void> {
  const startedMs = Date.now();
  let reportedMs = startedMs;
  const brokers = job.connection.brokers.join(',');
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
            `${job.what}: Kafka topic ${job.topic} on ${brokers}: ${e.message} ` +
              '(declare its partition count, or delete the topic)',
          ),
        ]);
      }
      const error = (e as Error).message;
      report.waits?.failed(topicJobName(job), `create topic ${job.topic}`, error);
      const now = Date.now();
      if (now - reportedMs >= WAIT_REPORT_MS) {
        reportedMs = now;
        const waitedS = Math.round((now - startedMs) / 1000);
        const topic = `topic ${job.topic} (${job.role})`;
        report.log(`kafka ${brokers}: waiting ${waitedS} s to create ${topic}: ${error}`);
      }
      await new Promise((r) => setTimeout(r, RETRY_MS));
    }
  }
}
