/**
 * The installation id (engine/cdc/staging.ts): kept by a reinstall over an existing staging
 * table, new when install creates the staging table, dropped by uninstall with the staging
 * tables; absent (capture installed before it existed), the pump core reconciles against
 * nothing. SQLite, PostgreSQL and MariaDB.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { openStaging, PumpCore, installationTableName } from '../engine/cdc/index.js';
import type { StagedChange } from '../engine/cdc/index.js';
import { createAppDb, LEDGER_DDL, DIALECTS, sourceFor, stagingName } from './cdc-helpers.js';

for (const dialect of [...DIALECTS, 'mariadb'] as const) {
  test(`${dialect}: install keeps the installation id over an existing staging table, a new staging table gets a new one`, async () => {
    const app = await createAppDb(dialect, 'h_epoch_');
    try {
      await app.exec(LEDGER_DDL[dialect]);
      const staging = await openStaging(sourceFor(app, [{}]));
      try {
        assert.is(await staging.installationId(), '', 'none before install');
        await staging.install();
        const a = await staging.installationId();
        assert.match(a, /^[0-9a-f]{16}$/);
        await staging.install();
        assert.is(await staging.installationId(), a, 'a reinstall keeps it');
        await staging.uninstall();
        await staging.install();
        assert.is(
          await staging.installationId(),
          a,
          'uninstall keeping the staging table keeps it',
        );
        await staging.uninstall({ dropStaging: true });
        assert.is(await staging.installationId(), '', 'dropped with the staging tables');
        await staging.install();
        const b = await staging.installationId();
        assert.match(b, /^[0-9a-f]{16}$/);
        assert.is.not(b, a, 'a new staging table, a new id');
        await staging.uninstall({ dropStaging: true });
      } finally {
        await staging.close();
      }
    } finally {
      await app.destroy();
    }
  });
}

test('sqlite: without an installation id the pump core deletes nothing at start, whatever the sink holds', async () => {
  const app = await createAppDb('sqlite');
  try {
    await app.exec(LEDGER_DDL.sqlite);
    const staging = await openStaging(sourceFor(app, [{}]));
    try {
      await staging.install();
      await app.exec(`INSERT INTO ledger(id, holder) VALUES (1, 'a'), (2, 'b')`);
      // Capture installed by a version without the id: no installation table.
      await app.exec(`DROP TABLE "${installationTableName('sluice_staging')}"`);
      const asked: string[] = [];
      // A sink that (wrongly) returns every id it is asked about: the core must not trust it.
      const sink = {
        appendBatch(_changes: StagedChange[]) {},
        recentStagingIds(_limit: number, installationId: string) {
          asked.push(installationId);
          return new Set(['1', '2']);
        },
      };
      const core = new PumpCore({ staging, sink, pump: 0, pumps: 1, batchSizeMax: 10 });
      assert.is(await core.start(), 0);
      assert.equal(asked, ['']);
      assert.is(await staging.stagedCount(), 2, 'nothing deleted');
      const n = await app.query<{ n: number }>(`SELECT count(*) AS n FROM ${stagingName(app)}`);
      assert.is(Number(n[0]!.n), 2);
      // With an id the core passes it on and acks what the sink returns.
      await staging.install();
      const id = await staging.installationId();
      const core2 = new PumpCore({ staging, sink, pump: 0, pumps: 1, batchSizeMax: 10 });
      assert.is(await core2.start(), 2);
      assert.equal(asked, ['', id]);
      assert.is(core2.installationId, id);
    } finally {
      await staging.close();
    }
  } finally {
    await app.destroy();
  }
});

test.run();
