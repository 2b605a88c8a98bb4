/**
 * The capture cases of shared/cases/capture.md on MariaDB, at the trigger + staging level:
 * C1 (two sessions), C3, C5, C6, C7, C8, C9 (TRUNCATE refused), plus the key hash in SQL, the type
 * renderings of the README's table, conditions, install/uninstall, pump ownership and config
 * checks. C2 with a real SIGKILL is in cdc-mariadb-crash.test.ts.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { fileURLToPath } from 'node:url';
import { ConfigError, loadTopology, parseTopology } from '../engine/config/index.js';
import {
  keyHash,
  openStaging,
  PumpCore,
  pumpOfKey,
  validateCaptureSource,
} from '../engine/cdc/index.js';
import type { CaptureSource, CaptureTable, StagingClient } from '../engine/cdc/index.js';
import {
  createAppDb,
  drain,
  LEDGER_DDL,
  ledgerRow,
  memorySink,
  sourceFor,
  stagingName,
  view,
} from './cdc-helpers.js';
import type { AppDb } from './cdc-helpers.js';

async function rejects(p: Promise<unknown>, re: RegExp): Promise<void> {
  try {
    await p;
  } catch (err) {
    assert.match((err as Error).message, re);
    return;
  }
  assert.unreachable(`expected a rejection matching ${re}`);
}

/** Runs `body` against a fresh ledger table in a fresh database with capture installed. */
async function withLedger(
  table: Partial<CaptureTable>,
  body: (app: AppDb, staging: StagingClient) => Promise<void>,
): Promise<void> {
  const app = await createAppDb('mariadb');
  let staging: StagingClient | null = null;
  try {
    await app.exec(LEDGER_DDL.mariadb);
    staging = await openStaging(sourceFor(app, [table]));
    await staging.install();
    await body(app, staging);
  } finally {
    if (staging) await staging.close();
    await app.destroy();
  }
}

test("mariadb: the staging table's FNV-1a function in the database equals keyHash in JS, ASCII and not", async () => {
  await withLedger({}, async (app) => {
    for (const k of ['', 'a', 'foobar', '["9007199254740993"]', '["Grüße 😀"]', '*']) {
      const fn = stagingName(app, 'sluice_staging_fnv1a32');
      const [row] = await app.query<{ h: string }>(`SELECT CAST(${fn}('${k}') AS CHAR) AS h`);
      assert.is(Number(row!.h), keyHash(k), k);
    }
  });
});

test('mariadb: C3 three rows from one statement get their own staging ids, claimed in order; partial ack then re-claim yields the other two once each in order', async () => {
  await withLedger({}, async (app, staging) => {
    await app.exec(`INSERT INTO ledger(id, holder) SELECT seq, 'bulk' FROM seq_20_to_22`);
    const first = await staging.claim(0, 1, 10);
    assert.equal(
      first.map((c) => c.key),
      ['["20"]', '["21"]', '["22"]'],
    );
    const ids = first.map((c) => BigInt(c.stagingId));
    assert.ok(
      ids[0]! < ids[1]! && ids[1]! < ids[2]!,
      `ids ascending and distinct: ${ids.join(',')}`,
    );
    assert.is(await staging.ack([first[0]!.stagingId]), 1);
    const again = await staging.claim(0, 1, 10);
    assert.equal(
      again.map((c) => [c.stagingId, c.key]),
      [
        [first[1]!.stagingId, '["21"]'],
        [first[2]!.stagingId, '["22"]'],
      ],
    );
    assert.is(await staging.ack(again.map((c) => c.stagingId)), 2);
    assert.equal(await staging.claim(0, 1, 10), []);
    assert.is(await staging.ack(first.map((c) => c.stagingId)), 0, 'ack is idempotent');
    for (const c of first) assert.is(c.keyHash, keyHash(c.key));
  });
});

test('mariadb: C5 bigint and decimal values keep every digit as exact text', async () => {
  await withLedger({}, async (app, staging) => {
    await app.exec(
      `INSERT INTO ledger(id, amount) VALUES (9007199254740993, 999999999999.999998), (41, -0.5)`,
    );
    const rows = await drain(staging);
    assert.equal(rows.map(view), [
      {
        table: 'ledger',
        op: 'insert',
        key: ['9007199254740993'],
        before: null,
        after: ledgerRow({ id: '9007199254740993', amount: '999999999999.999998' }),
      },
      {
        table: 'ledger',
        op: 'insert',
        key: ['41'],
        before: null,
        after: ledgerRow({ id: '41', amount: '-0.5' }),
      },
    ]);
    assert.is(rows[0]!.key, '["9007199254740993"]');
    assert.ok(rows[0]!.after!.includes('"amount":"999999999999.999998"'), rows[0]!.after!);
    assert.ok(rows[1]!.after!.includes('"amount":"-0.5"'), rows[1]!.after!);
  });
});

test('mariadb: C6 NULL transitions are changes, every captured column present, an unchanged update gives no event', async () => {
  await withLedger({}, async (app, staging) => {
    await app.exec(`INSERT INTO ledger(id, holder, memo) VALUES (70, 'ann', NULL)`);
    await app.exec(`UPDATE ledger SET holder = NULL WHERE id = 70`);
    await app.exec(`UPDATE ledger SET memo = 'm' WHERE id = 70`);
    await app.exec(`UPDATE ledger SET memo = 'm' WHERE id = 70`);
    const rows = await drain(staging);
    assert.equal(rows.map(view), [
      {
        table: 'ledger',
        op: 'insert',
        key: ['70'],
        before: null,
        after: ledgerRow({ id: '70', holder: 'ann' }),
      },
      {
        table: 'ledger',
        op: 'update',
        key: ['70'],
        before: ledgerRow({ id: '70', holder: 'ann', memo: null }),
        after: ledgerRow({ id: '70', holder: null, memo: null }),
      },
      {
        table: 'ledger',
        op: 'update',
        key: ['70'],
        before: ledgerRow({ id: '70', memo: null }),
        after: ledgerRow({ id: '70', memo: 'm' }),
      },
    ]);
  });
});

test('mariadb: C6 a change of letter case or trailing spaces is an update whatever the collation', async () => {
  await withLedger({}, async (app, staging) => {
    await app.exec(`INSERT INTO ledger(id, holder) VALUES (72, 'ann')`);
    await app.exec(`UPDATE ledger SET holder = 'ANN' WHERE id = 72`);
    await app.exec(`UPDATE ledger SET holder = 'ANN ' WHERE id = 72`);
    await app.exec(`UPDATE ledger SET holder = 'ANN ' WHERE id = 72`);
    const rows = await drain(staging);
    assert.equal(
      rows.map((c) => [c.op, view(c).after]),
      [
        ['insert', ledgerRow({ id: '72', holder: 'ann' })],
        ['update', ledgerRow({ id: '72', holder: 'ANN' })],
        ['update', ledgerRow({ id: '72', holder: 'ANN ' })],
      ],
    );
  });
});

test('mariadb: C6 with suppressNoopUpdates false an unchanged update is an event', async () => {
  await withLedger({ suppressNoopUpdates: false }, async (app, staging) => {
    await app.exec(`INSERT INTO ledger(id, memo) VALUES (71, 'm')`);
    // MariaDB fires row triggers for rows matched but not changed.
    await app.exec(`UPDATE ledger SET memo = 'm' WHERE id = 71`);
    const rows = await drain(staging);
    assert.equal(rows.map(view), [
      {
        table: 'ledger',
        op: 'insert',
        key: ['71'],
        before: null,
        after: ledgerRow({ id: '71', memo: 'm' }),
      },
      {
        table: 'ledger',
        op: 'update',
        key: ['71'],
        before: ledgerRow({ id: '71', memo: 'm' }),
        after: ledgerRow({ id: '71', memo: 'm' }),
      },
    ]);
  });
});

test('mariadb: C7 any text survives: valid UTF-8 JSON, control characters escaped, exact strings back', async () => {
  await withLedger({}, async (app, staging) => {
    await app.exec(
      `INSERT INTO ledger(id, holder, memo) VALUES (100, 'Grüße 😀', 'q"uote\\\\back\\nline\\ttab')`,
    );
    const [row] = await drain(staging);
    const after = row!.after!;
    assert.not.match(after, /[\u0000-\u001f]/, 'no raw control character in the JSON text');
    assert.not.match(after, /\uFFFD/, 'no replacement character (mojibake)');
    const image = JSON.parse(after) as Record<string, string | null>;
    assert.is(image.holder, 'Grüße 😀');
    assert.is(image.memo, 'q"uote\\back\nline\ttab');
    assert.equal(
      image,
      ledgerRow({ id: '100', holder: 'Grüße 😀', memo: 'q"uote\\back\nline\ttab' }),
    );
  });
});

test('mariadb: C7 a latin1 column and a writer session in latin1 still give the exact characters', async () => {
  const app = await createAppDb('mariadb');
  const staging = await openStaging(sourceFor(app, [{ table: 'l1', operations: ['insert'] }]));
  try {
    await app.exec(`CREATE TABLE l1 (id int PRIMARY KEY, t varchar(20) CHARACTER SET latin1)`);
    await staging.install();
    const writer = await app.connect();
    await writer.exec(`SET NAMES latin1; INSERT INTO l1 VALUES (1, _utf8mb4'Grüße')`);
    await writer.close();
    const [row] = await drain(staging);
    assert.equal(JSON.parse(row!.after!), { id: '1', t: 'Grüße' });
  } finally {
    await staging.close();
    await app.destroy();
  }
});

test("mariadb: C8 a primary-key update is a delete of the old key then an insert of the new, each on its key's pump; a consumer keyed on the key keeps no ghost", async () => {
  await withLedger({}, async (app, staging) => {
    await app.exec(`INSERT INTO ledger(id, holder) VALUES (80, 'k')`);
    await app.exec(`UPDATE ledger SET id = 81 WHERE id = 80`);
    await app.exec(`INSERT INTO ledger(id, holder) VALUES (80, 'again')`);
    const pumps = 2;
    const perPump = [await staging.claim(0, pumps, 100), await staging.claim(1, pumps, 100)];
    const all = perPump.flat().sort((a, b) => Number(BigInt(a.stagingId) - BigInt(b.stagingId)));
    assert.equal(all.map(view), [
      {
        table: 'ledger',
        op: 'insert',
        key: ['80'],
        before: null,
        after: ledgerRow({ id: '80', holder: 'k' }),
      },
      {
        table: 'ledger',
        op: 'delete',
        key: ['80'],
        before: ledgerRow({ id: '80', holder: 'k' }),
        after: null,
      },
      {
        table: 'ledger',
        op: 'insert',
        key: ['81'],
        before: null,
        after: ledgerRow({ id: '81', holder: 'k' }),
      },
      {
        table: 'ledger',
        op: 'insert',
        key: ['80'],
        before: null,
        after: ledgerRow({ id: '80', holder: 'again' }),
      },
    ]);
    for (const [p, rows] of perPump.entries()) {
      for (const r of rows) assert.is(pumpOfKey(r.key, pumps), p, `${r.key} on its own pump`);
    }
    assert.ok(
      pumpOfKey('["80"]', pumps) !== pumpOfKey('["81"]', pumps),
      'the two keys are on different pumps',
    );
    for (const order of [
      [0, 1],
      [1, 0],
    ]) {
      const state = new Map<string, unknown>();
      for (const p of order) {
        for (const r of perPump[p]!) {
          if (r.op === 'delete') state.delete(r.key);
          else state.set(r.key, JSON.parse(r.after!).holder);
        }
      }
      assert.equal([...state.entries()].sort(), [
        ['["80"]', 'again'],
        ['["81"]', 'k'],
      ]);
    }
  });
});

test("mariadb: C8 with keyUpdate 'update' a primary-key update is one update under the new key with the old key in its before image", async () => {
  await withLedger({ keyUpdate: 'update' }, async (app, staging) => {
    await app.exec(`INSERT INTO ledger(id, holder) VALUES (80, 'k')`);
    await app.exec(`UPDATE ledger SET id = 81 WHERE id = 80`);
    const rows = await drain(staging);
    assert.equal(rows.map(view)[1], {
      table: 'ledger',
      op: 'update',
      key: ['81'],
      before: ledgerRow({ id: '80', holder: 'k' }),
      after: ledgerRow({ id: '81', holder: 'k' }),
    });
    assert.is(rows.length, 2);
  });
});

test('mariadb: key strategies: columns, fixed, none and expression decide the staging key and the pump', async () => {
  const cases: [Partial<CaptureTable>['key'], string[]][] = [
    [{ columns: ['holder', 'id'] }, ['["ann","1"]', '["bob","2"]', '["bob","2"]']],
    [['holder'], ['["ann"]', '["bob"]', '["bob"]']],
    [{ fixed: 'all' }, ['["all"]', '["all"]', '["all"]']],
    [
      { expression: `CONCAT(UPPER(ROW.holder), '/', ROW.id)` },
      ['["ANN/1"]', '["BOB/2"]', '["BOB/2"]'],
    ],
    ['none', ['[]', '[]', '[]']],
  ];
  for (const [key, expected] of cases) {
    await withLedger({ key }, async (app, staging) => {
      await app.exec(`INSERT INTO ledger(id, holder) VALUES (1, 'ann')`);
      await app.exec(`INSERT INTO ledger(id, holder) VALUES (2, 'bob')`);
      await app.exec(`DELETE FROM ledger WHERE id = 2`);
      const rows = [...(await staging.claim(0, 2, 100)), ...(await staging.claim(1, 2, 100))].sort(
        (a, b) => Number(BigInt(a.stagingId) - BigInt(b.stagingId)),
      );
      assert.equal(
        rows.map((r) => r.key),
        expected,
        JSON.stringify(key),
      );
      assert.equal(
        rows.map((r) => r.op),
        ['insert', 'insert', 'delete'],
      );
      if (key !== 'none') {
        for (const pump of [0, 1]) {
          const mine = await staging.claim(pump, 2, 100);
          assert.ok(
            mine.every((r) => pumpOfKey(r.key, 2) === pump),
            `${JSON.stringify(key)}: keys on their pump`,
          );
        }
      }
    });
  }
});

test('mariadb: key strategy none spreads changes over the pumps (no order between them)', async () => {
  await withLedger({ key: 'none' }, async (app, staging) => {
    await app.exec(`INSERT INTO ledger(id) SELECT seq FROM seq_0_to_39`);
    const a = await staging.claim(0, 2, 100);
    const b = await staging.claim(1, 2, 100);
    assert.is(a.length + b.length, 40);
    assert.ok(a.length > 0 && b.length > 0, `both pumps get some: ${a.length}, ${b.length}`);
    assert.is(new Set([...a, ...b].map((r) => r.stagingId)).size, 40);
  });
});

test('mariadb: condition filters rows; columns and key config shape the images', async () => {
  await withLedger(
    {
      operations: ['insert', 'update'],
      columns: ['holder'],
      key: ['id'],
      condition: `NEW.holder <> 'skip'`,
    },
    async (app, staging) => {
      await app.exec(`INSERT INTO ledger(id, holder) VALUES (1, 'keep')`);
      await app.exec(`INSERT INTO ledger(id, holder) VALUES (2, 'skip')`);
      await app.exec(`UPDATE ledger SET holder = 'changed' WHERE id = 1`);
      await app.exec(`UPDATE ledger SET memo = 'not captured' WHERE id = 1`);
      const rows = await drain(staging);
      assert.equal(rows.map(view), [
        { table: 'ledger', op: 'insert', key: ['1'], before: null, after: { holder: 'keep' } },
        {
          table: 'ledger',
          op: 'update',
          key: ['1'],
          before: { holder: 'keep' },
          after: { holder: 'changed' },
        },
      ]);
    },
  );
});

test('mariadb: a condition over NEW on a delete trigger is refused at load; a bad condition is refused at install naming the table', async () => {
  await rejects(
    withLedger(
      { operations: ['insert', 'delete'], condition: `NEW.holder <> 'skip'` },
      async () => undefined,
    ),
    /tables\[0\]\.condition: names NEW, which a delete has not/,
  );
  await rejects(
    withLedger({ operations: ['insert'], condition: `NEW.nope <> 'skip'` }, async () => undefined),
    /capture table "ledger": condition \(insert\): the database refuses it: Unknown column 'NEW\.nope' in '/,
  );
});

test('mariadb: a condition per operation filters each operation over its own images; delete capture works beside an insert condition on NEW', async () => {
  const condition = {
    insert: `NEW.holder <> 'skip'`,
    update: `NOT (OLD.holder <=> NEW.holder)`,
    delete: `OLD.id <> 2`,
  };
  await withLedger({ condition }, async (app, staging) => {
    await app.exec(`INSERT INTO ledger(id, holder) VALUES (1, 'keep')`);
    await app.exec(`INSERT INTO ledger(id, holder) VALUES (2, 'skip')`);
    await app.exec(`UPDATE ledger SET memo = 'm' WHERE id = 1`);
    await app.exec(`UPDATE ledger SET holder = 'moved' WHERE id = 1`);
    await app.exec(`DELETE FROM ledger WHERE id = 2`);
    await app.exec(`DELETE FROM ledger WHERE id = 1`);
    const rows = await drain(staging);
    assert.equal(
      rows.map((r) => [r.op, r.key]),
      [
        ['insert', '["1"]'],
        ['update', '["1"]'],
        ['delete', '["1"]'],
      ],
    );
    assert.equal(JSON.parse(rows[1]!.after!).holder, 'moved');
  });
});

test('mariadb: install is idempotent, uninstall stops capture and removes the TRUNCATE guard', async () => {
  await withLedger({}, async (app, staging) => {
    await staging.install();
    await app.exec(`INSERT INTO ledger(id) VALUES (1)`);
    assert.is(await staging.stagedCount(), 1, 'one trigger per operation after two installs');
    await staging.uninstall();
    await app.exec(`INSERT INTO ledger(id) VALUES (2)`);
    assert.is(await staging.stagedCount(), 1);
    await app.exec(`TRUNCATE ledger`);
    const left = await app.query<{ n: number }>(
      `SELECT COUNT(*) AS n FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = DATABASE()`,
    );
    assert.is(Number(left[0]!.n), 0, 'no trigger left');
    const captureDb = (app.ref as { captureSchema: string }).captureSchema;
    const dbs = async () =>
      (
        await app.query<{ n: string }>(
          `SELECT SCHEMA_NAME AS n FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = '${captureDb}'`,
        )
      ).length;
    assert.is(await dbs(), 1, 'install created the capture database');
    await staging.uninstall({ dropStaging: true });
    assert.is(await dbs(), 0, 'uninstall dropped the capture database install created, once empty');
    await staging.install();
    assert.is(await staging.stagedCount(), 0);
    // A table of the user's in the capture database keeps it.
    await app.exec(`CREATE TABLE \`${captureDb}\`.mine (x int)`);
    await staging.uninstall({ dropStaging: true });
    assert.is(await dbs(), 1, 'a capture database that holds a user table stays');
    const remaining = await app.query<{ t: string }>(
      `SELECT TABLE_NAME AS t FROM information_schema.TABLES WHERE TABLE_SCHEMA = '${captureDb}'`,
    );
    assert.equal(
      remaining.map((r) => r.t),
      ['mine'],
      'uninstall removed exactly what install created',
    );
  });
});

test('mariadb: install names the missing column, a table without primary key, a non-InnoDB table', async () => {
  await rejects(
    withLedger({ columns: ['holder', 'nope'] }, async () => undefined),
    /capture table "ledger": columns: column "nope" not found/,
  );
  const app = await createAppDb('mariadb');
  try {
    await app.exec(
      `CREATE TABLE nopk (a int, b text); CREATE TABLE isam (id int PRIMARY KEY) ENGINE=MyISAM`,
    );
    for (const [table, re] of [
      ['nopk', /capture table "nopk": .*needs a primary key/],
      ['isam', /capture table "isam": engine is MyISAM; capture needs InnoDB/],
    ] as const) {
      const staging = await openStaging(
        sourceFor(app, [{ table, key: table === 'nopk' ? ['a'] : undefined }]),
      );
      try {
        await rejects(staging.install(), re);
      } finally {
        await staging.close();
      }
    }
  } finally {
    await app.destroy();
  }
});

test('mariadb: C9 TRUNCATE of a captured table is refused with an error naming the guard; the rows stay; DELETE is captured', async () => {
  await withLedger({}, async (app, staging) => {
    await app.exec(`INSERT INTO ledger(id) VALUES (90), (91)`);
    await rejects(
      app.exec(`TRUNCATE ledger`),
      /Cannot truncate a table referenced in a foreign key constraint .*sluice_capture_refuses_truncate_ledger/,
    );
    const rows = await app.query<{ id: string }>(
      `SELECT CAST(id AS CHAR) AS id FROM ledger ORDER BY id`,
    );
    assert.equal(
      rows.map((r) => r.id),
      ['90', '91'],
    );
    await app.exec(`DELETE FROM ledger`);
    assert.equal(
      (await drain(staging)).map((c) => [c.op, c.key]),
      [
        ['insert', '["90"]'],
        ['insert', '["91"]'],
        ['delete', '["90"]'],
        ['delete', '["91"]'],
      ],
    );
  });
});

test('mariadb: two captured tables, one in another database: both captured, both guarded against TRUNCATE', async () => {
  const app = await createAppDb('mariadb');
  const other = `${(app.ref as { url: string }).url.split('/').pop()}_b`;
  const staging = await openStaging(
    sourceFor(app, [{ table: 'ledger' }, { table: `${other}.accounts` }]),
  );
  try {
    await app.exec(
      `${LEDGER_DDL.mariadb}; CREATE DATABASE ${other}; CREATE TABLE ${other}.accounts (aid int PRIMARY KEY, abalance int)`,
    );
    await staging.install();
    await app.exec(
      `INSERT INTO ledger(id) VALUES (1); INSERT INTO ${other}.accounts VALUES (7, 100); UPDATE ${other}.accounts SET abalance = 90`,
    );
    assert.equal(
      (await drain(staging)).map((c) => [c.table, c.op, c.key]),
      [
        ['ledger', 'insert', '["1"]'],
        [`${other}.accounts`, 'insert', '["7"]'],
        [`${other}.accounts`, 'update', '["7"]'],
      ],
    );
    await rejects(app.exec(`TRUNCATE ledger`), /sluice_capture_refuses_truncate_ledger/);
    await rejects(app.exec(`TRUNCATE ${other}.accounts`), /sluice_capture_refuses_truncate_/);
    await staging.uninstall();
    await app.exec(`TRUNCATE ${other}.accounts`);
  } finally {
    await staging.close();
    await app
      .exec(`SET foreign_key_checks = 0; DROP DATABASE IF EXISTS ${other}`)
      .catch(() => undefined);
    await app.destroy();
  }
});

test('mariadb: every type family is rendered as exact text, whatever the writer time_zone', async () => {
  const app = await createAppDb('mariadb');
  const staging = await openStaging(sourceFor(app, [{ table: 'vals', operations: ['insert'] }]));
  try {
    await app.exec(`CREATE TABLE vals (
      id bigint unsigned PRIMARY KEY, ti tinyint, si smallint, i int, n numeric(10,0), dz decimal(65,30),
      f float, d double, b bit(5), y year, dt date, tm time(3), dtm datetime, ts timestamp(3) NULL, ts0 timestamp NULL,
      c char(3), vb varbinary(8), bl blob, e enum('red','green'), st set('a','b','c'), j json, u uuid, ip inet6)`);
    await staging.install();
    const writer = await app.connect();
    await writer.exec(`SET time_zone = '+09:00'; INSERT INTO vals VALUES (
      18446744073709551615, -128, -32768, -2147483648, 1234567890, -0.000000000000000000000000000001,
      0.1, 1e-1 + 2e-1, b'00101', 2024, '2024-02-29', '-838:59:59.000', '2024-02-29 12:34:56',
      '2024-02-29 12:34:56.780', '1970-01-01 09:00:01',
      'ab', x'00ff10', x'', 'green', 'a,c', '{"k": [1, 2.50]}', '123e4567-e89b-12d3-a456-426614174000', '::1')`);
    await writer.close();
    const [row] = await drain(staging);
    assert.equal(JSON.parse(row!.after!), {
      id: '18446744073709551615',
      ti: '-128',
      si: '-32768',
      i: '-2147483648',
      n: '1234567890',
      dz: '-0.000000000000000000000000000001',
      f: '0.10000000149011612',
      d: '0.30000000000000004',
      b: '00101',
      y: '2024',
      dt: '2024-02-29',
      tm: '-838:59:59.000',
      dtm: '2024-02-29T12:34:56',
      ts: '2024-02-29T03:34:56.780Z',
      ts0: '1970-01-01T00:00:01Z',
      c: 'ab',
      vb: '\\x00ff10',
      bl: '\\x',
      e: 'green',
      st: 'a,c',
      j: '{"k": [1, 2.50]}',
      u: '123e4567-e89b-12d3-a456-426614174000',
      ip: '::1',
    });
  } finally {
    await staging.close();
    await app.destroy();
  }
});

test("mariadb: a captured column dropped or renamed never fails the application's writes; each uncaptured change is parked with the reason; install resumes capture", async () => {
  await withLedger({}, async (app, staging) => {
    await app.exec(`INSERT INTO ledger(id, holder, memo) VALUES (1, 'a', 'm')`);
    await app.exec(`ALTER TABLE ledger ADD COLUMN extra int`);
    await app.exec(`INSERT INTO ledger(id, holder, extra) VALUES (2, 'b', 7)`);
    await app.exec(`ALTER TABLE ledger DROP COLUMN memo`);
    await app.exec(`INSERT INTO ledger(id, holder) VALUES (3, 'c')`);
    await app.exec(`ALTER TABLE ledger RENAME COLUMN holder TO owner`);
    await app.exec(`UPDATE ledger SET owner = 'd' WHERE id = 3`);
    await app.exec(`DELETE FROM ledger WHERE id = 1`);
    const rows = await app.query<{ id: string; owner: string | null }>(
      `SELECT CAST(id AS CHAR) AS id, owner FROM ledger ORDER BY id`,
    );
    assert.equal(
      rows.map((r) => [r.id, r.owner]),
      [
        ['2', 'b'],
        ['3', 'd'],
      ],
      'every write of the application happened',
    );
    const shipped = await drain(staging);
    assert.equal(
      shipped.map((c) => [c.op, c.key]),
      [
        ['insert', '["1"]'],
        ['insert', '["2"]'],
      ],
      'an added column breaks nothing',
    );
    assert.equal(
      Object.keys(JSON.parse(shipped[1]!.after!)),
      ['id', 'holder', 'memo', 'amount', 'booked', 'booked_tz'],
      'added column not captured until install',
    );
    const parked = await staging.listParked();
    assert.equal(
      parked.map((p) => [p.op, p.key, p.before, p.after]),
      [
        ['insert', '*', null, null],
        ['update', '*', null, null],
        ['delete', '*', null, null],
      ],
    );
    assert.match(
      parked[0]!.error,
      /^capture trigger of ledger \(insert\) failed, this change was not captured: Unknown column 'memo' in 'NEW'; .*run sluice install$/,
    );
    assert.match(parked[1]!.error, /Unknown column '(memo|holder)' in '(OLD|NEW)'/);
    assert.ok(
      BigInt(parked[0]!.stagingId) > BigInt(shipped[1]!.stagingId),
      'markers take staging ids in order',
    );
    assert.is(await staging.stagedCount(), 0, 'no marker is left in staging');
    assert.equal(
      await staging.describeTable!('ledger'),
      {
        live: ['id', 'owner', 'amount', 'booked', 'booked_tz', 'extra'],
        installed: ['id', 'holder', 'memo', 'amount', 'booked', 'booked_tz'],
        captureSchema: (app.ref as { captureSchema: string }).captureSchema,
        triggersMissing: [],
      },
      'what sluice check --live compares',
    );
    await staging.install();
    assert.equal((await staging.describeTable!('ledger')).installed, [
      'id',
      'owner',
      'amount',
      'booked',
      'booked_tz',
      'extra',
    ]);
    await app.exec(`UPDATE ledger SET owner = 'e' WHERE id = 3`);
    const [after] = await drain(staging);
    assert.equal(view(after!).after, {
      id: '3',
      owner: 'e',
      amount: null,
      booked: null,
      booked_tz: null,
      extra: null,
    });
  });
});

test("mariadb: C1 a slow transaction's lower staging id shipped after a higher one, both exactly once", async () => {
  const app = await createAppDb('mariadb');
  const sessionB = await app.connect();
  const staging = await openStaging(sourceFor(app, [{}]));
  try {
    await app.exec(LEDGER_DDL.mariadb);
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
      [ledgerRow({ id: '2', holder: 'quick' }), ledgerRow({ id: '1', holder: 'slow' })],
    );
    const [quick, slow] = sink.changes;
    assert.ok(
      BigInt(slow!.stagingId) < BigInt(quick!.stagingId),
      `late row has the lower id: ${slow!.stagingId} < ${quick!.stagingId}`,
    );
    assert.is(await staging.stagedCount(), 0);
  } finally {
    await staging.close();
    await sessionB.close();
    await app.destroy();
  }
});

test('mariadb: a second session claiming a held pump is refused; the pump is free once the holder closes', async () => {
  await withLedger({}, async (app, staging) => {
    await staging.claim(1, 2, 10);
    const other = await openStaging(sourceFor(app, [{}]));
    try {
      await rejects(
        other.claim(1, 2, 10),
        /pump 1 of staging .*sluice_staging is held by another session/,
      );
      assert.equal(await other.claim(0, 2, 10), [], 'another pump index is free');
      await staging.close();
      assert.equal(await other.claim(1, 2, 10), []);
    } finally {
      await other.close();
    }
  });
});

test('mariadb: config checks: truncate refused, url must name a database; mysql is accepted as a spelling', () => {
  const base = (
    database: CaptureSource['database'],
    ops: CaptureTable['operations'] = ['insert'],
  ): CaptureSource => ({
    name: 's',
    database,
    pumps: 1,
    batchSizeMax: 1,
    pollIntervalMs: 1,
    stagingTable: 'st',
    tables: [{ table: 'ledger', operations: ops, target: 'q' }],
  });
  assert.throws(
    () =>
      validateCaptureSource(base({ dialect: 'mariadb', url: 'mariadb://root@h/db' }, ['truncate'])),
    /tables\[0\]\.operations: truncate is not supported on mariadb \(MariaDB has no TRUNCATE trigger/,
  );
  assert.throws(
    () => validateCaptureSource(base({ dialect: 'mariadb', url: 'mariadb://root@h:3306' })),
    /database\.url: must name one database as its path/,
  );
  assert.throws(
    () => validateCaptureSource(base({ dialect: 'mariadb', url: 'postgres://h/db' })),
    /database\.url: scheme must be mariadb: or mysql:/,
  );
  assert.throws(
    () =>
      validateCaptureSource({
        ...base({ dialect: 'mariadb', url: 'mariadb://h/db' }),
        tables: [{ table: 'ledger', operations: ['insert'], key: 'transactionId', target: 'q' }],
      }),
    /tables\[0\]\.key: transactionId is not supported on mariadb/,
  );
  validateCaptureSource(base({ dialect: 'mysql', url: 'mysql://u:p@h:3307/db' }));
});

/** A topology with one capture source over `database` (inline YAML) and table `ops`. */
function topologyText(database: string, ops = '[insert]'): string {
  return [
    'name: t',
    'queues: [{ name: q }]',
    'capture:',
    `  - { name: db, database: ${database}, tables: [{ table: ledger, operations: ${ops}, target: q }] }`,
    '',
  ].join('\n');
}

test('mariadb topology: dialect mysql loads as mariadb; a url without database and truncate are reported with line and column', () => {
  const t = parseTopology(
    topologyText('{ dialect: mysql, url: "mysql://app@db:3306/shop" }'),
    '/x/t.yaml',
  );
  assert.equal(t.capture[0]!.database, { dialect: 'mariadb', url: 'mysql://app@db:3306/shop' });
  const text = topologyText(
    '{ dialect: mariadb, url: "mariadb://app@db:3306" }',
    '[insert, truncate]',
  );
  try {
    parseTopology(text, '/x/t.yaml');
    assert.unreachable('expected a ConfigError');
  } catch (err) {
    assert.instance(err, ConfigError);
    const line4 = text.split('\n')[3]!;
    assert.equal((err as ConfigError).message.split('\n'), [
      `/x/t.yaml:4:${line4.indexOf('"mariadb://') + 1}: capture[0].database.url: must name one database as its path (mariadb://user@host/database), url path=""`,
      `/x/t.yaml:4:${line4.indexOf('truncate') + 1}: capture[0].tables[0].operations[1]: truncate is not supported on mariadb ` +
        '(MariaDB has no TRUNCATE trigger; install refuses TRUNCATE of captured tables instead)',
    ]);
  }
});

test("the bank example's MariaDB topology loads; its url and capture database come from the environment", () => {
  const file = fileURLToPath(new URL('../../examples/bank/topology.mariadb.yaml', import.meta.url));
  assert.equal(loadTopology(file, { env: {} }).capture[0]!.database, {
    dialect: 'mariadb',
    url: 'mariadb://root@127.0.0.1:3306/sluice_bank',
    captureSchema: 'sluice',
  });
  const env = {
    SLUICE_MARIADB_BANK_URL: 'mariadb://u@db/bank',
    SLUICE_MARIADB_BANK_CAPTURE: 'cap',
  };
  assert.equal(loadTopology(file, { env }).capture[0]!.database, {
    dialect: 'mariadb',
    url: 'mariadb://u@db/bank',
    captureSchema: 'cap',
  });
});

test.run();
