/**
 * Failover on a 3-node Kafka cluster (testing/kafka-broker.ts: three combined broker+controller
 * nodes, replication factor 3, min.insync.replicas 2): the leader of an output partition is
 * killed with kill -9 while the durable pattern commits a transaction after another; the
 * remaining two nodes elect new leaders and the pattern goes on. A read_committed reader sees
 * every input's output exactly once: no loss, no duplicate.
 *
 * Not in the suite yet (scripts/run-tests.mjs runs *.test.js only): it passed 4 of 6 runs on a
 * loaded 2-core machine (75-124 s each); the failures were the durable subscription ending
 * during the failover, not a duplicate or a loss. Run by hand: node dist/test/kafka-failover.manual.js
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
// First: kafkajs must load with the corrected read_committed filter installed.
import '../engine/bus/kafka/read-committed.js';
import kafkajs from 'kafkajs';
import { createKafkaBus } from '../engine/bus/index.js';
import { startDurable, stringCodec } from '../engine/patterns/index.js';
import { startKafka } from '../testing/kafka-broker.js';
import { bytes, echoProcessor, readTopic, text } from './patterns-helpers.js';

const INPUTS = 400;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

test('kill -9 of a partition leader mid-stream on 3 nodes: every input once to a read_committed reader', async () => {
  const kafka = await startKafka({ brokers: 3 });
  const bus = createKafkaBus({ brokers: kafka.brokers });
  const admin = new kafkajs.Kafka({
    brokers: kafka.brokers,
    logLevel: kafkajs.logLevel.NOTHING,
  }).admin();
  const [input, output, group] = ['fo-in', 'fo-out', 'fo-g'];
  try {
    await admin.connect();
    await bus.createTopics([
      { name: input, partitions: 3 },
      { name: output, partitions: 3 },
    ]);
    const sub = startDurable({
      bus,
      groupId: group,
      topics: [input],
      transactionalId: group,
      codec: stringCodec,
      processor: echoProcessor(output),
      batchSizeMax: 10,
      sessionTimeoutMs: 6000,
      retryBackoffMs: 200,
      retriesMax: 1000,
    });
    let failed: unknown = null;
    sub.done.catch((e: unknown) => (failed = e instanceof Error ? e.stack : e));
    await sub.ready;
    const p = await bus.producer();
    let sent = 0;
    const produce = async (n: number): Promise<void> => {
      for (let end = sent + n; sent < end; sent += 10) {
        await p.send(
          Array.from({ length: 10 }, (_, i) => ({
            topic: input,
            key: `k${(sent + i) % 13}`,
            value: bytes(`v${sent + i}`),
          })),
        );
        await sleep(20);
      }
    };
    await produce(INPUTS / 2);
    const before = (await readTopic(bus, output)).length;
    const meta = await admin.fetchTopicMetadata({ topics: [output] });
    const leader = meta.topics[0].partitions.find((x) => x.partitionId === 0)!.leader;
    assert.ok(leader >= 1 && leader <= 3, `leader of ${output}/0 is a node: ${leader}`);
    // Transactions are committing (each batch of 10 is one per input partition): kill now.
    await kafka.stopBroker(leader, { kill: true });
    console.log(
      `  killed node ${leader} (leader of ${output}/0) with ${before} of ${sent} outputs visible`,
    );
    await produce(INPUTS / 2);
    const deadline = Date.now() + 90_000;
    let got = await readTopic(bus, output);
    while (got.length < INPUTS && Date.now() < deadline && failed === null) {
      await sleep(500);
      got = await readTopic(bus, output);
    }
    await sleep(1000);
    got = await readTopic(bus, output);
    assert.is(failed, null, `the durable subscription kept running: ${String(failed)}`);
    assert.equal(
      got.map(text).sort(),
      Array.from({ length: INPUTS }, (_, i) => `o:v${i}`).sort(),
      'each input once',
    );
    await sub.stop();
    await p.close();
  } finally {
    await admin.disconnect().catch(() => undefined);
    await bus.close();
    await kafka.stop({ kill: true });
  }
});

test.run();
