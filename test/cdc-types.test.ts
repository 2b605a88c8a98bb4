/**
 * Exact values whatever the writing session (issue item 10): every PostgreSQL built-in type
 * family is rendered the same under any TimeZone, DateStyle, IntervalStyle, extra_float_digits,
 * lc_monetary and bytea_output of the writer; values an update did not change are present in full
 * in both images, TOASTed ones included. SQLite's types likewise. The renderings asserted here are
 * the table in README (Capture: exact values).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { openStaging } from '../engine/cdc/index.js';
import { createAppDb, drain, sourceFor } from './cdc-helpers.js';

const PG_TYPES_DDL = `
  CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
  CREATE TABLE types (
    id int PRIMARY KEY, i2 smallint, i8 bigint, num numeric, num_s numeric(30,10), cash money,
    f4 real, f8 double precision, f8_nan double precision, f8_inf double precision,
    ts timestamp, tstz timestamptz, d date, t time, ttz timetz, iv interval, by bytea,
    js json, jb jsonb, arr int[], tarr timestamptz[], m mood, u uuid, b bool, big text, bigb bytea)`;

const PG_VALUES = `INSERT INTO types VALUES (1, -32768, 9223372036854775807,
  123456789012345678901234567890.123456789012345678901234567890, 1.5000000000, 1234567.89,
  0.1, 0.1, 'NaN', '-Infinity',
  '2024-02-29 23:59:59.123456', '2024-02-29 23:59:59.123456+01', '2024-02-29', '23:59:59.5', '23:59:59+05:30',
  '1 year 2 months 3 days 04:05:06.789', '\\xdeadbeef',
  '{"b": 1,  "a": [1, 2.50]}', '{"b": 1,  "a": [1, 2.50]}', '{1,2,3}', '{"2024-01-01 00:00:00+02"}',
  'happy', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', true, repeat('x', 1000000), decode(repeat('ab', 300000), 'hex'))`;

/** The image of row 1, every column but the two large ones, as README shows it. */
const PG_EXPECTED = {
  id: '1',
  i2: '-32768',
  i8: '9223372036854775807',
  num: '123456789012345678901234567890.12345678901234567890123456789',
  num_s: '1.5',
  cash: '1234567.89',
  f4: '0.1',
  f8: '0.1',
  f8_nan: 'NaN',
  f8_inf: '-Infinity',
  ts: '2024-02-29T23:59:59.123456',
  tstz: '2024-02-29T22:59:59.123456Z',
  d: '2024-02-29',
  t: '23:59:59.5',
  ttz: '23:59:59+05:30',
  iv: 'P1Y2M3DT4H5M6.789S',
  by: '\\xdeadbeef',
  js: '{"b": 1,  "a": [1, 2.50]}',
  jb: '{"a": [1, 2.50], "b": 1}',
  arr: '{1,2,3}',
  tarr: '{"2023-12-31 22:00:00+00"}',
  m: 'happy',
  u: 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
  b: 'true',
};

const SESSIONS = [
  `SET TimeZone = 'UTC'`,
  `SET TimeZone = 'Pacific/Chatham'; SET DateStyle = 'SQL, DMY'; SET IntervalStyle = 'sql_standard'; SET extra_float_digits = -15; SET bytea_output = 'escape'`,
  `SET TimeZone = 'America/St_Johns'; SET DateStyle = 'German'; SET IntervalStyle = 'postgres_verbose'; SET extra_float_digits = 0; SET lc_monetary = 'C'`,
];

test('postgres: every type family is rendered exactly and identically whatever the writer session settings', async () => {
  const app = await createAppDb('postgres');
  try {
    await app.exec(PG_TYPES_DDL);
    const staging = await openStaging(sourceFor(app, [{ table: 'types' }]));
    try {
      await staging.install();
      const images: string[] = [];
      for (const session of SESSIONS) {
        const writer = await app.connect();
        try {
          await writer.exec(session);
          await writer.exec(PG_VALUES);
          await writer.exec(`UPDATE types SET b = false WHERE id = 1`);
          await writer.exec(`DELETE FROM types`);
        } finally {
          await writer.close();
        }
        const rows = await drain(staging);
        assert.equal(
          rows.map((r) => r.op),
          ['insert', 'update', 'delete'],
          session,
        );
        const after = JSON.parse(rows[0]!.after!) as Record<string, string>;
        const { big, bigb, ...rest } = after;
        assert.equal(rest, PG_EXPECTED, session);
        assert.is(big, 'x'.repeat(1_000_000));
        assert.is(bigb, `\\x${'ab'.repeat(300_000)}`);
        // The update changed only b: the large TOASTed values are in full in both images.
        const before = JSON.parse(rows[1]!.before!) as Record<string, string>;
        const upd = JSON.parse(rows[1]!.after!) as Record<string, string>;
        assert.is(before.big, big);
        assert.is(upd.big, big);
        assert.is(upd.bigb, bigb);
        assert.is(upd.b, 'false');
        images.push(rows[0]!.after!);
      }
      assert.is(new Set(images).size, 1, 'one rendering for every session');
    } finally {
      await staging.close();
    }
  } finally {
    await app.destroy();
  }
});

test('postgres: a table of scalar types only (capture function without pinned TimeZone or DateStyle) renders the same under every session', async () => {
  const app = await createAppDb('postgres');
  try {
    await app.exec(`CREATE TABLE scalars (id int PRIMARY KEY, i8 bigint, num numeric(30,10), cash money, f4 real, f8 double precision,
      ts timestamp, tstz timestamptz, d date, t time, ttz timetz, iv interval, by bytea, jb jsonb, u uuid, b bool)`);
    const staging = await openStaging(sourceFor(app, [{ table: 'scalars' }]));
    try {
      await staging.install();
      for (const session of SESSIONS) {
        const writer = await app.connect();
        try {
          await writer.exec(session);
          await writer.exec(`INSERT INTO scalars VALUES (1, 9223372036854775807, 1.5000000000, 1234567.89, 0.1, 0.1,
            '2024-02-29 23:59:59.123456', '2024-02-29 23:59:59.123456+01', '2024-02-29', '23:59:59.5', '23:59:59+05:30',
            '1 year 2 months 3 days 04:05:06.789', '\\xdeadbeef', '{"b": 1}', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', true)`);
          await writer.exec(`DELETE FROM scalars`);
        } finally {
          await writer.close();
        }
        const [row] = await drain(staging);
        const { id, i8, num_s, cash, f4, f8, ts, tstz, d, t, ttz, iv, by, u, b } = {
          ...PG_EXPECTED,
          num_s: PG_EXPECTED.num_s,
        };
        assert.equal(
          JSON.parse(row!.after!),
          {
            id,
            i8,
            num: num_s,
            cash,
            f4,
            f8,
            ts,
            tstz,
            d,
            t,
            ttz,
            iv,
            by,
            jb: '{"b": 1}',
            u,
            b,
          },
          session,
        );
      }
    } finally {
      await staging.close();
    }
  } finally {
    await app.destroy();
  }
});

test('sqlite: integers, reals (incl. the largest and smallest), text, blobs and NULL are rendered exactly', async () => {
  const app = await createAppDb('sqlite');
  try {
    await app.exec(
      `CREATE TABLE types (id INTEGER PRIMARY KEY, i INTEGER, r REAL, r2 REAL, r3 REAL, t TEXT, b BLOB, n NUMERIC, d TEXT, big TEXT, u)`,
    );
    const staging = await openStaging(sourceFor(app, [{ table: 'types' }]));
    try {
      await staging.install();
      await app.exec(`INSERT INTO types VALUES (1, 9223372036854775807, 0.1, 1.7976931348623157e308, -4.9e-324,
        'Grüße', x'00ff', '12.50', '999999999999.999998', printf('%.*c', 1000000, 'x'), NULL)`);
      await app.exec(`UPDATE types SET u = 1 WHERE id = 1`);
      const rows = await drain(staging);
      const after = JSON.parse(rows[0]!.after!) as Record<string, string | null>;
      const { big, ...rest } = after;
      assert.equal(rest, {
        id: '1',
        i: '9223372036854775807',
        r: '0.1',
        r2: '1.7976931348623157e+308',
        r3: '-4.9406564584124654e-324',
        t: 'Grüße',
        b: '\\x00ff',
        n: '12.5',
        d: '999999999999.999998',
        u: null,
      });
      assert.is(big!.length, 1_000_000);
      assert.is((JSON.parse(rows[1]!.before!) as Record<string, string>).big, big);
      assert.is((JSON.parse(rows[1]!.after!) as Record<string, string>).big, big);
    } finally {
      await staging.close();
    }
  } finally {
    await app.destroy();
  }
});

test.run();
