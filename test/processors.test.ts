/**
 * Processors declared in topology files, run by startTopology and `sluice run`: the example on
 * the journal bus and on the real broker, a worker that dies mid-batch is restarted by the
 * supervisor and every output still appears once, counters in shared memory, and a drain on
 * SIGTERM.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import { loadTopology, startTopology } from '../index.js';
import { createJournalBus, createKafkaBus, type BusBackend } from '../engine/bus/index.js';
import { testKafka } from '../testing/kafka-broker.js';
import { main as shop } from '../examples/processors/main.js';
import { bytes, readTopic, text, waitForRecords } from './patterns-helpers.js';

const root = fileURLToPath(new URL('../../', import.meta.url));
const example = path.join(root, 'examples', 'processors', 'topology.yaml');
const fixture = (name: string) => path.join(root, 'test', 'fixtures', 'processors', `${name}.ts`);
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'processors_e2e-'));
const s = suite('processors from topology files');
const kafka = await testKafka();

/** The example's topology with its topics renamed `<prefix>-<name>` and absolute module paths. */
function renamedExample(prefix: string, busLine = ''): string {
  let t = fs.readFileSync(example, 'utf8');
  for (const q of ['orders', 'invoices', 'balances', 'bad-orders', 'invoicing'])
    t = t.replace(new RegExp(`(?<![\\w./-])${q}(?![\\w.-])`, 'g'), `${prefix}-${q}`);
  t = t.replace(/\.\/(invoicing|balances)\.ts/g, (_m, f: string) =>
    path.join(root, 'examples', 'processors', `${f}.ts`),
  );
  t = t.replace(/^name: .*$/m, (l) => `${l}\n${busLine}`);
  const file = path.join(fs.mkdtempSync(path.join(tmp, 'shop-')), 'topology.yaml');
  fs.writeFileSync(file, t);
  return file;
}

const expectedShop = (count: number) => {
  const invoices = Array.from({ length: count }, (_, i) => ({
    orderId: `o-${i + 1}`,
    customer: ['ada', 'bob', 'cy'][i % 3],
    totalCents: Math.round((1000 + i) * 1.2),
  }));
  const balances: Record<string, number> = {};
  for (const i of invoices) balances[i.customer!] = (balances[i.customer!] ?? 0) + i.totalCents;
  return { invoices, balances };
};
const byOrder = (a: { orderId: string }, b: { orderId: string }) =>
  Number(a.orderId.slice(2)) - Number(b.orderId.slice(2));

s(
  'the example (durable + state-and-event) on the journal bus: every invoice once, every balance the sum of its invoices',
  async () => {
    process.env.SLUICE_DATA_DIR = fs.mkdtempSync(path.join(tmp, 'data-'));
    try {
      const got = await shop(example, 30);
      const want = expectedShop(30);
      assert.equal(got.invoices.sort(byOrder), want.invoices);
      assert.equal(got.balances, want.balances);
    } finally {
      delete process.env.SLUICE_DATA_DIR;
    }
  },
);

s(
  'the same example with one line added (bus kind kafka) on the real broker: every invoice once, every balance right',
  async () => {
    process.env.SLUICE_DATA_DIR = fs.mkdtempSync(path.join(tmp, 'data-'));
    const file = renamedExample(
      `processors-${process.pid}-k`,
      `bus: { kind: kafka, brokers: ${JSON.stringify(kafka.brokers)} }`,
    );
    try {
      const got = await shop(file, 30);
      const want = expectedShop(30);
      assert.equal(got.invoices.sort(byOrder), want.invoices);
      assert.equal(got.balances, want.balances);
    } finally {
      delete process.env.SLUICE_DATA_DIR;
    }
  },
);

s(
  'a processor worker that dies mid-batch is restarted by the supervisor; its open work is dropped and every output appears once; counters show it',
  async () => {
    const dir = fs.mkdtempSync(path.join(tmp, 'crash-'));
    const marker = path.join(dir, 'crashed');
    const file = path.join(dir, 'topology.yaml');
    fs.writeFileSync(
      file,
      [
        'name: crash',
        `dataDir: ${dir}/data`,
        'supervisor: { backoffInitialMs: 50 }',
        'queues:',
        '  - { name: in, partitions: 2 }',
        '  - { name: out, partitions: 2 }',
        'processors:',
        '  - name: echo',
        '    pattern: durable',
        `    module: ${fixture('crash-once')}`,
        '    inputs: [in]',
        '    outputs: [out]',
        '    codec: string',
        '    batchSizeMax: 10',
        `    settings: { crashOn: v57, markerFile: ${marker} }`,
      ].join('\n'),
    );
    const running = await startTopology(loadTopology(file), { log: () => {} });
    try {
      const bus = running.bus!;
      assert.is(bus.kind, 'journal');
      // While the topology runs, its journal bus is its own: no other thread or process opens it.
      // (In this thread the appender lock says "already open in this process"; in another process
      // it is a JournalLockedError.)
      const second = await createJournalBus({ dir: path.join(dir, 'data', 'bus') }).then(
        () => null,
        (e: unknown) => e as Error,
      );
      assert.match(String(second?.message), /appender\.lock: an Appender is already open/);
      const p = await bus.producer();
      await p.send(
        Array.from({ length: 100 }, (_, i) => ({
          topic: 'in',
          key: `k${i % 9}`,
          value: bytes(`v${i}`),
        })),
      );
      const got = await waitForRecords(bus, 'out', 100, 20_000);
      await new Promise((r) => setTimeout(r, 300));
      const all = await readTopic(bus, 'out');
      assert.ok(fs.existsSync(marker), 'the worker did crash');
      assert.equal(
        all.map(text).sort(),
        Array.from({ length: 100 }, (_, i) => `o:v${i}`).sort(),
        'each input once',
      );
      assert.is(got.length, 100);
      assert.is(running.supervisor.groupStatus()['processor:echo']!.restarts, 1, 'restarted once');
      const counters = () =>
        running.supervisor.actors().find((a) => a.name === 'processor:echo')!.counters;
      for (let waited = 0; counters().eventsIn === 0 && waited < 3000; waited += 50)
        await new Promise((r) => setTimeout(r, 50));
      const c = counters();
      assert.is(c.state, 'live');
      // The restarted worker's own counters: what it committed (the crashed batch's inputs and
      // those after it); the first worker committed the rest.
      assert.ok(
        c.eventsIn > 0 && c.eventsIn <= 100 && c.eventsOut === c.eventsIn && c.batches > 0,
        `counters in shared memory: ${JSON.stringify(c)}`,
      );
    } finally {
      const result = await running.stop();
      assert.equal(result.terminated, [], 'drained, not terminated');
      assert.is((result.summaries['processor:echo'] as { pattern: string }).pattern, 'durable');
    }
  },
);

/** Runs `sluice run <file>` as a child; resolves with its exit code and stderr. */
function sluiceRun(file: string): {
  exited: Promise<{ code: number | null; stderr: string }>;
  kill(signal: NodeJS.Signals): void;
  stderr(): string;
} {
  const child = spawn(
    process.execPath,
    [path.join(root, 'dist', 'cli', 'sluice.js'), 'run', file, '--status-ms', '0'],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  let err = '';
  child.stderr.on('data', (d: Buffer) => (err += d.toString()));
  return {
    exited: new Promise((r) => child.on('exit', (code) => r({ code, stderr: err }))),
    kill: (signal) => child.kill(signal),
    stderr: () => err,
  };
}

s(
  'sluice run on a kafka topology: outputs exactly once to a read_committed reader, SIGTERM drains the processor and exits 0',
  async () => {
    const prefix = `processors-${process.pid}-run`;
    const file = renamedExample(
      prefix,
      `bus: { kind: kafka, brokers: ${JSON.stringify(kafka.brokers)} }\ndataDir: ${fs.mkdtempSync(path.join(tmp, 'run-'))}`,
    );
    const run = sluiceRun(file);
    const bus: BusBackend = createKafkaBus({ brokers: kafka.brokers });
    try {
      for (
        let waited = 0;
        (await bus.partitionCount(`${prefix}-orders`)) === null && waited < 20_000;
        waited += 200
      )
        await new Promise((r) => setTimeout(r, 200));
      const p = await bus.producer();
      await p.send(
        Array.from({ length: 20 }, (_, i) => ({
          topic: `${prefix}-orders`,
          key: ['ada', 'bob'][i % 2]!,
          value: bytes(
            JSON.stringify({ id: `o-${i + 1}`, customer: ['ada', 'bob'][i % 2], amountCents: 100 }),
          ),
        })),
      );
      await p.send([{ topic: `${prefix}-orders`, key: 'bad', value: bytes('not json') }]);
      const invoices = await waitForRecords(bus, `${prefix}-invoices`, 20, 30_000);
      assert.equal(
        invoices.map((r) => (JSON.parse(text(r)) as { orderId: string }).orderId).sort(),
        Array.from({ length: 20 }, (_, i) => `o-${i + 1}`).sort(),
        `each order invoiced once; ${run.stderr()}`,
      );
      const dead = await waitForRecords(bus, `${prefix}-bad-orders`, 1, 10_000);
      assert.equal(dead.map(text), ['not json'], 'the undecodable order dead-lettered once');
    } finally {
      run.kill('SIGTERM');
      const { code, stderr } = await run.exited;
      await bus.close();
      assert.is(code, 0, stderr);
      assert.match(stderr, new RegExp(`processor:${prefix}-invoicing\\s+stopped`));
    }
  },
);

s.after(async () => {
  await kafka.release();
  fs.rmSync(tmp, { recursive: true, force: true });
});
s.run();
