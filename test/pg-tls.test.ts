/**
 * TLS to PostgreSQL: capture's connections (the staging client the pumps and `sluice install`
 * use) against a private server that accepts only TLS (test/lib/pg-tls.ts). `sslmode=verify-full`
 * with the run's CA connects, installs triggers and ships a change; without the CA the server's
 * certificate is refused; `sslmode=disable` is rejected by the server's pg_hba.conf.
 */
import pg from 'pg';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { openStaging } from '../engine/cdc/index.js';
import type { CaptureSource } from '../engine/cdc/index.js';
import { startPostgresTls } from './lib/pg-tls.js';
import type { PostgresTls } from './lib/pg-tls.js';

let server: PostgresTls;
test.before(async () => {
  server = await startPostgresTls();
});
test.after(() => server?.stop());

const url = (params: string) => `postgres://postgres@127.0.0.1:${server.port}/postgres?${params}`;

function source(dbUrl: string): CaptureSource {
  return {
    name: 'tls',
    database: { dialect: 'postgres', url: dbUrl, captureSchema: 'sluice_tls' },
    tables: [
      { table: 'orders', operations: ['insert', 'update', 'delete'], target: 'orders-changes' },
    ],
    pumps: 1,
    batchSizeMax: 100,
    pollIntervalMs: 10,
    stagingTable: 'sluice_staging',
  } as CaptureSource;
}

test('verify-full with the CA: install over TLS, an insert is staged and claimed; the session is encrypted', async () => {
  const verified = url(`sslmode=verify-full&sslrootcert=${encodeURIComponent(server.caFile)}`);
  const app = new pg.Client({ connectionString: verified });
  await app.connect();
  try {
    await app.query('CREATE TABLE orders (id int PRIMARY KEY, total numeric)');
    const [row] = (await app.query('SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()'))
      .rows;
    assert.is(row.ssl, true);
    const staging = await openStaging(source(verified));
    try {
      await staging.install();
      await app.query(`INSERT INTO orders VALUES (1, 19.90)`);
      const claimed = await staging.claim(0, 1, 10);
      assert.is(claimed.length, 1);
      assert.is(claimed[0]!.table, 'orders');
      await staging.ack(claimed.map((c) => c.stagingId));
    } finally {
      await staging.close();
    }
  } finally {
    await app.end();
  }
});

test('without the CA the self-signed chain is refused; plaintext is rejected by the server', async () => {
  const noCa = new pg.Client({ connectionString: url('sslmode=verify-full') });
  const e1 = await noCa.connect().then(
    () => null,
    (e: Error) => e,
  );
  await noCa.end().catch(() => {});
  assert.ok(e1, 'verify-full without the CA connected');
  assert.match(e1!.message, /certificate/i);
  const plain = new pg.Client({ connectionString: url('sslmode=disable') });
  const e2 = await plain.connect().then(
    () => null,
    (e: Error) => e,
  );
  await plain.end().catch(() => {});
  assert.ok(e2, 'a plaintext connection was accepted');
  assert.match(e2!.message, /no encryption|pg_hba/);
});

test.run();
