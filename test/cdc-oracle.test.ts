/**
 * The live Oracle suite: capture cases C1, C3-C10 (as far as the MariaDB suite runs them), key
 * strategies, conditions per operation, value rendering, a 50,000-row bulk INSERT, and install /
 * uninstall exactness, against a real Oracle Database 19c or later.
 *
 * Runs only when SLUICE_ORACLE_URL is set, e.g. `oracle://system:pw@127.0.0.1:1521/FREEPDB1`
 * (a DBA login: each test run creates users H_ORA_<hex> for the application's tables and
 * H_ORA_<hex>_SLUICE for capture, and drops both). Without it every test is skipped and a SKIP
 * line names the variable. It has never been run here (no Oracle server can run on this machine).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { randomBytes } from 'node:crypto';
import oracledb from 'oracledb';
import {
  keyHash,
  openStaging,
  parseOracleUrl,
  PumpCore,
  RecordRefusedError,
} from '../engine/cdc/index.js';
import type { CaptureSource, CaptureTable, StagingClient } from '../engine/cdc/index.js';
import { drain, ledgerRow, limitedSink, view } from './cdc-helpers.js';

const URL_TEXT = process.env.SLUICE_ORACLE_URL;
const live = URL_TEXT ? test : test.skip;
if (!URL_TEXT) {
  console.log(
    'SKIP: the live Oracle suite (test/cdc-oracle.test.ts) needs SLUICE_ORACLE_URL=oracle://user:password@host:1521/service ' +
      '(a DBA login); it is not set, so none of its tests ran',
  );
}

const LEDGER_DDL = (owner: string) =>
  `CREATE TABLE "${owner}".LEDGER (ID NUMBER(20) PRIMARY KEY, HOLDER VARCHAR2(400 CHAR), MEMO CLOB, AMOUNT NUMBER(18,6), BOOKED TIMESTAMP(6), BOOKED_TZ TIMESTAMP(6) WITH TIME ZONE)`;

async function admin(): Promise<oracledb.Connection> {
  const u = parseOracleUrl(URL_TEXT!);
  if (typeof u === 'string') throw new Error(`SLUICE_ORACLE_URL: ${u}`);
  return oracledb.getConnection({
    user: u.user,
    password: u.password,
    connectString: u.connectString,
  });
}

interface OraApp {
  owner: string;
  capture: string;
  conn: oracledb.Connection;
  exec(sql: string, binds?: oracledb.BindParameters): Promise<void>;
  source(tables: Partial<CaptureTable>[], extra?: Partial<CaptureSource>): CaptureSource;
  destroy(): Promise<void>;
}

/** A fresh application user with the ledger table, and the name of its capture user. */
async function createApp(): Promise<OraApp> {
  const hex = randomBytes(4).toString('hex').toUpperCase();
  const owner = `H_ORA_${hex}`;
  const capture = `H_ORA_${hex}_SLUICE`;
  const conn = await admin();
  await conn.execute(`CREATE USER "${owner}" NO AUTHENTICATION QUOTA UNLIMITED ON USERS`);
  await conn.execute(LEDGER_DDL(owner));
  return {
    owner,
    capture,
    conn,
    async exec(sql, binds = {}) {
      await conn.execute(sql, binds, { autoCommit: true });
    },
    source(tables, extra = {}) {
      return {
        name: 'ora',
        database: { dialect: 'oracle', url: URL_TEXT!, schema: owner, captureSchema: capture },
        tables: tables.map((t) => ({
          table: 'ledger',
          operations: ['insert', 'update', 'delete'],
          target: 'ledger-events',
          ...t,
        })),
        pumps: 1,
        batchSizeMax: 100,
        pollIntervalMs: 10,
        stagingTable: 'sluice_staging',
        ...extra,
      };
    },
    async destroy() {
      for (const u of [owner, capture])
        await conn.execute(`DROP USER "${u}" CASCADE`).catch(() => undefined);
      await conn.close();
    },
  };
}

async function withCapture(
  tables: Partial<CaptureTable>[],
  work: (app: OraApp, staging: StagingClient) => Promise<void>,
  extra: Partial<CaptureSource> = {},
): Promise<void> {
  const app = await createApp();
  let staging: StagingClient | null = null;
  try {
    staging = await openStaging(app.source(tables, extra));
    await staging.install();
    await work(app, staging);
  } finally {
    await staging?.close();
    await app.destroy();
  }
}

live("oracle: the package's FNV-1a hash in the database equals keyHash in JS, ASCII and not", () =>
  withCapture([{}], async (app) => {
    for (const key of ['["80"]', '[]', '["Grüße 😀"]', '*']) {
      const r = await app.conn.execute<[string]>(
        `SELECT TO_CHAR("${app.capture}"."SLUICE_STAGING_PKG".fnv(:k)) FROM dual`,
        { k: key },
      );
      assert.is(Number(r.rows![0]![0]), keyHash(key), key);
    }
  }),
);

live(
  'oracle: C3 three rows of one statement are staged by one flush with their own ids, in order; a partial ack re-claims the other two once each',
  () =>
    withCapture([{}], async (app, staging) => {
      await app.exec(
        `INSERT INTO "${app.owner}".LEDGER (ID, HOLDER) SELECT LEVEL + 19, 'bulk' FROM dual CONNECT BY LEVEL <= 3`,
      );
      const rows = await staging.claim(0, 1, 10);
      assert.equal(
        rows.map((r) => JSON.parse(r.key)),
        [['20'], ['21'], ['22']],
      );
      const ids = rows.map((r) => BigInt(r.stagingId));
      assert.ok(ids[0]! < ids[1]! && ids[1]! < ids[2]!);
      await staging.ack([rows[0]!.stagingId]);
      const again = await drain(staging);
      assert.equal(
        again.map((r) => r.stagingId),
        rows.slice(1).map((r) => r.stagingId),
      );
      assert.equal(await drain(staging), []);
    }),
);

live('oracle: C5 numbers keep every digit as exact text', () =>
  withCapture([{}], async (app, staging) => {
    await app.exec(
      `INSERT INTO "${app.owner}".LEDGER (ID, AMOUNT) SELECT 9007199254740993, 999999999999.999998 FROM dual UNION ALL SELECT 41, -0.5 FROM dual`,
    );
    const got = (await drain(staging)).map((c) => view(c).after as Record<string, string>);
    assert.equal(
      got.map((a) => [a.id, a.amount]),
      [
        ['9007199254740993', '999999999999.999998'],
        ['41', '-0.5'],
      ],
    );
  }),
);

live(
  'oracle: C6 NULL transitions are changes, every captured column present; an unchanged update gives no event',
  () =>
    withCapture([{}], async (app, staging) => {
      const t = `"${app.owner}".LEDGER`;
      await app.exec(`INSERT INTO ${t} (ID, HOLDER, MEMO) VALUES (70, 'ann', NULL)`);
      await app.exec(`UPDATE ${t} SET HOLDER = NULL WHERE ID = 70`);
      await app.exec(`UPDATE ${t} SET MEMO = 'm' WHERE ID = 70`);
      await app.exec(`UPDATE ${t} SET MEMO = 'm' WHERE ID = 70`);
      const got = (await drain(staging)).map(view);
      assert.equal(
        got.map((c) => c.op),
        ['insert', 'update', 'update'],
      );
      assert.equal(got[1]!.before, ledgerRow({ id: '70', holder: 'ann' }));
      assert.equal(got[1]!.after, ledgerRow({ id: '70' }));
      assert.equal(got[2]!.after, ledgerRow({ id: '70', memo: 'm' }));
    }),
);

live('oracle: C7 any text survives: UTF-8, quotes, backslashes and control characters', () =>
  withCapture([{}], async (app, staging) => {
    const holder = 'Grüße 😀';
    const memo = 'q"uote\\back\nline\ttab';
    await app.exec(`INSERT INTO "${app.owner}".LEDGER (ID, HOLDER, MEMO) VALUES (100, :h, :m)`, {
      h: holder,
      m: memo,
    });
    const [c] = await drain(staging);
    const after = view(c!).after as Record<string, string>;
    assert.is(after.holder, holder);
    assert.is(after.memo, memo);
  }),
);

live(
  "oracle: C8 a primary-key update is a delete of the old key then an insert of the new; keyUpdate 'update' gives one update",
  async () => {
    await withCapture([{}], async (app, staging) => {
      const t = `"${app.owner}".LEDGER`;
      await app.exec(`INSERT INTO ${t} (ID, HOLDER) VALUES (80, 'k')`);
      await app.exec(`UPDATE ${t} SET ID = 81 WHERE ID = 80`);
      await app.exec(`INSERT INTO ${t} (ID, HOLDER) VALUES (80, 'again')`);
      const got = (await drain(staging)).map(view);
      assert.equal(
        got.map((c) => [c.op, c.key]),
        [
          ['insert', ['80']],
          ['delete', ['80']],
          ['insert', ['81']],
          ['insert', ['80']],
        ],
      );
      // A consumer keyed on the key keeps no ghost of 80's old row.
      const state = new Map<string, unknown>();
      for (const c of got) {
        const k = JSON.stringify(c.key);
        if (c.op === 'delete') state.delete(k);
        else state.set(k, c.after);
      }
      assert.equal(new Set(state.keys()), new Set(['["80"]', '["81"]']));
    });
    await withCapture([{ keyUpdate: 'update' }], async (app, staging) => {
      const t = `"${app.owner}".LEDGER`;
      await app.exec(`INSERT INTO ${t} (ID, HOLDER) VALUES (80, 'k')`);
      await app.exec(`UPDATE ${t} SET ID = 81 WHERE ID = 80`);
      const got = (await drain(staging)).map(view);
      assert.equal(
        got.map((c) => [c.op, c.key]),
        [
          ['insert', ['80']],
          ['update', ['81']],
        ],
      );
    });
  },
);

live(
  'oracle: C9 TRUNCATE of a captured table is refused by the guard; the rows stay; DELETE is captured',
  () =>
    withCapture([{}], async (app, staging) => {
      const t = `"${app.owner}".LEDGER`;
      await app.exec(`INSERT INTO ${t} (ID) SELECT 90 FROM dual UNION ALL SELECT 91 FROM dual`);
      try {
        await app.exec(`TRUNCATE TABLE ${t}`);
        assert.unreachable('TRUNCATE should be refused');
      } catch (err) {
        assert.match((err as Error).message, /ORA-20901: sluice capture refuses TRUNCATE/);
      }
      const n = await app.conn.execute<[number]>(`SELECT COUNT(*) FROM ${t}`);
      assert.is(Number(n.rows![0]![0]), 2);
      await app.exec(`DELETE FROM ${t}`);
      const got = (await drain(staging)).map(view);
      assert.equal(
        got.map((c) => c.op),
        ['insert', 'insert', 'delete', 'delete'],
      );
    }),
);

live(
  "oracle: C1 a slow transaction's lower staging id is shipped after a higher one, both exactly once",
  () =>
    withCapture([{}], async (app, staging) => {
      const t = `"${app.owner}".LEDGER`;
      const slow = await admin();
      try {
        await slow.execute(`INSERT INTO ${t} (ID, HOLDER) VALUES (1, 'slow')`);
        await app.exec(`INSERT INTO ${t} (ID, HOLDER) VALUES (2, 'quick')`);
        const first = await drain(staging);
        assert.equal(
          first.map((c) => view(c).key),
          [['2']],
        );
        await slow.commit();
        const second = await drain(staging);
        assert.equal(
          second.map((c) => view(c).key),
          [['1']],
        );
        assert.ok(BigInt(second[0]!.stagingId) < BigInt(first[0]!.stagingId));
      } finally {
        await slow.close();
      }
    }),
);

live(
  'oracle: C4 and C10 a change too large for the target is retried, parked with its reason, its key held; other keys flow; requeue ships it',
  () =>
    withCapture(
      [{}],
      async (app, staging) => {
        const t = `"${app.owner}".LEDGER`;
        await app.conn.execute(
          `DECLARE c CLOB; BEGIN DBMS_LOB.CREATETEMPORARY(c, TRUE); FOR i IN 1 .. 200 LOOP DBMS_LOB.APPEND(c, RPAD('x', 10000, 'x')); END LOOP;
         INSERT INTO ${t} (ID, MEMO) VALUES (110, c); COMMIT; END;`,
        );
        await app.exec(`UPDATE ${t} SET HOLDER = 'second' WHERE ID = 110`);
        await app.exec(`INSERT INTO ${t} (ID, HOLDER) VALUES (111, 'ok')`);
        const sink = limitedSink(100_000, RecordRefusedError);
        let now = 1_000_000;
        const pump = new PumpCore({
          staging,
          sink,
          pump: 0,
          pumps: 1,
          batchSizeMax: 10,
          clock: () => now,
        });
        await pump.start();
        for (let i = 0; i < 10; i++) {
          await pump.runCycle();
          now += 10_000;
        }
        assert.equal(
          sink.changes.map((c) => view(c).key),
          [['111']],
          'only 111 delivered',
        );
        const parked = await staging.listParked();
        assert.is(parked.length, 1);
        assert.equal(JSON.parse(parked[0]!.key), ['110']);
        assert.match(parked[0]!.error, /exceeds 100000/);
        assert.is(await staging.stagedCount(), 1, "110's second change waits behind it");
        sink.limit.bytes = 10_000_000;
        assert.is(await staging.requeue(), 1);
        for (let i = 0; i < 3; i++) await pump.runCycle();
        assert.equal(
          sink.changes.map((c) => [view(c).key, c.op]),
          [
            [['111'], 'insert'],
            [['110'], 'insert'],
            [['110'], 'update'],
          ],
        );
        assert.is((view(sink.changes[1]!).after as Record<string, string>).memo.length, 2_000_000);
      },
      { errors: { retriesImmediate: 0, attemptsMax: 2, retryDelayMs: 1, retryDelayMaxMs: 1 } },
    ),
);

live(
  'oracle: key strategies and conditions per operation (delete capture works beside an insert condition on NEW)',
  async () => {
    await withCapture(
      [
        {
          key: { fixed: 'all' },
          condition: { insert: 'NEW.amount > 0', delete: "OLD.holder <> 'keep'" },
        },
      ],
      async (app, staging) => {
        const t = `"${app.owner}".LEDGER`;
        await app.exec(`INSERT INTO ${t} (ID, HOLDER, AMOUNT) VALUES (1, 'a', 5)`);
        await app.exec(`INSERT INTO ${t} (ID, HOLDER, AMOUNT) VALUES (2, 'keep', -1)`);
        await app.exec(`INSERT INTO ${t} (ID, HOLDER, AMOUNT) VALUES (3, 'keep', 7)`);
        await app.exec(`DELETE FROM ${t}`);
        const got = (await drain(staging)).map(view);
        assert.equal(
          got
            .map((c) => [c.op, c.key, (c.after ?? c.before) as { id: string }])
            .map(([op, k, img]) => [op, k, (img as { id: string }).id]),
          [
            ['insert', ['all'], '1'],
            ['insert', ['all'], '3'],
            ['delete', ['all'], '1'],
          ],
        );
      },
    );
    await withCapture(
      [{ key: { expression: "UPPER(ROW.holder) || '/' || ROW.id" } }],
      async (app, staging) => {
        await app.exec(`INSERT INTO "${app.owner}".LEDGER (ID, HOLDER) VALUES (5, 'ann')`);
        assert.equal(view((await drain(staging))[0]!).key, ['ANN/5']);
      },
    );
    await withCapture([{ key: 'transactionId' }], async (app, staging) => {
      await app.exec(
        `INSERT INTO "${app.owner}".LEDGER (ID) SELECT LEVEL FROM dual CONNECT BY LEVEL <= 2`,
      );
      const got = await drain(staging);
      assert.is(got.length, 2);
      assert.is(got[0]!.key, got[1]!.key);
      assert.match(JSON.parse(got[0]!.key)[0], /^\d+\.\d+\.\d+$/);
      assert.is(got[0]!.txid, JSON.parse(got[0]!.key)[0]);
    });
  },
);

live(
  'oracle: values are rendered exactly whatever the writing session NLS settings and time zone',
  () =>
    withCapture([{}], async (app, staging) => {
      const writer = await admin();
      try {
        await writer.execute(
          `ALTER SESSION SET TIME_ZONE = '+09:00' NLS_NUMERIC_CHARACTERS = ',.' NLS_TIMESTAMP_FORMAT = 'DD.MM.RR HH24:MI'`,
        );
        await writer.execute(
          `INSERT INTO "${app.owner}".LEDGER (ID, AMOUNT, BOOKED, BOOKED_TZ) VALUES (7, 0.25,
           TIMESTAMP '2024-02-29 12:34:56.780000', TIMESTAMP '2024-02-29 12:34:56.780000 +09:00')`,
        );
        await writer.commit();
      } finally {
        await writer.close();
      }
      const after = view((await drain(staging))[0]!).after as Record<string, string>;
      assert.equal(after, {
        id: '7',
        holder: null,
        memo: null,
        amount: '0.25',
        booked: '2024-02-29T12:34:56.780000',
        booked_tz: '2024-02-29T03:34:56.780000Z',
      });
    }),
);

live(
  'oracle: a 50,000-row INSERT is staged by bulk flushes, every row once, ids in row order',
  () =>
    withCapture([{}], async (app, staging) => {
      const started = Date.now();
      await app.exec(
        `INSERT INTO "${app.owner}".LEDGER (ID, HOLDER) SELECT LEVEL, 'h' || LEVEL FROM dual CONNECT BY LEVEL <= 50000`,
      );
      console.log(`  oracle: 50,000-row INSERT with capture took ${Date.now() - started} ms`);
      assert.is(await staging.stagedCount(), 50_000);
      let last = -1n;
      let seen = 0;
      for (;;) {
        const rows = await staging.claim(0, 1, 5000);
        if (rows.length === 0) break;
        for (const r of rows) {
          assert.ok(BigInt(r.stagingId) > last);
          last = BigInt(r.stagingId);
          seen++;
        }
        await staging.ack(rows.map((r) => r.stagingId));
      }
      assert.is(seen, 50_000);
    }),
);

live(
  'oracle: uninstall removes exactly what install created; the capture user goes only when install created it',
  () =>
    withCapture([{}], async (app, staging) => {
      const objects = async () =>
        (
          await app.conn.execute<[string, string]>(
            `SELECT OBJECT_TYPE, OBJECT_NAME FROM ALL_OBJECTS WHERE OWNER = :o AND OBJECT_NAME NOT LIKE 'ISEQ$$%' AND OBJECT_NAME NOT LIKE 'SYS_%' ORDER BY 1, 2`,
            { o: app.capture },
          )
        ).rows!.map((r) => `${r[0]} ${r[1]}`);
      assert.equal(await objects(), [
        'PACKAGE SLUICE_STAGING_PKG',
        'PACKAGE BODY SLUICE_STAGING_PKG',
        'TABLE SLUICE_STAGING',
        'TABLE SLUICE_STAGING_ERRORS',
        `TRIGGER SLUICE_STAGING_G_${app.owner}_LEDGER`,
        `TRIGGER SLUICE_STAGING_T_${app.owner}_LEDGER`,
      ]);
      await staging.install(); // idempotent
      await staging.uninstall({ dropStaging: false });
      assert.equal(await objects(), [
        'PACKAGE SLUICE_STAGING_PKG',
        'PACKAGE BODY SLUICE_STAGING_PKG',
        'TABLE SLUICE_STAGING',
        'TABLE SLUICE_STAGING_ERRORS',
      ]);
      await app.exec(`INSERT INTO "${app.owner}".LEDGER (ID) VALUES (1)`);
      assert.is(await staging.stagedCount(), 0, 'no capture after uninstall');
      await staging.uninstall({ dropStaging: true });
      const users = await app.conn.execute('SELECT 1 FROM ALL_USERS WHERE USERNAME = :u', {
        u: app.capture,
      });
      assert.is(users.rows!.length, 0, 'the capture user install created is dropped');
    }),
);

test.run();
