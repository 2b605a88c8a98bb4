/**
 * Issue 3 (and startFrom START with INPUTS, issue 8): for each restart strategy, a child process running a topology is killed with SIGKILL
 * at random moments (62 kills in all under `npm run test:long`, half of each scenario's in
 * `npm test`: test/lib/long.ts); after every restart the state the service rebuilt equals
 * the reference state, and after the final run the output equals the reference: no input lost,
 * none processed twice, no output duplicated. The service (test/fixtures/services/
 * lww-product.ts) keeps a non-commutative state over several input queues, so a replay in the
 * wrong order shows. The seed is printed on failure; SLUICE_TEST_SEED replays one.
 *
 * The cases, for both buses (test/lib/backends.ts): replay-crash.test.ts runs them on the
 * embedded journal, replay-crash-kafka.test.ts on the real Kafka broker, where the output is
 * written in transactions (exactly once: a read_committed reader of the output sees each input's
 * effect once) and LAST_WRITTEN, the processed records and the snapshots are read back from the
 * output topic. On Kafka, CI runs the first scenario (5 kills; 10 under npm run test:long);
 * SLUICE_KAFKA_CRASH=all runs every scenario (`npm run test:kafka-services`, `npm run test:long`).
 */
import { runChild as runChildProcess, type KillAt, type ChildRun } from './lib/kill-child.js';
import { longOr } from './lib/long.js';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { EnvelopeView } from '../engine/codec/index.js';
import { EVENT_TYPE_SNAPSHOT_END } from '../engine/replay/index.js';
import type { TestBackend } from './lib/backends.js';
import {
  rng,
  appendLwwInputsTo,
  verifyLwwOutput,
  readLiveFile,
  type InputValues,
} from './replay-helpers.js';

const CHUNK = 1500;
const RUNS_MAX = 80;
const child = new URL('./replay-crash.child.js', import.meta.url).pathname;
const fixture = (name: string) =>
  new URL(`./fixtures/services/${name}.js`, import.meta.url).pathname;

/** Runs the child with the topology and record count; see test/lib/kill-child.ts. */
function runChild(topology: string, perPartition: number, kill: KillAt | null): Promise<ChildRun> {
  return runChildProcess(child, [topology, String(perPartition)], kill);
}

interface Scenario {
  name: string;
  module: string;
  inputsReplay: string;
  /** services[].startFrom; default LAST_WRITTEN. */
  startFrom?: string;
  queues: { name: string; partitions: number }[];
  settings: Record<string, unknown>;
  order: 'processed' | 'outputs';
  kills: number;
  /** Kills on the Kafka bus (each run there starts slower: producer fencing, reader consumers). */
  kafkaKills: number;
  seedOffset: number;
}

const SCENARIOS: Scenario[] = [
  {
    name: 'inputsReplay OUTPUT, three input queues',
    module: fixture('lww-product'),
    inputsReplay: 'OUTPUT',
    queues: [
      { name: 'a', partitions: 1 },
      { name: 'b', partitions: 1 },
      { name: 'c', partitions: 2 },
    ],
    settings: {},
    order: 'processed',
    kills: 18,
    kafkaKills: 10,
    seedOffset: 0,
  },
  {
    name: 'inputsReplay OUTPUT_REVERSE, two input queues',
    module: fixture('lww-product'),
    inputsReplay: 'OUTPUT_REVERSE',
    queues: [
      { name: 'a', partitions: 1 },
      { name: 'b', partitions: 1 },
    ],
    settings: { emitAll: true },
    order: 'outputs',
    kills: 16,
    kafkaKills: 10,
    seedOffset: 1,
  },
  {
    name: 'snapshots with inputsReplay OUTPUT, two input queues',
    module: fixture('lww-product-snapshot'),
    inputsReplay: 'OUTPUT',
    queues: [
      { name: 'a', partitions: 1 },
      { name: 'b', partitions: 2 },
    ],
    settings: { snapshotEveryInputs: 400 },
    order: 'processed',
    kills: 16,
    kafkaKills: 10,
    seedOffset: 2,
  },
  {
    // Chronicle's startFrom START + inputsReplay INPUTS: replay 0..LAST_WRITTEN, then live.
    // One input partition: INPUTS replays per partition, exact only without interleaving.
    name: 'startFrom START with inputsReplay INPUTS, one input queue',
    module: fixture('lww-product'),
    inputsReplay: 'INPUTS',
    startFrom: 'START',
    queues: [{ name: 'a', partitions: 1 }],
    settings: { emitAll: true },
    order: 'outputs',
    kills: 12,
    kafkaKills: 10,
    seedOffset: 3,
  },
];

/**
 * Registers the kill -9 cases on one bus (call test.run() after it). `backendOf` makes the
 * case's bus (test/lib/backends.ts). On Kafka only the first scenario runs unless
 * SLUICE_KAFKA_CRASH=all.
 */
export function crashTests(bus: 'journal' | 'kafka', backendOf: () => Promise<TestBackend>): void {
  const scenarios =
    bus === 'kafka' && process.env.SLUICE_KAFKA_CRASH !== 'all' ? SCENARIOS.slice(0, 1) : SCENARIOS;
  for (const sc of scenarios) crashTest(bus, sc, backendOf);
}

function crashTest(
  bus: 'journal' | 'kafka',
  sc: Scenario,
  backendOf: () => Promise<TestBackend>,
): void {
  test(`${bus} bus: kill -9 at random moments, ${sc.name}: every restart rebuilds the reference state; the output equals the reference`, async () => {
    const seed = Number(process.env.SLUICE_TEST_SEED ?? Date.now() % 100000) + sc.seedOffset;
    const random = rng(seed);
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-replay-crash-'));
    const backend = await backendOf();
    const full = bus === 'kafka' ? sc.kafkaKills : sc.kills;
    const kills = longOr(full, Math.ceil(full / 2));
    const q = (name: string) => backend.queue(name);
    try {
      const liveFile = path.join(dir, 'live.jsonl');
      const topologyFile = path.join(dir, 'topology.yaml');
      fs.writeFileSync(
        topologyFile,
        [
          `name: replay-crash-${bus}-${sc.seedOffset}-${process.pid}`,
          'dataDir: ./data',
          ...backend.busLines,
          'supervisor: { backoffInitialMs: 10, restartsMax: 50 }',
          'queues:',
          ...sc.queues.map((x) => `  - { name: ${q(x.name)}, partitions: ${x.partitions} }`),
          `  - { name: ${q('out')} }`,
          'services:',
          `  - name: ${backend.service('lww')}`,
          `    module: ${sc.module}`,
          `    inputs: [${sc.queues.map((x) => q(x.name)).join(', ')}]`,
          `    output: ${q('out')}`,
          `    inputsReplay: ${sc.inputsReplay}`,
          `    startFrom: ${sc.startFrom ?? 'LAST_WRITTEN'}`,
          '    batchSizeMax: 32',
          `    settings: ${JSON.stringify({ spinUs: 60, liveFile, ...sc.settings })}`,
          '',
        ].join('\n'),
      );
      const inputs = sc.queues.flatMap((x) =>
        Array.from({ length: x.partitions }, (_, p) => ({ queue: q(x.name), partition: p })),
      );
      await backend.createQueues([
        ...sc.queues.map((x) => ({ name: q(x.name), partitions: x.partitions })),
        { name: q('out'), partitions: 1 },
      ]);
      const dataDir = path.join(dir, 'data');
      const values: InputValues = new Map();
      let perPartition = 0;
      const more = async () => {
        await appendLwwInputsTo(backend, dataDir, inputs, CHUNK, random, values);
        perPartition += CHUNK;
      };
      await more();
      let killed = 0;
      let runs = 0;
      // One kill in four at a random moment of the start (restore, replay); the others at a
      // random moment of the live run after it, spread over a clean run's live time as measured.
      // Kafka: readers start later (each joins a private consumer group) and outputs commit
      // per transaction, so a run's live time is longer; measured runs correct it either way.
      let liveMs = bus === 'kafka' ? 4000 : 800;
      while (killed < kills) {
        assert.ok(++runs <= RUNS_MAX, `(seed ${seed}) ${RUNS_MAX} runs without ${kills} kills`);
        const kill =
          random() < 0.25
            ? { from: 'spawn' as const, afterMs: 100 + Math.floor(random() * 500) }
            : { from: 'live' as const, afterMs: Math.floor(random() * liveMs) };
        const r = await runChild(topologyFile, perPartition, kill);
        if (r.signal === 'SIGKILL') {
          killed++;
          continue;
        }
        assert.is(r.code, 0, `run ${runs} exited ${r.code} (seed ${seed}):\n${r.out}`);
        if (r.liveToExitMs !== null) liveMs = (liveMs + r.liveToExitMs) / 2;
        await more();
      }
      const final = await runChild(topologyFile, perPartition, null);
      assert.is(final.code, 0, `final run failed (seed ${seed}):\n${final.out}`);

      const verdict = verifyLwwOutput(
        backend.tailer(dataDir, q('out'), 0),
        inputs,
        values,
        sc.order,
        sc.settings.emitAll === true,
        `seed ${seed}`,
      );
      for (const [k, p] of Object.entries(verdict.positions))
        assert.is(
          p,
          perPartition - 1,
          `(seed ${seed}) ${k} processed through ${p} of ${perPartition}`,
        );
      // every start (the first, each restart after a kill, each clean rerun) rebuilt the reference state
      const live = readLiveFile(liveFile);
      let rebuilt = 0;
      for (const l of live) {
        assert.is(
          l.digest,
          verdict.digests[l.count],
          `(seed ${seed}) a start rebuilt the state after ${l.count} inputs wrongly`,
        );
        if (l.count > 0) rebuilt++;
      }
      assert.ok(rebuilt >= kills / 3, `(seed ${seed}) only ${rebuilt} starts had state to rebuild`);
      let markers = 0;
      if (sc.settings.snapshotEveryInputs) {
        const t = backend.tailer(dataDir, q('out'), 0);
        const view = new EnvelopeView();
        for (let rec = t.next(); rec; rec = t.next())
          if (view.wrap(rec.bytes, 0, rec.bytes.length).type === EVENT_TYPE_SNAPSHOT_END) markers++;
        t.close();
        assert.ok(markers >= 5, `(seed ${seed}) ${markers} snapshots written`);
      }
      process.stdout.write(
        `\n  ${bus} bus, ${sc.name}: seed ${seed}, ${killed} kills in ${runs + 1} runs, ${rebuilt} starts rebuilt state, ${verdict.outputs} outputs for ${perPartition * inputs.length} inputs${markers ? `, ${markers} snapshots` : ''}\n`,
      );
    } finally {
      await backend.close();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
}
