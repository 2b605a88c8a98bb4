/**
 * Named users of the operations API: every right (read, operate, admin) allowed and refused on a
 * real running topology, rights per topology, no anonymous access but /health/live and the
 * dashboard's static files, rate-limited failures, tokens in no log line and no audit entry, a
 * bad users file named at start, and `sluice user add` / `status --token` from the shell.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { loadTopology, startTopology, type RunningTopology, type Topology } from '../index.js';
import { addUser, loadUsers, verifyToken } from '../ops/index.js';
import { chromium } from 'playwright-core';

const service = new URL('./fixtures/services/ops-logger.js', import.meta.url).pathname;
const cli = new URL('../cli/sluice.js', import.meta.url).pathname;

let dir = '';
let running: RunningTopology | null = null;
const lines: string[] = [];
const tokens: Record<string, string> = {};
let usersFile = '';
let topology: Topology;

test.before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-auth-'));
  const file = path.join(dir, 'topology.yaml');
  fs.writeFileSync(
    file,
    `name: ops\ndataDir: ./data\nqueues:\n  - { name: in }\n  - { name: out }\nservices:\n  - name: pass\n    module: ${service}\n    inputs: [in]\n    output: out\n`,
  );
  topology = loadTopology(file);
  usersFile = path.join(dir, 'users.json');
  tokens.rita = addUser(usersFile, 'rita', 'read');
  tokens.olga = addUser(usersFile, 'olga', 'operate');
  tokens.adam = addUser(usersFile, 'adam', 'admin');
  tokens.otto = addUser(usersFile, 'otto', 'admin', 'another-topology');
  tokens.mixed = addUser(usersFile, 'mixed', 'admin');
  tokens.mixed = addUser(usersFile, 'mixed', 'read', 'ops');
  running = await startTopology(topology, {
    http: { port: 0, usersFile },
    log: (l) => lines.push(l),
  });
  // Ready once every actor is live (a reader may still be starting when startTopology resolves);
  // the rights tests below expect 200 from /health/ready, so wait for it here.
  for (let i = 0; i < 300 && (await call('/health/ready', 'adam')).status !== 200; i++) {
    await new Promise((r) => setTimeout(r, 100));
  }
});

test.after(async () => {
  await running?.stop();
  fs.rmSync(dir, { recursive: true, force: true });
});

async function call(
  route: string,
  user?: string,
  init: RequestInit = {},
): Promise<{ status: number; body: Record<string, unknown> }> {
  const headers: Record<string, string> = { ...(init.headers as Record<string, string>) };
  if (user) headers.authorization = `Bearer ${tokens[user] ?? user}`;
  const res = await fetch(`${running!.ops.server!.url}${route}`, { ...init, headers });
  const text = await res.text();
  let body: Record<string, unknown>;
  try {
    body = JSON.parse(text) as Record<string, unknown>;
  } catch {
    body = { text };
  }
  return { status: res.status, body };
}

const putLevel = (user: string | undefined, level: string) =>
  call('/log-level', user, {
    method: 'PUT',
    headers: { 'content-type': 'application/json', 'x-sluice-user': 'mallory' },
    body: JSON.stringify({ level, actor: 'service:pass' }),
  });

test('the users file holds scrypt hashes, never the tokens', () => {
  const text = fs.readFileSync(usersFile, 'utf8');
  for (const t of Object.values(tokens)) assert.not.match(text, t.slice(t.indexOf('.') + 1));
  assert.is(fs.statSync(usersFile).mode & 0o777, 0o600);
  const users = loadUsers(usersFile);
  assert.equal(
    users.map((u) => [u.name, u.rights]),
    [
      ['rita', { '*': 'read' }],
      ['olga', { '*': 'operate' }],
      ['adam', { '*': 'admin' }],
      ['otto', { 'another-topology': 'admin' }],
      ['mixed', { '*': 'admin', ops: 'read' }],
    ],
  );
  assert.ok(verifyToken(tokens.rita, users[0].tokenHash));
  assert.not.ok(verifyToken(tokens.olga, users[0].tokenHash));
});

test('without a token only /health/live and the dashboard page answer; the API is 401', async () => {
  assert.is((await call('/health/live')).status, 200);
  assert.is((await call('/')).status, 200);
  assert.is((await call('/assets/app.js')).status, 200);
  for (const route of [
    '/actors',
    '/health/ready',
    '/metrics',
    '/topology',
    '/openapi.json',
    '/capture',
    '/audit',
    '/stats',
    '/dlq',
    '/config/capture',
    '/config/history',
    '/actors/service:pass/history',
    '/actors/reader:in/0>pass/history',
  ]) {
    const r = await call(route);
    assert.is(r.status, 401, route);
    assert.match(String(r.body.error), 'authentication required: Authorization: Bearer <token>');
  }
  assert.is((await putLevel(undefined, 'debug')).status, 401);
});

test('read: every GET but the audit log; refused runtime changes (403)', async () => {
  for (const route of [
    '/actors',
    '/health/ready',
    '/metrics',
    '/topology',
    '/capture',
    '/log-level',
    '/openapi.json',
    '/stats?step=hour',
    '/dlq',
    '/dlq/pass.dlq',
    '/config/capture',
    '/config/history',
  ])
    assert.is((await call(route, 'rita')).status, 200, route);
  // An actor's history is read (a 404 only until the sampler has sampled the actor), its name's
  // slashes written plain or as %2F.
  for (const route of ['/actors/reader:in%2F0%3Epass/history', '/actors/reader:in/0>pass/history'])
    assert.ok([200, 404].includes((await call(route, 'rita')).status), route);
  const put = await putLevel('rita', 'debug');
  assert.is(put.status, 403);
  assert.is(put.body.error, 'user "rita" has read right on topology "ops"; this needs operate');
  assert.is((await call('/audit', 'rita')).status, 403);
});

test('operate: changes a log level, audited under the authenticated name (not a header); no audit log', async () => {
  const put = await putLevel('olga', 'debug');
  assert.is(put.status, 200);
  assert.equal([put.body.user, put.body.before, put.body.after], ['olga', 'info', 'debug']);
  const audit = await call('/audit', 'olga');
  assert.is(audit.status, 403);
  assert.is(audit.body.error, 'user "olga" has operate right on topology "ops"; this needs admin');
});

test('admin: reads the audit log; a right for another topology only is no right here; a topology entry beats "*"', async () => {
  const audit = await call('/audit', 'adam');
  assert.is(audit.status, 200);
  assert.equal(
    (audit.body.entries as { user: string; after: string }[]).map((e) => [e.user, e.after]),
    [['olga', 'debug']],
  );
  const otto = await call('/actors', 'otto');
  assert.is(otto.status, 403);
  for (const route of ['/stats', '/dlq', '/config/history'])
    assert.is((await call(route, 'otto')).status, 403, route);
  assert.is(otto.body.error, 'user "otto" has no right on topology "ops"; this needs read');
  assert.is((await call('/actors', 'mixed')).status, 200);
  assert.is((await call('/audit', 'mixed')).status, 403, 'ops: read overrides *: admin');
});

test('a wrong secret is 401; tokens appear in no log line and no audit entry', async () => {
  const wrong = `rita.${'A'.repeat(43)}`;
  const refused = await call('/actors', wrong);
  assert.is(refused.status, 401);
  // Said apart from a request without a token, with what is left before the 429.
  assert.match(
    String(refused.body.error),
    /^authentication failed: the token is not one of this topology's users .*; \d+ more failed attempts from \S+ within 60 s, then it is refused \(429\)$/,
  );
  const logged =
    lines.join('\n') + fs.readFileSync(path.join(topology.dataDir, 'ops', 'audit.jsonl'), 'utf8');
  assert.match(logged, 'log level changed user=olga');
  for (const t of [...Object.values(tokens), wrong])
    assert.not.match(logged, t.slice(t.indexOf('.') + 1));
});

test('sluice status --token reads a protected server; without a token it says 401', async () => {
  const run = (args: string[], env: Record<string, string> = {}) =>
    new Promise<{ code: number | null; out: string; err: string }>((resolve) => {
      const p = spawn(process.execPath, [cli, ...args], { env: { ...process.env, ...env } });
      let out = '';
      let err = '';
      p.stdout.on('data', (b) => (out += b));
      p.stderr.on('data', (b) => (err += b));
      p.on('exit', (code) => resolve({ code, out, err }));
    });
  const url = running!.ops.server!.url;
  const ok = await run(['status', '--http', url, '--once', '--token', tokens.rita]);
  assert.is(ok.code, 0, ok.err);
  assert.match(ok.out, /service:pass\s+live/);
  const env = await run(['log-level', '--http', url], { SLUICE_TOKEN: tokens.rita });
  assert.match(env.out, 'service:pass  debug');
  const none = await run(['status', '--http', url, '--once']);
  assert.is(none.code, 2);
  assert.match(none.err, 'status: HTTP 401: authentication required');
  const added = await run([
    'user',
    'add',
    '--file',
    path.join(dir, 'more.json'),
    '--name',
    'cli',
    '--right',
    'read',
    '--topology',
    'ops',
  ]);
  assert.is(added.code, 0, added.err);
  assert.match(added.out, /^cli\.[A-Za-z0-9_-]{43}\n$/);
  assert.match(added.err, 'user "cli" has read on topology "ops"');
  assert.ok(verifyToken(added.out.trim(), loadUsers(path.join(dir, 'more.json'))[0].tokenHash));
});

test('the dashboard asks for a token, then shows the actors; a read user is refused a log level change', async () => {
  const browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-gpu',
      '--no-first-run',
    ],
  });
  try {
    const page = await browser.newPage();
    await page.goto(`${running!.ops.server!.url}/`);
    await page.waitForSelector('#login:not([hidden])');
    assert.is(await page.textContent('#health'), 'sign in');
    assert.is(await page.$$eval('#actors tbody tr', (rows) => rows.length), 0);
    // A token whose user has no right on this topology: said, and asked for again.
    await page.fill('#token', tokens.otto);
    await page.click('#sign-in');
    await page.waitForFunction(`document.querySelector('#health').textContent === 'refused'`);
    await page.waitForSelector('#login:not([hidden])');
    assert.match((await page.textContent('#login-error')) ?? '', /otto/);
    await page.fill('#token', tokens.rita);
    await page.click('#sign-in');
    await page.waitForSelector('#actors tbody tr[data-actor="service:pass"]');
    assert.is(await page.textContent('#login-error'), '');
    assert.is(await page.textContent('#health'), 'ok');
    await page.selectOption('#log-actor', 'service:pass');
    await page.selectOption('#log-level', 'warn');
    await page.click('#log-apply');
    await page.waitForFunction(`document.querySelector('#log-result').textContent !== ''`);
    assert.is(
      await page.textContent('#log-result'),
      'refused: user "rita" has read right on topology "ops"; this needs operate',
    );
    assert.not.match(
      await page.content(),
      tokens.rita.slice(tokens.rita.indexOf('.') + 1),
      'the token is not in the page',
    );
  } finally {
    await browser.close();
  }
});

test('after 5 failed authentications from one address it gets 429, even with a good token', async () => {
  // The wrong-secret test already failed once from 127.0.0.1 (calls without a token do not count).
  // A good token's answer, kept by the server's front for its cache interval, must not outlive
  // the limit: the limit is the app's, and a refusal drops what the front kept for the address.
  assert.is((await call('/actors', 'adam')).status, 200);
  // Three identical wrong tokens at once on a route whose answers the front keeps: each is a
  // failure of its own (never merged into one request to the API).
  const together = await Promise.all(
    [0, 1, 2].map(async () => (await call('/actors', `nobody.${'B'.repeat(43)}`)).status),
  );
  assert.equal(together, [401, 401, 401]);
  // With the earlier failure still in the 60 s window the 5th failure is the next; on a machine
  // slow enough that it dropped out of the window (ci-2 today: the file took 88 s), the one after.
  const statuses: number[] = [];
  while (statuses.at(-1) !== 429 && statuses.length < 3)
    statuses.push((await call('/metrics', `nobody.${'C'.repeat(43)}`)).status);
  assert.ok(
    JSON.stringify(statuses) === '[401,429]' || JSON.stringify(statuses) === '[401,401,429]',
    `after 4 or 5 failures within the window, 429: ${JSON.stringify(statuses)}`,
  );
  const good = await call('/actors', 'adam');
  assert.is(good.status, 429);
  assert.match(
    String(good.body.error),
    /^too many failed authentications from 127\.0\.0\.1; retry in \d+ s$/,
  );
  assert.is((await call('/health/live')).status, 200, 'liveness is never limited');
});

test('a bad users file stops the start with the file, user and field', async () => {
  const bad = path.join(dir, 'bad.json');
  fs.writeFileSync(
    bad,
    JSON.stringify({ users: [{ name: 'x', tokenHash: 'scrypt$1', rights: { ops: 'root' } }] }),
  );
  const file2 = path.join(dir, 'second.yaml');
  fs.writeFileSync(
    file2,
    fs
      .readFileSync(topology.file, 'utf8')
      .replace('dataDir: ./data', 'dataDir: ./data2')
      .replace('name: ops', 'name: ops2'),
  );
  const err = await startTopology(loadTopology(file2), {
    http: { port: 0, usersFile: bad },
    log: () => {},
  }).then(
    () => null,
    (e: Error) => e,
  );
  assert.is(
    err?.message,
    `users file ${bad}: users[0].rights.ops must be one of read, operate, admin, got "root"`,
  );
});

test.run();
