/**
 * Main side of a topology on a kafka bus: before any actor starts, every queue of the topology
 * is a Kafka topic with the declared partition count (missing topics are created; an existing
 * topic with another partition count is an error at that queue's `partitions` field). A broker
 * that is not reachable yet is waited out and reported every few seconds.
 */
import { createKafkaBus, BusError } from '../engine/bus/index.js';
import { ConfigError, problemAt, type Topology } from '../engine/config/index.js';
import { kafkaBusOptionsOf } from '../engine/service/index.js';
import { actorBusOf } from '../engine/service/index.js';

/** How often a wait for an unreachable broker is reported, ms. */
const WAIT_REPORT_MS = 5_000;
/** Pause between two attempts while the broker is unreachable, ms. */
const RETRY_MS = 1_000;

/**
 * Creates the topology's queues as topics on its kafka bus (a no-op on the journal bus).
 * @param log receives one line per WAIT_REPORT_MS while the brokers cannot be reached.
 * @throws ConfigError at `queues[i].partitions` when topic queues[i] exists with another
 *   partition count.
 */
export async function createKafkaTopics(
  topology: Topology,
  log: (line: string) => void,
): Promise<void> {
  const bus = actorBusOf(topology);
  if (bus.kind !== 'kafka') return;
  const kafka = createKafkaBus(kafkaBusOptionsOf(bus.connection));
  const startedMs = Date.now();
  let reportedMs = startedMs;
  try {
    for (const [i, q] of topology.queues.entries()) {
      for (;;) {
        try {
          await kafka.createTopics([{ name: q.name, partitions: q.partitions }]);
          break;
        } catch (e) {
          if (e instanceof BusError && e.code === 'bad-input') {
            throw new ConfigError([
              problemAt(
                topology.file,
                ['queues', i, 'partitions'],
                `queue "${q.name}": Kafka topic ${q.name} on ${bus.connection.brokers.join(',')}: ${e.message} (declare its partition count, or delete the topic)`,
              ),
            ]);
          }
          const now = Date.now();
          if (now - reportedMs >= WAIT_REPORT_MS) {
            reportedMs = now;
            log(
              `kafka bus ${bus.connection.brokers.join(',')}: waiting ${Math.round((now - startedMs) / 1000)} s to create topic ${q.name}: ${(e as Error).message}`,
            );
          }
          await new Promise((r) => setTimeout(r, RETRY_MS));
        }
      }
    }
  } finally {
    await kafka.close();
  }
}
