/**
 * The Kafka shapes of the fault suite (`npm run faults -- --kafka`): the lww-product service of
 * the `service-output` shape (OUTPUT replay, 3 input topics, 4 partitions) on a topology whose
 * bus is a real Kafka cluster started by the shape for itself (testing/kafka-broker.ts, never a
 * broker someone else uses), with broker faults on top of the common ones:
 *
 * - `kafka-output` (1 node): `broker-restart`, the broker stopped (SIGTERM or kill -9, by seed)
 *   for 1-8 s while the service commits transaction after transaction, then started again on
 *   the same port and data;
 * - `kafka3-output` (3 nodes, replication factor 3, min.insync.replicas 2): `leader-kill`, kill
 *   -9 of the node leading the output partition (the service's transactions go there) for
 *   1-8 s, inputs still produced meanwhile; `controller-kill`, the same for the active
 *   controller; `broker-restart` of a random node.
 *
 * Both also take the network faults (faults/network.ts: every packet, or a share, between
 * `sluice run` and the cluster dropped; the nodes' own traffic untouched).
 *
 * Checks (test/replay-helpers.ts verifyLwwOutput over a read_committed reader of the output
 * topic): every input processed once and in order per partition, every output once, every
 * output's state equal to the reference after its input; every start rebuilt the reference
 * state; `sluice run` never exited by itself and was healthy again after every fault.
 */
import fs from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import kafkajs from 'kafkajs';
import { startKafka, type KafkaCluster } from '../testing/kafka-broker.js';
import { kafkaBackend, type TestBackend } from '../test/lib/backends.js';
import { appendLwwInputsTo, verifyLwwOutput, type InputValues } from '../test/replay-helpers.js';
import { TopologyProcess, REPO_ROOT, between, FAULT_BOUNDS } from './harness.js';
import {
  commonFaults,
  injectCommon,
  faultLoop,
  recover,
  checkAll,
  type Shape,
  type ShapeContext,
  type FaultTarget,
} from './shape.js';
import { reportFinalVerdict, TAIL_ONLY } from './services.js';
import { NetScope } from './network.js';

/** Names of the broker faults. */
export type KafkaFault = 'broker-restart' | 'leader-kill' | 'controller-kill';

const QUEUES = [
  { name: 'a', partitions: 1 },
  { name: 'b', partitions: 1 },
  { name: 'c', partitions: 2 },
];

/** The Kafka shape on a cluster of `nodes` nodes (see the file comment). */
export function kafkaShape(nodes: 1 | 3): Shape {
  const name = nodes === 1 ? 'kafka-output' : 'kafka3-output';
  return {
    name,
    async run(ctx: ShapeContext) {
      ctx.ledger.info(`${name}: starting a ${nodes}-node Kafka cluster of its own`);
      // A node started again on a loaded machine took over 90 s (kafka.sh's default) to serve
      // metadata; the suite measures Sluice, not the JVM, so it waits longer.
      process.env.KAFKA_READY_TIMEOUT_S ??= '220';
      const cluster = await startKafka({ brokers: nodes, dir: path.join(ctx.dir, 'kafka') });
      let backend: TestBackend | null = null;
      let admin: kafkajs.Admin | null = null;
      let proc: TopologyProcess | null = null;
      // Network faults between the topology and the cluster; the nodes' own traffic (replication,
      // the controller quorum) and the suite's producer and checks keep theirs.
      const net = ctx.net ? NetScope.open(name, [ctx.httpPort]) : null;
      try {
        backend = await kafkaBackend(`faults-${nodes}`, {
          brokers: cluster.brokers,
          release: async () => undefined,
        });
        admin = new kafkajs.Kafka({
          brokers: cluster.brokers,
          logLevel: kafkajs.logLevel.NOTHING,
        }).admin();
        await admin.connect();
        proc = await runOn(ctx, name, nodes, cluster, backend, admin, net);
      } finally {
        if (proc?.running) await proc.kill9();
        proc?.close();
        net?.close();
        await admin?.disconnect().catch(() => undefined);
        await backend?.close().catch(() => undefined);
        await cluster.stop({ kill: true });
      }
    },
  };
}

async function runOn(
  ctx: ShapeContext,
  name: string,
  nodes: 1 | 3,
  cluster: KafkaCluster,
  backend: TestBackend,
  admin: kafkajs.Admin,
  net: NetScope | null,
): Promise<TopologyProcess> {
  const q = (n: string) => backend.queue(n);
  const dataDir = path.join(ctx.dir, 'data');
  const liveFile = path.join(ctx.dir, 'live.jsonl');
  const file = path.join(ctx.dir, 'topology.yaml');
  const module = path.join(REPO_ROOT, 'dist/test/fixtures/services/lww-product.js');
  fs.writeFileSync(
    file,
    [
      `name: faults-${name}`,
      `dataDir: ${JSON.stringify(dataDir)}`,
      ...backend.busLines,
      // The final drain's last commit may meet a cluster whose transaction coordinator is still
      // moving after the last fault (a killed controller or leader): kafkajs retries a commit for
      // up to about 24 s (KAFKA_PRODUCER_RETRY), so 10 s (the default) terminated a service mid
      // commit (seed 8, 2026-12-04; nothing lost). README: raise drainTimeoutMs for such clusters.
      'supervisor: { backoffMaxMs: 1000, drainTimeoutMs: 60000 }',
      'queues:',
      ...QUEUES.map((x) => `  - { name: ${q(x.name)}, partitions: ${x.partitions} }`),
      `  - { name: ${q('out')} }`,
      'services:',
      `  - name: ${backend.service('lww')}`,
      `    module: ${JSON.stringify(module)}`,
      `    inputs: [${QUEUES.map((x) => q(x.name)).join(', ')}]`,
      `    output: ${q('out')}`,
      '    inputsReplay: OUTPUT',
      '    startFrom: LAST_WRITTEN',
      '    batchSizeMax: 32',
      `    settings: ${JSON.stringify({ spinUs: 40, liveFile })}`,
      '',
    ].join('\n'),
  );
  await backend.createQueues([
    ...QUEUES.map((x) => ({ name: q(x.name), partitions: x.partitions })),
    { name: q('out'), partitions: 1 },
  ]);
  const proc = new TopologyProcess({
    file,
    httpPort: ctx.httpPort,
    logFile: path.join(ctx.dir, 'sluice.log'),
    faultDir: path.join(ctx.dir, 'worker-faults'),
    ...(net ? { cgroupProcs: net.procsFile } : {}),
  });
  const inputs = QUEUES.flatMap((x) =>
    Array.from({ length: x.partitions }, (_, p) => ({ queue: q(x.name), partition: p })),
  );
  const values: InputValues = new Map();
  const verify = (final: boolean): string[] => {
    try {
      verifyLwwOutput(
        backend.tailer(dataDir, q('out'), 0),
        inputs,
        values,
        'processed',
        false,
        name,
      );
      return [];
    } catch (e) {
      const m = (e as Error).message;
      return !final && proc.running && TAIL_ONLY.test(m) ? [] : [m];
    }
  };
  const append = (n: number) => appendLwwInputsTo(backend, dataDir, inputs, n, ctx.random, values);
  await append(500);
  const t: FaultTarget = {
    shape: name,
    ctx,
    proc,
    disk: null,
    net,
    netPeer: `the Kafka cluster (${cluster.brokers.join(', ')})`,
    check: () => verify(false),
  };
  proc.start();
  if ((await recover(t, 'first start')) === null) return proc;
  const t0 = Date.now();
  const brokerFaults: KafkaFault[] =
    nodes === 1
      ? ['broker-restart', 'broker-restart']
      : ['leader-kill', 'leader-kill', 'controller-kill', 'broker-restart'];
  const n = await faultLoop(
    ctx,
    [...commonFaults(t), ...brokerFaults],
    async (kind) => {
      // New inputs before each fault, so that it lands with transactions in flight.
      await append(between(ctx.random, 50, 400));
      if (!(brokerFaults as string[]).includes(kind))
        return injectCommon(t, kind as Parameters<typeof injectCommon>[1], t0);
      await injectBroker(
        t,
        kind as KafkaFault,
        t0,
        { nodes, cluster, admin, outTopic: q('out') },
        () => (nodes === 3 ? append(between(ctx.random, 50, 200)) : Promise.resolve()),
      );
      return true;
    },
    [100, 1200],
  );
  ctx.ledger.info(`${name}: ${n} faults injected; draining`);
  if (!proc.running) proc.start();
  await recover(t, 'start before the final drain');
  // The final drain checks the end state; it is not one more fault: it comes once every input's
  // effect can be read back and the topology is healthy again, so a service still restarting
  // after the last fault (its replay and InitProducerId waiting on a cluster that lost a node)
  // is not asked to drain mid-way (seed 8: drain timeout, exit 1, nothing lost). A drain that
  // lands in such a restart is left to supervisor.drainTimeoutMs (docs/FAULTS.md).
  const caughtUpBy = Date.now() + FAULT_BOUNDS.recoveryMs;
  while (Date.now() < caughtUpBy && verify(true).length > 0) await sleep(1000);
  await recover(t, 'caught up before the final drain');
  const code = await proc.stop();
  if (code !== 0) ctx.ledger.violation(name, `the final drain exited with code ${code}`);
  await checkAll({ ...t, check: () => verify(true) });
  let verdict: ReturnType<typeof verifyLwwOutput> | null = null;
  try {
    verdict = verifyLwwOutput(
      backend.tailer(dataDir, q('out'), 0),
      inputs,
      values,
      'processed',
      false,
      name,
    );
  } catch {
    // reported by the check above
  }
  if (verdict) reportFinalVerdict(ctx, name, verdict, values, liveFile, proc.starts);
  return proc;
}

/** What a broker fault needs. */
interface KafkaTarget {
  nodes: 1 | 3;
  cluster: KafkaCluster;
  admin: kafkajs.Admin;
  /** The service's output topic (its partition 0 leader is the `leader-kill` victim). */
  outTopic: string;
}

/** The node `fault` hits: the output partition's leader, the active controller, or any node. */
async function victim(k: KafkaTarget, fault: KafkaFault, random: () => number): Promise<number> {
  if (k.nodes === 1) return 1;
  if (fault === 'leader-kill') {
    const meta = await k.admin.fetchTopicMetadata({ topics: [k.outTopic] });
    const leader = meta.topics[0]?.partitions.find((p) => p.partitionId === 0)?.leader;
    if (leader !== undefined && leader >= 1 && leader <= 3) return leader;
  }
  if (fault === 'controller-kill') {
    const c = (await k.admin.describeCluster()).controller;
    if (c !== null && c >= 1 && c <= 3) return c;
  }
  return between(random, 1, 3);
}

/**
 * Stops one node (kill -9 for the leader and controller faults; SIGTERM or kill -9 by seed for a
 * restart), holds it down 1-8 s while `during` runs (inputs produced on a cluster that still has
 * a quorum), starts it again, and waits for the topology to be healthy.
 */
async function injectBroker(
  t: FaultTarget,
  fault: KafkaFault,
  t0: number,
  k: KafkaTarget,
  during: () => Promise<void>,
): Promise<void> {
  const r = t.ctx.random;
  const at = Date.now() - t0;
  const kill = fault !== 'broker-restart' || r() < 0.5;
  const holdMs = between(r, 1000, 8000);
  const node = await victim(k, fault, r);
  await k.cluster.stopBroker(node, { kill });
  const held = Date.now();
  await during();
  await sleep(Math.max(0, holdMs - (Date.now() - held)));
  // The supervisor must wait the broker out: no exit while it is down.
  for (const e of t.proc.unexpectedExits.splice(0)) t.ctx.ledger.violation(t.shape, e);
  await k.cluster.startBroker(node);
  const what = `node ${node}${fault === 'leader-kill' ? ` (leader of ${k.outTopic}/0)` : fault === 'controller-kill' ? ' (active controller)' : ''} ${kill ? 'killed -9' : 'stopped'} for ${holdMs} ms`;
  const ms = await recover(t, `after ${what}`);
  t.ctx.ledger.fault({ shape: t.shape, fault, atMs: at, detail: what, recoveredMs: ms });
  await checkAll(t);
}
