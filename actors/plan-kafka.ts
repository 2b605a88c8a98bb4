/**
 * Planner pieces for Kafka: the start data of a capture pump on a kafka bus, and the groups of
 * the sink actors (one per partition of each sink's journal queue). Called by plan.ts.
 */
import path from 'node:path';
import type { GroupSpec } from '../engine/supervisor/index.js';
import type { CaptureSource } from '../engine/cdc/index.js';
import type { Topology } from '../engine/config/index.js';
import type { PumpKafkaData, SinkData } from './contracts.js';
import { kafkaConnectionOf, pumpTransactionalId, sinkTransactionalId } from './kafka-capture.js';

const here = path.dirname(new URL(import.meta.url).pathname);
/** Worker entry file of the sink actor. */
export const SINK_MODULE = path.join(here, 'sink.js');

/** PumpData.kafka of pump `pump` of `source`, or undefined on the journal bus. */
export function pumpKafkaData(
  topology: Topology,
  source: CaptureSource,
  pump: number,
): PumpKafkaData | undefined {
  if (topology.bus.kind !== 'kafka') return undefined;
  const formats: PumpKafkaData['formats'] = {};
  for (const t of source.tables) formats[t.table] = t.format ?? 'envelope';
  return {
    connection: kafkaConnectionOf(topology.bus),
    transactionalId: pumpTransactionalId(topology.name, source.name, pump),
    formats,
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
        captureSource,
      };
      groups.push({
        name,
        stage,
        start: async (launcher) => {
          await launcher.launch({ name, module: SINK_MODULE, data, shared: {} }).ready();
        },
      });
    }
  }
  return groups;
}
