/**
 * Patterns as actors vs as a library, same run: records/s of the durable and state-and-event
 * patterns with the same handler module (bench/lib/forward-processor.ts) run
 * - as a library: startDurable / startStateAndEvent in this thread, on the bus;
 * - as an actor: a topology file's `processors:` entry, planned (planTopology) and run under a
 *   Supervisor, the pattern in its own worker thread; on the journal bus the bus stays in this
 *   thread and the worker reaches it over a MessagePort (engine/bus/remote, as startTopology).
 * Method: one fresh journal bus (fsync 'batch', the default) per cell; topics of 4 partitions,
 * N pre-filled 100-byte records (keys k<i % 1000>; JSON values for state-and-event); clock from
 * the pattern's start (library: the start call; actor: supervisor.start, so the worker's start
 * is timed; printed in parentheses: until supervisor.start resolved, the worker's start with its
 * module imports and group join) until the group's committed offsets sum to N (checked every 5
 * ms). Each mode runs twice, alternating (library, actor, actor, library); the faster is printed.
 * Kafka rows (real broker) when SLUICE_KAFKA_BROKERS is set, durable only, smaller N.
 * Run: flock /tmp/sluice-bench.lock node dist/bench/processors.js   (prints a markdown table)
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { MessageChannel } from 'node:worker_threads';
import { planTopology } from '../actors/index.js';
import {
  createJournalBus,
  createKafkaBus,
  serveBus,
  type BusBackend,
} from '../engine/bus/index.js';
import { parseTopology } from '../engine/config/index.js';
import {
  bytesCodec,
  jsonCodec,
  startDurable,
  startStateAndEvent,
  type ProcessorContext,
} from '../engine/patterns/index.js';
import { Supervisor } from '../engine/supervisor/index.js';

const PARTITIONS = 4;
const here = path.dirname(new URL(import.meta.url).pathname);
const handlerSource = path.resolve(here, '..', '..', 'bench', 'lib', 'forward-processor.ts');
const handlerCompiled = path.join(here, 'lib', 'forward-processor.js');
type Pattern = 'durable' | 'state-and-event';
let seq = 0;

async function prefill(bus: BusBackend, topic: string, n: number, json: boolean): Promise<void> {
  const p = await bus.producer();
  const pad = 'x'.repeat(80);
  for (let i = 0; i < n; i += 1000) {
    await p.send(
      Array.from({ length: Math.min(1000, n - i) }, (_, k) => ({
        topic,
        key: `k${(i + k) % 1000}`,
        value: new TextEncoder().encode(
          json ? JSON.stringify({ n: i + k, pad }) : `${String(i + k).padStart(20, '0')}${pad}`,
        ),
      })),
    );
  }
  await p.close();
}

async function committedSum(bus: BusBackend, group: string, topic: string): Promise<number> {
  const tps = Array.from({ length: PARTITIONS }, (_, partition) => ({ topic, partition }));
  return (await bus.committed(group, tps)).reduce<number>((a, b) => a + (b ?? 0), 0);
}

async function cell(
  bus: BusBackend,
  pattern: Pattern,
  mode: 'library' | 'actor',
  n: number,
  kafkaBrokers?: string[],
): Promise<{ s: number; startS: number }> {
  const id = `pb${process.pid}-${++seq}`;
  const [input, output, state, group] = [`${id}-in`, `${id}-out`, `${id}-st`, `${id}-g`];
  await bus.createTopics([
    { name: input, partitions: PARTITIONS },
    { name: output, partitions: PARTITIONS },
    { name: state, partitions: PARTITIONS, compacted: true },
  ]);
  await prefill(bus, input, n, pattern === 'state-and-event');
  let stop: () => Promise<unknown>;
  let startS = 0;
  const t0 = performance.now();
  if (mode === 'library') {
    const mod = (await import(pathToFileURL(handlerCompiled).href)) as {
      default: (c: ProcessorContext) => never;
    };
    const h = mod.default({
      name: id,
      pattern,
      inputs: [input],
      outputs: [output],
      settings: {},
      bus,
    });
    const sub =
      pattern === 'durable'
        ? startDurable({
            bus,
            groupId: group,
            topics: [input],
            transactionalId: group,
            codec: bytesCodec,
            processor: h,
          })
        : startStateAndEvent({
            bus,
            groupId: group,
            eventTopic: input,
            stateTopic: state,
            transactionalId: group,
            eventCodec: jsonCodec<never>(),
            stateCodec: jsonCodec<never>(),
            processor: h,
          });
    stop = () => sub.stop();
  } else {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'processors_bench-'));
    const text = JSON.stringify({
      name: 'bench',
      dataDir: dir,
      ...(kafkaBrokers ? { bus: { kind: 'kafka', brokers: kafkaBrokers } } : {}),
      queues: [input, output, state].map((name) => ({ name, partitions: PARTITIONS })),
      processors: [
        {
          name: id,
          pattern,
          module: handlerSource,
          inputs: [input],
          group,
          ...(pattern === 'durable'
            ? { outputs: [output], codec: 'bytes' }
            : { stateTopic: state, codec: 'json' }),
        },
      ],
    });
    const file = path.join(dir, 'topology.yaml');
    fs.writeFileSync(file, text);
    const plan = planTopology(parseTopology(text, file, { env: {} }), {
      connectBus: () => {
        const { port1, port2 } = new MessageChannel();
        serveBus(bus, port1);
        return port2;
      },
    });
    const supervisor = new Supervisor({ restartsMax: 0 });
    await supervisor.start(plan.groups);
    startS = (performance.now() - t0) / 1000;
    stop = async () => {
      await supervisor.stop();
      fs.rmSync(dir, { recursive: true, force: true });
    };
  }
  const deadline = Date.now() + 120_000;
  while ((await committedSum(bus, group, input)) < n) {
    if (Date.now() > deadline)
      throw new Error(`${pattern} ${mode}: not all ${n} inputs committed within 120 s`);
    await new Promise((r) => setTimeout(r, 5));
  }
  const s = (performance.now() - t0) / 1000;
  await stop();
  return { s, startS };
}

export async function main(): Promise<void> {
  const rows: string[] = [];
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'processors_bench-bus-'));
  const cells: { pattern: Pattern; n: number; kafka: boolean }[] = [
    { pattern: 'durable', n: 100_000, kafka: false },
    { pattern: 'state-and-event', n: 50_000, kafka: false },
    ...(process.env.SLUICE_KAFKA_BROKERS
      ? [{ pattern: 'durable' as const, n: 20_000, kafka: true }]
      : []),
  ];
  console.log(
    `| pattern | backend | records | library s | library records/s | actor s (start) | actor records/s | actor / library |`,
  );
  console.log(`|---|---|---|---|---|---|---|---|`);
  for (const c of cells) {
    const results: Record<string, { s: number; startS: number }> = {};
    // Alternating order, twice, so a drift of the machine's load hits both modes.
    for (const mode of ['library', 'actor', 'actor', 'library'] as const) {
      const brokers = c.kafka ? process.env.SLUICE_KAFKA_BROKERS!.split(',') : undefined;
      const bus = brokers
        ? createKafkaBus({ brokers })
        : await createJournalBus({ dir: path.join(root, `b${++seq}`) });
      try {
        const r = await cell(bus, c.pattern, mode, c.n, brokers);
        if (results[mode] === undefined || r.s < results[mode]!.s) results[mode] = r;
      } finally {
        await bus.close();
      }
    }
    const lib = results.library!.s;
    const act = results.actor!.s;
    const row = `| ${c.pattern} | ${c.kafka ? 'kafka (real broker)' : 'journal'} | ${c.n} | ${lib.toFixed(2)} | ${Math.round(c.n / lib)} | ${act.toFixed(2)} (${results.actor!.startS.toFixed(2)}) | ${Math.round(c.n / act)} | ${(lib / act).toFixed(2)} |`;
    console.log(row);
    rows.push(row);
  }
  fs.rmSync(root, { recursive: true, force: true });
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) await main();
