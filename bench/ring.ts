/**
 * Ring benchmark: records from a producer worker to a consumer on the main thread, at 64 B and
 * 1 KiB payloads, over
 *   - the Sluice ring (engine/ring, RingProducer.write -> RingConsumer.read), publishing each
 *     record, and again with beginBatch()/endBatch() (publication every 64 records),
 *   - worker postMessage (one structured-clone message per record),
 *   - ringbuf.js 0.4.0 (npm; byte-stream SPSC ring: push/pop one record at a time),
 * and, as the practical limit, a bare single-thread loop that writes the same records (header +
 * payload copy) into a SharedArrayBuffer with no synchronization and no reader (the issue's
 * baseline). One more reference row, "bare two-thread", measures the hardware limit of moving
 * those records between two threads at all: the ring's record format with plain stores, one
 * tail store per 64 records, no API (bench/lib/bare-two-thread.ts). It does not replace the
 * single-thread baseline; it tells how much of the gap to that baseline no ring can close here.
 *
 * Each two-thread run also reports the CPU it got (process CPU time / wall time, both threads):
 * about 2.0 when producer and consumer each had a core, nearer 1.0 when they shared one (other
 * work on this 2-vCPU machine), which is what moves the two-thread numbers between runs.
 *
 * All contenders run in each of ROUNDS rounds; ratios are computed within a round and the median
 * over rounds is reported. `runRingBench()` returns the markdown; `node dist/bench/ring.js` prints
 * it.
 */
import { loadavg } from 'node:os';
import { Worker } from 'node:worker_threads';
import { RingBuffer } from 'ringbuf.js';
import { RingConsumer, createRing, type RecordHandler } from '../engine/ring/index.js';
import {
  BARE_PADDING_TYPE_ID,
  BARE_TRAILER_BYTES,
  bareHeadIndex,
  bareTailIndex,
} from './lib/bare-two-thread.js';
import { isMainModule, machineLine, markdownTable, median, si } from './lib/report.js';
import type {
  ProducerWorkerData,
  ProducerWorkerMessage,
  Transport,
} from './ring-producer.worker.js';

/** Payload sizes compared, bytes. */
const PAYLOAD_SIZES = [64, 1024] as const;
/** Data area of the Sluice ring and storage of the ringbuf.js ring, bytes. */
export const RING_CAPACITY_BYTES = 1 << 20;
/** Rounds; each runs every contender once. */
const ROUNDS = 5;
/** Records per run, chosen so each run takes roughly 0.3 - 1 s on a 2-core machine. */
const RECORDS: Record<Contender, Record<PayloadSize, number>> = {
  ring: { 64: 10_000_000, 1024: 2_000_000 },
  'ring-batch': { 64: 10_000_000, 1024: 2_000_000 },
  postMessage: { 64: 300_000, 1024: 200_000 },
  'ringbuf.js': { 64: 2_000_000, 1024: 300_000 },
  bare: { 64: 20_000_000, 1024: 4_000_000 },
  'bare-2t': { 64: 20_000_000, 1024: 4_000_000 },
};

type PayloadSize = (typeof PAYLOAD_SIZES)[number];
type Contender = Transport | 'bare';
/** Table order. */
const CONTENDERS: readonly Contender[] = [
  'ring',
  'ring-batch',
  'postMessage',
  'ringbuf.js',
  'bare',
  'bare-2t',
];
/**
 * Run order within a round, per payload size: the ring and the two baselines it is divided by
 * run back to back, so a ratio compares runs seconds apart (this host's speed drifts).
 */
const RUN_ORDER: readonly Contender[] = [
  'bare',
  'ring-batch',
  'bare-2t',
  'ring',
  'postMessage',
  'ringbuf.js',
];
const LABELS: Record<Contender, string> = {
  ring: 'Sluice ring, write() (worker -> main)',
  'ring-batch': 'Sluice ring, write() in beginBatch/endBatch',
  postMessage: 'worker postMessage (worker -> main)',
  'ringbuf.js': 'ringbuf.js 0.4.0 (worker -> main)',
  bare: 'bare loop into SAB (1 thread, no sync)',
  'bare-2t': 'reference: bare two-thread SAB loop (worker -> main, 1 store/64 rec)',
};

/** One run of one contender: records/s, and CPU cores busy (process CPU time / wall time). */
export interface Run {
  recordsPerS: number;
  cores: number;
}

/** Each contender's run at each size in one round. */
type Round = Record<Contender, Record<PayloadSize, Run>>;

/** Wall clock and process CPU (all threads) at the start of a timed run. */
interface Clock {
  startMs: number;
  cpu: NodeJS.CpuUsage;
}

function startClock(): Clock {
  return { startMs: performance.now(), cpu: process.cpuUsage() };
}

function stopClock(clock: Clock, count: number): Run {
  const elapsedMs = performance.now() - clock.startMs;
  const cpu = process.cpuUsage(clock.cpu);
  return {
    recordsPerS: count / (elapsedMs / 1000),
    cores: (cpu.user + cpu.system) / 1000 / elapsedMs,
  };
}

/** Reads the sequence number the producer stamped into the first four payload bytes. */
function seqAt(bytes: Uint8Array, offset: number): number {
  return (
    (bytes[offset]! |
      (bytes[offset + 1]! << 8) |
      (bytes[offset + 2]! << 16) |
      (bytes[offset + 3]! << 24)) >>>
    0
  );
}

/** Starts a producer worker and resolves once it is ready and waiting for the start flag. */
async function startProducer(
  data: ProducerWorkerData,
  onMessage?: (message: Uint8Array) => void,
): Promise<Worker> {
  const worker = new Worker(new URL('./ring-producer.worker.js', import.meta.url), {
    workerData: data,
  });
  await new Promise<void>((resolve, reject) => {
    worker.once('error', reject);
    worker.on('message', (message: ProducerWorkerMessage) => {
      if (message === 'ready') resolve();
      else onMessage?.(message);
    });
  });
  return worker;
}

function go(control: SharedArrayBuffer): Clock {
  const flag = new Int32Array(control);
  const clock = startClock();
  Atomics.store(flag, 0, 1);
  Atomics.notify(flag, 0);
  return clock;
}

/**
 * Records/s through the Sluice ring (producer worker -> this thread); the consumer checks every
 * sequence number. Also run by bench/peers/agrona.ts. Throws Error on a lost or wrong record.
 */
export async function runRing(
  transport: 'ring' | 'ring-batch',
  payloadBytes: number,
  count: number,
): Promise<Run> {
  const sab = createRing(RING_CAPACITY_BYTES);
  const control = new SharedArrayBuffer(4);
  const worker = await startProducer({ transport, sab, control, count, payloadBytes });
  const consumer = new RingConsumer(sab);
  let expected = 0;
  let misordered = 0;
  const handler: RecordHandler = (_typeId, bytes, offset, length) => {
    if (seqAt(bytes, offset) !== expected || length !== payloadBytes) misordered++;
    expected++;
  };
  const clock = go(control);
  while (!consumer.isClosed()) {
    if (consumer.read(handler) === 0) consumer.waitForData(1000);
  }
  const run = stopClock(clock, count);
  await worker.terminate();
  check(transport, expected, count, misordered);
  return run;
}

/** Records/s through worker postMessage, one message per record. */
async function runPostMessage(payloadBytes: number, count: number): Promise<Run> {
  const control = new SharedArrayBuffer(4);
  let expected = 0;
  let misordered = 0;
  let finish: (run: Run) => void = () => {};
  const finished = new Promise<Run>((resolve) => {
    finish = resolve;
  });
  let clock: Clock | undefined;
  const worker = await startProducer(
    { transport: 'postMessage', sab: new SharedArrayBuffer(8), control, count, payloadBytes },
    (message) => {
      if (seqAt(message, 0) !== expected || message.length !== payloadBytes) misordered++;
      if (++expected === count) finish(stopClock(clock!, count));
    },
  );
  clock = go(control);
  const run = await finished;
  await worker.terminate();
  check('postMessage', expected, count, misordered);
  return run;
}

/** Records/s through ringbuf.js, one push and one pop per record. */
async function runRingbuf(payloadBytes: number, count: number): Promise<Run> {
  const sab = RingBuffer.getStorageForCapacity(RING_CAPACITY_BYTES, Uint8Array);
  const control = new SharedArrayBuffer(4);
  const worker = await startProducer({
    transport: 'ringbuf.js',
    sab,
    control,
    count,
    payloadBytes,
  });
  const ring = new RingBuffer(sab, Uint8Array);
  const record = new Uint8Array(payloadBytes);
  let expected = 0;
  let misordered = 0;
  const clock = go(control);
  while (expected < count) {
    if (ring.availableRead() < payloadBytes) continue;
    ring.pop(record);
    if (seqAt(record, 0) !== expected) misordered++;
    expected++;
  }
  const run = stopClock(clock, count);
  await worker.terminate();
  check('ringbuf.js', expected, count, misordered);
  return run;
}

/**
 * Records/s through the bare two-thread reference (lib/bare-two-thread.ts). The consumer checks
 * every record as runRing's handler does (sequence number, length), skips padding, and stores its
 * head once per drained run, at most every RING_CAPACITY_BYTES / 4 bytes (as RingConsumer.read).
 */
async function runBareTwoThread(payloadBytes: number, count: number): Promise<Run> {
  const capacityBytes = RING_CAPACITY_BYTES;
  const sab = new SharedArrayBuffer(capacityBytes + BARE_TRAILER_BYTES);
  const control = new SharedArrayBuffer(4);
  const worker = await startProducer({ transport: 'bare-2t', sab, control, count, payloadBytes });
  const i32 = new Int32Array(sab);
  const bytes = new Uint8Array(sab, 0, capacityBytes);
  const mask = capacityBytes - 1;
  const tailIndex = bareTailIndex(capacityBytes);
  const headIndex = bareHeadIndex(capacityBytes);
  const runBytesMax = capacityBytes / 4;
  let head = 0;
  let expected = 0;
  let misordered = 0;
  const clock = go(control);
  while (expected < count) {
    const tail = Atomics.load(i32, tailIndex);
    if (tail === head) continue;
    const runEnd = ((tail - head) | 0) > runBytesMax ? (head + runBytesMax) | 0 : tail;
    while (((runEnd - head) | 0) > 0) {
      const offset = head & mask;
      const recordLength = i32[offset >> 2]!;
      head = (head + ((recordLength + 7) & ~7)) | 0;
      if (i32[(offset >> 2) + 1] === BARE_PADDING_TYPE_ID) continue;
      if (seqAt(bytes, offset + 8) !== expected || recordLength - 8 !== payloadBytes) misordered++;
      expected++;
    }
    Atomics.store(i32, headIndex, head);
  }
  const run = stopClock(clock, count);
  await worker.terminate();
  check('bare-2t', expected, count, misordered);
  return run;
}

/**
 * Records/s of one thread writing the same records (8-byte header + stamped payload, 8-aligned,
 * wrapping) into a SharedArrayBuffer of the ring's size: no other thread, no Atomics. The
 * payload is copied with TypedArray.set, as RingProducer.write does.
 */
function runBare(payloadBytes: number, count: number): Run {
  const sab = new SharedArrayBuffer(RING_CAPACITY_BYTES);
  const bytes = new Uint8Array(sab);
  const i32 = new Int32Array(sab);
  const src = new Uint8Array(payloadBytes);
  for (let i = 4; i < src.length; i++) src[i] = i & 255;
  const recordLength = 8 + payloadBytes;
  const recordBytes = (recordLength + 7) & ~7;
  let position = 0;
  const clock = startClock();
  for (let seq = 0; seq < count; seq++) {
    src[0] = seq & 255;
    src[1] = (seq >>> 8) & 255;
    src[2] = (seq >>> 16) & 255;
    src[3] = (seq >>> 24) & 255;
    if (position + recordBytes > RING_CAPACITY_BYTES) position = 0;
    i32[position >> 2] = recordLength;
    i32[(position >> 2) + 1] = 1;
    bytes.set(src, position + 8);
    position += recordBytes;
  }
  const run = stopClock(clock, count);
  if (i32[1] !== 1) throw new Error('bare loop wrote nothing');
  return run;
}

function check(name: string, received: number, count: number, misordered: number): void {
  if (received !== count || misordered !== 0) {
    throw new Error(
      `${name}: received ${received} of ${count} records, ${misordered} out of ` +
        'order or wrong length',
    );
  }
}

async function runContender(
  contender: Contender,
  payloadBytes: PayloadSize,
  count: number,
): Promise<Run> {
  switch (contender) {
    case 'ring':
    case 'ring-batch':
      return runRing(contender, payloadBytes, count);
    case 'postMessage':
      return runPostMessage(payloadBytes, count);
    case 'ringbuf.js':
      return runRingbuf(payloadBytes, count);
    case 'bare':
      return runBare(payloadBytes, count);
    case 'bare-2t':
      return runBareTwoThread(payloadBytes, count);
  }
}

async function runRound(scale: number): Promise<Round> {
  const round = {} as Round;
  for (const contender of RUN_ORDER) round[contender] = {} as Record<PayloadSize, Run>;
  for (const size of PAYLOAD_SIZES) {
    for (const contender of RUN_ORDER) {
      const count = Math.max(1000, Math.round(RECORDS[contender][size] * scale));
      round[contender][size] = await runContender(contender, size, count);
    }
  }
  return round;
}

/**
 * Runs the ring benchmark (a short warm-up round, then ROUNDS measured rounds) and returns a
 * markdown section: machine line, table of median records/s and MB/s (payload, 10^6 bytes), and
 * the within-round ratios (median over rounds) ring / postMessage, ring / ringbuf.js,
 * ring / bare loop and ring / bare two-thread, for both ways of writing to the ring, plus the
 * bare two-thread / bare loop ratio (the cross-thread limit of this run), and per round each
 * run's records/s and CPU cores busy. Takes about a minute. Throws Error if any transport loses
 * or reorders a record.
 */
export async function runRingBench(): Promise<string> {
  const loadStart = loadavg()[0]!;
  await runRound(0.05);
  const rounds: Round[] = [];
  for (let r = 0; r < ROUNDS; r++) rounds.push(await runRound(1));

  const rate = (c: Contender, s: PayloadSize): number =>
    median(rounds.map((r) => r[c][s].recordsPerS));
  const ratio = (a: Contender, b: Contender, s: PayloadSize): number =>
    median(rounds.map((r) => r[a][s].recordsPerS / r[b][s].recordsPerS));
  const header = [
    'transport',
    ...PAYLOAD_SIZES.flatMap((s) => [`${label(s)} rec/s`, `${label(s)} MB/s`]),
  ];
  const rows = CONTENDERS.map((c) => [
    LABELS[c],
    ...PAYLOAD_SIZES.flatMap((s) => [si(rate(c, s)), ((rate(c, s) * s) / 1e6).toFixed(0)]),
  ]);
  const ratioRows = (['ring', 'ring-batch'] as const).flatMap((ring) =>
    PAYLOAD_SIZES.map((s) => [
      `${ring === 'ring' ? 'write()' : 'batched'}, ${label(s)}`,
      `${ratio(ring, 'postMessage', s).toFixed(1)}x`,
      `${ratio(ring, 'ringbuf.js', s).toFixed(1)}x`,
      `${ratio(ring, 'bare', s).toFixed(2)}x`,
      `${ratio(ring, 'bare-2t', s).toFixed(2)}x`,
    ]),
  );
  const limit = PAYLOAD_SIZES.map(
    (s) => `${ratio('bare-2t', 'bare', s).toFixed(2)}x at ${label(s)}`,
  ).join(', ');
  const perRound = rounds.map(
    (r, i) =>
      `round ${i + 1}: ` +
      CONTENDERS.map(
        (c) =>
          `${c} ${PAYLOAD_SIZES.map((s) => si(r[c][s].recordsPerS)).join('/')} ` +
          `(${PAYLOAD_SIZES.map((s) => r[c][s].cores.toFixed(2)).join('/')} cores)`,
      ).join(', '),
  );
  const loadEnd = loadavg()[0]!;
  return [
    `Machine: ${machineLine()}. \`node dist/bench/ring.js\`; ring capacity ` +
      `${RING_CAPACITY_BYTES / 1024} KiB; median of ${ROUNDS} rounds; 1-minute load average ` +
      `${loadStart.toFixed(1)} at start, ${loadEnd.toFixed(1)} at end.`,
    '',
    markdownTable(header, rows),
    '',
    'Ratios within a round (median of rounds):',
    '',
    markdownTable(
      [
        'Sluice ring, payload',
        'ring / postMessage',
        'ring / ringbuf.js',
        'ring / bare loop',
        'ring / bare two-thread',
      ],
      ratioRows,
    ),
    '',
    `Cross-thread limit in this run, bare two-thread / bare loop (median of rounds): ${limit}.`,
    '',
    'Records/s per round (64 B / 1 KiB), with CPU cores busy during each run (process CPU ' +
      'time / wall time; 2.00 = producer and consumer each had a core):',
    '',
    ...perRound.map((line) => `- ${line}`),
  ].join('\n');
}

function label(size: PayloadSize): string {
  return size >= 1024 ? `${size / 1024} KiB` : `${size} B`;
}

if (isMainModule(import.meta.url)) {
  console.log(await runRingBench());
}
