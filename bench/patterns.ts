/**
 * Pattern benchmark: records/s of every pattern of engine/patterns (durable, pub/sub, compacted,
 * state-and-event, rpc) on each backend (memory; journal with fsync 'batch', the default, a
 * fresh temp directory per cell; kafka on librdkafka's mock cluster, one cluster for all kafka
 * cells), with raw kafkajs produce and consume on the same mock in the same run as the baseline
 * for the kafka rows.
 *
 * Method, common to all cells: topics of 4 partitions, 100-byte values carrying a sequence number
 * (uint32, big endian, in the first 4 bytes), keys `k<i % 1000>`, pre-fills in sends of 1000
 * records. Each cell gets a fresh bus and fresh topics. The main thread waits for the end with
 * 1 ms timers (a setImmediate spin would take a core from the journal's fdatasync on the thread
 * pool). Every cell checks what it counted against the sequence numbers and throws on a lost or
 * duplicated record. What is timed, per pattern:
 * - durable: N pre-filled inputs consumed, processed (one output per input, to a second topic)
 *   and committed (outputs + positions in one transaction, group commit as the pattern's
 *   default). Clock from the first onNext call (so the kafka group join is not timed) to
 *   `stats.recordsCommitted` = N. Afterwards the output topic is read back: exactly the N inputs,
 *   once each. `batch` 500 (the bus default pollRecordsMax). The processor forwards each input's
 *   value; the row `durable (new values)` is the same with a new Uint8Array copy per output, and
 *   `durable (allocValue)` with the copy built in `bus.allocValue(n)`.
 * - pub/sub: records delivered/s while a producer sends N records in sends of 100 (each send
 *   awaited, producer and subscriber in one process). Clock from the first send to the Nth
 *   delivery.
 * - compacted load: N pre-filled records (1000 keys) read into the map. Clock from
 *   startCompacted() to `ready` (after onSnapshot), so the consumer's creation and assignment are
 *   timed; the snapshot must hold every key with its last value. The same start on an empty topic
 *   is timed before it and printed in the notes: the load's fixed cost.
 * - compacted live: after the load, N more records sent as in pub/sub; each onNext must get its
 *   key's previous value. Clock from the first send to the Nth onNext.
 * - state-and-event: N pre-filled events; the processor increments a per-key counter kept as a
 *   100-byte state (one state record per event, committed with the event positions). Clock from
 *   the first onNext to `stats.eventsCommitted` = N; afterwards every key's counter must equal
 *   its event count.
 * - rpc: N request/response round trips (the responder echoes the request), `RPC_CONCURRENCY`
 *   requests outstanding (that many async senders on one RpcSender), responder and sender in one
 *   process. Clock from the first send to the last response.
 * Raw kafkajs baseline: bench/lib/raw-kafkajs.ts (the code bench/bus.ts runs), N records: produce
 * with sendBatch, acks -1, sends of 1000; consume read_committed, maxWaitTimeInMs 100, kafkajs'
 * default fetch sizes, 3 passes. The kafka bus uses the same settings (its defaults).
 *
 * N per cell is in `RECORDS` below, chosen so the whole run stays near 2 minutes on this 2-CPU
 * VM (most of it untimed: pre-fills, group joins, read-backs) with cells of 0.5-12 s. Compacted
 * load on memory and journal stays under 0.6 s: its untimed pre-fill is several times slower
 * than the load, so a longer load would cost far more run time. The kafka mock is an order of
 * magnitude or more slower per record, so its N is smaller; rpc on the journal (one fdatasync per
 * request and per response send) gets a smaller N too. Env PATTERN_BENCH_SCALE multiplies every
 * N (default 1); PATTERN_BENCH_ONLY (a comma list of cell names, e.g. `durable,rpc`) runs only those.
 *
 * Run: `node dist/bench/run.js patterns` (prints a markdown table).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import {
  createJournalBus,
  createKafkaBus,
  createMemoryBus,
  startKafkaMockCluster,
  type BusBackend,
  type ConsumedRecord,
  type KafkaMockCluster,
  type ProducerRecord,
} from '../engine/bus/index.js';
import {
  bytesCodec,
  startCompacted,
  startDurable,
  startPubSub,
  startRpcResponder,
  startRpcSender,
  startStateAndEvent,
} from '../engine/patterns/index.js';
import { benchRawKafkajs, CONSUME_PASSES, PARTITIONS, VALUE_BYTES } from './lib/raw-kafkajs.js';

const KEYS = 1000;
const PREFILL_SEND_RECORDS = 1000;
const LIVE_SEND_RECORDS = 100;
const BATCH_SIZE_MAX = 500;
const RPC_CONCURRENCY = 32;
/** Bound on any one wait of a cell, ms: a pattern that stops delivering fails the run, never hangs it. */
const CELL_TIMEOUT_MS = 60_000;

type Measure =
  | 'durable'
  | 'durable (new values)'
  | 'durable (allocValue)'
  | 'pub/sub'
  | 'compacted load'
  | 'compacted live'
  | 'state-and-event'
  | 'rpc';
type BackendName = 'memory' | 'journal' | 'kafka';

/** Records (or round trips) per cell, before PATTERN_BENCH_SCALE. */
const RECORDS: Record<Measure, Record<BackendName, number>> = {
  durable: { memory: 400_000, journal: 400_000, kafka: 30_000 },
  'durable (new values)': { memory: 400_000, journal: 400_000, kafka: 30_000 },
  'durable (allocValue)': { memory: 400_000, journal: 400_000, kafka: 30_000 },
  'pub/sub': { memory: 400_000, journal: 150_000, kafka: 60_000 },
  'compacted load': { memory: 800_000, journal: 800_000, kafka: 40_000 },
  'compacted live': { memory: 200_000, journal: 200_000, kafka: 20_000 },
  'state-and-event': { memory: 200_000, journal: 200_000, kafka: 40_000 },
  rpc: { memory: 50_000, journal: 5_000, kafka: 1_000 },
};

interface Cell {
  records: number;
  ms: number;
  note: string;
}

const now = (): number => performance.now();
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Waits (1 ms timers) until `done()`; throws after CELL_TIMEOUT_MS naming `what`. */
async function waitUntil(done: () => boolean, what: () => string): Promise<void> {
  const deadline = Date.now() + CELL_TIMEOUT_MS;
  while (!done()) {
    if (Date.now() > deadline)
      throw new Error(`pattern bench: no end within ${CELL_TIMEOUT_MS} ms, ${what()}`);
    await sleep(1);
  }
}

function seqValue(seq: number): Uint8Array {
  const v = new Uint8Array(VALUE_BYTES).fill(0x61);
  new DataView(v.buffer).setUint32(0, seq);
  return v;
}

function seqOf(v: Uint8Array | null): number {
  if (v === null || v.byteLength < 4)
    throw new Error(
      `pattern bench: record without a sequence number, bytes=${v?.byteLength ?? null}`,
    );
  return new DataView(v.buffer, v.byteOffset, v.byteLength).getUint32(0);
}

/**
 * Counts sequence numbers 0..n-1 seen, remembering duplicates and strangers instead of throwing
 * where they are seen (a throw inside a processor would be caught by the pattern).
 */
class Tally {
  readonly seen: Uint8Array;
  count = 0;
  readonly errors: string[] = [];
  constructor(
    readonly what: string,
    readonly n: number,
    readonly base = 0,
  ) {
    this.seen = new Uint8Array(n);
  }
  mark(seq: number): void {
    const i = seq - this.base;
    if (i < 0 || i >= this.n) this.error(`sequence number out of range, seq=${seq}`);
    else if (this.seen[i]) this.error(`record delivered twice, seq=${seq}`);
    else {
      this.seen[i] = 1;
      this.count++;
    }
  }
  error(message: string): void {
    if (this.errors.length < 10) this.errors.push(message);
    else this.errors[9] = '...';
  }
  /** Throws unless every sequence number was seen exactly once and nothing else was. */
  check(): void {
    if (this.errors.length > 0 || this.count !== this.n) {
      throw new Error(
        `pattern bench ${this.what}: ${this.count} of ${this.n} records seen once; ${this.errors.join('; ') || 'no duplicates'}`,
      );
    }
  }
}

function records(topic: string, from: number, to: number): ProducerRecord[] {
  const out: ProducerRecord[] = [];
  for (let i = from; i < to; i++) out.push({ topic, key: `k${i % KEYS}`, value: seqValue(i) });
  return out;
}

async function prefill(bus: BusBackend, topic: string, n: number): Promise<void> {
  const p = await bus.producer();
  for (let i = 0; i < n; i += PREFILL_SEND_RECORDS)
    await p.send(records(topic, i, Math.min(n, i + PREFILL_SEND_RECORDS)));
  await p.close();
}

/** Sends records `base`..`base+n-1` in awaited sends of LIVE_SEND_RECORDS; returns the time of the first send. */
async function sendLive(bus: BusBackend, topic: string, base: number, n: number): Promise<number> {
  const sends: ProducerRecord[][] = [];
  for (let i = base; i < base + n; i += LIVE_SEND_RECORDS)
    sends.push(records(topic, i, Math.min(base + n, i + LIVE_SEND_RECORDS)));
  const p = await bus.producer();
  const t0 = now();
  for (const s of sends) await p.send(s);
  await p.close();
  return t0;
}

let topicSeq = 0;
/** Topic names unique within the run: kafka cells share one mock cluster. */
const topicName = (base: string): string => `${base}-${++topicSeq}`;

/**
 * The durable cell, by how the processor makes each output's value: 'forward' hands on its input's
 * value (the consumed bytes, which the bus may store without a copy); 'new' copies the input's
 * bytes into a new Uint8Array (a processor that builds its outputs the plain way); 'alloc' copies
 * them into `bus.allocValue(n)` (the same, built in the bus's value slab).
 */
async function durable(
  bus: BusBackend,
  n: number,
  values: 'forward' | 'new' | 'alloc',
): Promise<Cell> {
  const [input, output] = [topicName('durable-in'), topicName('durable-out')];
  await bus.createTopics([
    { name: input, partitions: PARTITIONS },
    { name: output, partitions: PARTITIONS },
  ]);
  await prefill(bus, input, n);
  let t0 = 0;
  const build = (v: Uint8Array): Uint8Array => {
    const out = bus.allocValue(v.byteLength);
    out.set(v);
    return out;
  };
  // Each backend's default (see DurableOptions.fencing), named so the row says which ran.
  const fencing = bus.kind === 'kafka' ? 'partition' : 'member';
  const sub = startDurable({
    bus,
    groupId: topicName('durable-group'),
    topics: [input],
    transactionalId: topicName('durable-tx'),
    codec: bytesCodec,
    batchSizeMax: BATCH_SIZE_MAX,
    fencing,
    processor: {
      onNext: (rs) => {
        if (t0 === 0) t0 = now();
        if (values === 'forward')
          return rs.map((r) => ({ topic: output, key: r.key, value: r.value }));
        if (values === 'new')
          return rs.map((r) => ({
            topic: output,
            key: r.key,
            value: r.value === null ? null : new Uint8Array(r.value),
          }));
        return rs.map((r) => ({
          topic: output,
          key: r.key,
          value: r.value === null ? null : build(r.value),
        }));
      },
    },
  });
  await sub.ready;
  await waitUntil(
    () => sub.stats.recordsCommitted >= n,
    () => `durable: ${sub.stats.recordsCommitted} of ${n} committed`,
  );
  const ms = now() - t0;
  const { recordsCommitted, batchesCommitted, batchesFailed } = sub.stats;
  await sub.stop();
  if (recordsCommitted !== n)
    throw new Error(`pattern bench durable: ${recordsCommitted} inputs committed, ${n} sent`);
  const tally = new Tally('durable outputs', n);
  await drain(bus, output, (r) => tally.mark(seqOf(r.value)));
  tally.check();
  return {
    records: n,
    ms,
    note: `${Math.round(recordsCommitted / batchesCommitted)} records/commit, ${batchesFailed} failed batches, fencing ${fencing}`,
  };
}

/** Reads `topic` from the start to its end now (consumer without a group), handing each record to `onRecord`. */
async function drain(
  bus: BusBackend,
  topic: string,
  onRecord: (r: ConsumedRecord) => void,
): Promise<void> {
  const tps = Array.from({ length: PARTITIONS }, (_, partition) => ({ topic, partition }));
  const ends = await bus.offsets(tps);
  const c = await bus.consumer({ pollRecordsMax: 5000 });
  try {
    await c.assign(tps);
    await c.seekToBeginning(tps);
    const deadline = Date.now() + CELL_TIMEOUT_MS;
    while (tps.some((tp, i) => c.position(tp) < ends[i]!.end)) {
      if (Date.now() > deadline)
        throw new Error(`pattern bench: ${topic} not read back within ${CELL_TIMEOUT_MS} ms`);
      for (const r of await c.poll({ timeoutMs: 100 })) onRecord(r);
    }
  } finally {
    await c.close();
  }
}

async function pubsub(bus: BusBackend, n: number): Promise<Cell> {
  const topic = topicName('pubsub');
  await bus.createTopics([{ name: topic, partitions: PARTITIONS }]);
  const tally = new Tally('pub/sub', n);
  const sub = startPubSub({
    bus,
    topic,
    codec: bytesCodec,
    processor: { onNext: (r) => tally.mark(seqOf(r.value)) },
    onError: (e) => tally.error(`onError: ${(e as Error).message}`),
  });
  await sub.ready;
  const t0 = await sendLive(bus, topic, 0, n);
  await waitUntil(
    () => tally.count >= n || tally.errors.length > 0,
    () => `pub/sub: ${tally.count} of ${n} delivered`,
  );
  const ms = now() - t0;
  await sub.stop();
  tally.check();
  return { records: n, ms, note: `sends of ${LIVE_SEND_RECORDS}` };
}

/** Compacted: the load of `n` pre-filled records, then `live` updates. */
async function compacted(bus: BusBackend, n: number, live: number): Promise<[Cell, Cell]> {
  const [topic, empty] = [topicName('compacted'), topicName('compacted-empty')];
  await bus.createTopics([
    { name: topic, partitions: PARTITIONS, compacted: true },
    { name: empty, partitions: PARTITIONS, compacted: true },
  ]);
  // The same start on an empty topic: the load's fixed cost (consumer creation, assignment,
  // end offsets), printed in the notes so a short load is not read as a per-record rate.
  const e0 = now();
  const emptySub = startCompacted({
    bus,
    topic: empty,
    codec: bytesCodec,
    processor: { onSnapshot: () => undefined, onNext: () => undefined },
  });
  await emptySub.ready;
  const emptyMs = now() - e0;
  await emptySub.stop();
  await prefill(bus, topic, n);
  /** Last sequence number written per key index. */
  const last = new Int32Array(KEYS).fill(-1);
  for (let i = 0; i < n; i++) last[i % KEYS] = i;
  const tally = new Tally('compacted live', live, n);
  let snapshotError = '';
  const t0 = now();
  const sub = startCompacted({
    bus,
    topic,
    codec: bytesCodec,
    processor: {
      onSnapshot: (map) => {
        let good = 0;
        for (let k = 0; k < KEYS; k++)
          if (last[k]! >= 0 && map.has(`k${k}`) && seqOf(map.get(`k${k}`)!) === last[k]) good++;
        const expected = Math.min(n, KEYS);
        if (good !== expected || map.size !== expected)
          snapshotError = `snapshot has ${map.size} keys, ${good} with their last value, ${expected} expected`;
      },
      onNext: (r, previous) => {
        const seq = seqOf(r.value);
        const k = seq % KEYS;
        const want = last[k]!;
        const got = previous === null ? -1 : seqOf(previous);
        if (got !== want) tally.error(`key k${k}: previous value ${got}, expected ${want}`);
        last[k] = seq;
        tally.mark(seq);
      },
    },
    onError: (e) => tally.error(`onError: ${(e as Error).message}`),
  });
  await sub.ready;
  const loadMs = now() - t0;
  if (snapshotError) throw new Error(`pattern bench compacted load: ${snapshotError}`);
  const t1 = await sendLive(bus, topic, n, live);
  await waitUntil(
    () => tally.count >= live || tally.errors.length > 0,
    () => `compacted live: ${tally.count} of ${live} delivered`,
  );
  const liveMs = now() - t1;
  await sub.stop();
  tally.check();
  return [
    {
      records: n,
      ms: loadMs,
      note: `${Math.min(n, KEYS)} keys; start on an empty topic ${(emptyMs / 1000).toFixed(2)} s`,
    },
    { records: live, ms: liveMs, note: `sends of ${LIVE_SEND_RECORDS}` },
  ];
}

async function stateAndEvent(bus: BusBackend, n: number): Promise<Cell> {
  const [events, states] = [topicName('sae-events'), topicName('sae-states')];
  await bus.createTopics([
    { name: events, partitions: PARTITIONS },
    { name: states, partitions: PARTITIONS, compacted: true },
  ]);
  await prefill(bus, events, n);
  const maps: ReadonlyMap<string, Uint8Array>[] = [];
  let t0 = 0;
  const sub = startStateAndEvent({
    bus,
    groupId: topicName('sae-group'),
    eventTopic: events,
    stateTopic: states,
    transactionalId: topicName('sae-tx'),
    eventCodec: bytesCodec,
    stateCodec: bytesCodec,
    batchSizeMax: BATCH_SIZE_MAX,
    listener: { onPartitionSynced: (_, m) => void maps.push(m) },
    processor: {
      onNext: (state) => {
        if (t0 === 0) t0 = now();
        return { state: seqValue((state === null ? 0 : seqOf(state)) + 1) };
      },
    },
  });
  await sub.ready;
  await waitUntil(
    () => sub.stats.eventsCommitted >= n,
    () => `state-and-event: ${sub.stats.eventsCommitted} of ${n} committed`,
  );
  const ms = now() - t0;
  const { eventsCommitted, batchesFailed } = sub.stats;
  // The pattern updates its maps after each commit, so they hold every committed event now.
  let counted = 0;
  const wrong: string[] = [];
  for (let k = 0; k < KEYS; k++) {
    const expected = Math.floor(n / KEYS) + (k < n % KEYS ? 1 : 0);
    const v = maps.find((m) => m.has(`k${k}`))?.get(`k${k}`) ?? null;
    const got = v === null ? 0 : seqOf(v);
    counted += got;
    if (got !== expected && wrong.length < 5)
      wrong.push(`k${k}: ${got} events counted, ${expected} sent`);
  }
  await sub.stop();
  if (eventsCommitted !== n || counted !== n || wrong.length > 0) {
    throw new Error(
      `pattern bench state-and-event: ${eventsCommitted} events committed, ${counted} counted in states, ${n} sent; ${wrong.join('; ')}`,
    );
  }
  return { records: n, ms, note: `${KEYS} keys, ${batchesFailed} failed batches` };
}

async function rpc(bus: BusBackend, n: number): Promise<Cell> {
  const [requestTopic, responseTopic] = [topicName('rpc-req'), topicName('rpc-resp')];
  await bus.createTopics([
    { name: requestTopic, partitions: PARTITIONS },
    { name: responseTopic, partitions: PARTITIONS },
  ]);
  const common = {
    bus,
    requestTopic,
    responseTopic,
    requestCodec: bytesCodec,
    responseCodec: bytesCodec,
  };
  const responder = startRpcResponder({ ...common, processor: { onRequest: (r) => r.value! } });
  // A timeout fails the run (the tally counts it missing) instead of hiding a slow cell.
  const sender = startRpcSender({ ...common, timeoutMs: CELL_TIMEOUT_MS });
  await Promise.all([responder.ready, sender.ready]);
  const tally = new Tally('rpc', n);
  let next = 0;
  const t0 = now();
  await Promise.all(
    Array.from({ length: RPC_CONCURRENCY }, async () => {
      while (next < n) {
        const seq = next++;
        try {
          const response = await sender.send(seqValue(seq), { key: `k${seq % KEYS}` });
          if (seqOf(response) !== seq)
            tally.error(`request ${seq} answered with ${seqOf(response)}`);
          tally.mark(seq);
        } catch (e) {
          tally.error(`request ${seq}: ${(e as Error).message}`);
        }
      }
    }),
  );
  const ms = now() - t0;
  const late = sender.stats.lateResponses;
  await sender.stop();
  await responder.stop();
  tally.check();
  if (late !== 0) throw new Error(`pattern bench rpc: ${late} responses without a waiting request`);
  return { records: n, ms, note: `${RPC_CONCURRENCY} outstanding` };
}

interface Backend {
  name: BackendName;
  label: string;
  open(): Promise<{ bus: BusBackend; cleanup(): void }>;
}

function backends(mock: KafkaMockCluster): Backend[] {
  return [
    {
      name: 'memory',
      label: 'memory',
      open: async () => ({ bus: createMemoryBus(), cleanup: () => undefined }),
    },
    {
      name: 'journal',
      label: 'journal (fsync batch)',
      open: async () => {
        const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-bench-patterns-'));
        return {
          bus: await createJournalBus({ dir, fsync: 'batch' }),
          cleanup: () => fs.rmSync(dir, { recursive: true, force: true }),
        };
      },
    },
    {
      name: 'kafka',
      label: 'kafka (mock)',
      open: async () => ({
        bus: createKafkaBus({
          brokers: mock.brokers,
          createTopics: mock.createTopics,
          idempotent: false,
        }),
        cleanup: () => undefined,
      }),
    },
  ];
}

const fmt = (x: number): string => Math.round(x).toLocaleString('en-US');

export async function main(): Promise<string> {
  const scale = Number(process.env.PATTERN_BENCH_SCALE ?? 1);
  if (!(scale > 0))
    throw new Error(
      `PATTERN_BENCH_SCALE must be > 0, PATTERN_BENCH_SCALE=${process.env.PATTERN_BENCH_SCALE}`,
    );
  const count = (m: Measure, b: BackendName): number =>
    Math.max(KEYS, Math.round(RECORDS[m][b] * scale));
  const rows: string[][] = [];
  const row = (m: string, backend: string, c: Cell): void =>
    void rows.push([
      m,
      backend,
      fmt(c.records),
      (c.ms / 1000).toFixed(2),
      fmt(c.records / (c.ms / 1000)),
      c.note,
    ]);
  const mock = await startKafkaMockCluster({ brokers: 1 });
  try {
    const all = backends(mock);
    const cells: [Measure, (bus: BusBackend, b: BackendName) => Promise<void>][] = [
      [
        'durable',
        async (bus, b) =>
          row('durable', label(b), await durable(bus, count('durable', b), 'forward')),
      ],
      [
        'durable (new values)',
        async (bus, b) =>
          row(
            'durable (new values)',
            label(b),
            await durable(bus, count('durable (new values)', b), 'new'),
          ),
      ],
      [
        'durable (allocValue)',
        async (bus, b) =>
          row(
            'durable (allocValue)',
            label(b),
            await durable(bus, count('durable (allocValue)', b), 'alloc'),
          ),
      ],
      [
        'pub/sub',
        async (bus, b) => row('pub/sub', label(b), await pubsub(bus, count('pub/sub', b))),
      ],
      [
        'compacted load',
        async (bus, b) => {
          const [load, live] = await compacted(
            bus,
            count('compacted load', b),
            count('compacted live', b),
          );
          row('compacted load', label(b), load);
          row('compacted live', label(b), live);
        },
      ],
      [
        'state-and-event',
        async (bus, b) =>
          row('state-and-event', label(b), await stateAndEvent(bus, count('state-and-event', b))),
      ],
      ['rpc', async (bus, b) => row('rpc', label(b), await rpc(bus, count('rpc', b)))],
    ];
    function label(b: BackendName): string {
      return all.find((x) => x.name === b)!.label;
    }
    // PATTERN_BENCH_ONLY: a comma list of the first column's names (e.g. "durable,rpc") to run only those cells.
    const only = process.env.PATTERN_BENCH_ONLY?.split(',').map((x) => x.trim());
    const unknown = only?.filter((m) => !cells.some(([name]) => name === m)) ?? [];
    if (unknown.length > 0)
      throw new Error(
        `PATTERN_BENCH_ONLY names no cell: ${unknown.join(', ')} (cells: ${cells.map(([name]) => name).join(', ')})`,
      );
    for (const [name, run] of cells) {
      if (only && !only.includes(name)) continue;
      for (const backend of all) {
        const { bus, cleanup } = await backend.open();
        try {
          await run(bus, backend.name);
        } finally {
          await bus.close();
          cleanup();
        }
      }
    }
    // The baseline last, on the mock that has served every kafka cell (its logs grown as theirs did).
    const rawN = count('durable', 'kafka');
    const raw = await benchRawKafkajs(mock, rawN, PREFILL_SEND_RECORDS);
    rows.push([
      'raw kafkajs produce',
      'kafka (mock)',
      fmt(rawN),
      (raw.produceMs / 1000).toFixed(2),
      fmt(rawN / (raw.produceMs / 1000)),
      `sendBatch of ${PREFILL_SEND_RECORDS}, acks -1`,
    ]);
    rows.push([
      'raw kafkajs consume',
      'kafka (mock)',
      fmt(raw.consumed),
      (raw.consumeMs / 1000).toFixed(2),
      fmt(raw.consumed / (raw.consumeMs / 1000)),
      `${CONSUME_PASSES} passes, read_committed`,
    ]);
  } finally {
    await mock.stop();
  }
  return [
    `Patterns: ${VALUE_BYTES}-byte records, ${PARTITIONS} partitions, ${KEYS} keys; journal fsync 'batch' (default); kafka on librdkafka 2.0.2's mock cluster (1 broker, loopback), smaller N (an order of magnitude or more slower per record than memory). Measurements as in bench/patterns.ts's header. Raw kafkajs and the kafka bus share: acks -1, sends of ${PREFILL_SEND_RECORDS} (pre-fills), read_committed, maxWaitTimeInMs 100, kafkajs' default fetch sizes (1 MiB per partition, 10 MiB per fetch, minBytes 1).`,
    '',
    '| pattern | backend | records | s | records/s | notes |',
    '|---|---|---:|---:|---:|---|',
    ...rows.map((r) => `| ${r.join(' | ')} |`),
  ].join('\n');
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  console.log(await main());
  process.exit(0);
}
