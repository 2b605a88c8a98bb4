/**
 * Rights per captured schema (issue 11 §4) on a real running topology with two PostgreSQL
 * capture sources in two schemas: each right (read, operate, admin) given on one schema is
 * allowed there and refused on the other schema, a schema right widens a topology right it
 * lacks and narrows one it has, whole-configuration routes need the right on every schema, and a
 * bad `schemas` entry in the users file is named.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { loadTopology, startTopology, installCapture, type RunningTopology } from '../index.js';
import { addUser, loadUsers } from '../ops/index.js';
import { createAppDb, LEDGER_DDL, PG_URL, type AppDb } from './cdc-helpers.js';
import { sluice } from './lib/cli.js';

const changeLog = new URL('./fixtures/services/change-log.js', import.meta.url).pathname;
const TOPOLOGY = 'rights';

let dir = '';
let file = '';
let usersFile = '';
let running: RunningTopology | null = null;
const apps: AppDb[] = [];
const tokens: Record<string, string> = {};
let sa = '';
let sb = '';

const schemaOf = (app: AppDb) => (app.ref as { schema: string }).schema;
const source = (name: string, app: AppDb, target: string) => {
  const ref = app.ref as { schema: string; captureSchema: string };
  return `  - name: ${name}
    database: { dialect: postgres, url: ${JSON.stringify(PG_URL)}, schema: ${ref.schema}, captureSchema: ${ref.captureSchema} }
    tables:
      - { table: ledger, operations: [insert, update, delete], target: ${target} }
`;
};

test.before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ops-schema-rights-'));
  for (let i = 0; i < 2; i++) {
    const app = await createAppDb('postgres', 'h_ops_rights_');
    await app.exec(LEDGER_DDL.postgres);
    apps.push(app);
  }
  [sa, sb] = apps.map(schemaOf) as [string, string];
  file = path.join(dir, 'topology.yaml');
  fs.writeFileSync(
    file,
    `name: ${TOPOLOGY}
dataDir: ./data
queues:
  - { name: a-changes }
  - { name: b-changes }
  - { name: log }
capture:
${source('src-a', apps[0]!, 'a-changes')}${source('src-b', apps[1]!, 'b-changes')}services:
  - { name: log, module: ${changeLog}, inputs: [a-changes, b-changes], output: log }
`,
  );
  await installCapture(loadTopology(file));
  usersFile = path.join(dir, 'users.json');
  // Only schema rights, no topology right: what concerns schema A, nothing else.
  tokens.ra = addUser(usersFile, 'ra', 'read', '*', sa);
  // Topology read, widened on schema A (this topology only).
  tokens.oa = addUser(usersFile, 'oa', 'read', TOPOLOGY);
  tokens.oa = addUser(usersFile, 'oa', 'operate', TOPOLOGY, sa);
  tokens.aa = addUser(usersFile, 'aa', 'read', TOPOLOGY);
  tokens.aa = addUser(usersFile, 'aa', 'admin', TOPOLOGY, sa);
  // Admin everywhere, narrowed to read on schema B.
  tokens.nb = addUser(usersFile, 'nb', 'admin');
  tokens.nb = addUser(usersFile, 'nb', 'read', '*', sb);
  running = await startTopology(loadTopology(file), {
    http: { port: 0, usersFile },
    stats: false,
    log: () => {},
  });
});

test.after(async () => {
  await running?.stop();
  for (const app of apps) await app.destroy();
  fs.rmSync(dir, { recursive: true, force: true });
});

async function call(
  user: string,
  route: string,
  method = 'GET',
  body?: unknown,
): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(`${running!.ops.server!.url}${route}`, {
    method,
    headers: {
      authorization: `Bearer ${tokens[user]}`,
      ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
    },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

test('the users file keeps schema rights apart from topology rights', () => {
  const users = loadUsers(usersFile);
  assert.equal(
    users.map((u) => [u.name, u.rights, u.schemas]),
    [
      ['ra', {}, { [sa]: 'read' }],
      ['oa', { [TOPOLOGY]: 'read' }, { [`${TOPOLOGY}/${sa}`]: 'operate' }],
      ['aa', { [TOPOLOGY]: 'read' }, { [`${TOPOLOGY}/${sa}`]: 'admin' }],
      ['nb', { '*': 'admin' }, { [sb]: 'read' }],
    ],
  );
});

test('read on schema A: its error table is listed, schema B and the topology routes are refused', async () => {
  const allowed = await call('ra', '/capture/src-a/errors');
  assert.is(allowed.status, 200, JSON.stringify(allowed.body));
  const refused = await call('ra', '/capture/src-b/errors');
  assert.is(refused.status, 403);
  assert.is(
    refused.body.error,
    `user "ra" has no right on topology "${TOPOLOGY}"; this needs read`,
  );
  assert.is((await call('ra', '/actors')).status, 403);
  // One schema's export is allowed, the whole configuration (both schemas) is not.
  const one = await call('ra', `/config/capture?schema=${sa}`);
  assert.is(one.status, 200);
  assert.equal(
    (one.body.capture as Array<{ name: string }>).map((s) => s.name),
    ['src-a'],
  );
  assert.is((await call('ra', '/config/capture')).status, 403);
  // Read is not operate, even on its own schema.
  assert.is((await call('ra', '/capture/src-a/errors/purge', 'POST', { all: true })).status, 403);
});

test('operate on schema A: purge and the pump count there; refused on schema B (topology read)', async () => {
  const purged = await call('oa', '/capture/src-a/errors/purge', 'POST', { all: true });
  assert.is(purged.status, 200, JSON.stringify(purged.body));
  const pumps = await call('oa', '/capture/src-a/pumps', 'PUT', { pumps: 1 });
  assert.is(pumps.status, 200, JSON.stringify(pumps.body));
  assert.is(pumps.body.user, 'oa');
  const refused = await call('oa', '/capture/src-b/errors/purge', 'POST', { all: true });
  assert.is(refused.status, 403);
  assert.is(
    refused.body.error,
    `user "oa" has read right on topology "${TOPOLOGY}"; this needs operate`,
  );
  assert.is((await call('oa', '/capture/src-b/pumps', 'PUT', { pumps: 1 })).status, 403);
  // Its topology right still reads the rest.
  assert.is((await call('oa', '/actors')).status, 200);
  assert.is((await call('oa', '/capture/src-b/errors')).status, 200);
});

test('admin on schema A: imports schema A; schema B and the whole configuration are refused', async () => {
  const exported = await call('aa', `/config/capture?schema=${sa}`);
  assert.is(exported.status, 200);
  const imported = await call('aa', '/config/capture', 'POST', exported.body);
  assert.is(imported.status, 200, JSON.stringify(imported.body));
  const other = await call('aa', `/config/capture?schema=${sb}`);
  assert.is(other.status, 200, 'topology read exports schema B');
  const refused = await call('aa', '/config/capture', 'POST', other.body);
  assert.is(refused.status, 403);
  assert.is(
    refused.body.error,
    `user "aa" has read right on topology "${TOPOLOGY}"; this needs admin`,
  );
  assert.is(
    (await call('aa', '/config/restore', 'POST', { version: 1 })).status,
    403,
    'a restore concerns every schema',
  );
});

test('a schema right narrows a topology right: admin everywhere, read on schema B', async () => {
  assert.is((await call('nb', '/capture/src-a/errors/purge', 'POST', { all: true })).status, 200);
  const refused = await call('nb', '/capture/src-b/errors/purge', 'POST', { all: true });
  assert.is(refused.status, 403);
  assert.is(
    refused.body.error,
    `user "nb" has read right on schema "${sb}" of topology "${TOPOLOGY}"; this needs operate`,
  );
  assert.is((await call('nb', '/capture/src-b/errors')).status, 200);
  assert.is((await call('nb', '/audit')).status, 200, 'the audit log is the topology right');
});

test('sluice user add --schema, and a bad schema right in the users file is named', async () => {
  const other = path.join(dir, 'other-users.json');
  const r = await sluice([
    'user',
    'add',
    '--file',
    other,
    '--name',
    'sam',
    '--right',
    'operate',
    '--topology',
    TOPOLOGY,
    '--schema',
    'public',
  ]);
  assert.is(r.code, 0, r.err);
  assert.match(
    r.err,
    `user "sam" has operate on schema "public" of topology "${TOPOLOGY}" in ${other}`,
  );
  assert.equal(loadUsers(other)[0]!.schemas, { [`${TOPOLOGY}/public`]: 'operate' });
  const bad = path.join(dir, 'bad-users.json');
  fs.writeFileSync(
    bad,
    JSON.stringify({
      users: [{ name: 'x', tokenHash: 'scrypt$1', rights: {}, schemas: { public: 'root' } }],
    }),
  );
  assert.throws(
    () => loadUsers(bad),
    (e: Error) =>
      e.message ===
      `users file ${bad}: users[0].schemas.public must be one of read, operate, admin, got "root"`,
  );
});

test.run();
