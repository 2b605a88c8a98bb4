/**
 * Services of a topology on a Kafka bus (issue 8, section 2), against the real broker: what the
 * shared crash and replay tests (replay-crash, replay-start, replay-kv, dead-letter, run on both
 * buses) do not cover.
 * - startFrom START (no replay), LAST_WRITTEN and END on both buses, with exact outputs;
 * - the queues become topics at start; a topic with another partition count is refused at the
 *   queue's `partitions` field;
 * - a restarted service's producer fences the old one (zombie): the old one's commit fails and
 *   a read_committed reader sees nothing it sent after the fence;
 * - a kafka bus with services (and capture) loads; openQueueAppender refuses a Kafka queue.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {
  loadTopology,
  parseTopology,
  startTopology,
  openQueueAppender,
  ConfigError,
  type Topology,
} from '../index.js';
import {
  EnvelopeView,
  EnvelopeWriter,
  EVENT_TYPE_JSON,
  decodeJson,
  encodeJson,
} from '../engine/codec/index.js';
import { createKafkaBus } from '../engine/bus/index.js';
import { openQueueLogs, SyncKafkaError } from '../engine/service/index.js';
import { journalBackend, kafkaBackend, type TestBackend } from './lib/backends.js';
import { testKafka } from '../testing/index.js';

const runningSum = new URL('./fixtures/services/running-sum.js', import.meta.url).pathname;
const quiet = () => {};
const writer = new EnvelopeWriter();

interface Out {
  cause: number;
  key: string;
  sum: number;
  n: number;
}

/** The JSON outputs of the running-sum service, in output order, with their causes. */
function outputs(backend: TestBackend, t: Topology, queue: string): Out[] {
  const tail = backend.tailer(t.dataDir, queue, 0);
  const view = new EnvelopeView();
  const got: Out[] = [];
  try {
    for (let rec = tail.next(); rec; rec = tail.next()) {
      view.wrap(rec.bytes, 0, rec.bytes.length);
      if (view.type !== EVENT_TYPE_JSON) continue;
      got.push({
        cause: view.causeIndex,
        ...(decodeJson(view.payload) as { key: string; sum: number; n: number }),
      });
    }
  } finally {
    tail.close();
  }
  return got;
}

async function until(done: () => boolean, what: string, timeoutMs = 60_000): Promise<void> {
  for (const t0 = Date.now(); !done(); await new Promise((r) => setTimeout(r, 25))) {
    assert.ok(Date.now() - t0 < timeoutMs, `${what}: not after ${timeoutMs} ms`);
  }
}

const inputsOf = (from: number, count: number) =>
  Array.from({ length: count }, (_, k) =>
    writer.encode({
      type: EVENT_TYPE_JSON,
      key: `k${(from + k) % 3}`,
      eventTimeMs: 1,
      payload: encodeJson({ v: from + k, n: from + k }),
    }),
  );

const BUSES = (process.env.SLUICE_TEST_BUS ?? 'journal,kafka').split(',');
for (const bus of BUSES) {
  test(`${bus} bus: startFrom START without replay reprocesses every input, LAST_WRITTEN resumes after the last one with an output, END skips what was there`, async () => {
    const backend =
      bus === 'kafka' ? await kafkaBackend('svc-start', await testKafka()) : journalBackend();
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-svc-kafka-'));
    try {
      const q = (n: string) => backend.queue(n);
      const file = path.join(dir, 'topology.yaml');
      fs.writeFileSync(
        file,
        [
          `name: svc-start-${bus}-${process.pid}`,
          'dataDir: ./data',
          ...backend.busLines,
          'queues:',
          `  - { name: ${q('in')} }`,
          ...['start', 'last', 'end'].map((s) => `  - { name: ${q(`out-${s}`)} }`),
          'services:',
          ...['START', 'LAST_WRITTEN', 'END'].flatMap((from, i) => [
            `  - name: ${backend.service(`sum-${['start', 'last', 'end'][i]}`)}`,
            `    module: ${runningSum}`,
            `    inputs: [${q('in')}]`,
            `    output: ${q(`out-${['start', 'last', 'end'][i]}`)}`,
            `    startFrom: ${from}`,
          ]),
          '',
        ].join('\n'),
      );
      const t = loadTopology(file);
      await backend.createQueues(t.queues);
      await backend.append(t.dataDir, q('in'), 0, inputsOf(0, 5));
      const out = (s: string) => outputs(backend, t, q(`out-${s}`));

      // 1. first start: START and LAST_WRITTEN read from 0; END starts after the 5 there
      let run = await startTopology(t, { log: quiet });
      await backend.append(t.dataDir, q('in'), 0, inputsOf(5, 3));
      await until(
        () => out('start').length === 8 && out('last').length === 8 && out('end').length === 3,
        'first run',
      );
      await run.stop();
      assert.equal(
        out('last').map((o) => o.cause),
        [0, 1, 2, 3, 4, 5, 6, 7],
      );
      assert.equal(
        out('end').map((o) => o.cause),
        [5, 6, 7],
      );
      // k0 gets 0, 3, 6: running sums 0, 3, 9
      assert.equal(
        out('last')
          .filter((o) => o.key === 'k0')
          .map((o) => o.sum),
        [0, 3, 9],
      );

      // 2. restart after 2 more: START processes all of them again (no state to rebuild),
      //    LAST_WRITTEN only the new ones, END only what comes after its start
      await backend.append(t.dataDir, q('in'), 0, inputsOf(8, 2));
      run = await startTopology(t, { log: quiet });
      await backend.append(t.dataDir, q('in'), 0, inputsOf(10, 1));
      await until(
        () =>
          out('start').length === 8 + 11 && out('last').length === 11 && out('end').length === 4,
        'second run',
      );
      await run.stop();
      assert.equal(
        out('start').map((o) => o.cause),
        [0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
      );
      assert.equal(
        out('last').map((o) => o.cause),
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
      );
      assert.equal(
        out('end').map((o) => o.cause),
        [5, 6, 7, 10],
      );
    } finally {
      await backend.close();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
}

if (BUSES.includes('kafka')) {
  test('kafka bus: the queues become topics at start; a topic with another partition count is refused at its partitions field', async () => {
    const backend = await kafkaBackend('svc-topics', await testKafka());
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-svc-kafka-'));
    try {
      const q = (n: string) => backend.queue(n);
      const file = path.join(dir, 'topology.yaml');
      const write = (inPartitions: number) =>
        fs.writeFileSync(
          file,
          [
            `name: svc-topics-${process.pid}`,
            'dataDir: ./data',
            ...backend.busLines,
            'queues:',
            `  - { name: ${q('in')}, partitions: ${inPartitions} }`,
            `  - { name: ${q('out')} }`,
            'services:',
            `  - name: ${backend.service('sum')}`,
            `    module: ${runningSum}`,
            `    inputs: [${q('in')}]`,
            `    output: ${q('out')}`,
            '',
          ].join('\n'),
        );
      write(3);
      const run = await startTopology(loadTopology(file), { log: quiet });
      await run.stop();
      const kafka = await testKafka();
      const bus = createKafkaBus({ brokers: kafka.brokers });
      try {
        assert.is(await bus.partitionCount(q('in')), 3);
        assert.is(await bus.partitionCount(q('out')), 1);
        assert.is(
          await bus.partitionCount(`${backend.service('sum')}.dlq`),
          1,
          'the default dead-letter queue',
        );
      } finally {
        await bus.close();
        await kafka.release();
      }
      write(2);
      const err = await startTopology(loadTopology(file), { log: quiet }).then(
        () => null,
        (e: Error) => e,
      );
      assert.ok(err instanceof ConfigError, String(err));
      assert.match(err!.message, `${file}:5:`);
      assert.match(
        err!.message,
        `queues[0].partitions: queue "${q('in')}": Kafka topic ${q('in')}`,
      );
      assert.match(err!.message, 'topic exists with 3 partitions');
    } finally {
      await backend.close();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  test('kafka bus: a restarted writer fences the old one: its commit fails with fenced and a read_committed reader never sees it', async () => {
    const backend = await kafkaBackend('svc-fence', await testKafka());
    const kafka = await testKafka();
    try {
      const topic = backend.queue('out');
      await backend.createQueues([{ name: topic, partitions: 1 }]);
      const bus = {
        kind: 'kafka' as const,
        connection: { brokers: kafka.brokers, clientId: 'svckafka-fence' },
      };
      const spec = {
        queue: topic,
        partition: 0,
        dir: '',
        segmentBytes: 0,
        fsync: 'none' as const,
        transactionalId: `svckafka.fence.${process.pid}`,
      };
      const zombieLogs = openQueueLogs(bus);
      const newLogs = openQueueLogs(bus);
      try {
        const zombie = zombieLogs.appender(spec);
        zombie.appendBatch([new Uint8Array([1])]);
        zombie.flush();
        const successor = newLogs.appender(spec);
        zombie.appendBatch([new Uint8Array([2])]);
        const err = (() => {
          try {
            zombie.flush();
            return null;
          } catch (e) {
            return e as SyncKafkaError;
          }
        })();
        assert.ok(err instanceof SyncKafkaError, `the zombie's commit fails: ${String(err)}`);
        assert.is(err!.code, 'fenced', err!.message);
        successor.appendBatch([new Uint8Array([3])]);
        successor.flush();
        const t = newLogs.tailer(spec);
        const seen: number[] = [];
        for (let r = t.next(); r; r = t.next()) seen.push(r.bytes[0]);
        t.close();
        assert.equal(seen, [1, 3]);
      } finally {
        zombieLogs.close();
        newLogs.close();
      }
    } finally {
      await kafka.release();
      await backend.close();
    }
  });
}

test('a kafka bus with services loads, with capture into the queue a service reads too', () => {
  const t = parseTopology(
    [
      'name: x',
      'bus: { kind: kafka, brokers: [127.0.0.1:9092] }',
      'queues: [{ name: a }, { name: b }]',
      `services: [{ name: s, module: ${runningSum}, inputs: [a], output: b }]`,
      '',
    ].join('\n'),
    path.join(os.tmpdir(), 'svckafka-x.yaml'),
  );
  assert.is(t.bus.kind, 'kafka');
  assert.is(t.services.length, 1);
  // The producer API writes the Kafka topic (test/cli-kafka.test.ts); a service's output keeps
  // its one writer on Kafka too.
  assert.throws(
    () => openQueueAppender(t, 'b'),
    /queue "b" is written by "s" .*; a queue has one writer/,
  );
  // Capture and services together on one kafka bus: the one data plane (capture writes the topic a service reads).
  const both = parseTopology(
    [
      'name: x',
      'bus: { kind: kafka, brokers: [127.0.0.1:9092] }',
      'queues: [{ name: a, partitions: 3 }, { name: b }]',
      `services: [{ name: s, module: ${runningSum}, inputs: [a], output: b }]`,
      'capture: [{ name: c, pumps: 2, database: { dialect: sqlite, file: /tmp/x.db }, tables: [{ table: t, operations: [insert], target: a }] }]',
      '',
    ].join('\n'),
    path.join(os.tmpdir(), 'svckafka-y.yaml'),
  );
  assert.equal(
    [both.services.length, both.capture.length, both.capture[0]!.pumps, both.queues[0]!.partitions],
    [1, 1, 2, 3],
  );
});

test.run();
