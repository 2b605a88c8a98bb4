/**
 * Consume only: the Kafka backend's consumer vs raw kafkajs on a real broker, same run, many
 * rounds over one prefilled topic (issue 8). bench/kafka-bus.ts measures consume too, but each
 * round there produces 200,000 records first, so its consume windows are ~1 s per round; this
 * one spends its whole time in the two consumers, for CPU per record with a spread and for
 * `node --cpu-prof` runs of one side.
 *
 * Method (bench/bus.ts's consume side, unchanged): one topic of 4 partitions filled once with
 * `--records` 100-byte records (keys `k<i % 1000>`, sends of 1000, idempotent producer, acks -1);
 * then `--rounds` rounds alternating which side goes first (raw, bus, bus, raw, ...), each side
 * reading the whole topic `--passes` times (seek to 0 between) with a fresh consumer:
 * read_committed, maxWaitTimeInMs 100, kafkajs' default fetch sizes; raw kafkajs's eachBatch
 * counts the messages, the backend's poll() loop (pollRecordsMax 5000) counts the records. Each
 * pass is timed, in wall time and this process's CPU time (process.cpuUsage, user + system),
 * from the first records handed over to the last (bench/bus.ts's window), summed per side and
 * round. One untimed warm-up round per side first.
 *
 * Printed: CPU µs per record per side (sum of all rounds), backend / raw of that sum, the median
 * and range of the per-round ratios, and the rates (wall time; noisy on a shared machine).
 *
 *   node dist/bench/kafka-consume.js --brokers host:port [--records 200000] [--passes 3]
 *     [--rounds 8] [--side both|raw|bus] [--profile FILE.cpuprofile]
 *     [--baseline PATH]
 *
 * `--baseline DIST/engine/bus/index.js` (repeatable) adds a side, the backend of another build (e.g. the
 * commit before a change, built into another directory whose engine/bus/kafka/read-committed.js
 * is a symlink to this build's, so both use one kafkajs with one filter), alternated with the
 * other two in every round: a before/after ratio from the same run.
 *
 * `--side raw` or `--side bus` runs that side only; `--profile` writes a V8 CPU profile
 * (node:inspector) of the timed rounds only, without the prefill and the warm-up, for
 * bench/profile-top.ts.
 */
// First: kafkajs must load with the backend's read_committed filter installed.
import '../engine/bus/kafka/read-committed.js';
import fs from 'node:fs';
import inspector from 'node:inspector';
import path from 'node:path';
import { constants, PerformanceObserver } from 'node:perf_hooks';
import kafkajs from 'kafkajs';
import { createKafkaBus, type BusBackend, type KafkaBusOptions } from '../engine/bus/index.js';
import { cpuSince, PARTITIONS, prefillTopic } from './lib/raw-kafkajs.js';

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

function positiveInt(name: string, fallback: number): number {
  const v = arg(name);
  if (v === undefined) return fallback;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1)
    throw new Error(`--${name} must be a positive integer, got "${v}"`);
  return n;
}

/** One side's consume of `passes` passes: records read, wall ms and CPU µs inside the windows. */
interface Consumed {
  records: number;
  ms: number;
  cpuUs: number;
  /** The timed windows, [start, end] in performance.now() ms, for the GC attribution. */
  windows: [number, number][];
}

/**
 * Garbage collections of this thread (PerformanceObserver 'gc' entries: start in
 * performance.now() ms, duration ms), attributed to the timed windows after the run.
 */
const gcs: { start: number; ms: number; minor: boolean }[] = [];
new PerformanceObserver((list) => {
  for (const e of list.getEntries())
    gcs.push({
      start: e.startTime,
      ms: e.duration,
      minor:
        (e as unknown as { detail?: { kind?: number } }).detail?.kind ===
        constants.NODE_PERFORMANCE_GC_MINOR,
    });
}).observe({ entryTypes: ['gc'] });

/**
 * GC pause ms (wall time of the main thread's pauses, so it includes waits for a core) and the
 * number of scavenges (minor GCs: about proportional to the bytes allocated) whose start falls
 * inside one of `windows`.
 */
function gcIn(windows: [number, number][]): { ms: number; scavenges: number } {
  let ms = 0;
  let scavenges = 0;
  for (const g of gcs)
    if (windows.some(([a, b]) => g.start >= a && g.start <= b)) {
      ms += g.ms;
      if (g.minor) scavenges++;
    }
  return { ms, scavenges };
}

/** Raw kafkajs: eachBatch counts; seek every partition to 0 after each pass. */
async function consumeRaw(
  brokers: string[],
  topic: string,
  records: number,
  passes: number,
): Promise<Consumed> {
  const kafka = new kafkajs.Kafka({
    brokers,
    clientId: 'bench-consume-raw',
    logLevel: kafkajs.logLevel.NOTHING,
    retry: { retries: 5, initialRetryTime: 100 },
  });
  const c = kafka.consumer({
    groupId: `${topic}-raw-${Date.now()}`,
    readUncommitted: false,
    maxWaitTimeInMs: 100,
  });
  await c.connect();
  await c.subscribe({ topic, fromBeginning: true });
  let got = 0;
  let t0 = 0;
  let ms = 0;
  let cpuUs = 0;
  const windows: [number, number][] = [];
  let cpu0 = process.cpuUsage();
  let pass = 1;
  let done: () => void = () => undefined;
  const finished = new Promise<void>((resolve) => (done = resolve));
  await c.run({
    autoCommit: false,
    eachBatch: async ({ batch, isStale }) => {
      if (isStale()) return;
      if (t0 === 0) {
        t0 = performance.now();
        cpu0 = process.cpuUsage();
      }
      got += batch.messages.length;
      if (got < records * pass) return;
      windows.push([t0, performance.now()]);
      ms += performance.now() - t0;
      cpuUs += cpuSince(cpu0);
      t0 = 0;
      if (pass++ === passes) done();
      else
        for (let partition = 0; partition < PARTITIONS; partition++)
          c.seek({ topic, partition, offset: '0' });
    },
  });
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([finished, new Promise((r) => (timer = setTimeout(r, 180_000)))]);
  clearTimeout(timer);
  await c.disconnect();
  if (got !== records * passes)
    throw new Error(`raw kafkajs: consumed ${got} of ${records * passes} records`);
  return { records: got, ms, cpuUs, windows };
}

/** The backend: poll() loop counting records; seek every partition to 0 after each pass. */
async function consumeBus(
  create: (o: KafkaBusOptions) => BusBackend,
  brokers: string[],
  topic: string,
  records: number,
  passes: number,
): Promise<Consumed> {
  const bus = create({ brokers, clientId: 'bench-consume-bus' });
  try {
    const c = await bus.consumer({ pollRecordsMax: 5000 });
    const tps = Array.from({ length: PARTITIONS }, (_, partition) => ({ topic, partition }));
    await c.assign(tps);
    let got = 0;
    let ms = 0;
    let cpuUs = 0;
    const windows: [number, number][] = [];
    const deadline = Date.now() + 180_000;
    for (let pass = 1; pass <= passes; pass++) {
      let t0 = 0;
      let cpu0 = process.cpuUsage();
      while (got < records * pass && Date.now() < deadline) {
        const n = (await c.poll({ timeoutMs: 100 })).length;
        if (n > 0 && t0 === 0) {
          t0 = performance.now();
          cpu0 = process.cpuUsage();
        }
        got += n;
      }
      windows.push([t0, performance.now()]);
      ms += performance.now() - t0;
      cpuUs += cpuSince(cpu0);
      if (pass < passes) for (const tp of tps) c.seek(tp, 0);
    }
    if (got !== records * passes)
      throw new Error(`kafka backend: consumed ${got} of ${records * passes} records`);
    return { records: got, ms, cpuUs, windows };
  } finally {
    await bus.close();
  }
}

const session = new inspector.Session();

/** Starts V8's CPU profiler in this thread (default sampling interval). */
async function startProfile(): Promise<void> {
  session.connect();
  const post = (m: string) =>
    new Promise<void>((res, rej) => session.post(m, (e) => (e ? rej(e) : res())));
  await post('Profiler.enable');
  await post('Profiler.start');
}

/** Stops the profiler started by startProfile; the profile (a .cpuprofile's JSON object). */
function stopProfile(): Promise<object> {
  return new Promise((res, rej) =>
    session.post('Profiler.stop', (e, r) => (e ? rej(e) : res(r.profile))),
  );
}

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const pct = (x: number): string => `${Math.round(x * 100)}%`;
const perRec = (c: Consumed): number => c.cpuUs / c.records;

async function main(): Promise<void> {
  const records = positiveInt('records', 200_000);
  const passes = positiveInt('passes', 3);
  const rounds = positiveInt('rounds', 8);
  const side = arg('side') ?? 'both';
  if (!['both', 'raw', 'bus'].includes(side)) throw new Error(`--side must be both, raw or bus`);
  const profile = arg('profile');
  const baselines = process.argv.flatMap((a, i) =>
    a === '--baseline' && process.argv[i + 1] ? [process.argv[i + 1]] : [],
  );
  const given = arg('brokers') ?? process.env.SLUICE_KAFKA_BROKERS;
  if (!given) throw new Error('--brokers host:port (or SLUICE_KAFKA_BROKERS) is required');
  const brokers = given.split(',').map((b) => b.trim());
  const sides: { name: string; run: () => Promise<Consumed>; rows: Consumed[] }[] = [];
  const topic = `bench-consume-${Date.now()}`;
  if (side !== 'bus')
    sides.push({
      name: 'raw kafkajs',
      run: () => consumeRaw(brokers, topic, records, passes),
      rows: [],
    });
  if (side !== 'raw')
    sides.push({
      name: 'kafka backend',
      run: () => consumeBus(createKafkaBus, brokers, topic, records, passes),
      rows: [],
    });
  for (const baseline of baselines) {
    const mod = (await import(path.resolve(baseline))) as { createKafkaBus: typeof createKafkaBus };
    sides.push({
      name: `kafka backend (${baseline})`,
      run: () => consumeBus(mod.createKafkaBus, brokers, topic, records, passes),
      rows: [],
    });
  }
  const kafka = new kafkajs.Kafka({
    brokers,
    clientId: 'bench-consume-admin',
    logLevel: kafkajs.logLevel.NOTHING,
  });
  const admin = kafka.admin();
  await admin.connect();
  try {
    await prefillTopic(kafka, admin, topic, records);
    for (const s of sides) await s.run();
    if (profile) await startProfile();
    for (let i = 0; i < rounds; i++) {
      // Rotate the order: round i starts with side i % n (two sides: raw, bus, bus, raw, ...).
      const order = sides.map((_, j) => sides[i % 2 === 0 ? j : sides.length - 1 - j]);
      for (const s of order) s.rows.push(await s.run());
      process.stderr.write(`round ${i + 1}/${rounds} done\n`);
    }
    if (profile) fs.writeFileSync(profile, JSON.stringify(await stopProfile()));
  } finally {
    await admin.deleteTopics({ topics: [topic] }).catch(() => undefined);
    await admin.disconnect();
  }
  const total = (xs: Consumed[]): Consumed =>
    xs.reduce(
      (a, c) => ({
        records: a.records + c.records,
        ms: a.ms + c.ms,
        cpuUs: a.cpuUs + c.cpuUs,
        windows: [...a.windows, ...c.windows],
      }),
      {
        records: 0,
        ms: 0,
        cpuUs: 0,
        windows: [],
      },
    );
  const lines = [
    `Consume only, real broker at ${brokers.join(',')}, node ${process.version}: ${records.toLocaleString('en-US')} records of 100 bytes in ${PARTITIONS} partitions, ${passes} passes per side and round, ${rounds} rounds alternating the order of the sides after one warm-up round per side.`,
    '',
  ];
  for (const s of sides) {
    const t = total(s.rows);
    lines.push(
      `${s.name}: CPU ${perRec(t).toFixed(3)} µs/record (rounds ${s.rows.map((c) => perRec(c).toFixed(2)).join(', ')}), GC pauses ${((gcIn(t.windows).ms * 1000) / t.records).toFixed(3)} µs/record, ${((gcIn(t.windows).scavenges * 1e5) / t.records).toFixed(2)} scavenges per 100,000 records, ${Math.round((t.records / t.ms) * 1000).toLocaleString('en-US')} records/s`,
    );
  }
  const raw = sides.find((s) => s.name === 'raw kafkajs');
  for (const s of sides) {
    if (!raw || s === raw) continue;
    const cpu = raw.rows.map((r, i) => perRec(s.rows[i]) / perRec(r));
    const rate = raw.rows.map((r, i) => s.rows[i].records / s.rows[i].ms / (r.records / r.ms));
    const tr = total(raw.rows);
    const tb = total(s.rows);
    lines.push(
      '',
      `${s.name} / raw, CPU per record: ${pct(perRec(tb) / perRec(tr))} of the sums; per round median ${pct(median(cpu))}, range ${pct(Math.min(...cpu))}-${pct(Math.max(...cpu))} (${cpu.map(pct).join(', ')})`,
      `${s.name} / raw, rate: ${pct(tb.records / tb.ms / (tr.records / tr.ms))} of the sums; per round median ${pct(median(rate))}, range ${pct(Math.min(...rate))}-${pct(Math.max(...rate))}`,
    );
  }
  console.log(lines.join('\n'));
}

await main();
