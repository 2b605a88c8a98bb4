/**
 * A defect the fault suite (faults/, fault pg-row-lock) found: a pump whose staged rows another
 * session held locked (`SELECT ... FOR UPDATE` left open) waited in its DELETE forever and said
 * nothing. Now its session has lock_timeout (PG_LOCK_TIMEOUT_MS): the ack fails with an error
 * naming the blocking session (pid, user, application, since when, its last query), the pump
 * retries as after any outage, and the ack goes through once the lock is released.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import pg from 'pg';
import { openStaging } from '../engine/cdc/index.js';
import { createAppDb, sourceFor, stagingName, LEDGER_DDL, PG_URL } from './cdc-helpers.js';

test("an ack blocked by another session's row lock fails within lock_timeout naming the blocker; after the release it goes through", async () => {
  const app = await createAppDb('postgres');
  const locker = new pg.Client({ connectionString: PG_URL, application_name: 'faults-row-locker' });
  try {
    await app.exec(LEDGER_DDL.postgres);
    const source = sourceFor(app, [{}]);
    const installer = await openStaging(source);
    await installer.install();
    await installer.close();
    await app.exec(
      `INSERT INTO ledger (id, holder) SELECT g, 'h' || g FROM generate_series(1, 20) g`,
    );
    const staging = await openStaging(source);
    try {
      const rows = await staging.claim(0, 1, 100);
      assert.is(rows.length, 20);
      await locker.connect();
      await locker.query('BEGIN');
      await locker.query(`SELECT id FROM ${stagingName(app)} ORDER BY id LIMIT 5 FOR UPDATE`);
      const pid = Number((await locker.query('SELECT pg_backend_pid() AS p')).rows[0].p);
      let error: Error | null = null;
      try {
        await staging.ack(rows.map((r) => r.stagingId));
      } catch (e) {
        error = e as Error;
      }
      assert.ok(error, 'the ack waited for the lock and went through while it was held');
      assert.match(error!.message, /waited lock_timeout \d+ ms for row locks held by pid (\d+)/);
      assert.ok(
        error!.message.includes(`pid ${pid} `),
        `the blocker pid ${pid} is not named: ${error!.message}`,
      );
      assert.ok(error!.message.includes('faults-row-locker'), error!.message);
      await locker.query('ROLLBACK');
      // The same session goes on (the pump reconnects, but the session itself is fine).
      assert.is(await staging.ack(rows.map((r) => r.stagingId)), 20);
      assert.is((await staging.claim(0, 1, 100)).length, 0);
    } finally {
      await staging.close();
    }
  } finally {
    await locker.end().catch(() => undefined);
    await app.destroy();
  }
});

test.run();
