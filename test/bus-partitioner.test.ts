/**
 * Partitioning must equal Kafka's default partitioner so a key lands on the same partition number
 * on every backend and in every Kafka client. Oracles: Apache Kafka's UtilsTest.testMurmur2
 * vectors, and kafkajs' own DefaultPartitioner (Java-compatible since kafkajs 2.0).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
// First: kafkajs must load with the corrected read_committed filter installed.
import '../engine/bus/kafka/read-committed.js';
import kafkajs from 'kafkajs';
import { murmur2, partitionForKey, PartitionResolver } from '../engine/bus/index.js';

const enc = new TextEncoder();

test("murmur2 equals Kafka's Utils.murmur2 on the UtilsTest vectors", () => {
  const vectors: [string, number][] = [
    ['21', -973932308],
    ['foobar', -790332482],
    ['a-little-bit-long-string', -985981536],
    ['a-little-bit-longer-string', -1486304829],
    ['lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8', -58897971],
    ['abc', 479470107],
  ];
  for (const [input, hash] of vectors) assert.is(murmur2(enc.encode(input)), hash, input);
});

test("partitionForKey equals kafkajs' DefaultPartitioner for 2000 keys and 1..64 partitions", () => {
  const kafkajsPartition = kafkajs.Partitioners.DefaultPartitioner();
  for (let i = 0; i < 2000; i++) {
    // ASCII, multi-byte UTF-8, every length mod 4, and the empty key.
    const key = i === 0 ? '' : `${i % 3 === 0 ? 'ключ-€-' : 'key-'}${i}${'x'.repeat(i % 7)}`;
    const partitions = 1 + (i % 64);
    const partitionMetadata = Array.from({ length: partitions }, (_, partitionId) => ({
      partitionId,
      leader: 1,
      partitionErrorCode: 0,
      replicas: [1],
      isr: [1],
    }));
    const expected = kafkajsPartition({
      topic: 't',
      partitionMetadata,
      message: { key, value: null },
    });
    assert.is(
      partitionForKey(key, partitions),
      expected,
      `key=${JSON.stringify(key)} partitions=${partitions}`,
    );
  }
});

test('partitionForKey rejects a partition count below 1', () => {
  assert.throws(() => partitionForKey('k', 0), /partitions must be >= 1, partitions=0/);
});

test('PartitionResolver: explicit partition wins, is range-checked; keyless records go round-robin', async () => {
  const r = new PartitionResolver((topic) => (topic === 't' ? 3 : null));
  const rec = (key: string | null, partition?: number) => ({
    topic: 't',
    key,
    value: null,
    partition,
  });
  assert.equal(
    await r.resolve([rec('21', 2), rec('21'), rec(null), rec(null), rec(null), rec(null)]),
    [2, partitionForKey('21', 3), 0, 1, 2, 0],
  );
  try {
    await r.resolve([rec('k', 3)]);
    assert.unreachable('partition 3 of 3 must be rejected');
  } catch (e) {
    assert.match((e as Error).message, /partition out of range \[0, 3\), topic=t partition=3/);
  }
  try {
    await r.resolve([{ topic: 'nope', key: 'k', value: null }]);
    assert.unreachable('unknown topic must be rejected');
  } catch (e) {
    assert.match((e as Error).message, /topic does not exist, topic=nope/);
  }
});

test.run();
