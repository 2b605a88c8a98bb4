/**
 * Capture figures from a real PostgreSQL capture source: staging depth and oldest age per table
 * and parked errors, read by the operations layer over its own read-only connection.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { randomBytes } from 'node:crypto';
import { createAppDb, sourceFor, type AppDb } from './cdc-helpers.js';
import { openStaging } from '../engine/cdc/index.js';
import { CaptureStats } from '../ops/index.js';

let app: AppDb;
test.before(async () => {
  app = await createAppDb('postgres');
});
test.after(async () => {
  await app.destroy();
});

test('PostgreSQL: staging depth, oldest staged age and parked errors per table', async () => {
  await app.exec('CREATE TABLE ledger (id bigint PRIMARY KEY, memo text)');
  await app.exec('CREATE TABLE notes (id bigint PRIMARY KEY, body text)');
  const stagingTable = `ops_staging_${randomBytes(4).toString('hex')}`;
  const source = sourceFor(app, [{ table: 'ledger' }, { table: 'notes', target: 'note-events' }], {
    stagingTable,
  });
  const staging = await openStaging(source);
  await staging.install();
  await app.exec(`INSERT INTO ledger VALUES (1, 'a'), (2, 'b'), (3, 'c')`);
  await app.exec(`INSERT INTO notes VALUES (1, 'n')`);
  await new Promise((r) => setTimeout(r, 30));
  const stats = new CaptureStats([source], 0);
  try {
    let [s] = await stats.read();
    assert.is(s.error, null);
    assert.equal(
      s.tables!.map((t) => [t.table, t.stagingDepth, t.parkedErrors]),
      [
        ['ledger', 3, 0],
        ['notes', 1, 0],
      ],
    );
    assert.ok(s.tables![0].oldestStagedAgeMs >= 30, String(s.tables![0].oldestStagedAgeMs));
    await staging.ack(
      (await staging.claim(0, 1, 10)).filter((c) => c.table === 'ledger').map((c) => c.stagingId),
    );
    [s] = await stats.read();
    assert.equal(
      s.tables!.map((t) => [t.table, t.stagingDepth, t.oldestStagedAgeMs === 0]),
      [
        ['ledger', 0, true],
        ['notes', 1, false],
      ],
    );
  } finally {
    await stats.close();
    await staging.uninstall({ dropStaging: true });
    await staging.close();
  }
});

test.run();
