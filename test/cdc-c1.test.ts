/**
 * Case C1: a lower staging id becomes visible after higher ones were shipped. Both events must be
 * delivered exactly once; there is no "id > last shipped" cursor to lose the late one.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Worker } from 'node:worker_threads';
import { openStaging, PumpCore } from '../engine/cdc/index.js';
import { createAppDb, LEDGER_DDL, memorySink, sleepMs, sourceFor, view } from './cdc-helpers.js';

test("postgres: C1 a slow transaction's lower staging id shipped after a higher one, both exactly once", async () => {
  const app = await createAppDb('postgres');
  const sessionB = await app.connect();
  const staging = await openStaging(sourceFor(app, [{}]));
  try {
    await app.exec(LEDGER_DDL.postgres);
    await staging.install();
    const sink = memorySink();
    const pump = new PumpCore({ staging, sink, pump: 0, pumps: 1, batchSizeMax: 100 });
    await pump.start();

    await app.exec(`BEGIN`);
    await app.exec(`INSERT INTO ledger(id, holder) VALUES (1, 'slow')`); // staging id n, uncommitted
    await sessionB.exec(`INSERT INTO ledger(id, holder) VALUES (2, 'quick')`); // n+1, committed
    assert.is(await pump.runCycle(), 1, 'the pump ships what is visible: only the quick row');
    await app.exec(`COMMIT`);
    assert.is(await pump.runCycle(), 1, 'the next cycle ships the late, lower id');
    assert.is(await pump.runCycle(), 0);

    assert.equal(
      sink.changes.map((c) => view(c).after),
      [
        { id: '2', holder: 'quick', memo: null, amount: null, booked: null, booked_tz: null },
        { id: '1', holder: 'slow', memo: null, amount: null, booked: null, booked_tz: null },
      ],
    );
    const [quick, slow] = sink.changes;
    assert.ok(
      BigInt(slow!.stagingId) < BigInt(quick!.stagingId),
      `late row has the lower id: ${slow!.stagingId} < ${quick!.stagingId}`,
    );
    assert.is(new Set(sink.changes.map((c) => c.stagingId)).size, 2);
    assert.is(await staging.stagedCount(), 0);
  } finally {
    await staging.close();
    await sessionB.close();
    await app.destroy();
  }
});

test('sqlite: C1 cannot arise: the second writer waits for the first, so staging ids follow commit order', async () => {
  const app = await createAppDb('sqlite');
  const staging = await openStaging(sourceFor(app, [{}]));
  try {
    await app.exec(LEDGER_DDL.sqlite);
    await staging.install();
    const sink = memorySink();
    const pump = new PumpCore({ staging, sink, pump: 0, pumps: 1, batchSizeMax: 100 });
    await pump.start();

    await app.exec(`BEGIN IMMEDIATE; INSERT INTO ledger(id, holder) VALUES (1, 'slow')`);
    if (app.ref.dialect !== 'sqlite') throw new Error('unreachable');
    const writerB = new Worker(new URL('./cdc-writer.child.js', import.meta.url), {
      workerData: {
        mode: 'exec',
        file: app.ref.file,
        sql: `INSERT INTO ledger(id, holder) VALUES (2, 'quick')`,
      },
    });
    let bDone: { waitedMs: number } | null = null;
    const bFinished = new Promise<void>((resolve, reject) => {
      writerB.on('message', (m: { type: string; waitedMs: number }) => {
        if (m.type === 'done') {
          bDone = m;
          resolve();
        }
      });
      writerB.on('error', reject);
    });
    await new Promise<void>((resolve) => writerB.once('message', () => resolve())); // started
    await sleepMs(300);
    assert.is(bDone, null, 'session B is still waiting for the write lock');
    assert.is(await pump.runCycle(), 0, 'nothing committed yet: nothing to ship');
    await app.exec(`COMMIT`);
    await bFinished;
    assert.ok(bDone!.waitedMs >= 250, `B waited for A's commit (${bDone!.waitedMs} ms)`);
    await writerB.terminate();

    assert.is(await pump.runCycle(), 2);
    assert.is(await pump.runCycle(), 0);
    assert.equal(
      sink.changes.map((c) => view(c).key),
      [['1'], ['2']],
    );
    const [slow, quick] = sink.changes;
    assert.ok(BigInt(slow!.stagingId) < BigInt(quick!.stagingId), 'ids follow commit order');
    assert.is(await staging.stagedCount(), 0);
  } finally {
    await staging.close();
    await app.destroy();
  }
});

test('postgres: a change committed while the last batch synced is shipped by the next cycle, not hidden by the empty claim made during the sync', async () => {
  // The pipelined claim runs while sync() is in flight. Found by the bank job on a busy CI
  // machine: that claim found nothing, pgbench then committed its last transactions, and the
  // drain took the stale empty claim for "nothing left", leaving them in staging.
  const app = await createAppDb('postgres');
  const staging = await openStaging(sourceFor(app, [{}]));
  try {
    await app.exec(LEDGER_DDL.postgres);
    await staging.install();
    const base = memorySink();
    let duringSync: (() => Promise<void>) | null = null;
    const sink = {
      ...base,
      async sync() {
        const work = duringSync;
        duringSync = null;
        if (work !== null) await work();
      },
    };
    const pump = new PumpCore({ staging, sink, pump: 0, pumps: 1, batchSizeMax: 100 });
    await pump.start();

    await app.exec(`INSERT INTO ledger(id, holder) VALUES (1, 'first')`);
    // The next batch is claimed at once (nothing staged but row 1, which it skips); the insert
    // of row 2 commits after that claim and before the sync resolves.
    duringSync = async () => {
      await sleepMs(20);
      await app.exec(`INSERT INTO ledger(id, holder) VALUES (2, 'late')`);
    };
    assert.is(await pump.runCycle(), 1, 'row 1 shipped');
    assert.is(await pump.runCycle(), 1, 'row 2, committed after the pipelined claim, shipped next');
    assert.is(await pump.runCycle(), 0);
    assert.equal(
      base.changes.map((c) => (view(c).after as { holder: string }).holder),
      ['first', 'late'],
    );
    assert.is(await staging.stagedCount(), 0);
  } finally {
    await staging.close();
    await app.destroy();
  }
});

test.run();
