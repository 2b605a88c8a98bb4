/**
 * Capture cases C3, C5, C6, C7 (and C9 on PostgreSQL) from shared/cases/capture.md, at the
 * trigger + staging level, on SQLite and PostgreSQL; plus key hash, condition and config checks.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { keyHash, openStaging, pumpOfKey, validateCaptureSource } from '../engine/cdc/index.js';
import type { StagingClient } from '../engine/cdc/index.js';
import {
  stagingName,
  createAppDb,
  DIALECTS,
  drain,
  LEDGER_DDL,
  ledgerRow,
  sourceFor,
  view,
} from './cdc-helpers.js';
import type { AppDb, Dialect } from './cdc-helpers.js';
import type { CaptureTable } from '../engine/cdc/index.js';

/** Asserts that `p` rejects with a message matching `re`. */
async function rejects(p: Promise<unknown>, re: RegExp): Promise<void> {
  try {
    await p;
  } catch (err) {
    assert.match((err as Error).message, re);
    return;
  }
  assert.unreachable(`expected a rejection matching ${re}`);
}

/** Runs `body` against a fresh ledger table with capture installed; cleans up after. */
async function withLedger(
  dialect: Dialect,
  table: Partial<CaptureTable>,
  body: (app: AppDb, staging: StagingClient) => Promise<void>,
): Promise<void> {
  const app = await createAppDb(dialect);
  let staging: StagingClient | null = null;
  try {
    await app.exec(LEDGER_DDL[dialect]);
    staging = await openStaging(sourceFor(app, [table]));
    await staging.install();
    await body(app, staging);
  } finally {
    if (staging) await staging.close();
    await app.destroy();
  }
}

test('keyHash is FNV-1a 32 over UTF-8 (reference vectors)', () => {
  assert.is(keyHash(''), 0x811c9dc5);
  assert.is(keyHash('a'), 0xe40c292c);
  assert.is(keyHash('foobar'), 0xbf9cf968);
  // Non-ASCII goes through UTF-8: "é" is C3 A9.
  let h = 0x811c9dc5;
  for (const b of [0x5b, 0xc3, 0xa9, 0x5d]) h = Math.imul(h ^ b, 16777619) >>> 0;
  assert.is(keyHash('[é]'), h);
});

test('postgres: the key hash function in the database equals keyHash in JS, ASCII and not', async () => {
  await withLedger('postgres', {}, async (app) => {
    for (const k of ['', 'a', '["9007199254740993"]', '["Grüße 😀"]', '*']) {
      const [row] = await app.query<{ h: string }>(
        `SELECT ${stagingName(app, 'sluice_staging_fnv1a32')}('${k}')::text AS h`,
      );
      assert.is(Number(row!.h), keyHash(k), k);
    }
  });
});

for (const dialect of DIALECTS) {
  test(`${dialect}: C3 three rows from one statement get their own staging ids, claimed in order; partial ack then re-claim yields the other two once each in order`, async () => {
    await withLedger(dialect, {}, async (app, staging) => {
      await app.exec(
        dialect === 'postgres'
          ? `INSERT INTO ledger(id, holder) SELECT g, 'bulk' FROM generate_series(20, 22) g`
          : `WITH RECURSIVE g(x) AS (SELECT 20 UNION ALL SELECT x + 1 FROM g WHERE x < 22) INSERT INTO ledger(id, holder) SELECT x, 'bulk' FROM g`,
      );
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
      // "Crash after the first of the three is shipped": only its ack happened.
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
      // Ack is idempotent: already-deleted ids delete nothing.
      assert.is(await staging.ack(first.map((c) => c.stagingId)), 0);
    });
  });

  test(`${dialect}: C5 bigint and numeric values keep every digit as exact text`, async () => {
    await withLedger(dialect, {}, async (app, staging) => {
      await app.exec(
        dialect === 'postgres'
          ? `INSERT INTO ledger(id, amount) VALUES (9007199254740993, 999999999999.999998), (41, -0.5)`
          : // SQLite: amount is TEXT and the values are written as text (NUMERIC affinity would round).
            `INSERT INTO ledger(id, amount) VALUES (9007199254740993, '999999999999.999998'), (41, '-0.5')`,
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

  test(`${dialect}: C6 NULL transitions are changes, every captured column present, an unchanged update gives no event`, async () => {
    await withLedger(dialect, {}, async (app, staging) => {
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

  test(`${dialect}: C6 with suppressNoopUpdates false an unchanged update is an event`, async () => {
    await withLedger(dialect, { suppressNoopUpdates: false }, async (app, staging) => {
      await app.exec(`INSERT INTO ledger(id, memo) VALUES (71, 'm')`);
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

  test(`${dialect}: C7 any text survives: valid UTF-8 JSON, control characters escaped, exact strings back`, async () => {
    await withLedger(dialect, {}, async (app, staging) => {
      await app.exec(
        dialect === 'postgres'
          ? `INSERT INTO ledger(id, holder, memo) VALUES (100, 'Grüße 😀', E'q"uote\\\\back\\nline\\ttab')`
          : `INSERT INTO ledger(id, holder, memo) VALUES (100, 'Grüße 😀', 'q"uote\\back' || char(10) || 'line' || char(9) || 'tab')`,
      );
      const [row] = await drain(staging);
      const after = row!.after!;
      assert.not.match(after, /[\u0000-\u001f]/, 'no raw control character in the JSON text');
      assert.not.match(after, /\uFFFD/, 'no replacement character (mojibake)');
      assert.is(Buffer.from(after, 'utf8').toString('utf8'), after);
      const image = JSON.parse(after) as Record<string, string | null>;
      assert.is(image.holder, 'Grüße 😀');
      assert.is(image.memo, 'q"uote\\back\nline\ttab');
      assert.equal(
        image,
        ledgerRow({ id: '100', holder: 'Grüße 😀', memo: 'q"uote\\back\nline\ttab' }),
      );
    });
  });

  test(`${dialect}: condition in the trigger WHEN filters rows; columns and key config shape the images`, async () => {
    await withLedger(
      dialect,
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

  test(`${dialect}: a condition per operation filters each operation over its own images; delete capture works beside an insert condition on NEW`, async () => {
    const condition = {
      insert: `NEW.holder <> 'skip'`,
      update:
        dialect === 'postgres'
          ? `OLD.holder IS DISTINCT FROM NEW.holder`
          : `OLD.holder IS NOT NEW.holder`,
      delete: `OLD.id <> 2`,
    };
    await withLedger(dialect, { condition }, async (app, staging) => {
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

  test(`${dialect}: a condition over NEW on a delete trigger is refused at install`, async () => {
    await rejects(
      withLedger(
        dialect,
        { operations: ['insert', 'delete'], condition: `NEW.holder <> 'skip'` },
        async () => undefined,
      ),
      /new/i,
    );
  });

  test(`${dialect}: install is idempotent and uninstall stops capture`, async () => {
    await withLedger(dialect, {}, async (app, staging) => {
      await staging.install();
      await app.exec(`INSERT INTO ledger(id) VALUES (1)`);
      assert.is(await staging.stagedCount(), 1, 'one trigger per operation after two installs');
      await staging.uninstall();
      await app.exec(`INSERT INTO ledger(id) VALUES (2)`);
      assert.is(await staging.stagedCount(), 1);
      await staging.uninstall({ dropStaging: true });
      await staging.install();
      assert.is(await staging.stagedCount(), 0);
    });
  });

  test(`${dialect}: C8 a primary-key update is a delete of the old key then an insert of the new, each on its key's pump; a consumer keyed on the key keeps no ghost`, async () => {
    await withLedger(dialect, {}, async (app, staging) => {
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
      // A consumer keyed on the primary key, fed pump 1 entirely before pump 0 and the other way.
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

  test(`${dialect}: C8 with keyUpdate 'update' a primary-key update is one update under the new key with the old key in its before image`, async () => {
    await withLedger(dialect, { keyUpdate: 'update' }, async (app, staging) => {
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

  test(`${dialect}: key strategies: columns, fixed, none and expression decide the staging key and the pump`, async () => {
    const cases: [Partial<CaptureTable>['key'], string[]][] = [
      [{ columns: ['holder', 'id'] }, ['["ann","1"]', '["bob","2"]', '["bob","2"]']],
      [['holder'], ['["ann"]', '["bob"]', '["bob"]']],
      [{ fixed: 'all' }, ['["all"]', '["all"]', '["all"]']],
      [
        { expression: `upper(ROW.holder) || '/' || ROW.id` },
        ['["ANN/1"]', '["BOB/2"]', '["BOB/2"]'],
      ],
      ['none', ['[]', '[]', '[]']],
    ];
    for (const [key, expected] of cases) {
      await withLedger(dialect, { key }, async (app, staging) => {
        await app.exec(`INSERT INTO ledger(id, holder) VALUES (1, 'ann')`);
        await app.exec(`INSERT INTO ledger(id, holder) VALUES (2, 'bob')`);
        await app.exec(`DELETE FROM ledger WHERE id = 2`);
        const rows = [
          ...(await staging.claim(0, 2, 100)),
          ...(await staging.claim(1, 2, 100)),
        ].sort((a, b) => Number(BigInt(a.stagingId) - BigInt(b.stagingId)));
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

  test(`${dialect}: key strategy none spreads changes over the pumps (no order between them)`, async () => {
    await withLedger(dialect, { key: 'none' }, async (app, staging) => {
      for (let i = 0; i < 40; i++) await app.exec(`INSERT INTO ledger(id) VALUES (${i})`);
      const a = await staging.claim(0, 2, 100);
      const b = await staging.claim(1, 2, 100);
      assert.is(a.length + b.length, 40);
      assert.ok(a.length > 0 && b.length > 0, `both pumps get some: ${a.length}, ${b.length}`);
      assert.is(new Set([...a, ...b].map((r) => r.stagingId)).size, 40);
    });
  });

  test(`${dialect}: install names the missing column`, async () => {
    await rejects(
      withLedger(dialect, { columns: ['holder', 'nope'] }, async () => undefined),
      /capture table "ledger": columns: column "nope" not found/,
    );
  });
}

test('postgres: key strategy transactionId: one transaction, one key; another transaction, another key', async () => {
  await withLedger('postgres', { key: 'transactionId' }, async (app, staging) => {
    await app.exec(
      `BEGIN; INSERT INTO ledger(id) VALUES (1); UPDATE ledger SET holder = 'x' WHERE id = 1; COMMIT`,
    );
    await app.exec(`INSERT INTO ledger(id) VALUES (2)`);
    const rows = await drain(staging);
    assert.is(rows.length, 3);
    assert.equal(
      rows.map((r) => r.key),
      rows.map((r) => JSON.stringify([r.txid])),
    );
    assert.is(rows[0]!.key, rows[1]!.key);
    assert.ok(rows[2]!.key !== rows[0]!.key);
  });
});

test('postgres: C9 TRUNCATE writes a table-level truncate event after the row events', async () => {
  await withLedger(
    'postgres',
    { operations: ['insert', 'update', 'delete', 'truncate'] },
    async (app, staging) => {
      await app.exec(`INSERT INTO ledger(id) VALUES (90), (91)`);
      await app.exec(`TRUNCATE ledger`);
      const rows = await drain(staging);
      assert.equal(rows.map(view), [
        {
          table: 'ledger',
          op: 'insert',
          key: ['90'],
          before: null,
          after: ledgerRow({ id: '90' }),
        },
        {
          table: 'ledger',
          op: 'insert',
          key: ['91'],
          before: null,
          after: ledgerRow({ id: '91' }),
        },
        { table: 'ledger', op: 'truncate', key: '*', before: null, after: null },
      ]);
      assert.is(rows[2]!.keyHash, keyHash('*'));
    },
  );
});

test('postgres: timestamptz is rendered in UTC whatever the writer TimeZone; numeric scale is trimmed', async () => {
  await withLedger('postgres', {}, async (app, staging) => {
    await app.exec(`SET TimeZone = 'Asia/Tokyo'`);
    await app.exec(
      `INSERT INTO ledger(id, amount, booked, booked_tz) VALUES (5, 1.500000, '2024-02-29 12:34:56.789', '2024-02-29 12:34:56.789+09')`,
    );
    const [row] = await drain(staging);
    assert.equal(
      view(row!).after,
      ledgerRow({
        id: '5',
        amount: '1.5',
        booked: '2024-02-29T12:34:56.789',
        booked_tz: '2024-02-29T03:34:56.789Z',
      }),
    );
    assert.ok(/^\d+$/.test(row!.txid), `txid is txid_current() text: ${row!.txid}`);
  });
});

test('sqlite: reals keep round-trip text, integers are exact, blobs become \\x hex', async () => {
  const app = await createAppDb('sqlite');
  const staging = await openStaging(sourceFor(app, [{ table: 'vals', operations: ['insert'] }]));
  try {
    await app.exec(`CREATE TABLE vals (id INTEGER PRIMARY KEY, r REAL, i INTEGER, b BLOB)`);
    await staging.install();
    await app.exec(`INSERT INTO vals VALUES (1, 0.1 + 0.2, 9223372036854775807, x'00ff10')`);
    const [row] = await drain(staging);
    const after = JSON.parse(row!.after!) as Record<string, string>;
    assert.is(Number(after.r), 0.1 + 0.2, `real text round-trips: ${after.r}`);
    assert.equal(after, { id: '1', r: after.r!, i: '9223372036854775807', b: '\\x00ff10' });
  } finally {
    await staging.close();
    await app.destroy();
  }
});

test('sqlite: truncate in the config is refused with a clear error', () => {
  assert.throws(
    () =>
      validateCaptureSource({
        name: 's',
        database: { dialect: 'sqlite', file: 'x.db' },
        pumps: 1,
        batchSizeMax: 1,
        pollIntervalMs: 1,
        stagingTable: 'st',
        tables: [{ table: 'ledger', operations: ['truncate'], target: 'q' }],
      }),
    /tables\[0\]\.operations: truncate is not supported on sqlite/,
  );
});

test('config errors list every problem with its path', () => {
  try {
    validateCaptureSource({
      name: 's',
      database: { dialect: 'postgres', url: '' },
      pumps: 0,
      batchSizeMax: 1,
      pollIntervalMs: 1,
      stagingTable: 'bad name',
      tables: [{ table: 'ledger', operations: [], target: 'q' }],
    });
    assert.unreachable();
  } catch (err) {
    const msg = (err as Error).message;
    assert.match(msg, /capture source "s": database\.url: must be a non-empty connection string/);
    assert.match(msg, /capture source "s": pumps: must be an integer in \[1, 1024\], pumps=0/);
    assert.match(msg, /stagingTable: must match/);
    assert.match(msg, /tables\[0\]\.operations: must list at least one/);
  }
});

test.run();
