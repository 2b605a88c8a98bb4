/**
 * Durable pattern as a process on the Kafka backend: orders in, invoices out. Start it several
 * times with the same --group and the processes split the partitions of the order topic between
 * them; when one dies, the others take its partitions over at the group's committed positions.
 *
 *   node dist/examples/patterns/durable-kafka.js --brokers HOST:PORT[,HOST:PORT] --instance a
 *     [--group billing] [--input orders] [--output invoices] [--session-timeout-ms 10000]
 *     [--fencing partition|member]   default partition: one transactional producer per order
 *                partition, ids `<group>:<input>:<partition>`, so a partition's new owner fences
 *                its previous one (see engine/patterns/durable.ts); member: one per process,
 *                id `<group>-<instance>`, which on Kafka fences only the same instance's restart.
 *     [--log-level NOTHING|ERROR|WARN|INFO|DEBUG]   (kafkajs' log, on stderr)
 *
 *   node dist/examples/patterns/durable-kafka.js --brokers HOST:PORT --create-topics P [--input orders] [--output invoices]
 *     creates the input and output topics with P partitions each (existing ones with P are kept),
 *     prints {"event":"topics",...} and exits.
 *
 *   node dist/examples/patterns/durable-kafka.js --brokers HOST:PORT --produce N [--input orders]
 *     sends N orders (ids `o-<time>-<i>`, customers c1..c4 as keys) to the input topic, prints
 *     {"event":"produced",...} and exits: a producer to try the processors with.
 *
 * The topics must exist (a local broker: `bash tools/kafka/kafka.sh start`, see the README). Each process needs its own
 * --instance: it names the process in logs (clientId, `batch` header). With --fencing partition
 * every process derives the same transactionalId per order partition from --group, so whichever
 * process is assigned a partition creates its producer and so fences and aborts what a previous
 * owner (dead, or stalled past its session timeout) left open or still tries to commit. With
 * --fencing member the transactionalId is `<group>-<instance>`: unique among the running
 * processes and stable across restarts of the same one, it fences only that instance's restart.
 *
 * Stdout: one JSON line per event, for logs and for test/patterns-scaleout.test.ts:
 *   {"event":"ready",...}                             a group member, about to be assigned
 *   {"event":"assigned","partitions":[..],"committed":[..]}   gained partitions, and the group's
 *                                                     committed offsets they start from (null: none)
 *   {"event":"revoked","partitions":[..]}             lost partitions
 *   {"event":"batch","n":N,"records":R}               batch N handed to the processor
 *   {"event":"committed","n":N} | {"event":"failed","n":N}   its transaction's outcome
 *   {"event":"stopped","stats":{..}}                  after SIGTERM/SIGINT: drained, exits 0
 * Each invoice carries headers `source` (orders:partition:offset) and `batch` (instance:N).
 */
import { pathToFileURL } from 'node:url';
import {
  createKafkaBus,
  type BusBackend,
  type KafkaBusOptions,
  type TopicPartition,
} from 'sluice/bus';
import { jsonCodec, startDurable, type DurableStats, type Subscription } from 'sluice/patterns';

/** An order, keyed by customer on the input topic. */
export interface Order {
  id: string;
  customer: string;
  amountCents: number;
}
/** The invoice of one order, keyed by customer on the output topic. */
export interface Invoice {
  orderId: string;
  customer: string;
  totalCents: number;
}

/** Codecs of both topics, shared with producers and readers of them. */
export const orderCodec = jsonCodec<Order>();
export const invoiceCodec = jsonCodec<Invoice>();

/** Settings of one billing process. */
export interface BillingOptions {
  bus: BusBackend;
  groupId: string;
  /** Names this process (logs, `batch` header); with `fencing: 'member'` its transactionalId is `<groupId>-<instance>`. */
  instance: string;
  /**
   * Default 'partition': transactionalId prefix `groupId`, the same in every process, one
   * producer per order partition (`<groupId>:<input>:<partition>`).
   */
  fencing?: 'member' | 'partition';
  input: string;
  output: string;
  sessionTimeoutMs?: number;
  /** Receives one event object per line of the program's stdout (see the file comment). */
  log: (event: Record<string, unknown>) => void;
}

/**
 * Starts the billing processor: a durable subscription whose processor turns each order into its
 * invoice (20% added). Logs assignments and the outcome of every batch's transaction.
 */
export function startBilling(o: BillingOptions): Subscription & { readonly stats: DurableStats } {
  let batch = 0;
  // The pattern reports outcomes in onNext order, each covering one or more batches (one
  // transaction may hold several batches: group commit).
  let reported = 0;
  const partitions = (tps: TopicPartition[]): number[] =>
    tps.map((tp) => tp.partition).sort((a, b) => a - b);
  return startDurable({
    bus: o.bus,
    groupId: o.groupId,
    topics: [o.input],
    codec: orderCodec,
    fencing: o.fencing ?? 'partition',
    transactionalId:
      (o.fencing ?? 'partition') === 'partition' ? o.groupId : `${o.groupId}-${o.instance}`,
    sessionTimeoutMs: o.sessionTimeoutMs,
    listener: {
      assigned: async (tps) =>
        o.log({
          event: 'assigned',
          partitions: partitions(tps),
          committed: await o.bus.committed(o.groupId, tps),
        }),
      revoked: (tps) => o.log({ event: 'revoked', partitions: partitions(tps) }),
    },
    onOutcome: (outcome) => {
      for (let i = 0; i < outcome.batches; i++)
        o.log({ event: outcome.committed ? 'committed' : 'failed', n: ++reported });
    },
    processor: {
      // Outputs are returned, never sent: the pattern commits them with the consumed positions.
      onNext: (records) => {
        o.log({ event: 'batch', n: ++batch, records: records.length });
        return records.map((r) => {
          const order = r.value!;
          return {
            topic: o.output,
            key: order.customer,
            value: invoiceCodec.encode({
              orderId: order.id,
              customer: order.customer,
              totalCents: Math.round(order.amountCents * 1.2),
            }),
            headers: {
              source: `${r.topic}:${r.partition}:${r.offset}`,
              batch: `${o.instance}:${batch}`,
            },
          };
        });
      },
    },
  });
}

function arg(args: string[], name: string, fallback?: string): string {
  const i = args.indexOf(`--${name}`);
  if (i >= 0 && (args[i + 1] === undefined || args[i + 1].startsWith('--')))
    throw new Error(`--${name} needs a value`);
  const v = i >= 0 ? args[i + 1] : fallback;
  if (v === undefined) throw new Error(`--${name} is required`);
  return v;
}

/**
 * Sends `count` orders to `input` (customers c1..c4 as keys, ids unique per call) with a plain
 * producer of `bus`, and returns their ids.
 */
export async function produceOrders(
  bus: BusBackend,
  input: string,
  count: number,
): Promise<string[]> {
  const producer = await bus.producer();
  try {
    const run = Date.now().toString(36);
    const orders: Order[] = Array.from({ length: count }, (_, i) => ({
      id: `o-${run}-${i + 1}`,
      customer: `c${(i % 4) + 1}`,
      amountCents: 1000 + i,
    }));
    await producer.send(
      orders.map((o) => ({ topic: input, key: o.customer, value: orderCodec.encode(o) })),
    );
    return orders.map((o) => o.id);
  } finally {
    await producer.close();
  }
}

/**
 * The program: with --produce N sends N orders and exits; otherwise runs one billing process
 * until SIGTERM or SIGINT, then drains and exits 0.
 */
export async function main(args: string[]): Promise<void> {
  const log = (e: Record<string, unknown>): void =>
    void process.stdout.write(`${JSON.stringify(e)}\n`);
  const logLevel = arg(args, 'log-level', 'NOTHING') as KafkaBusOptions['logLevel'];
  const produce = args.includes('--produce') ? Number(arg(args, 'produce')) : null;
  if (produce !== null && !(Number.isInteger(produce) && produce > 0))
    throw new Error(`--produce needs a positive integer, --produce ${arg(args, 'produce')}`);
  const bus = createKafkaBus({
    brokers: arg(args, 'brokers').split(','),
    clientId:
      produce !== null || args.includes('--create-topics')
        ? 'billing-producer'
        : `billing-${arg(args, 'instance')}`,
    logLevel,
  });
  if (args.includes('--create-topics')) {
    const partitions = Number(arg(args, 'create-topics'));
    const topics = [arg(args, 'input', 'orders'), arg(args, 'output', 'invoices')];
    try {
      await bus.createTopics(topics.map((name) => ({ name, partitions })));
      log({ event: 'topics', topics, partitions });
    } finally {
      await bus.close();
    }
    return;
  }
  if (produce !== null) {
    try {
      const ids = await produceOrders(bus, arg(args, 'input', 'orders'), produce);
      log({
        event: 'produced',
        topic: arg(args, 'input', 'orders'),
        orders: ids.length,
        first: ids[0],
        last: ids[ids.length - 1],
      });
    } finally {
      await bus.close();
    }
    return;
  }
  const sessionTimeoutMs = Number(arg(args, 'session-timeout-ms', '10000'));
  if (!(Number.isInteger(sessionTimeoutMs) && sessionTimeoutMs > 0))
    throw new Error(
      `--session-timeout-ms needs a positive integer (ms), --session-timeout-ms ${arg(args, 'session-timeout-ms')}`,
    );
  const fencing = arg(args, 'fencing', 'partition');
  if (fencing !== 'partition' && fencing !== 'member')
    throw new Error(`--fencing is partition or member, --fencing ${fencing}`);
  const billing = startBilling({
    bus,
    groupId: arg(args, 'group', 'billing'),
    instance: arg(args, 'instance'),
    input: arg(args, 'input', 'orders'),
    output: arg(args, 'output', 'invoices'),
    sessionTimeoutMs,
    log,
    fencing,
  });
  const stop = new Promise<string>((resolve) => {
    process.once('SIGTERM', () => resolve('SIGTERM'));
    process.once('SIGINT', () => resolve('SIGINT'));
  });
  await billing.ready;
  log({ event: 'ready', instance: arg(args, 'instance'), pid: process.pid });
  const reason = await Promise.race([stop, billing.done.then(() => 'done')]);
  await billing.stop();
  log({ event: 'stopped', reason, stats: billing.stats });
  await bus.close();
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  main(process.argv.slice(2)).then(
    () => process.exit(0),
    (e: Error) => {
      process.stderr.write(`durable-kafka: ${e.message}\n`);
      process.exit(1);
    },
  );
}
