/**
 * Scale-out of a topology file's processor on the real broker: the same topology file started as
 * 3 `sluice run` processes shares the durable processor's consumer group; 12 times one of them
 * is killed with kill -9 (possibly mid-transaction) while inputs keep coming, and started again;
 * a read_committed reader then sees every input's output exactly once.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createKafkaBus } from '../engine/bus/index.js';
import { testKafka } from '../testing/kafka-broker.js';
import { bytes, readTopic, text } from './patterns-helpers.js';

const root = fileURLToPath(new URL('../../', import.meta.url));
const kafka = await testKafka();
const KILLS = 12;
const PROCESSES = 3;
const PER_ROUND = 40;

test(`3 processes of one topology file share the group; ${KILLS} kill -9s move partitions; a read_committed reader sees every output exactly once`, async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'processors_scaleout-'));
  const prefix = `processors-${process.pid}-so`;
  const file = path.join(dir, 'topology.yaml');
  fs.writeFileSync(
    file,
    [
      'name: scaleout',
      // One data directory per process (its topology.lock); the bus is the broker.
      'dataDir: ${INSTANCE_DIR}',
      `bus: { kind: kafka, brokers: ${JSON.stringify(kafka.brokers)} }`,
      'queues:',
      `  - { name: ${prefix}-in, partitions: 6 }`,
      `  - { name: ${prefix}-out, partitions: 6 }`,
      'processors:',
      '  - name: echo',
      '    pattern: durable',
      `    module: ${path.join(root, 'test', 'fixtures', 'processors', 'echo.ts')}`,
      `    inputs: [${prefix}-in]`,
      `    outputs: [${prefix}-out]`,
      `    group: ${prefix}-g`,
      '    codec: string',
      '    batchSizeMax: 20',
      '    sessionTimeoutMs: 2000',
    ].join('\n'),
  );
  const procs: (ChildProcess | null)[] = [];
  const stderr: string[] = Array.from({ length: PROCESSES }, () => '');
  const exits: Promise<number | null>[] = [];
  const startProcess = (i: number): void => {
    const child = spawn(
      process.execPath,
      [path.join(root, 'dist', 'cli', 'sluice.js'), 'run', file, '--status-ms', '0'],
      {
        env: { ...process.env, INSTANCE_DIR: path.join(dir, `instance-${i}`) },
        stdio: ['ignore', 'ignore', 'pipe'],
      },
    );
    child.stderr!.on('data', (d: Buffer) => (stderr[i] += d.toString()));
    procs[i] = child;
    exits[i] = new Promise((r) => child.on('exit', (code) => r(code)));
  };
  const bus = createKafkaBus({ brokers: kafka.brokers });
  let sent = 0;
  const produce = async (n: number): Promise<void> => {
    const p = await bus.producer();
    await p.send(
      Array.from({ length: n }, (_, k) => ({
        topic: `${prefix}-in`,
        key: `c${(sent + k) % 17}`,
        value: bytes(`v${sent + k}`),
      })),
    );
    sent += n;
    await p.close();
  };
  try {
    for (let i = 0; i < PROCESSES; i++) startProcess(i);
    for (
      let waited = 0;
      (await bus.partitionCount(`${prefix}-out`)) === null && waited < 30_000;
      waited += 200
    )
      await new Promise((r) => setTimeout(r, 200));
    await produce(PER_ROUND);
    let killed = 0;
    for (let round = 0; round < KILLS; round++) {
      await new Promise((r) => setTimeout(r, 700 + Math.floor(Math.random() * 800)));
      const i = round % PROCESSES;
      procs[i]!.kill('SIGKILL');
      assert.is(await exits[i], null, 'died by the signal');
      killed++;
      await produce(PER_ROUND);
      startProcess(i);
    }
    await produce(PER_ROUND);
    // Every input's output, through a read_committed reader (the kafka bus reads committed data only).
    const want = Array.from({ length: sent }, (_, k) => `o:v${k}`).sort();
    let got: string[] = [];
    const deadline = Date.now() + 60_000;
    while (Date.now() < deadline) {
      got = (await readTopic(bus, `${prefix}-out`)).map(text);
      if (new Set(got).size >= sent) break;
      await new Promise((r) => setTimeout(r, 300));
    }
    await new Promise((r) => setTimeout(r, 1000));
    got = (await readTopic(bus, `${prefix}-out`)).map(text).sort();
    assert.is(killed, KILLS);
    const counts = new Map<string, number>();
    for (const v of got) counts.set(v, (counts.get(v) ?? 0) + 1);
    const twice = [...counts].filter(([, n]) => n > 1).map(([v]) => v);
    const missing = want.filter((v) => !counts.has(v));
    assert.equal(
      { missing: missing.slice(0, 10), twice: twice.slice(0, 10) },
      { missing: [], twice: [] },
      `${sent} inputs, ${got.length} outputs`,
    );
    assert.equal(got, want, 'every output exactly once');
  } finally {
    for (const p of procs) p?.kill('SIGTERM');
    const codes = await Promise.all(exits);
    await bus.close();
    await kafka.release();
    fs.rmSync(dir, { recursive: true, force: true });
    // The last processes drain and exit 0 on SIGTERM (the killed ones were replaced).
    assert.equal(
      codes.slice(-PROCESSES).map((c) => c),
      Array.from({ length: PROCESSES }, () => 0),
      stderr.join('\n---\n').slice(-3000),
    );
  }
});

test.run();
