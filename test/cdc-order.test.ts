/**
 * Per-key ordering with several pumps: 3 pump loops run concurrently against concurrent writers
 * doing interleaved multi-key update transactions. Each key's events must arrive, in one pump,
 * in commit order, each exactly once: the key's `v` goes 0 (insert), 1, 2, ... with no gap,
 * repeat or swap.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Worker } from 'node:worker_threads';
import { keyHash, openStaging, PumpCore } from '../engine/cdc/index.js';
import type { StagedChange, StagingClient } from '../engine/cdc/index.js';
import { createAppDb, DIALECTS, memorySink, sleepMs, sourceFor } from './cdc-helpers.js';
import type { AppDb, MemorySink } from './cdc-helpers.js';

const KEYS = 60;
const PUMPS = 3;

async function pgWriters(app: AppDb, writers: number, transactions: number): Promise<number> {
  const counts = await Promise.all(
    Array.from({ length: writers }, async () => {
      const conn = await app.connect();
      let updates = 0;
      try {
        for (let i = 0; i < transactions; i++) {
          // Sorted keys: writers lock rows in one order, so no deadlocks.
          const keys = Array.from(
            { length: 1 + Math.floor(Math.random() * 3) },
            () => 1 + Math.floor(Math.random() * KEYS),
          ).sort((a, b) => a - b);
          await conn.exec('BEGIN');
          for (const k of keys) await conn.exec(`UPDATE kv SET v = v + 1 WHERE k = ${k}`);
          await conn.exec('COMMIT');
          updates += keys.length;
        }
      } finally {
        await conn.close();
      }
      return updates;
    }),
  );
  return counts.reduce((a, b) => a + b, 0);
}

async function sqliteWriters(file: string, writers: number, transactions: number): Promise<number> {
  const counts = await Promise.all(
    Array.from(
      { length: writers },
      (_, i) =>
        new Promise<number>((resolve, reject) => {
          const w = new Worker(new URL('./cdc-writer.child.js', import.meta.url), {
            workerData: { mode: 'updates', file, keys: KEYS, transactions, seed: 1234 + i * 7919 },
          });
          w.on('message', (m: { type: string; updates?: number }) => {
            if (m.type === 'done') resolve(m.updates!);
          });
          w.on('error', reject);
        }),
    ),
  );
  return counts.reduce((a, b) => a + b, 0);
}

/**
 * A memorySink that syncs separately, as the journal sink of a pump: appendBatch only writes
 * (`changes`), sync() makes what was written durable a few ms later (`durable`). Rows acked
 * before they are durable fail the test through `early`.
 */
interface SyncingSink extends MemorySink {
  durable: Set<string>;
  sync(): Promise<void>;
}

function syncingSink(): SyncingSink {
  const base = memorySink();
  const durable = new Set<string>();
  return {
    ...base,
    durable,
    async sync() {
      const upTo = base.changes.length;
      await sleepMs(3);
      for (const c of base.changes.slice(0, upTo)) durable.add(c.stagingId);
    },
  };
}

const VARIANTS = [
  ...[...DIALECTS, 'mariadb'].map((dialect) => ({ dialect, pipelined: false })),
  { dialect: 'postgres', pipelined: true },
] as { dialect: (typeof DIALECTS)[number] | 'mariadb'; pipelined: boolean }[];

for (const { dialect, pipelined } of VARIANTS) {
  const how = pipelined
    ? ', pipelined (next batch claimed while the last one syncs, rows deleted only once durable)'
    : '';
  test(`${dialect}: with ${PUMPS} concurrent pumps each key's changes arrive once, in commit order, in the pump that owns the key${how}`, async () => {
    const app = await createAppDb(dialect);
    const source = sourceFor(app, [{ table: 'kv' }], {
      pumps: PUMPS,
      batchSizeMax: 7,
      pollIntervalMs: 2,
    });
    const clients: StagingClient[] = [];
    const abort = new AbortController();
    try {
      await app.exec(
        dialect !== 'sqlite'
          ? 'CREATE TABLE kv (k integer PRIMARY KEY, v bigint NOT NULL)'
          : 'CREATE TABLE kv (k INTEGER PRIMARY KEY, v INTEGER NOT NULL)',
      );
      const admin = await openStaging(source);
      clients.push(admin);
      await admin.install();

      const sinks: MemorySink[] = [];
      const runs: Promise<unknown>[] = [];
      let prefetches = 0;
      const early: string[] = [];
      for (let p = 0; p < PUMPS; p++) {
        const staging = await openStaging(source);
        clients.push(staging);
        const sink = pipelined ? syncingSink() : memorySink();
        sinks.push(sink);
        if (pipelined) {
          const durable = (sink as SyncingSink).durable;
          const claim = staging.claim.bind(staging);
          const ack = staging.ack.bind(staging);
          staging.claim = (pump, pumps, limit, keys, ids) => {
            if (ids !== undefined && ids.length > 0) prefetches++;
            return claim(pump, pumps, limit, keys, ids);
          };
          staging.ack = (ids) => {
            early.push(...ids.filter((id) => !durable.has(id)));
            return ack(ids);
          };
        }
        runs.push(
          new PumpCore({
            staging,
            sink,
            pump: p,
            pumps: PUMPS,
            batchSizeMax: source.batchSizeMax,
          }).run(abort.signal, source.pollIntervalMs),
        );
      }

      const values = Array.from({ length: KEYS }, (_, i) => `(${i + 1}, 0)`).join(', ');
      await app.exec(`INSERT INTO kv (k, v) VALUES ${values}`);
      // pgWriters' BEGIN / UPDATE / COMMIT is MariaDB SQL too.
      const updates =
        dialect !== 'sqlite'
          ? await pgWriters(app, 4, 150)
          : await sqliteWriters((app.ref as { file: string }).file, 2, 300);
      const shippedWhileWriting = sinks.reduce((n, s) => n + s.changes.length, 0);
      assert.ok(shippedWhileWriting > 0, 'pumps ran while the writers wrote');

      const deadline = Date.now() + 20_000;
      while ((await admin.stagedCount()) > 0) {
        assert.ok(Date.now() < deadline, 'pumps drain the staging table within 20 s');
        await sleepMs(10);
      }
      abort.abort();
      await Promise.all(runs);

      const finals = new Map(
        (await app.query<{ k: number; v: string | number }>('SELECT k, v FROM kv')).map((r) => [
          `["${r.k}"]`,
          Number(r.v),
        ]),
      );
      const byKey = new Map<string, StagedChange[]>();
      sinks.forEach((sink, p) => {
        assert.ok(sink.changes.length > 0, `pump ${p} shipped something`);
        for (const c of sink.changes) {
          assert.is(
            c.keyHash % PUMPS,
            p,
            `key ${c.key} belongs to pump ${c.keyHash % PUMPS}, seen in pump ${p}`,
          );
          assert.is(c.keyHash, keyHash(c.key));
          let list = byKey.get(c.key);
          if (!list) byKey.set(c.key, (list = []));
          list.push(c);
        }
      });
      let total = 0;
      assert.is(byKey.size, KEYS);
      for (const [key, list] of byKey) {
        const vs = list.map((c) => (c.op === 'insert' ? -1 : Number(JSON.parse(c.before!).v)));
        const afters = list.map((c) => Number(JSON.parse(c.after!).v));
        const expected = Array.from({ length: finals.get(key)! + 1 }, (_, i) => i);
        assert.equal(afters, expected, `key ${key}: after.v runs 0..final in order`);
        assert.equal(
          vs,
          expected.map((v) => v - 1),
          `key ${key}: each before.v is the previous after.v`,
        );
        total += list.length - 1;
      }
      assert.is(total, updates, 'every update delivered exactly once');
      if (pipelined) {
        assert.ok(prefetches > 0, 'next batches were claimed while the last one synced');
        assert.equal(early, [], 'no row deleted from staging before its append was durable');
      }
    } finally {
      abort.abort();
      for (const c of clients) await c.close();
      await app.destroy();
    }
  });
}

test.run();
