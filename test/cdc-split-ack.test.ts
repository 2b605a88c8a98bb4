/**
 * A refused batch split into halves on the Kafka pump sink (engine/cdc/pump.ts point 3): each
 * half is one transaction and is acked before the next half is appended, so a failed ack between
 * two halves stops the cycle with only the first half committed; the pump core retried (the
 * pending ack first) or replaced (start()'s reconciliation finds that half as the newest
 * transaction) ships every other change once. The pump core (no worker) over a SQLite staging
 * and the Kafka pump sink over the in-memory bus (the same transactions and committed offsets);
 * the kill -9 of a real process is test/cdc-split-crash.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { KafkaPumpSink, PumpCore, openStaging } from '../engine/cdc/index.js';
import type { CaptureErrorPolicy, StagingClient } from '../engine/cdc/index.js';
import { createMemoryBus } from '../engine/bus/memory/index.js';
import type { BusBackend } from '../engine/bus/types.js';
import { createAppDb, LEDGER_DDL, sourceFor } from './cdc-helpers.js';

const TOPIC = 'ledger';
const KEYS = 12;
const UPDATES = 2;
const BIG_ID = 99;
const RECORD_BYTES_MAX = 4000;
/** Refused once, parked at once: the test needs no clock. */
const ERRORS: CaptureErrorPolicy = {
  retriesImmediate: 0,
  attemptsMax: 1,
  retryDelayMs: 1,
  retryDelayMaxMs: 1,
  holdKeyWhenParked: true,
  retentionMs: 86_400_000,
};

function sinkOn(bus: BusBackend): KafkaPumpSink {
  return new KafkaPumpSink({
    bus,
    source: 'test',
    pump: 0,
    transactionalId: 'sluice.capture.t.test.0',
    topics: [TOPIC],
    recordBytesMax: RECORD_BYTES_MAX,
    encode: (ch) => ({
      topic: TOPIC,
      value: new TextEncoder().encode(JSON.stringify({ op: ch.op, key: ch.key, after: ch.after })),
    }),
  });
}

/** `staging` whose first `failures` acks fail (the database gone between two halves). */
function ackFailing(staging: StagingClient, failures: number): StagingClient {
  let left = failures;
  return new Proxy(staging, {
    get(target, prop) {
      if (prop === 'ack' && left > 0)
        return () => {
          left--;
          return Promise.reject(new Error('staging gone before the ack'));
        };
      const v: unknown = Reflect.get(target, prop, target);
      return typeof v === 'function' ? v.bind(target) : v;
    },
  });
}

/** Every record of the topic: staging id, key and the after image's amount, per partition. */
async function readTopicRecords(
  bus: BusBackend,
): Promise<{ stagingId: string; key: string; amount: string }[]> {
  const consumer = await bus.consumer({});
  const out: { stagingId: string; key: string; amount: string }[] = [];
  try {
    await consumer.assign([0, 1].map((partition) => ({ topic: TOPIC, partition })));
    for (let polled = await consumer.poll({ timeoutMs: 50 }); polled.length > 0;) {
      for (const r of polled) {
        const v = JSON.parse(new TextDecoder().decode(r.value!)) as { key: string; after: string };
        const amount = (JSON.parse(v.after) as { amount: string }).amount;
        out.push({ stagingId: r.headers['sluice.stagingId']!, key: v.key, amount });
      }
      polled = await consumer.poll({ timeoutMs: 50 });
    }
  } finally {
    await consumer.close();
  }
  return out;
}

for (const after of ['retried', 'replaced'] as const) {
  test(`kafka sink: the ack between two halves of a split batch fails; nothing more is appended, and the pump ${after} ships every change once, in order per key`, async () => {
    const app = await createAppDb('sqlite');
    const bus = createMemoryBus();
    const clients: StagingClient[] = [];
    try {
      await app.exec(LEDGER_DDL.sqlite);
      const source = sourceFor(app, [{ table: 'ledger', target: TOPIC }], {
        batchSizeMax: 50,
        errors: ERRORS,
      });
      const admin = await openStaging(source);
      clients.push(admin);
      await admin.install();
      for (let id = 1; id <= KEYS; id++)
        await app.exec(`INSERT INTO ledger(id, amount) VALUES (${id}, '0')`);
      await app.exec(
        `INSERT INTO ledger(id, memo, amount) VALUES (${BIG_ID}, '${'m'.repeat(10_000)}', '0')`,
      );
      for (let u = 1; u <= UPDATES; u++)
        await app.exec(`UPDATE ledger SET amount = '${u}' WHERE id <= ${KEYS}`);
      const shippable = KEYS * (1 + UPDATES);
      await bus.createTopics([{ name: TOPIC, partitions: 2 }]);

      const first = await openStaging(source);
      clients.push(first);
      const failing = new PumpCore({
        staging: ackFailing(first, 1),
        sink: sinkOn(bus),
        pump: 0,
        pumps: 1,
        batchSizeMax: 50,
        errors: ERRORS,
      });
      assert.is(await failing.start(), 0);
      const err = await failing.runCycle().catch((e: unknown) => e);
      assert.match(String(err), 'staging gone before the ack');
      // 37 claimed, the big one 13th: halves of 18, then of 9; the first 9 committed, then the
      // ack before the next half failed.
      const committed = await readTopicRecords(bus);
      assert.is(committed.length, 9, 'only the first half committed');
      assert.is(await admin.stagedCount(), shippable + 1, 'still staged');

      let core = failing;
      if (after === 'replaced') {
        const again = await openStaging(source);
        clients.push(again);
        core = new PumpCore({
          staging: again,
          sink: sinkOn(bus),
          pump: 0,
          pumps: 1,
          batchSizeMax: 50,
          errors: ERRORS,
        });
        assert.is(await core.start(), 9, 'the first half reconciled at start');
      }
      for (let i = 0; i < 20 && (await core.runCycle()) > 0; i++);
      assert.is(await admin.stagedCount(), 0, 'drained');
      assert.is(await admin.parkedCount(), 1, 'the big change parked');

      const records = await readTopicRecords(bus);
      const ids = new Map<string, number>();
      for (const r of records) ids.set(r.stagingId, (ids.get(r.stagingId) ?? 0) + 1);
      const twice = [...ids].filter(([, n]) => n > 1).map(([id, n]) => `${id} x${n}`);
      assert.equal(twice, [], 'staging ids in the topic more than once');
      assert.is(records.length, shippable, 'every shippable change');
      for (let id = 1; id <= KEYS; id++) {
        const key = JSON.stringify([String(id)]);
        assert.equal(
          records.filter((r) => r.key === key).map((r) => r.amount),
          Array.from({ length: UPDATES + 1 }, (_, u) => String(u)),
          `key ${id} in order`,
        );
      }
    } finally {
      for (const c of clients) await c.close().catch(() => undefined);
      await bus.close();
      await app.destroy();
    }
  });
}

test.run();
