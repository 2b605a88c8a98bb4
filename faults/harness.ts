/**
 * The fault suite's harness (issue 13 §1): a topology run by the real CLI (`sluice run`) in a
 * child process, watched through its operations API, and the faults injected into it.
 *
 * - {@link TopologyProcess}: spawns `node dist/cli/sluice.js run <file> --http 127.0.0.1:<port>`,
 *   keeps its log, reports an exit nobody asked for (the supervisor must never exit because a
 *   dependency was down), kills it with SIGKILL, drains it with SIGTERM.
 * - worker faults: a file in the directory named by SLUICE_FAULT_WORKER_DIR makes the named
 *   actor end its own thread (`process.exit`) or throw, from its heartbeat (engine/actor/runtime.ts).
 * - {@link Tmpfs}: a small tmpfs mounted on a data directory, filled to ENOSPC and freed,
 *   remounted read only and back.
 * - {@link rng}: mulberry32, so that a seed fixes every choice the suite makes (which fault,
 *   when, how long): `npm run faults -- --seed N` makes the same choices again. The timing of the
 *   processes themselves is the machine's, so a replay injects the same faults at the same
 *   offsets, not at the same instructions.
 */
import fs from 'node:fs';
import path from 'node:path';
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { inScope } from './network.js';

/** The repository root (faults/ is compiled to dist/faults/). */
export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
/** The compiled CLI. */
export const CLI = path.join(REPO_ROOT, 'dist/cli/sluice.js');
/** Environment variable of the worker fault hook (engine/actor/runtime.ts). */
export const WORKER_FAULT_DIR_ENV = 'SLUICE_FAULT_WORKER_DIR';

/** Deterministic pseudo-random numbers in [0, 1) (mulberry32). */
export function rng(seed: number): () => number {
  let s = seed | 0;
  return () => {
    s = (s + 0x6d2b79f5) | 0;
    let t = Math.imul(s ^ (s >>> 15), 1 | s);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A random integer in [min, max] from `random`. */
export function between(random: () => number, min: number, max: number): number {
  return min + Math.floor(random() * (max - min + 1));
}

/** One of `items`, picked by `random`. */
export function pick<T>(random: () => number, items: readonly T[]): T {
  return items[Math.floor(random() * items.length)]!;
}

/** One injected fault as the suite records it. */
export interface FaultRecord {
  shape: string;
  fault: string;
  /** ms since the shape started. */
  atMs: number;
  /** What exactly was done (e.g. `actor service:accounts exit`, `5 terminations`). */
  detail: string;
  /** ms from the injection until the topology was healthy again (null: not measured). */
  recoveredMs: number | null;
}

/** Collects faults and violations; a violation names the shape, the seed and what broke. */
export class Ledger {
  readonly faults: FaultRecord[] = [];
  readonly violations: string[] = [];
  constructor(
    readonly seed: number,
    private readonly out: (line: string) => void = (l) => process.stdout.write(l + '\n'),
  ) {}

  fault(r: FaultRecord): void {
    this.faults.push(r);
    const rec = r.recoveredMs === null ? '' : ` (healthy after ${r.recoveredMs} ms)`;
    this.out(`faults: #${this.faults.length} ${r.shape} ${r.fault}: ${r.detail}${rec}`);
  }

  violation(shape: string, what: string): void {
    const line =
      `VIOLATION (seed ${this.seed}, shape ${shape}, after fault #${this.faults.length}` +
      `${this.faults.length ? ` ${this.faults[this.faults.length - 1]!.fault}` : ''}): ${what}`;
    this.violations.push(line);
    this.out(line);
  }

  info(line: string): void {
    this.out(`faults: ${line}`);
  }
}

/** GET /health of a topology (ops/health.ts). */
export interface HealthView {
  status: string;
  ready: boolean;
  reasons: string[];
}

/** One actor as GET /actors shows it (the fields the suite uses). */
export interface ActorView {
  name: string;
  group: string;
  restarts: number;
  state?: string;
}

/** Options of {@link TopologyProcess}. */
export interface TopologyProcessOptions {
  /** The topology file. */
  file: string;
  /** Port of its operations API (127.0.0.1). */
  httpPort: number;
  /** The child's log (stdout and stderr of every run, appended). */
  logFile: string;
  /** Directory of the worker fault hook (created). */
  faultDir: string;
  /** Extra environment. */
  env?: Record<string, string>;
  /**
   * A cgroup's `cgroup.procs` (faults/network.ts NetScope): each run is put there before it
   * starts, so the network faults of that scope hit its sockets.
   */
  cgroupProcs?: string;
}

/**
 * `sluice run` of one topology in a child process. An exit the suite did not cause (by
 * {@link kill9} or {@link stop}) is recorded in `unexpectedExits`: the supervisor must wait out
 * every dependency, never exit.
 */
export class TopologyProcess {
  private child: ChildProcess | null = null;
  private exited: Promise<{ code: number | null; signal: string | null }> | null = null;
  private expectingExit = false;
  /** `exit code C (signal S) at T: <log tail>` for each exit nobody asked for. */
  readonly unexpectedExits: string[] = [];
  private logTail = '';
  private readonly log: fs.WriteStream;
  /** Runs started. */
  starts = 0;

  constructor(readonly options: TopologyProcessOptions) {
    fs.mkdirSync(options.faultDir, { recursive: true });
    this.log = fs.createWriteStream(options.logFile, { flags: 'a' });
  }

  get running(): boolean {
    return this.child !== null;
  }

  /** Log lines of all runs so far that match `re`. */
  logLines(re: RegExp): string[] {
    return fs
      .readFileSync(this.options.logFile, 'utf8')
      .split('\n')
      .filter((l) => re.test(l));
  }

  /** The log of the current (or last) run only. */
  currentLog(): string {
    const all = fs.readFileSync(this.options.logFile, 'utf8');
    const at = all.lastIndexOf('\n=== faults: start #');
    return at < 0 ? all : all.slice(at);
  }

  /**
   * Waits until every capture source that went down in this run is up again (as many
   * `is up again` lines as `is down since` lines); true when so within `timeoutMs`.
   */
  async waitSourcesUp(timeoutMs: number): Promise<boolean> {
    const t0 = Date.now();
    for (;;) {
      const log = this.currentLog();
      const down = log.match(/is down since/g)?.length ?? 0;
      const up = log.match(/is up again after/g)?.length ?? 0;
      if (up >= down) return true;
      if (Date.now() - t0 > timeoutMs || !this.child) return false;
      await sleep(100);
    }
  }

  /** Starts `sluice run`; resolves once it is spawned (not yet healthy: see {@link waitHealthy}). */
  start(): void {
    if (this.child) throw new Error('topology process already running');
    this.starts++;
    this.expectingExit = false;
    this.log.write(`\n=== faults: start #${this.starts} at ${new Date().toISOString()}\n`);
    const args = [
      CLI,
      'run',
      this.options.file,
      '--http',
      `127.0.0.1:${this.options.httpPort}`,
      '--status-ms',
      '0',
    ];
    const cg = this.options.cgroupProcs;
    const [command, argv] = cg ? inScope(cg, process.execPath, args) : [process.execPath, args];
    const child = spawn(command, argv, {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, [WORKER_FAULT_DIR_ENV]: this.options.faultDir, ...this.options.env },
    });
    const onData = (b: Buffer) => {
      this.log.write(b);
      this.logTail = (this.logTail + b.toString()).slice(-4000);
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    this.child = child;
    this.exited = new Promise((resolve) => {
      child.on('exit', (code, signal) => {
        if (this.child === child) this.child = null;
        if (!this.expectingExit) {
          this.unexpectedExits.push(
            `sluice run exited by itself with code ${code} (signal ${signal}) at ${new Date().toISOString()}; log tail:\n${this.logTail}`,
          );
        }
        resolve({ code, signal });
      });
    });
  }

  /** SIGKILL of the whole process (every worker thread with it); resolves once it is gone. */
  async kill9(): Promise<void> {
    if (!this.child || !this.exited) return;
    this.expectingExit = true;
    this.child.kill('SIGKILL');
    await this.exited;
  }

  /** SIGTERM (drain, then exit); resolves with the exit code; SIGKILL after `timeoutMs`. */
  async stop(timeoutMs = 120_000): Promise<number | null> {
    if (!this.child || !this.exited) return null;
    this.expectingExit = true;
    const child = this.child;
    child.kill('SIGTERM');
    const t = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    const r = await this.exited;
    clearTimeout(t);
    return r.code;
  }

  private async get<T>(route: string): Promise<T | null> {
    try {
      const res = await fetch(`http://127.0.0.1:${this.options.httpPort}${route}`, {
        signal: AbortSignal.timeout(5000),
      });
      if (!res.ok && res.status !== 503) return null;
      return (await res.json()) as T;
    } catch {
      return null;
    }
  }

  /** GET /health, or null while the API does not answer. */
  health(): Promise<HealthView | null> {
    return this.get<HealthView>('/health');
  }

  /** GET /actors (every actor of the current generation), or null. */
  async actors(): Promise<ActorView[] | null> {
    const r = await this.get<ActorView[] | { actors: ActorView[] }>('/actors');
    if (r === null) return null;
    return Array.isArray(r) ? r : r.actors;
  }

  /**
   * Waits until GET /health says `ok` (every group live, none degraded); resolves with the ms
   * waited, or null after `timeoutMs` (or when the process is gone).
   */
  async waitHealthy(timeoutMs: number): Promise<number | null> {
    const t0 = Date.now();
    while (Date.now() - t0 < timeoutMs) {
      if (!this.child) return null;
      const h = await this.health();
      if (h?.status === 'ok') return Date.now() - t0;
      await sleep(50);
    }
    return null;
  }

  /**
   * Worker fault: asks actor `actor` to end its thread (`exit`) or throw (`throw`) at its next
   * heartbeat. Resolves true once the actor took the fault, false if it did not within
   * `timeoutMs` (the fault file is then removed).
   */
  async workerFault(actor: string, mode: 'exit' | 'throw', timeoutMs = 10_000): Promise<boolean> {
    const file = path.join(this.options.faultDir, encodeURIComponent(actor));
    fs.writeFileSync(`${file}.tmp`, mode);
    fs.renameSync(`${file}.tmp`, file);
    const t0 = Date.now();
    while (Date.now() - t0 < timeoutMs) {
      if (!fs.existsSync(file)) return true;
      await sleep(10);
    }
    fs.rmSync(file, { force: true });
    return false;
  }

  /** Closes the log (after the last run). */
  close(): void {
    this.log.end();
  }
}

/**
 * A tmpfs of `sizeBytes` mounted on `dir` (root only): filled with a file until ENOSPC and
 * freed again; remounted read only and read-write again. {@link unmount} in a finally.
 */
export class Tmpfs {
  mounted = false;
  private readonly filler: string;
  constructor(
    readonly dir: string,
    readonly sizeBytes: number,
  ) {
    this.filler = path.join(dir, 'faults-filler');
  }

  /** True when `mount -t tmpfs` works here (root, no sandbox refusing it). */
  static available(probeDir: string): boolean {
    fs.mkdirSync(probeDir, { recursive: true });
    try {
      execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', probeDir], {
        stdio: 'ignore',
      });
      execFileSync('umount', [probeDir], { stdio: 'ignore' });
      return true;
    } catch {
      return false;
    } finally {
      fs.rmSync(probeDir, { recursive: true, force: true });
    }
  }

  mount(): void {
    fs.mkdirSync(this.dir, { recursive: true });
    execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${this.sizeBytes}`, 'tmpfs', this.dir]);
    this.mounted = true;
  }

  /** Writes the filler until the file system is full; returns the bytes written. */
  fill(): number {
    const chunk = Buffer.alloc(1 << 20, 0x5a);
    const fd = fs.openSync(this.filler, 'a');
    let n = 0;
    try {
      for (;;) {
        try {
          n += fs.writeSync(fd, chunk);
        } catch (e) {
          if ((e as NodeJS.ErrnoException).code === 'ENOSPC') break;
          throw e;
        }
      }
      // The last partial megabyte: fill the remaining blocks too.
      for (let size = 1 << 19; size >= 512; size >>= 1) {
        try {
          n += fs.writeSync(fd, chunk, 0, size);
        } catch {
          // full at this size; try smaller
        }
      }
    } finally {
      fs.closeSync(fd);
    }
    return n;
  }

  /** Deletes the filler. */
  free(): void {
    fs.rmSync(this.filler, { force: true });
  }

  readOnly(): void {
    execFileSync('mount', ['-o', 'remount,ro', this.dir]);
  }

  readWrite(): void {
    execFileSync('mount', ['-o', 'remount,rw', this.dir]);
  }

  unmount(): void {
    if (!this.mounted) return;
    try {
      this.readWrite();
    } catch {
      // already read-write
    }
    this.free();
    execFileSync('umount', ['-l', this.dir]);
    this.mounted = false;
  }
}

/** Bounds of the suite's waits, ms (a slow shared machine: generous, but every wait has one). */
export const FAULT_BOUNDS = {
  /** A topology (re)started or a fault ended: healthy again within this. */
  recoveryMs: 90_000,
  /** A drain (SIGTERM) finishes within this. */
  drainMs: 180_000,
} as const;
