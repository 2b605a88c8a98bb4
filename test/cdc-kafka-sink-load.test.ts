/**
 * The Kafka pump sink (engine/cdc/kafka-sink.ts) reconciles against the pump's newest committed
 * transaction only. In a cycle of an initial load the claimed changes are one transaction and
 * the chunk's read events the next: a crash after both commits and before the ack must still
 * leave each change once in the topic. The pump core (no worker) over a SQLite staging and the
 * Kafka pump sink over the in-memory bus (the same transactions and committed offsets); the
 * crash is the ack failing for good, after which the pump is replaced, as after a kill -9.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { KafkaPumpSink, PumpCore, installLoads, openStaging } from '../engine/cdc/index.js';
import type { StagingClient } from '../engine/cdc/index.js';
import { createMemoryBus } from '../engine/bus/memory/index.js';
import type { BusBackend } from '../engine/bus/types.js';
import { createAppDb, sourceFor } from './cdc-helpers.js';
import { ITEMS_DDL, fillItems, itemsInDb, applyEvents } from './initial-load-helpers.js';

const TOPIC = 'items';
const ROWS = 3000;
/** Fewer than batchSizeMax, so the first cycle claims them and reads a chunk (2000 rows). */
const CHANGES = 20;

function sinkOn(bus: BusBackend): KafkaPumpSink {
  return new KafkaPumpSink({
    bus,
    source: 'test',
    pump: 0,
    transactionalId: 'sluice.capture.t.test.0',
    topics: [TOPIC],
    encode: (ch) => ({
      topic: TOPIC,
      value: new TextEncoder().encode(JSON.stringify({ op: ch.op, key: ch.key, after: ch.after })),
    }),
  });
}

/** `staging` whose ack fails from now on: the pump dies between its append and its ack. */
function ackFailing(staging: StagingClient): StagingClient {
  return new Proxy(staging, {
    get(target, prop) {
      if (prop === 'ack') return () => Promise.reject(new Error('killed before the ack'));
      const v: unknown = Reflect.get(target, prop, target);
      return typeof v === 'function' ? v.bind(target) : v;
    },
  });
}

test(`a load cycle's ${CHANGES} changes and its 2000 read events committed, the pump gone before its ack: after a restart each change is in the topic once`, async () => {
  const app = await createAppDb('sqlite');
  const bus = createMemoryBus();
  const clients: StagingClient[] = [];
  try {
    await app.exec(ITEMS_DDL.sqlite);
    await fillItems(app, ROWS);
    const source = sourceFor(app, [{ table: 'items', initialLoad: true, target: TOPIC }], {
      batchSizeMax: 500,
    });
    const admin = await openStaging(source);
    clients.push(admin);
    await admin.install();
    assert.equal(await installLoads(admin), ['items']);
    await app.exec(`UPDATE items SET n = n + 1, note = 'changed' WHERE id <= ${CHANGES}`);
    await bus.createTopics([{ name: TOPIC, partitions: 2 }]);

    const first = await openStaging(source);
    clients.push(first);
    const dying = new PumpCore({
      staging: ackFailing(first),
      sink: sinkOn(bus),
      pump: 0,
      pumps: 1,
      batchSizeMax: 500,
    });
    assert.is(await dying.start(), 0);
    const err = await dying.runCycle().catch((e: unknown) => e);
    assert.match(String(err), 'killed before the ack');
    assert.is(await admin.stagedCount(), CHANGES, 'never acked: still staged');

    const again = await openStaging(source);
    clients.push(again);
    const restarted = new PumpCore({
      staging: again,
      sink: sinkOn(bus),
      pump: 0,
      pumps: 1,
      batchSizeMax: 500,
    });
    const reconciled = await restarted.start();
    for (let i = 0; i < 20 && (await restarted.runCycle()) > 0; i++);
    assert.is(await admin.stagedCount(), 0, 'drained');

    const consumer = await bus.consumer({});
    const tps = [0, 1].map((partition) => ({ topic: TOPIC, partition }));
    await consumer.assign(tps);
    const events: { op: string; key: string; after: string | null; stagingId: string }[] = [];
    for (let polled = await consumer.poll({ timeoutMs: 50 }); polled.length > 0;) {
      for (const r of polled) {
        const v = JSON.parse(new TextDecoder().decode(r.value!)) as Omit<
          (typeof events)[number],
          'stagingId'
        >;
        events.push({ ...v, stagingId: r.headers['sluice.stagingId']! });
      }
      polled = await consumer.poll({ timeoutMs: 50 });
    }
    await consumer.close();
    const ids = new Map<string, number>();
    for (const e of events)
      if (e.op !== 'read') ids.set(e.stagingId, (ids.get(e.stagingId) ?? 0) + 1);
    for (const [id, n] of ids) assert.is(n, 1, `staging id ${id} is in the topic ${n} times`);
    assert.is(ids.size, CHANGES, 'every change');
    assert.is(reconciled, CHANGES, 'deleted at start, not shipped again');
    // Per key the partition keeps order; the consumer's table equals the database's.
    const table = new Map<string, unknown>();
    applyEvents(table, events, new Map());
    const db = await itemsInDb(app);
    assert.is(table.size, db.size, 'rows in the consumer vs the database');
    for (const [k, v] of db) assert.equal(table.get(k), v, `row ${k}`);
  } finally {
    for (const c of clients) await c.close().catch(() => undefined);
    await bus.close();
    await app.destroy();
  }
});

test.run();
