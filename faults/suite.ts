/**
 * The fault suite (issue 13 §1): runs shapes one after the other, each with its share of the
 * faults, and collects the ledger. `npm run faults` (faults/run.ts) runs it from the command
 * line; test/faults-ci.test.ts runs a subset in CI.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Ledger, Tmpfs, rng } from './harness.js';
import { NetScope } from './network.js';
import { bankShape, pgAvailable } from './bank.js';
import { serviceShape, STRATEGIES } from './services.js';
import { kafkaShape } from './kafka.js';
import type { Shape } from './shape.js';

/**
 * Every shape by name: without `kafka` the journal shapes; with it the Kafka shapes, each on a
 * cluster it starts for itself (faults/kafka.ts); with `all` both, the Kafka shapes first.
 */
export function allShapes(kafka = false, all = false): Shape[] {
  const journal = [bankShape('sqlite'), bankShape('postgres'), ...STRATEGIES.map(serviceShape)];
  const onKafka = [kafkaShape(1), kafkaShape(3)];
  // Kafka first: with --parallel 2 each lane starts with one, and its journal shapes make up
  // the faults a slow cluster could not take in its share of the time.
  if (all) return [...onKafka, ...journal];
  return kafka ? onKafka : journal;
}

/** Options of {@link runSuite}. */
export interface SuiteOptions {
  seed: number;
  /**
   * Faults in all, shared out evenly over the shapes; what a shape could not inject in its time
   * goes to the next shapes of its lane.
   */
  faults: number;
  /** Shape names to run (default: all; bank-postgres only when PostgreSQL answers). */
  shapes?: string[];
  /** Stop injecting after this long in all, ms (each shape gets its share). */
  budgetMs: number;
  /** The Kafka shapes (broker faults on clusters of their own) instead of the journal ones. */
  kafka?: boolean;
  /** The journal shapes and the Kafka shapes in one run (overrides `kafka`). */
  all?: boolean;
  /** Use tmpfs faults when available (default true). */
  tmpfs?: boolean;
  /** Use network faults when available (default true; faults/network.ts). */
  net?: boolean;
  /** First port for the topologies' operations API (one per shape; default 19161, Kafka 19181). */
  portBase?: number;
  /** Where the shapes' directories go (default a fresh one under the OS temp directory). */
  dir?: string;
  /** Keep the directories (logs) after a clean run. */
  keep?: boolean;
  /**
   * Shapes run at the same time (default 1: one after the other). With P > 1 shape i runs in lane
   * i mod P, each lane's shapes one after the other, every lane with the whole time budget. A
   * shape's seed is the same whatever P is (drawn in shape order before any starts).
   */
  parallel?: number;
  out?: (line: string) => void;
}

/** What a run of the suite did. */
export interface SuiteResult {
  seed: number;
  faults: number;
  byFault: Record<string, number>;
  byShape: Record<string, number>;
  violations: string[];
  durationMs: number;
  dir: string;
}

/** Runs the suite; never throws for a violation (they are in the result). */
export async function runSuite(o: SuiteOptions): Promise<SuiteResult> {
  const t0 = Date.now();
  const ledger = new Ledger(o.seed, o.out);
  const dir = o.dir ?? fs.mkdtempSync(path.join(os.tmpdir(), `faults_${o.seed}_`));
  fs.mkdirSync(dir, { recursive: true });
  const pg = await pgAvailable();
  let shapes = allShapes(o.kafka, o.all).filter((s) =>
    o.shapes ? o.shapes.includes(s.name) : true,
  );
  if (!pg) {
    if (shapes.some((s) => s.name === 'bank-postgres'))
      ledger.info('PostgreSQL does not answer: bank-postgres skipped');
    shapes = shapes.filter((s) => s.name !== 'bank-postgres');
  }
  const tmpfs = (o.tmpfs ?? true) && Tmpfs.available(path.join(dir, 'tmpfs-probe'));
  const net = (o.net ?? true) && NetScope.available() !== null;
  ledger.info(
    `seed ${o.seed}, ${o.faults} faults over ${shapes.map((s) => s.name).join(', ')}; tmpfs faults ${tmpfs ? 'on' : 'off (mount -t tmpfs refused)'}; network faults ${net ? 'on' : 'off (needs root, nft and a cgroup2 mount under /sys/fs/cgroup)'}; directory ${dir}`,
  );
  const random = rng(o.seed);
  const seeds = shapes.map(() => Math.floor(random() * 2 ** 31));
  const lanes = Math.max(1, Math.min(o.parallel ?? 1, shapes.length));
  const shareOf = (i: number) =>
    Math.floor(o.faults / shapes.length) + (i < o.faults % shapes.length ? 1 : 0);
  const runLane = async (lane: number): Promise<void> => {
    const mine = shapes.map((_, i) => i).filter((i) => i % lanes === lane);
    // The lane's faults, shared out over its shapes as they go: what a shape could not inject
    // in its time (a Kafka cluster's restarts are slow) goes to the lane's next shapes.
    let laneLeft = mine.reduce((n, i) => n + shareOf(i), 0);
    for (let k = 0; k < mine.length; k++) {
      const i = mine[k]!;
      const shape = shapes[i]!;
      const share = Math.floor(laneLeft / (mine.length - k));
      const shapeDir = path.join(dir, shape.name);
      fs.mkdirSync(shapeDir, { recursive: true });
      const remainingMs = o.budgetMs - (Date.now() - t0);
      const budget = remainingMs / (mine.length - k);
      try {
        await shape.run({
          ledger,
          random: rng(seeds[i]!),
          faults: share,
          deadlineMs: Date.now() + budget,
          dir: shapeDir,
          httpPort: (o.portBase ?? (o.kafka ? 19181 : 19161)) + i,
          tmpfs,
          net,
        });
      } catch (e) {
        ledger.violation(shape.name, `the shape failed: ${(e as Error).stack ?? e}`);
      }
      const done = ledger.faults.filter((f) => f.shape === shape.name).length;
      laneLeft -= done;
      ledger.info(
        `${shape.name}: ${done} faults, ${ledger.violations.length} violations so far in the run`,
      );
    }
  };
  await Promise.all(Array.from({ length: lanes }, (_, lane) => runLane(lane)));
  const byFault: Record<string, number> = {};
  const byShape: Record<string, number> = {};
  for (const f of ledger.faults) {
    byFault[f.fault] = (byFault[f.fault] ?? 0) + 1;
    byShape[f.shape] = (byShape[f.shape] ?? 0) + 1;
  }
  if (ledger.violations.length === 0 && !o.keep) fs.rmSync(dir, { recursive: true, force: true });
  return {
    seed: o.seed,
    faults: ledger.faults.length,
    byFault,
    byShape,
    violations: ledger.violations,
    durationMs: Date.now() - t0,
    dir,
  };
}
