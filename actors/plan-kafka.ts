/**
 * Planner pieces for Kafka: the start data of a capture pump on a kafka bus, and the groups of
 * the sink actors (one per partition of each sink's journal queue). Called by plan.ts.
 */
import path from 'node:path';
import type { GroupSpec } from '../engine/supervisor/index.js';
import { KAFKA_SINK_DEFAULTS, type CaptureSource } from '../engine/cdc/index.js';
import type { Topology } from '../engine/config/index.js';
import { createSinkPosition, SINK_SHARED, type PumpKafkaData, type SinkData } from './contracts.js';
import { kafkaConnectionOf, pumpTransactionalId, sinkTransactionalId } from './kafka-capture.js';

const here = path.dirname(new URL(import.meta.url).pathname);
/** Worker entry file of the sink actor. */
export const SINK_MODULE = path.join(here, 'sink.js');

/**
 * Whether `source` ships into the topology's bus in transactions: on a kafka bus always; on the
 * journal bus when its targets are processor topics (engine/config checks a source does not mix
 * them with journal queues), which live on the bus rather than in engine/journal's layout.
 */
export function captureIntoBus(topology: Topology, source: CaptureSource): boolean {
  if (topology.bus.kind === 'kafka') return true;
  const topics = new Set(
    topology.processors.flatMap((p) => [
      ...p.inputs,
      ...p.outputs,
      ...(p.stateTopic !== undefined ? [p.stateTopic] : []),
      ...(p.deadLetterTopic !== undefined ? [p.deadLetterTopic] : []),
    ]),
  );
  return source.tables.length > 0 && source.tables.every((t) => topics.has(t.target));
}

/**
 * PumpData.kafka of pump `pump` of `source`, or undefined when it appends to journal queues
 * (see captureIntoBus); on the journal bus it has no connection (the pump gets a port).
 */
export function pumpKafkaData(
  topology: Topology,
  source: CaptureSource,
  pump: number,
): PumpKafkaData | undefined {
  if (!captureIntoBus(topology, source)) return undefined;
  const formats: PumpKafkaData['formats'] = {};
  for (const t of source.tables) formats[t.table] = t.format ?? 'envelope';
  return {
    ...(topology.bus.kind === 'kafka' ? { connection: kafkaConnectionOf(topology.bus) } : {}),
    transactionalId: pumpTransactionalId(topology.name, source.name, pump),
    formats,
    busRecordBytesMax:
      topology.bus.kind === 'kafka'
        ? topology.bus.recordBytesMax
        : KAFKA_SINK_DEFAULTS.recordBytesMax,
  };
}

/**
 * One group per partition of each sink's queue, at `stage` (after every writer of the queue,
 * so a drain forwards what the pumps and services wrote last).
 */
export function sinkGroups(
  topology: Topology,
  stage: number,
  partitionDir: (queue: string, partition: number) => string,
): GroupSpec[] {
  const groups: GroupSpec[] = [];
  for (const k of topology.sinks) {
    const q = topology.queues.find((x) => x.name === k.from);
    if (!q) throw new Error(`sink ${k.name}: queue "${k.from}" is not declared`);
    const captureSource =
      topology.capture.find((c) => c.tables.some((t) => t.target === k.from)) ?? null;
    for (let p = 0; p < q.partitions; p++) {
      const name = `sink:${k.name}/${p}`;
      const data: SinkData = {
        sink: k.name,
        queue: q.name,
        partition: p,
        dir: partitionDir(q.name, p),
        connection: { brokers: k.to.brokers, clientId: k.to.clientId },
        topic: k.to.topic,
        transactionalId: sinkTransactionalId(topology.name, k.name, p),
        format: k.format,
        batchSizeMax: k.batchSizeMax,
        pollIntervalMs: k.pollIntervalMs,
        recordBytesMax: k.to.recordBytesMax,
        captureSource,
      };
      // One buffer for every start of the group: a restarted sink's lag is known until it has
      // read its committed offset again.
      const shared = { [SINK_SHARED.position]: createSinkPosition() };
      groups.push({
        name,
        stage,
        start: async (launcher) => {
          await launcher.launch({ name, module: SINK_MODULE, data, shared }).ready();
        },
      });
    }
  }
  return groups;
}
