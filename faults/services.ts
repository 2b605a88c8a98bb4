/**
 * The generic "every input has exactly one effect" shape, once per restart strategy: the
 * lww-product test service (test/fixtures/services/lww-product.ts: last-writer-wins per key and
 * a running affine product over every input, in processing order, so a replay in the wrong order,
 * a lost input or a repeated one changes every later digest) under `sluice run`, its inputs
 * appended by the suite while it runs, faulted throughout.
 *
 * Checks (test/replay-helpers.ts verifyLwwOutput, as the replay kill -9 tests use it): every
 * input processed once and in order per partition, every output once, every output's state equal
 * to the reference state after its input; every start rebuilt exactly the reference state (the
 * service's live file). After a kill -9 (nothing running) and at the end: all of it. While the
 * topology runs, a batch may be half on disk when it is read, so the two checks that look at the
 * end of the output (outputs after the last processed record, output count) wait for the end.
 */
import fs from 'node:fs';
import path from 'node:path';
import {
  appendLwwInputs,
  verifyLwwOutput,
  readLiveFile,
  type InputValues,
} from '../test/replay-helpers.js';
import { TopologyProcess, Tmpfs, REPO_ROOT, between } from './harness.js';
import {
  commonFaults,
  injectCommon,
  faultLoop,
  recover,
  checkAll,
  type Shape,
  type ShapeContext,
  type FaultTarget,
} from './shape.js';

/** One restart strategy to fault. */
interface Strategy {
  name: string;
  module: string;
  inputsReplay: string;
  startFrom: string;
  queues: { name: string; partitions: number }[];
  settings: Record<string, unknown>;
  order: 'processed' | 'outputs';
}

const fixture = (name: string) => path.join(REPO_ROOT, `dist/test/fixtures/services/${name}.js`);

/** The strategies (the replay kill -9 tests' scenarios, plus LAST_WRITTEN with INPUTS). */
export const STRATEGIES: Strategy[] = [
  {
    name: 'output',
    module: fixture('lww-product'),
    inputsReplay: 'OUTPUT',
    startFrom: 'LAST_WRITTEN',
    queues: [
      { name: 'a', partitions: 1 },
      { name: 'b', partitions: 1 },
      { name: 'c', partitions: 2 },
    ],
    settings: {},
    order: 'processed',
  },
  {
    name: 'output-reverse',
    module: fixture('lww-product'),
    inputsReplay: 'OUTPUT_REVERSE',
    startFrom: 'LAST_WRITTEN',
    queues: [
      { name: 'a', partitions: 1 },
      { name: 'b', partitions: 1 },
    ],
    settings: { emitAll: true },
    order: 'outputs',
  },
  {
    name: 'snapshots',
    module: fixture('lww-product-snapshot'),
    inputsReplay: 'OUTPUT',
    startFrom: 'LAST_WRITTEN',
    queues: [
      { name: 'a', partitions: 1 },
      { name: 'b', partitions: 2 },
    ],
    settings: { snapshotEveryInputs: 400 },
    order: 'processed',
  },
  {
    name: 'start-inputs',
    module: fixture('lww-product'),
    inputsReplay: 'INPUTS',
    startFrom: 'START',
    queues: [{ name: 'a', partitions: 1 }],
    settings: { emitAll: true },
    order: 'outputs',
  },
  {
    name: 'last-written-inputs',
    module: fixture('lww-product'),
    inputsReplay: 'INPUTS',
    startFrom: 'LAST_WRITTEN',
    queues: [{ name: 'a', partitions: 1 }],
    settings: { emitAll: true },
    order: 'outputs',
  },
];

/** Messages of verifyLwwOutput about the end of the output: only final once nothing runs. */
export const TAIL_ONLY = /outputs after the last processed record|outputs for \d+ emitting inputs/;

/**
 * The end-of-run checks of an LWW service shape (here and faults/kafka.ts) on a verdict of
 * verifyLwwOutput: every input processed after the drain, every start's rebuilt state equal to
 * the reference (`liveFile`), and the summary line.
 */
export function reportFinalVerdict(
  ctx: ShapeContext,
  name: string,
  verdict: NonNullable<ReturnType<typeof verifyLwwOutput>>,
  values: InputValues,
  liveFile: string,
  starts: number,
): void {
  for (const [k, p] of Object.entries(verdict.positions)) {
    const due = (values.get(k)?.length ?? 0) - 1;
    if (p !== due)
      ctx.ledger.violation(
        name,
        `${k} processed through ${p} of ${due} after the drain (inputs without an effect)`,
      );
  }
  let rebuilt = 0;
  for (const l of readLiveFile(liveFile)) {
    if (l.digest !== verdict.digests[l.count])
      ctx.ledger.violation(
        name,
        `a start rebuilt the state after ${l.count} inputs as ${l.digest}, the reference is ${verdict.digests[l.count]}`,
      );
    if (l.count > 0) rebuilt++;
  }
  const total = [...values.values()].reduce((a, v) => a + v.length, 0);
  ctx.ledger.info(
    `${name}: final: ${total} inputs, ${verdict.outputs} outputs, ${rebuilt} starts rebuilt state, ${starts} runs of sluice run`,
  );
}

/** The shape for one strategy. */
export function serviceShape(s: Strategy): Shape {
  const name = `service-${s.name}`;
  return {
    name,
    async run(ctx: ShapeContext) {
      const dataDir = path.join(ctx.dir, 'data');
      const liveFile = path.join(ctx.dir, 'live.jsonl');
      const file = path.join(ctx.dir, 'topology.yaml');
      fs.writeFileSync(
        file,
        [
          `name: faults-${s.name}`,
          `dataDir: ${JSON.stringify(dataDir)}`,
          'supervisor: { backoffMaxMs: 1000 }',
          'queues:',
          ...s.queues.map(
            (q) => `  - { name: ${q.name}, partitions: ${q.partitions}, segmentBytes: 1048576 }`,
          ),
          '  - { name: out, segmentBytes: 1048576 }',
          'services:',
          '  - name: lww',
          `    module: ${JSON.stringify(s.module)}`,
          `    inputs: [${s.queues.map((q) => q.name).join(', ')}]`,
          '    output: out',
          `    inputsReplay: ${s.inputsReplay}`,
          `    startFrom: ${s.startFrom}`,
          '    batchSizeMax: 32',
          `    settings: ${JSON.stringify({ spinUs: 40, liveFile, ...s.settings })}`,
          '',
        ].join('\n'),
      );
      let disk: Tmpfs | null = null;
      if (ctx.tmpfs) {
        // Room for a long run's data (see faults/bank.ts); the disk-full fault fills what is left.
        disk = new Tmpfs(dataDir, 512 * 1048576);
        disk.mount();
      }
      const proc = new TopologyProcess({
        file,
        httpPort: ctx.httpPort,
        logFile: path.join(ctx.dir, 'sluice.log'),
        faultDir: path.join(ctx.dir, 'worker-faults'),
      });
      const inputs = s.queues.flatMap((q) =>
        Array.from({ length: q.partitions }, (_, p) => ({ queue: q.name, partition: p })),
      );
      const values: InputValues = new Map();
      const outDir = path.join(dataDir, 'queues', 'out', '0');
      const verify = (final: boolean): string[] => {
        if (!fs.existsSync(outDir)) return [];
        try {
          verifyLwwOutput(outDir, inputs, values, s.order, s.settings.emitAll === true, name);
          return [];
        } catch (e) {
          const m = (e as Error).message;
          return !final && proc.running && TAIL_ONLY.test(m) ? [] : [m];
        }
      };
      try {
        appendLwwInputs(dataDir, inputs, 500, ctx.random, values);
        const t: FaultTarget = { shape: name, ctx, proc, disk, check: () => verify(false) };
        proc.start();
        if ((await recover(t, 'first start')) === null) return;
        const t0 = Date.now();
        const n = await faultLoop(
          ctx,
          commonFaults(t),
          async (kind) => {
            // New inputs before each fault, so that it lands with work in flight.
            if (!disk || !fs.existsSync(path.join(disk.dir, 'faults-filler')))
              appendLwwInputs(dataDir, inputs, between(ctx.random, 50, 400), ctx.random, values);
            return injectCommon(t, kind as Parameters<typeof injectCommon>[1], t0);
          },
          [100, 1200],
        );
        ctx.ledger.info(`${name}: ${n} faults injected; draining`);
        if (!proc.running) proc.start();
        await recover(t, 'start before the final drain');
        const code = await proc.stop();
        if (code !== 0) ctx.ledger.violation(name, `the final drain exited with code ${code}`);
        await checkAll({ ...t, check: () => verify(true) });
        let verdict: ReturnType<typeof verifyLwwOutput> | null = null;
        try {
          verdict = verifyLwwOutput(
            outDir,
            inputs,
            values,
            s.order,
            s.settings.emitAll === true,
            name,
          );
        } catch {
          // reported by the check above
        }
        if (verdict) reportFinalVerdict(ctx, name, verdict, values, liveFile, proc.starts);
      } finally {
        if (proc.running) await proc.kill9();
        proc.close();
        disk?.unmount();
      }
    },
  };
}
