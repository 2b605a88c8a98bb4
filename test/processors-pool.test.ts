/**
 * The pool stage of a processor declared in a topology file (`pool: { threads }`), on the
 * journal bus with real piscina threads: every record once and in order per key (durable outputs;
 * pubsub handler calls), a record the
 * handler keeps throwing on goes to the dead-letter topic (pooled and inline alike) while the
 * others pass, and kill -9 of a `sluice run` process mid-run, twice, then a restart, still gives
 * every output exactly once, in order per key.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import { loadTopology, startTopology } from '../index.js';
import { createJournalBus, type BusBackend, type ConsumedRecord } from '../engine/bus/index.js';
import { bytes, readTopic, text, waitForRecords } from './patterns-helpers.js';

const root = fileURLToPath(new URL('../../', import.meta.url));
const fixture = path.join(root, 'test', 'fixtures', 'processors', 'pool-transform.ts');
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'processors_pool-'));
const s = suite('pool stage of a topology processor');
const KEYS = 12;

/** A topology file with one durable processor `t` (in -> out), pooled unless `pool` is ''. */
function topologyFile(dir: string, opts: { pool: string; extra?: string[] }): string {
  const file = path.join(dir, 'topology.yaml');
  fs.writeFileSync(
    file,
    [
      'name: pool',
      `dataDir: ${dir}/data`,
      'supervisor: { backoffInitialMs: 50 }',
      'queues:',
      '  - { name: in, partitions: 4 }',
      '  - { name: out, partitions: 4 }',
      '  - { name: dead }',
      'processors:',
      '  - name: t',
      '    pattern: durable',
      `    module: ${fixture}`,
      '    inputs: [in]',
      '    outputs: [out]',
      '    codec: string',
      '    batchSizeMax: 100',
      ...(opts.pool ? [`    pool: ${opts.pool}`] : []),
      ...(opts.extra ?? []),
    ].join('\n'),
  );
  return file;
}

/** Input i: key k<i mod KEYS>, value {"k", "seq": i}; seq grows along each key. */
const input = (n: number) =>
  Array.from({ length: n }, (_, i) => ({
    topic: 'in',
    key: `k${i % KEYS}`,
    value: bytes(JSON.stringify({ k: `k${i % KEYS}`, seq: i })),
  }));

/**
 * Asserts `out` holds each input seq of `want` exactly once and, in each partition's offset
 * order, every key's seqs increasing; returns the parsed outputs.
 */
function assertOncePerKeyOrder(
  out: ConsumedRecord[],
  want: number[],
): { k: string; seq: number; pooled: boolean }[] {
  const sorted = [...out].sort((a, b) => a.partition - b.partition || a.offset - b.offset);
  const values = sorted.map(
    (r) => JSON.parse(text(r)) as { k: string; seq: number; pooled: boolean },
  );
  assert.equal(
    values.map((v) => v.seq).sort((a, b) => a - b),
    want,
    'every input once',
  );
  const last = new Map<string, number>();
  for (const v of values) {
    const prev = last.get(v.k) ?? -1;
    assert.ok(v.seq > prev, `key ${v.k}: seq ${v.seq} after ${prev}`);
    last.set(v.k, v.seq);
  }
  return values;
}

const range = (n: number, skip?: number) =>
  Array.from({ length: n }, (_, i) => i).filter((i) => i !== skip);

s(
  'a pooled durable processor (2 threads, batches of 16) outputs every record once, in order per key, computed in pool threads',
  async () => {
    const dir = fs.mkdtempSync(path.join(tmp, 'order-'));
    const running = await startTopology(
      loadTopology(topologyFile(dir, { pool: '{ threads: 2, batchSize: 16 }' })),
      { log: () => {} },
    );
    try {
      const bus = running.bus!;
      const p = await bus.producer();
      await p.send(input(600));
      const out = await waitForRecords(bus, 'out', 600, 30_000);
      const values = assertOncePerKeyOrder(out, range(600));
      assert.ok(
        values.every((v) => v.pooled),
        'every output computed in a pool thread',
      );
      const c = running.supervisor.actors().find((a) => a.name === 'processor:t')!.counters;
      for (let waited = 0; c.eventsIn < 600 && waited < 3000; waited += 50)
        await new Promise((r) => setTimeout(r, 50));
    } finally {
      const result = await running.stop();
      assert.equal(result.terminated, [], 'drained, not terminated');
      assert.is((result.summaries['processor:t'] as { eventsIn: number }).eventsIn, 600);
    }
  },
);

s(
  'a pooled pubsub processor handles every record once, each key in offset order (a key group runs in one call sequence)',
  async () => {
    const dir = fs.mkdtempSync(path.join(tmp, 'pubsub-'));
    const log = path.join(dir, 'seen.jsonl');
    const file = path.join(dir, 'topology.yaml');
    fs.writeFileSync(
      file,
      [
        'name: pool-pubsub',
        `dataDir: ${dir}/data`,
        'queues:',
        '  - { name: in, partitions: 4 }',
        'processors:',
        '  - name: seen',
        '    pattern: pubsub',
        `    module: ${path.join(root, 'test', 'fixtures', 'processors', 'log-records.ts')}`,
        '    inputs: [in]',
        '    codec: string',
        '    pool: { threads: 2, batchSize: 8 }',
        `    settings: { logFile: ${log} }`,
      ].join('\n'),
    );
    const running = await startTopology(loadTopology(file), { log: () => {} });
    try {
      const p = await running.bus!.producer();
      await p.send(input(300));
      const lines = () =>
        fs.existsSync(log) ? fs.readFileSync(log, 'utf8').split('\n').filter(Boolean) : [];
      for (let waited = 0; lines().length < 300 && waited < 30_000; waited += 50)
        await new Promise((r) => setTimeout(r, 50));
      const seen = lines().map(
        (l) => JSON.parse(JSON.parse(l).value as string) as { k: string; seq: number },
      );
      assert.equal(
        seen.map((v) => v.seq).sort((a, b) => a - b),
        range(300),
        'every record once',
      );
      const last = new Map<string, number>();
      for (const v of seen) {
        assert.ok(v.seq > (last.get(v.k) ?? -1), `key ${v.k}: seq ${v.seq} in order`);
        last.set(v.k, v.seq);
      }
    } finally {
      const result = await running.stop();
      assert.equal(result.terminated, []);
    }
  },
);

for (const mode of ['pooled', 'inline'] as const) {
  s(
    `${mode}: a record the handler keeps throwing on goes to the dead-letter topic after 1 + retriesMax attempts, with error and source; every other record passes once`,
    async () => {
      const dir = fs.mkdtempSync(path.join(tmp, `dead-${mode}-`));
      const file = topologyFile(dir, {
        pool: mode === 'pooled' ? '{ threads: 2, batchSize: 8 }' : '',
        extra: [
          '    deadLetterTopic: dead',
          '    retriesMax: 2',
          '    retryBackoffMs: 10',
          '    settings: { poisonKey: k3, poisonSeq: 51 }',
        ],
      });
      const running = await startTopology(loadTopology(file), { log: () => {} });
      try {
        const bus = running.bus!;
        const p = await bus.producer();
        await p.send(input(200));
        const out = await waitForRecords(bus, 'out', 199, 30_000);
        const dead = await waitForRecords(bus, 'dead', 1, 10_000);
        const values = assertOncePerKeyOrder(out, range(200, 51));
        assert.ok(values.every((v) => v.pooled === (mode === 'pooled')));
        assert.is(dead.length, 1, 'dead-lettered once');
        assert.equal(JSON.parse(text(dead[0]!)), { k: 'k3', seq: 51 });
        assert.is(dead[0]!.key, 'k3');
        assert.is(dead[0]!.headers.attempts, '3');
        assert.match(dead[0]!.headers.error!, /poison record k3\/51/);
        assert.match(dead[0]!.headers.source!, /^in:[0-3]:\d+$/);
        // Nothing more arrives: the poison record is not retried forever.
        await new Promise((r) => setTimeout(r, 300));
        assert.is((await readTopic(bus, 'dead')).length, 1);
        assert.is((await readTopic(bus, 'out')).length, 199);
      } finally {
        const result = await running.stop();
        assert.equal(result.terminated, []);
        assert.ok((result.summaries['processor:t'] as { errors: number }).errors >= 1);
      }
    },
  );
}

/** `sluice run <file> --status-ms 50` as a child; `committed()` reads its last status line. */
function sluiceRun(file: string) {
  const child = spawn(
    process.execPath,
    [path.join(root, 'dist', 'cli', 'sluice.js'), 'run', file, '--status-ms', '50'],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  let err = '';
  child.stderr.on('data', (d: Buffer) => (err += d.toString()));
  const exited = new Promise<NodeJS.Signals | null>((r) => child.on('exit', (_c, sig) => r(sig)));
  return {
    exited,
    stderr: () => err,
    /** Input records the processor committed in this process (its `in=` counter). */
    committed: () => {
      const all = [...err.matchAll(/processor:t\s+\S+\s+in=(\d+)/g)];
      return all.length === 0 ? 0 : Number(all[all.length - 1]![1]);
    },
    kill9: () => child.kill('SIGKILL'),
  };
}

s(
  'kill -9 of sluice run mid-run, twice, then a restart: every output exactly once, in order per key',
  async () => {
    const N = 2000;
    const dir = fs.mkdtempSync(path.join(tmp, 'kill-'));
    const file = topologyFile(dir, {
      pool: '{ threads: 2, batchSize: 16 }',
      extra: ['    settings: { spinUs: 1000 }'],
    });
    // The inputs are there before the first start (the running process owns the bus).
    const seed: BusBackend = await createJournalBus({ dir: path.join(dir, 'data', 'bus') });
    await seed.createTopics([
      { name: 'in', partitions: 4 },
      { name: 'out', partitions: 4 },
      { name: 'dead', partitions: 1 },
    ]);
    await (await seed.producer()).send(input(N));
    await seed.close();
    let before = 0;
    for (let round = 0; round < 2; round++) {
      const run = sluiceRun(file);
      for (let waited = 0; run.committed() < 100 && waited < 60_000; waited += 20)
        await new Promise((r) => setTimeout(r, 20));
      assert.ok(run.committed() >= 100, `round ${round}: the processor committed; ${run.stderr()}`);
      run.kill9();
      assert.is(await run.exited, 'SIGKILL');
      const bus = await createJournalBus({ dir: path.join(dir, 'data', 'bus') });
      const out = (await readTopic(bus, 'out')).length;
      await bus.close();
      assert.ok(
        out > before && out < N,
        `round ${round}: killed mid-run with ${out} of ${N} outputs`,
      );
      before = out;
    }
    const running = await startTopology(loadTopology(file), { log: () => {} });
    try {
      const out = await waitForRecords(running.bus!, 'out', N, 60_000);
      await new Promise((r) => setTimeout(r, 300));
      assertOncePerKeyOrder(await readTopic(running.bus!, 'out'), range(N));
      assert.is(out.length, N);
    } finally {
      const result = await running.stop();
      assert.equal(result.terminated, []);
    }
  },
);

s.after(() => fs.rmSync(tmp, { recursive: true, force: true }));
s.run();
