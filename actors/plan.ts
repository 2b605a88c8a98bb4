/**
 * Turns a validated topology into supervisor groups: one group per capture pump (stage 0) and
 * one group per service with its queue readers (stage 1 + its depth in the service graph, so a
 * service drains only after the services that feed it). Queue notifiers are allocated once per
 * queue partition and shared by every appender and tailer of it in this process; rings and the
 * doorbell are allocated afresh at every (re)start of a service group.
 */
import path from 'node:path';
import type { MessagePort } from 'node:worker_threads';
import { createRing } from '../engine/ring/index.js';
import { createDoorbell } from '../engine/actor/index.js';
import { createQueueNotifier } from '../engine/journal/index.js';
import { inputKey, actorBusOf } from '../engine/service/index.js';
import type { GroupSpec } from '../engine/supervisor/index.js';
import type { Topology } from '../engine/config/index.js';
import { kafkaConnectionOf } from './kafka-capture.js';
import { captureIntoBus, pumpKafkaData, sinkGroups } from './plan-kafka.js';
import {
  createPositions,
  createReaderPosition,
  createShippedCounters,
  HOST_SHARED,
  READER_SHARED,
  PUMP_PORTS,
  PUMP_SHARED,
  TIMER_SHARED,
  type ServiceHostData,
  type ServiceReadyInfo,
  type QueueReaderData,
  type PumpData,
  type TimerData,
  type ProcessorData,
  PROCESSOR_PORTS,
} from './contracts.js';

const here = path.dirname(new URL(import.meta.url).pathname);
/** Worker entry files of the ready-made actors. */
export const ACTOR_MODULES = {
  reader: path.join(here, 'queue-reader.js'),
  service: path.join(here, 'service-host.js'),
  pump: path.join(here, 'cdc-pump.js'),
  timer: path.join(here, 'timer.js'),
  processor: path.join(here, 'processor.js'),
} as const;

/** Directory of the topology's journal bus (processors' topics): `<dataDir>/bus`. */
export function busDir(topology: Topology): string {
  return path.join(topology.dataDir, 'bus');
}

/** Options of {@link planTopology}. */
export interface PlanOptions {
  /**
   * Journal bus: a new connection to the topology's journal bus (the port to hand to a
   * processor; the other end served by serveBus on the thread that opened the bus). Called at
   * every (re)start of a processor group. Without it, processor groups fail to start on a
   * journal bus (a plan for display only, as `sluice check` prints).
   */
  connectBus?: () => MessagePort;
}

/** Journal directory of one queue partition: `<dataDir>/queues/<queue>/<partition>`. */
export function partitionDir(topology: Topology, queue: string, partition: number): string {
  return path.join(topology.dataDir, 'queues', queue, String(partition));
}

/**
 * Kafka transactional.id of service `service`'s output producer: stable across restarts and
 * processes (that is what fences a zombie), unique per topology and service.
 */
export function transactionalIdOf(topology: Topology, service: string): string {
  return `sluice.${topology.name}.${service}`;
}

/** Where service `s` appends its dead letters (partition 0 of its dead-letter queue), if any. */
export function deadLetterOf(
  topology: Topology,
  s: Topology['services'][number],
): ServiceHostData['deadLetter'] {
  if (s.errors.onFailure !== 'dead-letter') return null;
  const name = s.errors.deadLetterQueue;
  const q = topology.queues.find((x) => x.name === name);
  if (!q) throw new Error(`service ${s.name}: dead-letter queue "${name}" is not declared`);
  const dir = partitionDir(topology, q.name, 0);
  return { queue: q.name, dir, segmentBytes: q.segmentBytes, fsync: q.fsync };
}

/**
 * The pump groups of one capture source (stage 0), `pumps` of them (default: the source's):
 * pump i appends, per target queue, the partitions p with p mod pumps = i (on the journal bus
 * the partitions are a multiple of the pumps; engine/config/checks.ts). `buffers` are the
 * plan's: its queue notifiers and the source's shipped counters, given to every pump of it. A
 * runtime change of the pump count (actors/pump-count.ts) replaces a source's groups with these
 * for the new count.
 * @throws Error when pumps does not divide the partitions of a journal target, or the plan has
 *   no shipped counters for the source.
 */
export function pumpGroups(
  topology: Topology,
  source: Topology['capture'][number],
  buffers: PlanBuffers,
  pumps = source.pumps,
  connectBus?: () => MessagePort,
): GroupSpec[] {
  const { notifiers } = buffers;
  const shipped = buffers.shipped.get(source.name);
  if (!shipped) throw new Error(`capture source "${source.name}": no shipped counters in the plan`);
  const queues = new Map(topology.queues.map((q) => [q.name, q]));
  const tableTargets: Record<string, string> = {};
  for (const t of source.tables) tableTargets[t.table] = t.target;
  const journal = topology.bus.kind === 'journal';
  // Into processor topics (the bus) rather than journal queues: no partition directories.
  const intoBus = captureIntoBus(topology, source);
  const run = { ...source, pumps };
  const groups: GroupSpec[] = [];
  for (let i = 0; i < pumps; i++) {
    const targets: PumpData['targets'] = {};
    const shared: Record<string, SharedArrayBuffer> = { [PUMP_SHARED.shipped]: shipped };
    for (const queue of journal && !intoBus ? new Set(Object.values(tableTargets)) : []) {
      const q = queues.get(queue)!;
      if (q.partitions % pumps !== 0)
        throw new Error(
          `capture source "${source.name}": ${pumps} pumps do not divide the ${q.partitions} partitions of target queue "${queue}" (on the journal bus the pump count must divide them)`,
        );
      const dirs: Record<number, string> = {};
      for (let p = i; p < q.partitions; p += pumps) {
        dirs[p] = partitionDir(topology, queue, p);
        shared[PUMP_SHARED.notifier(queue, p)] = notifiers.get(inputKey(queue, p))!;
      }
      targets[queue] = {
        partitions: q.partitions,
        dirs,
        segmentBytes: q.segmentBytes,
        fsync: q.fsync,
      };
    }
    const kafka = pumpKafkaData(topology, run, i);
    const data: PumpData = kafka
      ? { source: run, pump: i, targets: {}, tableTargets, kafka }
      : { source: run, pump: i, targets, tableTargets };
    const name = `pump:${source.name}/${i}`;
    groups.push({
      name,
      stage: 0,
      start: async (launcher) => {
        // Into the journal bus: a fresh connection per (re)start, like a processor's.
        let ports: Record<string, MessagePort> = {};
        if (intoBus && journal) {
          if (!connectBus)
            throw new Error(
              `${name}: no connection to the topology's journal bus (start the topology with startTopology)`,
            );
          ports = { [PUMP_PORTS.bus]: connectBus() };
        }
        await launcher.launch({ name, module: ACTOR_MODULES.pump, data, shared, ports }).ready();
      },
    });
  }
  return groups;
}

/** The groups and the shared notifiers of a topology. */
export interface TopologyPlan {
  groups: GroupSpec[];
  /** inputKey(queue, partition) -> notifier, for in-process tailers (e.g. verification). */
  notifiers: Map<string, SharedArrayBuffer>;
  /**
   * Capture source name -> its per-table shipped counters (actors/contracts.ts
   * createShippedCounters), shared by every pump of the source for the whole run.
   */
  shipped: Map<string, SharedArrayBuffer>;
}

/** The plan's buffers that outlive one set of pump groups (see {@link pumpGroups}). */
export type PlanBuffers = Pick<TopologyPlan, 'notifiers' | 'shipped'>;

/**
 * Builds the plan. @throws Error if the topology has a service cycle or a service output queue
 * with more than one partition (a service is the single appender of partition 0).
 */
export function planTopology(topology: Topology, options: PlanOptions = {}): TopologyPlan {
  const queues = new Map(topology.queues.map((q) => [q.name, q]));
  const notifiers = new Map<string, SharedArrayBuffer>();
  for (const q of topology.queues) {
    for (let p = 0; p < q.partitions; p++)
      notifiers.set(inputKey(q.name, p), createQueueNotifier());
  }
  const shipped = new Map(
    topology.capture.map((s) => [s.name, createShippedCounters(s.tables.length)]),
  );
  const groups: GroupSpec[] = [];
  const bus = actorBusOf(topology);

  for (const source of topology.capture)
    groups.push(
      ...pumpGroups(topology, source, { notifiers, shipped }, source.pumps, options.connectBus),
    );

  // Depth of each service in the service graph: fed only by capture/producers = 1.
  const producerOf = new Map(topology.services.map((s) => [s.output, s.name]));
  const depth = new Map<string, number>();
  const depthOf = (name: string, seen: string[]): number => {
    const known = depth.get(name);
    if (known !== undefined) return known;
    if (seen.includes(name)) throw new Error(`service cycle: ${[...seen, name].join(' -> ')}`);
    const s = topology.services.find((x) => x.name === name)!;
    let dd = 1;
    for (const input of s.inputs) {
      const up = producerOf.get(input);
      if (up) dd = Math.max(dd, depthOf(up, [...seen, name]) + 1);
    }
    depth.set(name, dd);
    return dd;
  };

  for (const s of topology.services) {
    const out = queues.get(s.output)!;
    if (out.partitions !== 1) {
      throw new Error(
        `service ${s.name}: output queue "${s.output}" has ${out.partitions} partitions; a service output queue must have 1`,
      );
    }
    const inputs = s.inputs.flatMap((name) => {
      const q = queues.get(name)!;
      return Array.from({ length: q.partitions }, (_, p) => ({
        queue: name,
        partition: p,
        dir: partitionDir(topology, name, p),
      }));
    });
    // Periodic update events: a timer actor appends them to the service's timer queue (one of
    // its inputs, written by nothing else), as a stage-0 group like a pump.
    const timerQueue = s.settings.timerQueue;
    if (timerQueue !== undefined) {
      const q = typeof timerQueue === 'string' ? queues.get(timerQueue) : undefined;
      if (!q || !s.inputs.includes(q.name)) {
        throw new Error(
          `service ${s.name}: settings.timerQueue ${JSON.stringify(timerQueue)} must name one of its input queues (${s.inputs.join(', ')})`,
        );
      }
      if (q.partitions !== 1)
        throw new Error(
          `service ${s.name}: timer queue "${q.name}" has ${q.partitions} partitions; a timer queue must have 1`,
        );
      const intervalMs = Number(s.settings.timerIntervalMs);
      if (!(Number.isInteger(intervalMs) && intervalMs >= 1))
        throw new Error(
          `service ${s.name}: settings.timerIntervalMs must be an integer >= 1 (ms), timerIntervalMs=${String(s.settings.timerIntervalMs)}`,
        );
      const data: TimerData = {
        service: s.name,
        queue: q.name,
        dir: partitionDir(topology, q.name, 0),
        segmentBytes: q.segmentBytes,
        fsync: q.fsync,
        intervalMs,
        bus,
      };
      const shared = { [TIMER_SHARED.notifier]: notifiers.get(inputKey(q.name, 0))! };
      groups.push({
        name: `timer:${s.name}`,
        stage: 0,
        start: async (launcher) => {
          await launcher
            .launch({ name: `timer:${s.name}`, module: ACTOR_MODULES.timer, data, shared })
            .ready();
        },
      });
    }
    const hostData: ServiceHostData = {
      service: s.name,
      moduleFile: s.module,
      bus,
      transactionalId: transactionalIdOf(topology, s.name),
      settings: s.settings,
      inputs,
      output: {
        queue: s.output,
        dir: partitionDir(topology, s.output, 0),
        segmentBytes: out.segmentBytes,
        fsync: out.fsync,
      },
      startFrom: s.startFrom,
      inputsReplay: s.inputsReplay,
      batchSizeMax: s.batchSizeMax,
      emitDuringReplay: s.emitDuringReplay,
      errors: {
        retriesMax: s.errors.retriesMax,
        retryBackoffMs: s.errors.retryBackoffMs,
        onFailure: s.errors.onFailure,
      },
      deadLetter: deadLetterOf(topology, s),
      recordBytesMax: topology.rings.recordBytesMax,
    };
    groups.push({
      name: `service:${s.name}`,
      stage: depthOf(s.name, []),
      start: async (launcher) => {
        const doorbell = createDoorbell();
        const shared: Record<string, SharedArrayBuffer> = {
          [HOST_SHARED.doorbell]: doorbell,
          [HOST_SHARED.positions]: createPositions(inputs.length),
        };
        const rings = new Map<string, SharedArrayBuffer>();
        for (const input of inputs) {
          const key = inputKey(input.queue, input.partition);
          const ring = createRing(topology.rings.capacityBytes);
          rings.set(key, ring);
          shared[HOST_SHARED.ring(key)] = ring;
          shared[HOST_SHARED.notifier(key)] = notifiers.get(key)!;
        }
        shared[HOST_SHARED.notifier(inputKey(s.output, 0))] = notifiers.get(inputKey(s.output, 0))!;
        if (hostData.deadLetter) {
          const dk = inputKey(hostData.deadLetter.queue, 0);
          shared[HOST_SHARED.notifier(dk)] = notifiers.get(dk)!;
        }
        const host = launcher.launch({
          name: `service:${s.name}`,
          module: ACTOR_MODULES.service,
          data: hostData,
          shared,
          drainOrder: 1,
        });
        const ready = (await host.ready()) as ServiceReadyInfo;
        for (const input of inputs) {
          const key = inputKey(input.queue, input.partition);
          const data: QueueReaderData = {
            queue: input.queue,
            partition: input.partition,
            dir: input.dir,
            from: ready.from[key],
            batchSizeMax: s.batchSizeMax,
            bus,
          };
          launcher.launch({
            name: `reader:${key}>${s.name}`,
            module: ACTOR_MODULES.reader,
            data,
            shared: {
              [READER_SHARED.ring]: rings.get(key)!,
              [READER_SHARED.doorbell]: doorbell,
              [READER_SHARED.notifier]: notifiers.get(key)!,
              [READER_SHARED.position]: createReaderPosition(),
            },
            drainOrder: 0,
          });
        }
      },
    });
  }
  groups.push(...processorGroups(topology, options));
  // Sinks drain after every writer of their queues.
  const sinkStage = 1 + Math.max(0, ...groups.map((g) => g.stage));
  groups.push(
    ...sinkGroups(topology, sinkStage, (queue, partition) =>
      partitionDir(topology, queue, partition),
    ),
  );
  return { groups, notifiers, shipped };
}

/**
 * One group per processor, each one actor `processor:<name>` in its own worker, at stage 1
 * (drained after the capture pumps, with the first services). On the journal bus every (re)start
 * gets a fresh connection to the bus (options.connectBus); what the previous worker had open on
 * the bus (group membership, an open transaction) closes with its port.
 */
function processorGroups(topology: Topology, options: PlanOptions): GroupSpec[] {
  const b = topology.bus;
  const bus: ProcessorData['bus'] =
    b.kind === 'kafka'
      ? { kind: 'kafka', ...kafkaConnectionOf(b), recordBytesMax: b.recordBytesMax }
      : { kind: 'journal' };
  return topology.processors.map((p): GroupSpec => {
    const data: ProcessorData = { topology: topology.name, processor: p, bus };
    const name = `processor:${p.name}`;
    return {
      name,
      stage: 1,
      start: async (launcher) => {
        let ports: Record<string, MessagePort> = {};
        if (bus.kind === 'journal') {
          if (!options.connectBus)
            throw new Error(
              `${name}: no connection to the topology's journal bus (start the topology with startTopology)`,
            );
          ports = { [PROCESSOR_PORTS.bus]: options.connectBus() };
        }
        await launcher.launch({ name, module: ACTOR_MODULES.processor, data, ports }).ready();
      },
    };
  });
}
