/**
 * `npm run soak [-- --minutes 120 --fault-every-min 5 --sample-s 10 --shape bank-postgres
 * --out bench/soak]`: the soak of issue 13 §3. Runs one fault-suite shape (default the bank job
 * on PostgreSQL: pgbench at a fixed 300 transactions/s, capture, two services) for the whole
 * time, with one fault (kill -9, a worker thread ending or throwing, disk full, PostgreSQL
 * sessions terminated, login refused, row locks) every few minutes, and samples every
 * `--sample-s` seconds: resident memory (VmRSS) and open file descriptors of the `sluice run`
 * process (its worker threads share both), the data directory's disk usage, and the largest
 * input lag the operations API reports (GET /actors). At the end the shape's own checks run (every
 * change shipped once, the bank balances match the database).
 *
 * Writes into `<out>/<UTC stamp>/`: samples.csv, summary.json (verdicts, seed, faults), and
 * rss.png, fds.png, disk.png, lag.png (charts drawn as SVG and rendered by headless Chromium,
 * /usr/bin/chromium through playwright-core). Flat means: after the warm-up (the first quarter),
 * the last quarter's mean RSS is within 10% of the second quarter's and its mean descriptor count
 * within 16 of it (single samples vary: a restart after kill -9 opens its files anew). Disk
 * usage is reported, not judged, unless `--bounded`: the shape's queues have no retention, so it
 * grows with history.
 *
 * `--bounded`: the shape's bounded variant (faults/bank.ts `bankShape(dialect, { bounded: true })`:
 * service snapshots every 20,000 inputs, so a restart replays only the inputs after the newest
 * one, and retention on every queue); then disk usage is judged as well, by the rule of RSS (last
 * quarter's mean within 10% of the second quarter's).
 *
 * `--charts-from <run dir>`: no run; summary.json and the charts from that directory's
 * samples.csv (a run whose end did not write them), by the same code and rule (`--minutes`,
 * `--shape`, `--seed`, `--bounded` as the run had them: they set the quarters, the titles and the
 * rule). What the run's ledger held (faults, violations) is not in samples.csv: null there.
 *
 * Exits 0 when flat with no violation (with `--charts-from`: when written), 1 otherwise.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Command, InvalidArgumentError } from 'commander';
import { chromium } from 'playwright-core';
import { Ledger, rng } from './harness.js';

// Before the shapes load (dynamic imports): the soak's PostgreSQL database and role have names
// of their own, so a fault run can use the same server meanwhile.
process.env.SLUICE_FAULTS_PG_PREFIX ??= 'soak';
const { allShapes } = await import('./suite.js');
const { pgAvailable, bankShape } = await import('./bank.js');

function int(name: string) {
  return (v: string): number => {
    const n = Number(v);
    if (!Number.isFinite(n) || n <= 0)
      throw new InvalidArgumentError(`${name} must be a number > 0, got "${v}"`);
    return n;
  };
}

const o = new Command()
  .name('soak')
  .exitOverride((err) => process.exit(err.exitCode === 0 ? 0 : 2))
  .option('--minutes <n>', 'length of the run', int('--minutes'), 120)
  .option('--fault-every-min <n>', 'mean minutes between faults', int('--fault-every-min'), 5)
  .option('--sample-s <n>', 'seconds between samples', int('--sample-s'), 10)
  .option('--shape <name>', 'fault-suite shape to soak', 'bank-postgres')
  .option('--seed <n>', 'seed of every choice (default random, printed)', int('--seed'))
  .option('--out <dir>', 'where the run directory goes', 'bench/soak')
  .option('--port <n>', 'operations API port of the topology', int('--port'), 19391)
  .option('--bounded', "the shape's bounded variant: snapshots and queue retention", false)
  .option('--charts-from <dir>', "no run: summary.json and charts from <dir>'s samples.csv")
  .parse()
  .opts<{
    minutes: number;
    faultEveryMin: number;
    sampleS: number;
    shape: string;
    seed?: number;
    out: string;
    port: number;
    bounded: boolean;
    chartsFrom?: string;
  }>();

/** One sample of the `sluice run` process. */
interface Sample {
  /** Seconds since the soak started. */
  t: number;
  pid: number;
  rssMiB: number;
  fds: number;
  diskMiB: number;
  /** Largest input lag over all actors, records (null when the API did not answer). */
  lagRecords: number | null;
}

/** The `sluice run` child of this soak: the process whose command line names our topology. */
function findSluicePid(topologyFile: string): number | null {
  for (const e of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    try {
      const cmd = fs.readFileSync(`/proc/${e}/cmdline`, 'utf8').split('\0');
      if (cmd.includes('run') && cmd.includes(topologyFile)) return Number(e);
    } catch {
      /* gone */
    }
  }
  return null;
}

function diskBytes(dir: string): number {
  let n = 0;
  const walk = (d: string) => {
    let list: fs.Dirent[];
    try {
      list = fs.readdirSync(d, { withFileTypes: true });
    } catch {
      return;
    }
    for (const e of list) {
      const p = path.join(d, e.name);
      if (e.isDirectory()) walk(p);
      else
        try {
          n += fs.statSync(p).blocks * 512;
        } catch {
          /* removed meanwhile (retention) */
        }
    }
  };
  walk(dir);
  return n;
}

async function sample(t0: number, file: string, dataDir: string): Promise<Sample | null> {
  const pid = findSluicePid(file);
  if (pid === null) return null;
  let rssKiB = 0;
  let fds = 0;
  try {
    rssKiB = Number(/VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]);
    fds = fs.readdirSync(`/proc/${pid}/fd`).length;
  } catch {
    return null; // exited between the lookup and the read (a kill -9)
  }
  let lagRecords: number | null = null;
  try {
    const res = await fetch(`http://127.0.0.1:${o.port}/actors`, {
      signal: AbortSignal.timeout(2000),
    });
    if (res.ok) {
      const body = (await res.json()) as {
        actors?: Array<{ inputs?: Array<{ lagRecords?: number }> }>;
      };
      lagRecords = 0;
      for (const a of body.actors ?? [])
        for (const i of a.inputs ?? []) lagRecords = Math.max(lagRecords, i.lagRecords ?? 0);
    }
  } catch {
    /* restarting */
  }
  return {
    t: Math.round((Date.now() - t0) / 1000),
    pid,
    rssMiB: rssKiB / 1024,
    fds,
    diskMiB: diskBytes(dataDir) / 1048576,
    lagRecords,
  };
}

/** A line chart of `ys` over `xs` as SVG (x: minutes). */
function svgChart(title: string, unit: string, xs: number[], ys: number[]): string {
  const W = 900;
  const H = 360;
  const L = 70;
  const B = 40;
  const maxX = Math.max(1, ...xs);
  const maxY = Math.max(1e-9, ...ys) * 1.15;
  const px = (x: number) => L + (x / maxX) * (W - L - 20);
  const py = (y: number) => H - B - (y / maxY) * (H - B - 40);
  const pts = xs.map((x, i) => `${px(x).toFixed(1)},${py(ys[i]!).toFixed(1)}`).join(' ');
  const ticksY = [0, 0.25, 0.5, 0.75, 1].map((f) => f * maxY);
  const ticksX = [0, 0.25, 0.5, 0.75, 1].map((f) => f * maxX);
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="${L}" y="22" font-size="15">${title}</text>
${ticksY.map((y) => `<line x1="${L}" x2="${W - 20}" y1="${py(y)}" y2="${py(y)}" stroke="#ddd"/><text x="${L - 6}" y="${py(y) + 4}" text-anchor="end">${y.toFixed(y < 10 ? 1 : 0)}</text>`).join('\n')}
${ticksX.map((x) => `<text x="${px(x)}" y="${H - B + 18}" text-anchor="middle">${(x / 60).toFixed(0)}</text>`).join('\n')}
<text x="${(W + L) / 2}" y="${H - 6}" text-anchor="middle">minutes</text>
<text x="14" y="${H / 2}" transform="rotate(-90 14 ${H / 2})" text-anchor="middle">${unit}</text>
<polyline fill="none" stroke="#2b6cb0" stroke-width="1.5" points="${pts}"/>
</svg>`;
}

/** Renders SVG files to PNG next to them with headless Chromium. */
async function renderPngs(files: string[]): Promise<void> {
  const browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-background-networking', '--disable-component-update'],
  });
  try {
    const page = await browser.newPage({ viewport: { width: 900, height: 360 } });
    for (const f of files) {
      await page.setContent(fs.readFileSync(f, 'utf8'));
      await page.screenshot({ path: f.replace(/\.svg$/, '.png') });
    }
  } finally {
    await browser.close();
  }
}

const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);

/** The soak's figures and verdict over `samples` of a run of `minutes` (see the file comment). */
function verdicts(samples: Sample[], minutes: number, bounded: boolean) {
  // After the warm-up (the first quarter); the last quarter includes the final checks' samples.
  const q = (k: number) => samples.filter((s) => s.t >= (k * minutes * 60) / 4);
  const second = samples.filter((s) => s.t >= (minutes * 60) / 4 && s.t < (minutes * 60) / 2);
  const last = q(3);
  const growth = (f: (s: Sample) => number) =>
    second.length && last.length ? mean(last.map(f)) / mean(second.map(f)) - 1 : NaN;
  const fdDrift =
    second.length && last.length
      ? mean(last.map((s) => s.fds)) - mean(second.map((s) => s.fds))
      : NaN;
  const rssGrowth = growth((s) => s.rssMiB);
  const diskGrowth = growth((s) => s.diskMiB);
  const lags = q(1)
    .map((s) => s.lagRecords)
    .filter((l): l is number => l !== null);
  return {
    samples: samples.length,
    rssMiB: {
      secondQuarterMean: mean(second.map((s) => s.rssMiB)),
      lastQuarterMean: mean(last.map((s) => s.rssMiB)),
      growth: rssGrowth,
      max: Math.max(...samples.map((s) => s.rssMiB)),
    },
    fds: {
      secondQuarterMean: mean(second.map((s) => s.fds)),
      lastQuarterMean: mean(last.map((s) => s.fds)),
      drift: fdDrift,
      max: Math.max(...samples.map((s) => s.fds)),
    },
    diskMiB: {
      secondQuarterMean: mean(second.map((s) => s.diskMiB)),
      lastQuarterMean: mean(last.map((s) => s.diskMiB)),
      growth: diskGrowth,
      max: Math.max(...samples.map((s) => s.diskMiB)),
      // Judged only with retention (--bounded); without it the data directory grows with history.
      judged: bounded,
    },
    lagRecords: {
      secondQuarterMean: mean(second.flatMap((s) => (s.lagRecords === null ? [] : [s.lagRecords]))),
      lastQuarterMean: mean(last.flatMap((s) => (s.lagRecords === null ? [] : [s.lagRecords]))),
      maxAfterWarmup: lags.length ? Math.max(...lags) : null,
    },
    flat:
      Math.abs(rssGrowth) <= 0.1 &&
      Math.abs(fdDrift) <= 16 &&
      (!bounded || Math.abs(diskGrowth) <= 0.1),
  };
}

/** The one-line result the soak prints. */
function resultLine(
  v: ReturnType<typeof verdicts>,
  faults: number | null,
  violations: number | null,
  outDir: string,
): string {
  const pct = (g: number) => `${g >= 0 ? '+' : ''}${(g * 100).toFixed(1)}%`;
  return `soak: ${faults ?? '?'} faults, ${violations ?? '?'} violations; RSS ${v.rssMiB.secondQuarterMean.toFixed(0)} -> ${v.rssMiB.lastQuarterMean.toFixed(0)} MiB (${pct(v.rssMiB.growth)}, max ${v.rssMiB.max.toFixed(0)}), fds ${v.fds.secondQuarterMean.toFixed(0)} -> ${v.fds.lastQuarterMean.toFixed(0)} (max ${v.fds.max}), disk ${v.diskMiB.secondQuarterMean.toFixed(0)} -> ${v.diskMiB.lastQuarterMean.toFixed(0)} MiB (${pct(v.diskMiB.growth)}, max ${v.diskMiB.max.toFixed(0)}${v.diskMiB.judged ? '' : ', not judged: no retention'}), lag ${v.lagRecords.secondQuarterMean.toFixed(0)} -> ${v.lagRecords.lastQuarterMean.toFixed(0)} records (max after warm-up ${v.lagRecords.maxAfterWarmup ?? '?'}): ${v.flat ? 'flat' : 'NOT flat'}; charts in ${outDir}`;
}

/** Writes rss.png, fds.png, disk.png and lag.png of `samples` into `outDir`. */
async function writeCharts(outDir: string, samples: Sample[], label: string): Promise<void> {
  const xs = samples.map((s) => s.t);
  const charts: Array<[string, string, string, number[]]> = [
    ['rss', 'resident memory of sluice run', 'MiB', samples.map((s) => s.rssMiB)],
    ['fds', 'open file descriptors of sluice run', 'descriptors', samples.map((s) => s.fds)],
    ['disk', 'data directory on disk', 'MiB', samples.map((s) => s.diskMiB)],
    ['lag', 'largest input lag (GET /actors)', 'records', samples.map((s) => s.lagRecords ?? 0)],
  ];
  const svgs: string[] = [];
  for (const [name, title, unit, ys] of charts) {
    const f = path.join(outDir, `${name}.svg`);
    fs.writeFileSync(f, svgChart(`${title}, ${label}`, unit, xs, ys));
    svgs.push(f);
  }
  await renderPngs(svgs);
  for (const f of svgs) fs.rmSync(f);
}

/** The samples of a samples.csv the soak wrote. */
function readSamples(file: string): Sample[] {
  const lines = fs.readFileSync(file, 'utf8').split('\n').filter(Boolean);
  if (lines[0] !== 't_s,pid,rss_mib,fds,disk_mib,lag_records')
    throw new Error(`${file}: not a soak samples.csv (header ${JSON.stringify(lines[0])})`);
  return lines.slice(1).map((l, i) => {
    const [t, pid, rss, fds, disk, lag] = l.split(',');
    const n = [t, pid, rss, fds, disk].map(Number);
    if (n.some((x) => !Number.isFinite(x))) throw new Error(`${file}:${i + 2}: bad line "${l}"`);
    return {
      t: n[0]!,
      pid: n[1]!,
      rssMiB: n[2]!,
      fds: n[3]!,
      diskMiB: n[4]!,
      lagRecords: lag === undefined || lag === '' ? null : Number(lag),
    };
  });
}

const variant = `${o.shape}${o.bounded ? ' (bounded)' : ''}`;
if (o.chartsFrom !== undefined) {
  const dir = path.resolve(o.chartsFrom);
  const samples = readSamples(path.join(dir, 'samples.csv'));
  const v = verdicts(samples, o.minutes, o.bounded);
  const summary = {
    from: 'samples.csv (--charts-from): faults and violations were in the run ledger, not here',
    seed: o.seed ?? null,
    shape: o.shape,
    bounded: o.bounded,
    minutes: o.minutes,
    pids: [...new Set(samples.map((s) => s.pid))].length,
    lastSampleS: samples.at(-1)?.t ?? null,
    faults: null,
    violations: null,
    ...v,
  };
  fs.writeFileSync(path.join(dir, 'summary.json'), JSON.stringify(summary, null, 2) + '\n');
  await writeCharts(
    dir,
    samples,
    `${variant}, ${o.minutes} min${o.seed === undefined ? '' : `, seed ${o.seed}`}`,
  );
  console.log(JSON.stringify({ event: 'soak-charts', ...summary }));
  console.log(resultLine(v, null, null, dir));
  process.exit(0);
}

const seed = o.seed ?? Math.floor(Math.random() * 2 ** 31);
const base = allShapes().find((s) => s.name === o.shape);
if (!base) {
  console.error(
    `soak: unknown --shape "${o.shape}" (one of ${allShapes()
      .map((s) => s.name)
      .join(', ')})`,
  );
  process.exit(2);
}
let shape = base;
if (o.bounded) {
  if (!o.shape.startsWith('bank-')) {
    console.error(`soak: --bounded is a variant of the bank shapes only, not of "${o.shape}"`);
    process.exit(2);
  }
  shape = bankShape(o.shape === 'bank-postgres' ? 'postgres' : 'sqlite', { bounded: true });
}
if (o.shape === 'bank-postgres' && !(await pgAvailable())) {
  console.error('soak: PostgreSQL does not answer at 127.0.0.1:5432 (bank-postgres needs it)');
  process.exit(2);
}
const stamp = new Date().toISOString().replace(/[:.]/g, '-').slice(0, 19);
const outDir = path.resolve(o.out, stamp);
fs.mkdirSync(outDir, { recursive: true });
const work = fs.mkdtempSync(path.join(os.tmpdir(), `soak_${seed}_`));
const topologyFile = path.join(work, 'topology.yaml');
const dataDir = path.join(work, 'data');
const ledger = new Ledger(seed);
const t0 = Date.now();
const gap = o.faultEveryMin * 60_000;
console.log(
  `soak: seed ${seed}, shape ${shape.name}, ${o.minutes} min, a fault every ~${o.faultEveryMin} min, samples every ${o.sampleS} s -> ${outDir}`,
);

const samples: Sample[] = [];
let sampling = true;
const sampler = (async () => {
  const csv = fs.createWriteStream(path.join(outDir, 'samples.csv'));
  csv.write('t_s,pid,rss_mib,fds,disk_mib,lag_records\n');
  while (sampling) {
    const s = await sample(t0, topologyFile, dataDir);
    if (s) {
      samples.push(s);
      csv.write(
        `${s.t},${s.pid},${s.rssMiB.toFixed(1)},${s.fds},${s.diskMiB.toFixed(1)},${s.lagRecords ?? ''}\n`,
      );
    }
    await new Promise((r) => setTimeout(r, o.sampleS * 1000));
  }
  csv.end();
})();

await shape.run({
  ledger,
  random: rng(seed),
  faults: Number.MAX_SAFE_INTEGER,
  deadlineMs: t0 + o.minutes * 60_000,
  dir: work,
  httpPort: o.port,
  tmpfs: false,
  net: false,
  gapMs: [gap * 0.5, gap * 1.5],
});
sampling = false;
await sampler;

const v = verdicts(samples, o.minutes, o.bounded);
const summary = {
  seed,
  shape: shape.name,
  bounded: o.bounded,
  minutes: o.minutes,
  startedAt: new Date(t0).toISOString(),
  endedAt: new Date().toISOString(),
  machine: `${os.cpus().length} CPUs (${os.cpus()[0]?.model}), ${(os.totalmem() / 2 ** 30).toFixed(0)} GiB, Node ${process.version}, load average at the end ${os
    .loadavg()
    .map((l) => l.toFixed(1))
    .join(' ')}`,
  pids: [...new Set(samples.map((s) => s.pid))].length,
  faults: ledger.faults.length,
  byFault: ledger.faults.reduce<Record<string, number>>((m, f) => {
    m[f.fault] = (m[f.fault] ?? 0) + 1;
    return m;
  }, {}),
  violations: ledger.violations,
  ...v,
};
fs.writeFileSync(path.join(outDir, 'summary.json'), JSON.stringify(summary, null, 2) + '\n');
await writeCharts(outDir, samples, `${variant}, ${o.minutes} min, seed ${seed}`);
fs.rmSync(work, { recursive: true, force: true });
console.log(JSON.stringify({ event: 'soak-done', ...summary }));
console.log(resultLine(v, summary.faults, ledger.violations.length, outDir));
process.exit(v.flat && ledger.violations.length === 0 ? 0 : 1);
