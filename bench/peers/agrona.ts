/**
 * The Sluice ring against Agrona's OneToOneRingBuffer (org.agrona:agrona 2.6.0, the JVM's
 * reference single-producer ring), in one run, moving the same records between two threads.
 *
 *   node dist/bench/peers/agrona.js [--rounds 5]
 *
 * Both sides: 64 B and 1 KiB payloads (first 4 bytes a sequence number the consumer checks, as
 * bench/ring.ts), a 1 MiB data area, producer on its own thread (a worker; a Java thread), the
 * consumer on the main thread reading in batches (RingConsumer.read; OneToOneRingBuffer.read),
 * both sides idling with a backoff strategy when full or empty (each library's default kind;
 * Agrona's parks are timed, Sluice's are woken by the other side), plus Agrona busy-spinning.
 * Contenders:
 *   - Sluice ring, write() in beginBatch()/endBatch() (tail published every 64 records: what
 *     the queue readers use) and plain write() (published per record), from bench/ring.ts;
 *   - Agrona write() (copy in, published per record) and tryClaim()/commit() (the sequence
 *     number and payload written into the claimed slot) with Agrona's BackoffIdleStrategy, and
 *     write() with BusySpinIdleStrategy on both sides (the JVM's lowest-latency setting), in one
 *     long-lived JVM (bench/peers/agrona/, AgronaRingBench.java) so its JIT stays warm.
 *
 * A warm-up round, then `rounds` rounds alternating the side that runs first (A B A B); the
 * ratio Sluice / Agrona is taken within each round (runs seconds apart), and the median over
 * rounds is reported. Run under `flock /tmp/sluice-bench.lock`.
 */
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { loadavg } from 'node:os';
import { RING_CAPACITY_BYTES, runRing, type Run } from '../ring.js';
import { isMainModule, machineLine, markdownTable, median, si } from '../lib/report.js';
import { buildPeer } from './maven.js';
import { processCpuMs } from '../lib/proc-cpu.js';

const PAYLOAD_SIZES = [64, 1024] as const;
type PayloadSize = (typeof PAYLOAD_SIZES)[number];
/** Records per run, as bench/ring.ts's ring rows: each run takes about 0.3 - 2 s here. */
const RECORDS: Record<PayloadSize, number> = { 64: 10_000_000, 1024: 2_000_000 };
const WARMUP_SCALE = 0.2;
const CONTENDERS = [
  'sluice-batch',
  'sluice-write',
  'agrona-write',
  'agrona-claim',
  'agrona-spin',
] as const;
type Contender = (typeof CONTENDERS)[number];
const LABELS: Record<Contender, string> = {
  'sluice-batch': 'Sluice ring, write() in beginBatch/endBatch',
  'sluice-write': 'Sluice ring, write()',
  'agrona-write': 'Agrona OneToOneRingBuffer, write()',
  'agrona-claim': 'Agrona OneToOneRingBuffer, tryClaim()/commit()',
  'agrona-spin': 'Agrona OneToOneRingBuffer, write(), both sides busy-spin',
};
type Round = Record<Contender, Record<PayloadSize, Run>>;

/** The long-lived JVM running AgronaRingBench: one command in, one JSON line out. */
class AgronaPeer {
  private readonly pending: ((line: string) => void)[] = [];
  private readonly stderr: string[] = [];
  /** Per run: JVM CPU time from /proc / wall time of the command, cores. */
  readonly procCores: number[] = [];

  private constructor(private readonly child: ReturnType<typeof spawn>) {
    createInterface({ input: child.stdout! }).on('line', (line) => this.pending.shift()?.(line));
    child.stderr!.on('data', (b: Buffer) => this.stderr.push(b.toString()));
  }

  /** Starts the JVM and waits for its ready line. Throws Error with its stderr on failure. */
  static async start(classpath: string): Promise<AgronaPeer> {
    const child = spawn(
      'java',
      [
        '--add-exports',
        'java.base/jdk.internal.misc=ALL-UNNAMED',
        '-cp',
        classpath,
        'sluice.bench.AgronaRingBench',
        String(RING_CAPACITY_BYTES),
      ],
      { stdio: ['pipe', 'pipe', 'pipe'] },
    );
    const peer = new AgronaPeer(child);
    await peer.line();
    return peer;
  }

  private line(): Promise<string> {
    return new Promise((resolve, reject) => {
      const onExit = (code: number | null) =>
        reject(new Error(`AgronaRingBench exited ${code}: ${this.stderr.join('')}`));
      this.child.once('exit', onExit);
      this.pending.push((line) => {
        this.child.off('exit', onExit);
        resolve(line);
      });
    });
  }

  async run(
    variant: 'write' | 'claim',
    idle: 'backoff' | 'spin',
    payloadBytes: number,
    records: number,
  ): Promise<Run> {
    const reply = this.line();
    // Cores busy from /proc around the whole command (a little more than the timed part), as a
    // check of the JVM's own figure: they agree when the JVM's accounting is right.
    const cpu0 = processCpuMs(this.child.pid!);
    const t0 = performance.now();
    this.child.stdin!.write(`run ${variant} ${payloadBytes} ${records} ${idle}\n`);
    const v = JSON.parse(await reply) as { recordsPerS: number; cores: number };
    this.procCores.push((processCpuMs(this.child.pid!) - cpu0) / (performance.now() - t0));
    return { recordsPerS: v.recordsPerS, cores: v.cores };
  }

  async quit(): Promise<void> {
    const exited = new Promise((resolve) => this.child.once('exit', resolve));
    this.child.stdin!.end('quit\n');
    await exited;
  }
}

function runContender(
  peer: AgronaPeer,
  c: Contender,
  size: PayloadSize,
  records: number,
): Promise<Run> {
  switch (c) {
    case 'sluice-batch':
      return runRing('ring-batch', size, records);
    case 'sluice-write':
      return runRing('ring', size, records);
    case 'agrona-write':
      return peer.run('write', 'backoff', size, records);
    case 'agrona-claim':
      return peer.run('claim', 'backoff', size, records);
    case 'agrona-spin':
      return peer.run('write', 'spin', size, records);
  }
}

async function runRound(peer: AgronaPeer, index: number, scale: number): Promise<Round> {
  const order: readonly Contender[] =
    index % 2 === 0
      ? ['sluice-batch', 'agrona-write', 'sluice-write', 'agrona-claim', 'agrona-spin']
      : ['agrona-spin', 'agrona-write', 'sluice-batch', 'agrona-claim', 'sluice-write'];
  const round = Object.fromEntries(CONTENDERS.map((c) => [c, {}])) as Round;
  for (const size of PAYLOAD_SIZES) {
    for (const c of order) {
      round[c][size] = await runContender(peer, c, size, Math.round(RECORDS[size] * scale));
    }
  }
  return round;
}

function label(size: PayloadSize): string {
  return size >= 1024 ? `${size / 1024} KiB` : `${size} B`;
}

/**
 * Builds the Java harness (cached), runs a warm-up round and `rounds` measured rounds, and
 * returns the markdown section: records/s per contender (median), the per-round ratios Sluice /
 * Agrona and their medians, and per round every run's records/s and cores busy. Throws Error if
 * a record is lost or reordered on either side, or if the JVM fails.
 */
export async function runAgronaBench(rounds = 5): Promise<string> {
  if (!Number.isInteger(rounds) || rounds < 1) throw new Error(`rounds must be >= 1, ${rounds}`);
  const peer = await AgronaPeer.start(await buildPeer('agrona'));
  const loadStart = loadavg()[0]!;
  const measured: Round[] = [];
  try {
    await runRound(peer, 0, WARMUP_SCALE);
    for (let r = 0; r < rounds; r++) measured.push(await runRound(peer, r, 1));
  } finally {
    await peer.quit();
  }
  const procCores = peer.procCores.slice(-rounds * PAYLOAD_SIZES.length * 3);
  const loadEnd = loadavg()[0]!;
  const rate = (c: Contender, s: PayloadSize) => median(measured.map((r) => r[c][s].recordsPerS));
  const ratios = (f: (r: Round) => number): { med: number; all: string } => ({
    med: median(measured.map(f)),
    all: measured.map((r) => f(r).toFixed(2)).join(', '),
  });
  const best = (r: Round, side: 'sluice' | 'agrona', s: PayloadSize): number =>
    side === 'sluice'
      ? Math.max(r['sluice-batch'][s].recordsPerS, r['sluice-write'][s].recordsPerS)
      : Math.max(
          r['agrona-write'][s].recordsPerS,
          r['agrona-claim'][s].recordsPerS,
          r['agrona-spin'][s].recordsPerS,
        );
  // Records per second of CPU the side's process used: what the host's share of CPU bought.
  const perCpuS = (run: Run): number => run.recordsPerS / run.cores;
  const ratioRows = PAYLOAD_SIZES.flatMap((s) => {
    const rows: [string, (r: Round) => number][] = [
      [
        'batched write / Agrona write',
        (r) => r['sluice-batch'][s].recordsPerS / r['agrona-write'][s].recordsPerS,
      ],
      [
        'write / Agrona write (both publish per record)',
        (r) => r['sluice-write'][s].recordsPerS / r['agrona-write'][s].recordsPerS,
      ],
      ['best / best (per round)', (r) => best(r, 'sluice', s) / best(r, 'agrona', s)],
      [
        'batched write / Agrona write, records per CPU-second',
        (r) => perCpuS(r['sluice-batch'][s]) / perCpuS(r['agrona-write'][s]),
      ],
    ];
    return rows.map(([name, f]) => {
      const x = ratios(f);
      return [`${label(s)}: ${name}`, `${x.med.toFixed(2)}x`, x.all];
    });
  });
  const perRound = measured.map(
    (r, i) =>
      `round ${i + 1} (${i % 2 === 0 ? 'Sluice' : 'Agrona'} ` +
      'first): ' +
      CONTENDERS.map(
        (c) =>
          `${c} ${PAYLOAD_SIZES.map((s) => si(r[c][s].recordsPerS)).join('/')} (${PAYLOAD_SIZES.map(
            (s) => r[c][s].cores.toFixed(2),
          ).join('/')} cores)`,
      ).join(', '),
  );
  return [
    `Machine: ${machineLine()}. \`node dist/bench/peers/agrona.js --rounds ${rounds}\`; ring ` +
      `data area ${RING_CAPACITY_BYTES / 1024} KiB on both sides; ${RECORDS[64] / 1e6} M records ` +
      `at 64 B, ${RECORDS[1024] / 1e6} M at 1 KiB per run; median of ${rounds} rounds after a ` +
      `warm-up round; 1-minute load average ${loadStart.toFixed(1)} at start, ` +
      `${loadEnd.toFixed(1)} at end.`,
    '',
    markdownTable(
      [
        'ring (producer thread -> main thread)',
        ...PAYLOAD_SIZES.flatMap((s) => [`${label(s)} rec/s`, `${label(s)} MB/s`]),
      ],
      CONTENDERS.map((c) => [
        LABELS[c],
        ...PAYLOAD_SIZES.flatMap((s) => [si(rate(c, s)), ((rate(c, s) * s) / 1e6).toFixed(0)]),
      ]),
    ),
    '',
    'Sluice / Agrona, within each round:',
    '',
    markdownTable(['ratio', 'median', 'per round'], ratioRows),
    '',
    'Records/s per round (64 B / 1 KiB), with CPU cores busy during each run (process CPU ' +
      "time / wall time of that side's process):",
    '',
    ...perRound.map((line) => `- ${line}`),
    '',
    `JVM cores busy per Agrona run read from /proc by the runner (command round trip): ` +
      `${procCores.map((c) => c.toFixed(2)).join(', ')}.`,
  ].join('\n');
}

if (isMainModule(import.meta.url)) {
  const i = process.argv.indexOf('--rounds');
  const rounds = i >= 0 ? Number(process.argv[i + 1]) : 5;
  console.log(await runAgronaBench(rounds));
  process.exit(0);
}
