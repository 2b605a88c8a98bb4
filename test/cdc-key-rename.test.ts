/**
 * Key columns through schema changes on PostgreSQL, with capture installed and running: a renamed
 * key column keeps the key (the dynamic path matches key columns by the attribute number recorded
 * at install, in key order), so a primary-key update after `RENAME COLUMN id TO ident` is still a
 * delete of the old key and an insert of the new one (case C8); a dropped key column never gives
 * key `[]`: the application's statement succeeds and the change is parked in the error table
 * under key `*` with an error naming table and column, and `check --live` reports the column.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { openStaging } from '../engine/cdc/index.js';
import type { CaptureTable, StagingClient, TriggerLevel } from '../engine/cdc/index.js';
import { checkCaptureLive, type Topology } from '../index.js';
import { createAppDb, drain, sourceFor, view } from './cdc-helpers.js';
import type { AppDb } from './cdc-helpers.js';

/** `rk (id int PRIMARY KEY, grp text, v text)` in a fresh schema, capture installed on it. */
async function withRk(
  table: Partial<CaptureTable>,
  body: (app: AppDb, staging: StagingClient) => Promise<void>,
): Promise<void> {
  const app = await createAppDb('postgres', 'sluice_pkren_');
  let staging: StagingClient | null = null;
  try {
    await app.exec(`CREATE TABLE rk (id int PRIMARY KEY, grp text, v text)`);
    staging = await openStaging(
      sourceFor(app, [{ table: 'rk', operations: ['insert', 'update', 'delete'], ...table }]),
    );
    await staging.install();
    await body(app, staging);
  } finally {
    if (staging) await staging.close();
    await app.destroy();
  }
}

/** The staged changes as `[op, key, before, after]`, images parsed. */
async function changes(staging: StagingClient): Promise<unknown[]> {
  return (await drain(staging)).map(view).map((c) => [c.op, c.key, c.before, c.after]);
}

for (const triggers of ['statement', 'row'] as TriggerLevel[]) {
  test(`postgres (${triggers} triggers): RENAME COLUMN of the primary-key column keeps the key; a key update is still delete + insert (C8)`, async () => {
    await withRk({ triggers }, async (app, staging) => {
      await app.exec(`INSERT INTO rk VALUES (1, 'g', 'a')`);
      await app.exec(`ALTER TABLE rk RENAME COLUMN id TO ident`);
      await app.exec(`INSERT INTO rk VALUES (2, 'g', 'b')`);
      await app.exec(`UPDATE rk SET v = 'b2' WHERE ident = 2`);
      await app.exec(`UPDATE rk SET ident = 3 WHERE ident = 2`);
      await app.exec(`DELETE FROM rk WHERE ident = 1`);
      const img = (id: string, v: string) => ({ ident: id, grp: 'g', v });
      assert.equal(await changes(staging), [
        ['insert', ['1'], null, { id: '1', grp: 'g', v: 'a' }],
        ['insert', ['2'], null, img('2', 'b')],
        ['update', ['2'], img('2', 'b'), img('2', 'b2')],
        ['delete', ['2'], img('2', 'b2'), null],
        ['insert', ['3'], null, img('3', 'b2')],
        ['delete', ['1'], img('1', 'a'), null],
      ]);
      assert.is(await staging.parkedCount(), 0);
    });
  });
}

test('postgres: a key of listed columns [grp, id] survives renaming both, in key order (grp first)', async () => {
  await withRk({ key: ['grp', 'id'] }, async (app, staging) => {
    await app.exec(`ALTER TABLE rk RENAME COLUMN grp TO team`);
    await app.exec(`ALTER TABLE rk RENAME COLUMN id TO ident`);
    await app.exec(`INSERT INTO rk VALUES (1, 'g1', 'a')`);
    await app.exec(`UPDATE rk SET v = 'a2' WHERE ident = 1`);
    await app.exec(`UPDATE rk SET team = 'g2' WHERE ident = 1`);
    await app.exec(`DELETE FROM rk WHERE ident = 1`);
    const img = (team: string, v: string) => ({ ident: '1', team, v });
    assert.equal(await changes(staging), [
      ['insert', ['g1', '1'], null, img('g1', 'a')],
      ['update', ['g1', '1'], img('g1', 'a'), img('g1', 'a2')],
      ['delete', ['g1', '1'], img('g1', 'a2'), null],
      ['insert', ['g2', '1'], null, img('g2', 'a2')],
      ['delete', ['g2', '1'], img('g2', 'a2'), null],
    ]);
    const topology = { capture: [staging.source] } as unknown as Topology;
    const where = 'capture source "test": table "rk"';
    const keyLines = (await checkCaptureLive(topology)).filter((l) => l.includes('key column'));
    assert.equal(keyLines, [
      `${where}: key column "grp" is now "team" (renamed): the installed triggers still key on it; name it so in the topology's key (if listed) and run sluice install`,
      `${where}: key column "id" is now "ident" (renamed): the installed triggers still key on it; name it so in the topology's key (if listed) and run sluice install`,
    ]);
  });
});

test("postgres: DROP COLUMN of a key column: the application's statements succeed, each change is parked (key *, error naming table and column), none staged under key []; check --live reports it", async () => {
  await withRk({ key: ['grp'] }, async (app, staging) => {
    await app.exec(`INSERT INTO rk VALUES (1, 'g1', 'a')`);
    await app.exec(`ALTER TABLE rk DROP COLUMN grp`);
    await app.exec(`INSERT INTO rk VALUES (2, 'b'), (3, 'c')`);
    await app.exec(`UPDATE rk SET v = 'a2' WHERE id = 1`);
    await app.exec(`DELETE FROM rk WHERE id = 3`);
    assert.equal(await app.query(`SELECT id, v FROM rk ORDER BY id`), [
      { id: 1, v: 'a2' },
      { id: 2, v: 'b' },
    ]);
    assert.equal(await changes(staging), [
      ['insert', ['g1'], null, { id: '1', grp: 'g1', v: 'a' }],
    ]);
    const parked = await staging.listParked();
    assert.equal(
      parked.map((p) => [p.table, p.op, p.key, p.before, p.after]),
      [
        ['rk', 'insert', '*', null, '{"id":"2","v":"b"}'],
        ['rk', 'insert', '*', null, '{"id":"3","v":"c"}'],
        ['rk', 'update', '*', '{"id":"1","v":"a"}', '{"id":"1","v":"a2"}'],
        ['rk', 'delete', '*', '{"id":"3","v":"c"}', null],
      ],
    );
    for (const p of parked)
      assert.match(
        p.error,
        /^capture of table "rk" \((insert|update|delete)\): key column "grp" no longer exists/,
      );
    const topology = { capture: [staging.source] } as unknown as Topology;
    const live = await checkCaptureLive(topology);
    assert.ok(
      live.includes(
        'capture source "test": table "rk": key column "grp" no longer exists (dropped): its changes are parked in the error table under key "*" instead of staged; give the table a key and run sluice install',
      ),
      live.join('\n'),
    );
  });
});

test('postgres: DROP COLUMN of the primary-key column (primaryKey strategy): statements succeed, changes parked naming the column', async () => {
  await withRk({}, async (app, staging) => {
    await app.exec(`ALTER TABLE rk DROP COLUMN id`);
    await app.exec(`INSERT INTO rk VALUES ('g', 'x')`);
    await app.exec(`UPDATE rk SET v = 'y'`);
    assert.equal(await changes(staging), []);
    const parked = await staging.listParked();
    assert.equal(
      parked.map((p) => [p.op, p.key, p.after]),
      [
        ['insert', '*', '{"grp":"g","v":"x"}'],
        ['update', '*', '{"grp":"g","v":"y"}'],
      ],
    );
    assert.match(
      parked[0]!.error,
      /capture of table "rk" \(insert\): key column "id" no longer exists/,
    );
  });
});

test.run();
