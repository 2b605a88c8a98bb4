/**
 * Consumer lag of a service on a kafka bus (issue 11), against the real broker. Before the fix
 * the sampler read the ends of journal files, which a kafka bus does not have: lag was 0
 * whatever the backlog.
 * 1. the service handles 10 records written in 2 transactions: lag 0 (the 2 commit markers
 *    after the last record are offsets, not records);
 * 2. a gate record holds the service while 40 more arrive in 4 transactions: lag between 41
 *    (the records) and 47 (plus the markers of those 5 transactions and of the one before),
 *    and lag in ms grows;
 * 3. the gate opens: lag 0 again.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { loadTopology, startTopology } from '../index.js';
import { EnvelopeWriter, EVENT_TYPE_JSON, encodeJson } from '../engine/codec/index.js';
import { createKafkaBus } from '../engine/bus/index.js';
import { kafkaBackend } from './lib/backends.js';
import { testKafka } from '../testing/index.js';

const gate = new URL('./fixtures/services/gate.js', import.meta.url).pathname;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const writer = new EnvelopeWriter();

interface Lag {
  queue: string;
  partition: number;
  lagRecords: number;
  lagMs: number;
}

test('kafka bus: a service behind by N records shows lag N (commit markers aside), 0 once caught up', async () => {
  const broker = await testKafka();
  const backend = await kafkaBackend('ops-lag', broker);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-lag-kafka-'));
  const gateFile = path.join(dir, 'gate');
  const bus = createKafkaBus({ brokers: broker.brokers, clientId: 'ops-lag-test' });
  try {
    const input = backend.queue('in');
    const output = backend.queue('out');
    const file = path.join(dir, 'topology.yaml');
    fs.writeFileSync(
      file,
      [
        `name: opslag-${process.pid}`,
        'dataDir: ./data',
        ...backend.busLines,
        'queues:',
        `  - { name: ${input} }`,
        `  - { name: ${output} }`,
        'services:',
        `  - { name: ${backend.service('svc')}, module: ${gate}, inputs: [${input}], output: ${output}, settings: { gateFile: ${gateFile} } }`,
        '',
      ].join('\n'),
    );
    const t = loadTopology(file);
    await backend.createQueues(t.queues);
    const running = await startTopology(t, { log: () => {}, sampler: { intervalMs: 200 } });
    const producer = await bus.producer({ transactionalId: `ops-lag-test.${process.pid}` });
    let n = 0;
    /** `txns` transactions of `each` records; the first record of all is a gate when asked. */
    const write = async (txns: number, each: number, withGate: boolean) => {
      for (let x = 0; x < txns; x++) {
        const tx = await producer.begin();
        await tx.send(
          Array.from({ length: each }, (_, k) => ({
            topic: input,
            partition: 0,
            key: `k${n % 3}`,
            value: writer.encode({
              type: EVENT_TYPE_JSON,
              key: `k${n % 3}`,
              eventTimeMs: Date.now(),
              payload: encodeJson({ n: n++, gate: withGate && x === 0 && k === 0 }),
            }),
          })),
        );
        await tx.commit();
      }
    };
    const service = `service:${backend.service('svc')}`;
    const lag = (): Lag => {
      const s = running.ops.sampler.statuses().find((a) => a.name === service);
      assert.ok(s, `${service} in /actors`);
      assert.is(s.inputs.length, 1);
      return s.inputs[0]!;
    };
    const handled = () => running.supervisor.counters()[service]?.eventsIn ?? 0;
    const until = async (done: () => boolean, what: string, timeoutMs = 60_000) => {
      for (const t0 = Date.now(); !done(); await sleep(50))
        assert.ok(Date.now() - t0 < timeoutMs, `${what}: not after ${timeoutMs} ms`);
    };
    try {
      // 1. caught up after transactions: the markers are no lag
      await write(2, 5, false);
      await until(() => handled() === 10, 'the first 10 records handled');
      await sleep(800); // a few sampler rounds
      assert.is(lag().lagRecords, 0, 'caught up after 2 transactions');

      // 2. held behind 41 records
      fs.writeFileSync(gateFile, '');
      await write(1, 1, true);
      await write(4, 10, false);
      await until(() => lag().lagRecords >= 41, 'lag of the held records', 20_000);
      await sleep(1000);
      const held = lag();
      assert.ok(
        held.lagRecords >= 41 && held.lagRecords <= 47,
        `lag ${held.lagRecords}, want 41 records (+ up to 6 markers)`,
      );
      assert.ok(held.lagMs >= 500, `lag in ms while held: ${held.lagMs}`);
      assert.is(handled(), 10, 'the service is held at the gate');

      // 3. caught up again
      fs.rmSync(gateFile);
      await until(() => handled() === 51, 'every record handled');
      await until(() => lag().lagRecords === 0, 'lag back to 0', 10_000);
      assert.is(lag().lagMs, 0);
    } finally {
      fs.rmSync(gateFile, { force: true });
      await producer.close();
      await running.stop();
    }
  } finally {
    await bus.close();
    await backend.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
