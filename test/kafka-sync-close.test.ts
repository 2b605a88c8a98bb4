/**
 * SyncKafka (engine/service/kafka-sync.ts), the blocking Kafka client of readers and services,
 * closes within its bound when the cluster answers nothing: a reader closes it while draining,
 * and an unbounded close outlasted the supervisor's drain timeout (fault seed 45, docs/FAULTS.md
 * defect 12). The cluster is a real TCP listener that accepts connections and never answers, as
 * a stopped or cut-off node looks to a client.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { silentNode } from './lib/silent-node.js';
import { SyncKafka, isBrokerAway } from '../engine/service/kafka-sync.js';

test('close() returns within closeTimeoutMs although the helper client is stuck on a node that never answers', async () => {
  const node = await silentNode();
  const broker = node.broker;
  try {
    const k = new SyncKafka({ brokers: [broker], clientId: 'close-test' }, () => undefined, {
      callTimeoutMs: 4000,
      closeTimeoutMs: 500,
      lookupTimeoutMs: 60_000,
    });
    let t0 = Date.now();
    assert.throws(() => k.offsets('never-answered', 0), /did not answer within 4000 ms/);
    assert.ok(Date.now() - t0 >= 3900, `the call gave up after ${Date.now() - t0} ms`);
    t0 = Date.now();
    k.close();
    const closeMs = Date.now() - t0;
    // Before the bound, close() waited the whole call timeout (4 s here, 120 s by default).
    assert.ok(closeMs < 2000, `close() took ${closeMs} ms with closeTimeoutMs 500`);
    k.close(); // idempotent
  } finally {
    node.close();
  }
});

test('a lookup (offsets, partitionCount) gives up after lookupTimeoutMs as the broker being away, well before the call timeout', async () => {
  const node = await silentNode();
  const broker = node.broker;
  const k = new SyncKafka({ brokers: [broker], clientId: 'lookup-test' }, () => undefined, {
    callTimeoutMs: 20_000,
    closeTimeoutMs: 500,
    lookupTimeoutMs: 1500,
  });
  try {
    for (const call of [() => k.offsets('never-answered', 0), () => k.partitionCount('never')]) {
      const t0 = Date.now();
      let failure: unknown = null;
      try {
        call();
      } catch (e) {
        failure = e;
      }
      const ms = Date.now() - t0;
      assert.ok(failure instanceof Error, 'the lookup failed');
      assert.match((failure as Error).message, /the cluster did not answer for .* within 1500 ms/);
      assert.ok(isBrokerAway(failure), 'it counts as the broker being away');
      assert.ok(ms >= 1400 && ms < 6000, `gave up after ${ms} ms (call timeout 20000 ms)`);
    }
  } finally {
    k.close();
    node.close();
  }
});

test.run();
