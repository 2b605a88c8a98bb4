/**
 * The race at the end of replay: inputs appended while a service replays are processed live
 * exactly once, never swallowed by the replay and never skipped. A producer appends to every
 * input queue in small batches throughout a restart that replays a long history (OUTPUT and
 * INPUTS); afterwards every input has been processed once, in order, and the output equals
 * the reference.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Tailer } from '../engine/journal/index.js';
import { loadTopology, startTopology } from '../index.js';
import { computeLastWritten } from '../engine/service/index.js';
import { scanOutput } from '../engine/replay/index.js';
import {
  rng,
  appendLwwInputs,
  verifyLwwOutput,
  readLiveFile,
  type InputValues,
} from './replay-helpers.js';

const HISTORY = 40_000;
const DURING = 60;
const DURING_BATCH = 50;

for (const inputsReplay of ['OUTPUT', 'INPUTS']) {
  test(`inputs appended during an ${inputsReplay} replay are processed live exactly once`, async () => {
    const seed = Number(process.env.SLUICE_TEST_SEED ?? 99);
    const random = rng(seed);
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-replay-race-'));
    try {
      const liveFile = path.join(dir, 'live.jsonl');
      const file = path.join(dir, 'topology.yaml');
      // INPUTS replays partitions one after the other: one input queue keeps the reference exact
      const queues = inputsReplay === 'OUTPUT' ? ['a', 'b'] : ['a'];
      fs.writeFileSync(
        file,
        [
          'name: race',
          'dataDir: ./data',
          'queues:',
          ...queues.map((q) => `  - { name: ${q} }`),
          '  - { name: out, fsync: none }',
          'services:',
          '  - name: lww',
          `    module: ${new URL('./fixtures/services/lww-product.js', import.meta.url).pathname}`,
          `    inputs: [${queues.join(', ')}]`,
          '    output: out',
          `    inputsReplay: ${inputsReplay}`,
          '    batchSizeMax: 256',
          `    settings: { liveFile: ${JSON.stringify(liveFile)}, emitAll: ${inputsReplay === 'INPUTS'} }`,
          '',
        ].join('\n'),
      );
      const topology = loadTopology(file);
      const inputs = queues.map((q) => ({ queue: q, partition: 0 }));
      const outDir = path.join(topology.dataDir, 'queues', 'out', '0');
      const values: InputValues = new Map();
      const caughtUp = async (n: number) => {
        for (let waited = 0; ; waited += 10) {
          const t = Tailer.open({ dir: outDir });
          t.moveToEnd();
          let positions = scanOutput(t, inputs, undefined, 'out').positions;
          t.moveToEnd();
          if (!positions) positions = Object.values(computeLastWritten(t, inputs).positions);
          t.close();
          if (positions.every((p) => p === n - 1)) return;
          assert.ok(
            waited < 60_000,
            `(seed ${seed}) not caught up with ${n} inputs after 60 s: ${positions}`,
          );
          await new Promise((r) => setTimeout(r, 10));
        }
      };
      // 1. a history, processed live
      appendLwwInputs(topology.dataDir, inputs, HISTORY, random, values);
      let running = await startTopology(topology, { log: () => {} });
      await caughtUp(HISTORY);
      await running.stop();

      // 2. restart (replaying the history) while a producer appends
      let appended = 0;
      let stop = false;
      const producer = (async () => {
        while (!stop && appended < DURING * DURING_BATCH) {
          appendLwwInputs(topology.dataDir, inputs, DURING_BATCH, random, values);
          appended += DURING_BATCH;
          await new Promise((r) => setTimeout(r, 2));
        }
      })();
      running = await startTopology(topology, { log: () => {} });
      const atLive = appended;
      await producer;
      stop = true;
      await caughtUp(HISTORY + appended);
      await running.stop();

      const live = readLiveFile(liveFile);
      assert.is(live.length, 2);
      assert.ok(atLive > 0, `(seed ${seed}) nothing was appended while the service started`);
      const verdict = verifyLwwOutput(
        outDir,
        inputs,
        values,
        inputsReplay === 'OUTPUT' ? 'processed' : 'outputs',
        inputsReplay === 'INPUTS',
        `seed ${seed}`,
      );
      for (const p of Object.values(verdict.positions)) assert.is(p, HISTORY + appended - 1);
      // the restart rebuilt the state after the history, whatever was appended meanwhile
      assert.is(live[1].digest, verdict.digests[live[1].count]);
      assert.is(
        live[1].count,
        HISTORY * queues.length,
        'the replay covers the history only; what came during it is live',
      );
      process.stdout.write(
        `\n  ${inputsReplay}: ${atLive} of ${appended} inputs per queue appended while the service started\n`,
      );
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
}

test.run();
