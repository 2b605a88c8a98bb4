/**
 * Refused changes (cases C4 and C10 of shared/cases/capture.md) at the pump-core level, on SQLite,
 * PostgreSQL and MariaDB: divide and conquer, immediate and delayed retries with the attempt count in
 * staging, parking in the error table, the key held behind its refused change, requeue and
 * purge, the holding period, and outages that are not refusals. Throughout, the changes the pump
 * reports durable (PumpOptions.onDurable, the per-table statistics' source) are exactly the ones
 * the sink holds, each once: never a refused or parked one, never one twice.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { openStaging, PumpCore, RecordRefusedError } from '../engine/cdc/index.js';
import type { CaptureErrorPolicy, StagedChange, StagingClient } from '../engine/cdc/index.js';
import {
  stagingName,
  createAppDb,
  DIALECTS,
  LEDGER_DDL,
  limitedSink,
  sourceFor,
} from './cdc-helpers.js';
import type { AppDb, Dialect, LimitedSink } from './cdc-helpers.js';

const POLICY: CaptureErrorPolicy = {
  retriesImmediate: 2,
  attemptsMax: 3,
  retryDelayMs: 1000,
  retryDelayMaxMs: 1500,
  holdKeyWhenParked: true,
  retentionMs: 3_600_000,
};
/** The target's limit in the tests: a 2,000,000-character memo is far over it. */
const LIMIT = 10_000;
/** Characters of the after image of row 110 (its memo is 2,000,000 x). */
const SIZE110 = JSON.stringify({
  id: '110',
  holder: null,
  memo: 'x'.repeat(2_000_000),
  amount: null,
  booked: null,
  booked_tz: null,
}).length;

interface Rig {
  app: AppDb;
  staging: StagingClient;
  sink: LimitedSink;
  clock: { ms: number };
  core: PumpCore;
  /** What the core passed to onDurable, in order. */
  durable: StagedChange[];
}

async function withRig(
  dialect: Dialect,
  policy: Partial<CaptureErrorPolicy>,
  body: (r: Rig) => Promise<void>,
): Promise<void> {
  const app = await createAppDb(dialect);
  let staging: StagingClient | null = null;
  try {
    await app.exec(LEDGER_DDL[dialect]);
    staging = await openStaging(sourceFor(app, [{}]));
    await staging.install();
    const sink = limitedSink(LIMIT, RecordRefusedError);
    const clock = { ms: 1_000_000 };
    const errors = { ...POLICY, ...policy };
    const durable: StagedChange[] = [];
    const core = new PumpCore({
      staging,
      sink,
      pump: 0,
      pumps: 1,
      batchSizeMax: 100,
      errors,
      clock: () => clock.ms,
      fault: null,
      onDurable: (changes) => durable.push(...changes),
    });
    await core.start();
    await body({ app, staging, sink, clock, core, durable });
    assert.equal(
      durable.map((c) => c.stagingId),
      sink.changes.map((c) => c.stagingId),
      'onDurable: exactly the changes the sink holds, in order, once each',
    );
  } finally {
    if (staging) await staging.close();
    await app.destroy();
  }
}

const big = (dialect: Dialect) =>
  dialect !== 'sqlite' ? `repeat('x', 2000000)` : `printf('%.*c', 2000000, 'x')`;
const keysOf = (sink: LimitedSink) => sink.changes.map((c) => `${c.op}:${JSON.parse(c.key)[0]}`);

async function stagedRow(
  app: AppDb,
  key: string,
): Promise<{ attempts: number; next: number | null; err: string | null } | undefined> {
  const rows = await app.query<{
    attempts: number;
    next: string | number | null;
    err: string | null;
  }>(
    `SELECT attempts, next_attempt_ms AS next, last_error AS err FROM ${stagingName(app)} WHERE ${app.dialect === 'mariadb' ? '`key`' : 'key'} = '${key}' ORDER BY id LIMIT 1`,
  );
  const r = rows[0];
  return (
    r && { attempts: Number(r.attempts), next: r.next === null ? null : Number(r.next), err: r.err }
  );
}

for (const dialect of [...DIALECTS, 'mariadb'] as const) {
  test(`${dialect}: C10 a row over the target's limit is divided out, retried, parked with its reason and counted; 111 is delivered; requeue after the limit is raised delivers it`, async () => {
    await withRig(dialect, {}, async ({ app, staging, sink, clock, core }) => {
      await app.exec(`INSERT INTO ledger(id, memo) VALUES (110, ${big(dialect)})`);
      await app.exec(`INSERT INTO ledger(id, holder) VALUES (111, 'ok')`);
      assert.is(await core.runCycle(), 1);
      assert.equal(keysOf(sink), ['insert:111']);
      const [id110, id111] = sink.calls[0]!;
      // The batch of two, then each half, then two immediate retries of the refused one.
      assert.equal(sink.calls, [[id110, id111], [id110], [id110], [id110], [id111]]);
      assert.equal(await stagedRow(app, '["110"]'), {
        attempts: 1,
        next: clock.ms + 1000,
        err: `record of ${SIZE110} bytes exceeds ${LIMIT}`,
      });

      clock.ms += 999; // not due yet: not even claimed
      assert.is(await core.runCycle(), 0);
      assert.is(sink.calls.length, 5);
      clock.ms += 1; // round 2 (delay 1000), then round 3 after min(2000, 1500)
      assert.is(await core.runCycle(), 0);
      assert.equal((await stagedRow(app, '["110"]'))!.attempts, 2);
      assert.equal((await stagedRow(app, '["110"]'))!.next, clock.ms + 1500);
      clock.ms += 1500;
      assert.is(await core.runCycle(), 0);
      assert.is(sink.calls.length, 5 + 3 + 3, 'three tries per round');
      assert.is(await staging.stagedCount(), 0);
      assert.is(core.stats.parked, 1);
      assert.is(core.stats.retriesDelayed, 2);
      const parked = await staging.listParked();
      assert.equal(
        parked.map((p) => [p.key, p.op, p.attempts, p.error, p.parkedTimeMs]),
        [
          [
            '["110"]',
            'insert',
            3,
            `refused 3 times (3 tries each): record of ${SIZE110} bytes exceeds ${LIMIT}`,
            clock.ms,
          ],
        ],
      );
      assert.is(JSON.parse(parked[0]!.after!).memo.length, 2_000_000);
      assert.is(await staging.parkedCount(), 1);

      sink.limit.bytes = 4_000_000;
      assert.is(await staging.requeue(), 1);
      assert.is(await staging.parkedCount(), 0);
      clock.ms += 1000; // the pump re-reads its parked keys
      assert.is(await core.runCycle(), 1);
      assert.equal(keysOf(sink), ['insert:111', 'insert:110']);
      assert.is(sink.changes[1]!.stagingId, id110, 'requeued under its own staging id');
      assert.is(await staging.stagedCount(), 0);
    });
  });

  test(`${dialect}: C4 the second change of a refused key waits behind the first while other keys flow; after requeue both arrive in order`, async () => {
    await withRig(dialect, {}, async ({ app, staging, sink, clock, core }) => {
      await app.exec(`INSERT INTO ledger(id, memo) VALUES (30, ${big(dialect)})`);
      await app.exec(`INSERT INTO ledger(id, holder) VALUES (31, 'a')`);
      await app.exec(`UPDATE ledger SET memo = 'short' WHERE id = 30`);
      await app.exec(`INSERT INTO ledger(id, holder) VALUES (32, 'b')`);
      await core.runCycle();
      assert.equal(keysOf(sink), ['insert:31', 'insert:32']);
      for (let i = 0; i < 3; i++) {
        clock.ms += 2000;
        await app.exec(`INSERT INTO ledger(id, holder) VALUES (${40 + i}, 'later')`);
        await core.runCycle();
      }
      assert.equal(keysOf(sink), ['insert:31', 'insert:32', 'insert:40', 'insert:41', 'insert:42']);
      assert.is(await staging.parkedCount(), 1);
      // Parked and held: the update of 30 stays staged, not delivered.
      assert.is(await staging.stagedCount(), 1);
      clock.ms += 60_000;
      await core.runCycle();
      assert.not.ok(keysOf(sink).includes('update:30'));
      assert.equal([...core.heldKeys().parked], ['["30"]']);

      sink.limit.bytes = 4_000_000;
      await staging.requeue({ ids: (await staging.listParked()).map((p) => p.stagingId) });
      clock.ms += 1000;
      await core.runCycle();
      assert.equal(keysOf(sink), [
        'insert:31',
        'insert:32',
        'insert:40',
        'insert:41',
        'insert:42',
        'insert:30',
        'update:30',
      ]);
    });
  });

  test(`${dialect}: C4 with holdKeyWhenParked false the key's later change flows once the refused one is parked, not before`, async () => {
    await withRig(
      dialect,
      { holdKeyWhenParked: false, attemptsMax: 2 },
      async ({ app, staging, sink, clock, core }) => {
        await app.exec(`INSERT INTO ledger(id, memo) VALUES (30, ${big(dialect)})`);
        await app.exec(`UPDATE ledger SET memo = 'short' WHERE id = 30`);
        await core.runCycle();
        assert.equal(keysOf(sink), [], 'round 1 refused: the update waits');
        clock.ms += 1000;
        await core.runCycle(); // round 2 = attemptsMax: parked; the update stays for the next cycle
        assert.is(await staging.parkedCount(), 1);
        await core.runCycle();
        assert.equal(keysOf(sink), ['update:30']);
      },
    );
  });

  test(`${dialect}: divide and conquer ships every accepted change of a batch in staging-id order around two refused ones`, async () => {
    await withRig(dialect, {}, async ({ app, sink, core }) => {
      for (let i = 1; i <= 8; i++) {
        await app.exec(
          `INSERT INTO ledger(id, memo) VALUES (${i}, ${i === 3 || i === 6 ? big(dialect) : `'m${i}'`})`,
        );
      }
      assert.is(await core.runCycle(), 6);
      assert.equal(keysOf(sink), [
        'insert:1',
        'insert:2',
        'insert:4',
        'insert:5',
        'insert:7',
        'insert:8',
      ]);
      assert.equal([...core.heldKeys().retrying.keys()].sort(), ['["3"]', '["6"]']);
    });
  });

  test(`${dialect}: a restarted pump keeps holding a key whose retry is not due (state read from staging)`, async () => {
    await withRig(dialect, {}, async ({ app, staging, sink, clock, core, durable }) => {
      await app.exec(`INSERT INTO ledger(id, memo) VALUES (30, ${big(dialect)})`);
      await core.runCycle();
      await app.exec(`UPDATE ledger SET memo = 'short' WHERE id = 30`);
      sink.limit.bytes = 4_000_000; // would ship now, if the key were not held until its retry
      const again = new PumpCore({
        staging,
        sink,
        pump: 0,
        pumps: 1,
        batchSizeMax: 100,
        errors: POLICY,
        clock: () => clock.ms,
        fault: null,
        onDurable: (changes) => durable.push(...changes),
      });
      await again.start();
      assert.equal([...again.heldKeys().retrying], [['["30"]', clock.ms + 1000]]);
      await again.runCycle();
      assert.equal(keysOf(sink), []);
      clock.ms += 1000;
      await again.runCycle();
      assert.equal(keysOf(sink), ['insert:30', 'update:30']);
    });
  });

  test(`${dialect}: an outage (not a refusal) fails the cycle without retries or parking; the next cycle ships everything once`, async () => {
    await withRig(dialect, {}, async ({ app, staging, sink, core }) => {
      await app.exec(`INSERT INTO ledger(id) VALUES (1), (2), (3)`);
      sink.down = true;
      try {
        await core.runCycle();
        assert.unreachable('the cycle should fail');
      } catch (err) {
        assert.match((err as Error).message, /ECONNREFUSED/);
      }
      assert.is(sink.calls.length, 1, 'no division on an outage');
      assert.equal(await stagedRow(app, '["1"]'), { attempts: 0, next: null, err: null });
      sink.down = false;
      assert.is(await core.runCycle(), 3);
      assert.equal(keysOf(sink), ['insert:1', 'insert:2', 'insert:3']);
      assert.is(await staging.parkedCount(), 0);
    });
  });

  test(`${dialect}: parked changes older than retentionMs are deleted by pump 0; purge by id deletes only those`, async () => {
    await withRig(
      dialect,
      { attemptsMax: 1, retentionMs: 120_000 },
      async ({ app, staging, clock, core }) => {
        await app.exec(`INSERT INTO ledger(id, memo) VALUES (1, ${big(dialect)})`);
        await app.exec(`INSERT INTO ledger(id, memo) VALUES (2, ${big(dialect)})`);
        await core.runCycle(); // both parked at once (attemptsMax 1)
        assert.is(await staging.parkedCount(), 2);
        const [first] = await staging.listParked();
        assert.is(await staging.purge({ ids: [first!.stagingId] }), 1);
        assert.equal(
          (await staging.listParked()).map((p) => p.key),
          ['["2"]'],
        );
        await app.exec(`INSERT INTO ledger(id, memo) VALUES (3, ${big(dialect)})`);
        clock.ms += 60_000;
        await core.runCycle(); // 3 parked 60 s after 2
        assert.is(await staging.parkedCount(), 2);
        clock.ms += 60_001; // 2 is now older than 120 s, 3 is not
        await core.runCycle();
        assert.equal(
          (await staging.listParked()).map((p) => p.key),
          ['["3"]'],
        );
        assert.is(core.stats.expired, 1);
      },
    );
  });
}

test.run();
