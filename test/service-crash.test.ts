/**
 * Issue 2, item 7: a child process running a topology is killed with SIGKILL at random moments
 * (at least 20 times); after the final run, the service output equals a reference computed from
 * the inputs: every input's output exactly once, in input order per partition, with the state
 * (running sums) rebuilt correctly after each restart (LAST_WRITTEN + INPUTS replay).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { Appender, Tailer } from '../engine/journal/index.js';
import {
  EnvelopeView,
  EnvelopeWriter,
  EVENT_TYPE_JSON,
  decodeJson,
  encodeJson,
  queueId,
} from '../engine/codec/index.js';

const PARTITIONS = 2;
const CHUNK = 3000;
const KILLS = 20;
const RUNS_MAX = 80;
const child = new URL('./service-crash.child.js', import.meta.url).pathname;
const serviceModule = new URL('./fixtures/services/running-sum.js', import.meta.url).pathname;

/** Deterministic pseudo-random numbers (mulberry32), so a failure can be replayed. */
function rng(seed: number) {
  return () => {
    seed |= 0;
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function runChild(
  topology: string,
  perPartition: number,
  killAfterMs: number | null,
): Promise<{ code: number | null; signal: string | null; out: string }> {
  return new Promise((resolve) => {
    const p = spawn(process.execPath, [child, topology, String(perPartition)], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    p.stdout.on('data', (b) => (out += b));
    p.stderr.on('data', (b) => (out += b));
    const timer = killAfterMs === null ? null : setTimeout(() => p.kill('SIGKILL'), killAfterMs);
    p.on('exit', (code, signal) => {
      if (timer) clearTimeout(timer);
      resolve({ code, signal, out });
    });
  });
}

test('kill -9 at random moments: after the final run the output equals the reference', async () => {
  const seed = Number(process.env.SLUICE_TEST_SEED ?? Date.now() % 100000);
  const random = rng(seed);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-crash-'));
  try {
    const topologyFile = path.join(dir, 'topology.yaml');
    fs.writeFileSync(
      topologyFile,
      [
        'name: crash',
        'dataDir: ./data',
        'supervisor: { backoffInitialMs: 10, restartsMax: 50 }',
        'queues:',
        `  - { name: in, partitions: ${PARTITIONS} }`,
        '  - { name: out }',
        'services:',
        '  - name: summer',
        `    module: ${serviceModule}`,
        '    inputs: [in]',
        '    output: out',
        '    inputsReplay: INPUTS',
        '    batchSizeMax: 64',
        '    settings: { spinUs: 60 }',
        '',
      ].join('\n'),
    );
    // The inputs, and the reference computed from them; extended whenever a run completes, so
    // that every kill lands while there is work in flight.
    const reference = new Map<string, { key: string; sum: number; n: number }[]>();
    const sums = new Map<string, number>();
    const writer = new EnvelopeWriter();
    let perPartition = 0;
    const appendInputs = () => {
      for (let p = 0; p < PARTITIONS; p++) {
        const a = Appender.open({ dir: path.join(dir, 'data', 'queues', 'in', String(p)) });
        const ref = reference.get(`in/${p}`) ?? [];
        for (let n = perPartition; n < perPartition + CHUNK; n++) {
          const key = `p${p}-k${n % 13}`;
          const v = ((n * 7919) % 1000) - 500;
          const sum = (sums.get(key) ?? 0) + v;
          sums.set(key, sum);
          ref.push({ key, sum, n });
          a.append(
            writer.encode({
              type: EVENT_TYPE_JSON,
              key,
              eventTimeMs: Date.now(),
              payload: encodeJson({ v, n }),
            }),
          );
        }
        a.close();
        reference.set(`in/${p}`, ref);
      }
      perPartition += CHUNK;
    };
    appendInputs();

    let killed = 0;
    let runs = 0;
    while (killed < KILLS) {
      assert.ok(++runs <= RUNS_MAX, `(seed ${seed}) ${RUNS_MAX} runs without ${KILLS} kills`);
      const r = await runChild(topologyFile, perPartition, 100 + Math.floor(random() * 700));
      if (r.signal === 'SIGKILL') {
        killed++;
        continue;
      }
      assert.is(r.code, 0, `run ${runs} exited ${r.code} (seed ${seed}):\n${r.out}`);
      appendInputs();
    }
    const final = await runChild(topologyFile, perPartition, null);
    assert.is(final.code, 0, `final run failed (seed ${seed}):\n${final.out}`);

    // The output: per input partition, exactly the reference, in order, once each.
    const got = new Map<string, { key: string; sum: number; n: number }[]>();
    const t = Tailer.open({ dir: path.join(dir, 'data', 'queues', 'out', '0') });
    const view = new EnvelopeView();
    const qid = queueId('in');
    for (let rec = t.next(); rec; rec = t.next()) {
      view.wrap(rec.bytes, 0, rec.bytes.length);
      assert.is(view.causeQueue, qid);
      const k = `in/${view.causePartition}`;
      const list = got.get(k) ?? [];
      assert.is(
        view.causeIndex,
        list.length,
        `(seed ${seed}) ${k}: output for input ${view.causeIndex} where ${list.length} was due (a duplicate or a gap)`,
      );
      list.push(decodeJson(view.payload) as { key: string; sum: number; n: number });
      got.set(k, list);
    }
    t.close();
    for (const [k, ref] of reference)
      assert.equal(got.get(k), ref, `(seed ${seed}) output of ${k} differs from the reference`);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
