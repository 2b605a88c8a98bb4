/**
 * Main side of a topology on a kafka bus: before any actor starts, every queue of the topology
 * is a Kafka topic with the declared partition count (missing topics are created; an existing
 * topic with another partition count is an error at that queue's `partitions` field). A broker
 * that is not reachable yet is waited out, without end, and reported every few seconds naming
 * the topic and what needs it (actors/kafka-capture.ts createTopicsWaiting).
 */
import type { Topology } from '../engine/config/index.js';
import {
  captureSourcesInto,
  createTopicsWaiting,
  kafkaConnectionOf,
  type TopicJob,
  type TopicWaitReport,
} from './kafka-capture.js';

/**
 * Creates the topology's queues as topics on its kafka bus (a no-op on the journal bus).
 * @param report receives one log line per few seconds while the brokers cannot be reached, and
 *   holds each wait while it lasts.
 * @throws ConfigError at `queues[i].partitions` when topic queues[i] exists with another
 *   partition count.
 */
export async function createKafkaTopics(
  topology: Topology,
  report: TopicWaitReport,
): Promise<void> {
  if (topology.bus.kind !== 'kafka') return;
  const connection = kafkaConnectionOf(topology.bus);
  const jobs = topology.queues.map((q, i): TopicJob => ({
    connection,
    topic: q.name,
    partitions: q.partitions,
    at: ['queues', i, 'partitions'],
    what: `queue "${q.name}"`,
    role: [`queue "${q.name}" of the kafka bus`, ...usersOf(topology, q.name)].join(', '),
  }));
  await createTopicsWaiting(topology, jobs, report);
}

/** What reads or writes queue `queue`: `target of capture source "app"`, `input of service "s"`. */
function usersOf(topology: Topology, queue: string): string[] {
  const sources = captureSourcesInto(topology, queue);
  return [
    ...(sources.length > 0 ? [`target of ${sources.join(', ')}`] : []),
    ...topology.services
      .filter((s) => s.inputs.includes(queue))
      .map((s) => `input of service "${s.name}"`),
    ...topology.services
      .filter((s) => s.output === queue)
      .map((s) => `output of service "${s.name}"`),
  ];
}
