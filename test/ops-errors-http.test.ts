/**
 * The capture error table and the dead-letter queues over HTTP, on a running topology with
 * users: a capture target refusing a record (recordBytesMax) parks it; GET
 * /capture/{source}/errors lists it for a read user; requeue and purge are refused to a read
 * user and done for an operate user, each audited with the user, before and after; a service
 * handler that throws dead-letters an event; GET /dlq lists it, replay is refused to read and
 * done for operate (the event is appended again), purge is refused while the service runs.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { loadTopology, startTopology, installCapture, type RunningTopology } from '../index.js';
import { addUser } from '../ops/index.js';
import { Tailer } from '../engine/journal/index.js';

const changeLog = new URL('./fixtures/services/change-log.js', import.meta.url).pathname;
const thrower = new URL('./fixtures/services/thrower.js', import.meta.url).pathname;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let dir = '';
let running: RunningTopology | null = null;
let db: Database.Database | null = null;
const tokens: Record<string, string> = {};

test.before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ops2-errors-http-'));
  const file = path.join(dir, 'shop.db');
  db = new Database(file);
  db.exec('CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT)');
  const topologyFile = path.join(dir, 'topology.yaml');
  fs.writeFileSync(
    topologyFile,
    `name: errs
dataDir: ./data
queues:
  - { name: item-changes }
  - { name: item-log }
  - { name: orders }
  - { name: priced }
  - { name: retry }
  - { name: "5" }
capture:
  - name: shop
    database: { dialect: sqlite, file: ${file} }
    pollIntervalMs: 20
    recordBytesMax: 4000
    errors: { retriesImmediate: 0, attemptsMax: 1 }
    tables:
      - { table: items, operations: [insert, update, delete], target: item-changes }
services:
  - { name: log, module: ${changeLog}, inputs: [item-changes], output: item-log }
  - name: pricer
    module: ${thrower}
    inputs: [orders]
    output: priced
    errors: { retriesMax: 0, retryBackoffMs: 1 }
`,
  );
  const usersFile = path.join(dir, 'users.json');
  tokens.rita = addUser(usersFile, 'rita', 'read');
  tokens.olga = addUser(usersFile, 'olga', 'operate');
  const t = loadTopology(topologyFile);
  await installCapture(t);
  running = await startTopology(t, { http: { port: 0, usersFile }, log: () => {} });
});

test.after(async () => {
  await running?.stop();
  db?.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

async function call(
  route: string,
  user: string,
  body?: unknown,
): Promise<{ status: number; body: Record<string, any> }> {
  const headers: Record<string, string> = { authorization: `Bearer ${tokens[user]}` };
  const init: RequestInit = { headers };
  if (body !== undefined) {
    init.method = 'POST';
    headers['content-type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const res = await fetch(`${running!.ops.server!.url}${route}`, init);
  return { status: res.status, body: (await res.json()) as Record<string, any> };
}

async function until<T>(what: string, probe: () => Promise<T | null | false>): Promise<T> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const v = await probe();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

const parkedTotal = async () => (await call('/capture/shop/errors', 'rita')).body.total as number;

test('a refused change is listed for read; requeue and purge are refused to read, done for operate and audited', async () => {
  const insert = db!.prepare('INSERT INTO items (id, name) VALUES (?, ?)');
  insert.run(1, 'x'.repeat(10_000));
  insert.run(2, 'y'.repeat(10_000));
  insert.run(3, 'small');
  await until('two changes parked', async () => (await parkedTotal()) === 2);

  const list = await call('/capture/shop/errors', 'rita');
  assert.is(list.status, 200);
  assert.equal(
    list.body.parked.map((p: { key: string }) => p.key),
    ['["1"]', '["2"]'],
  );
  const first = list.body.parked[0];
  assert.is(first.table, 'items');
  assert.is(first.op, 'insert');
  assert.is(first.before, null);
  assert.is(first.after, null, 'images only when asked for');
  assert.ok(first.afterChars > 10_000);
  assert.match(
    first.error,
    /record of \d+ bytes exceeds recordBytesMax 4000 of capture source "shop"/,
  );
  const withImages = await call('/capture/shop/errors?images=true&limit=1', 'rita');
  assert.is(withImages.body.parked.length, 1);
  assert.is(JSON.parse(withImages.body.parked[0].after).name, 'x'.repeat(10_000));

  // Refused to read, the error table unchanged.
  const refused = await call('/capture/shop/errors/requeue', 'rita', { all: true });
  assert.is(refused.status, 403);
  assert.match(
    refused.body.error,
    /user "rita" has read right on topology "errs"; this needs operate/,
  );
  const refusedPurge = await call('/capture/shop/errors/purge', 'rita', { all: true });
  assert.is(refusedPurge.status, 403);
  assert.is(await parkedTotal(), 2);

  // Bad selections and sources, for operate.
  const none = await call('/capture/shop/errors/purge', 'olga', {});
  assert.is(none.status, 400);
  assert.is(
    none.body.error,
    'errors purge: name staging ids ("ids"), or "all": true, or "olderThanMs"',
  );
  const badId = await call('/capture/shop/errors/requeue', 'olga', { ids: ['12x'] });
  assert.is(badId.status, 400);
  assert.match(badId.body.error, /body\/ids\/0 must match pattern/);
  const unknown = await call('/capture/nope/errors', 'rita');
  assert.is(unknown.status, 404);
  assert.is(unknown.body.error, 'unknown capture source "nope" (capture sources: shop)');

  // Purge the second one by id: gone for good, audited with olga's name.
  const purged = await call('/capture/shop/errors/purge', 'olga', {
    ids: [list.body.parked[1].stagingId],
  });
  assert.is(purged.status, 200);
  assert.is(purged.body.changed, 1);
  assert.is(purged.body.parked, 1);
  assert.equal(
    [purged.body.audit.user, purged.body.audit.action, purged.body.audit.target],
    ['olga', 'errors-purge', 'capture:shop'],
  );
  assert.equal(purged.body.audit.before, { parked: 2 });
  assert.equal(purged.body.audit.after, {
    parked: 1,
    purged: 1,
    selection: { ids: [list.body.parked[1].stagingId] },
  });

  // Requeue the first: it leaves the error table, is refused again (the limit is unchanged) and
  // parked again, under its own staging id.
  const requeued = await call('/capture/shop/errors/requeue', 'olga', { all: true });
  assert.is(requeued.status, 200);
  assert.is(requeued.body.changed, 1);
  assert.is(requeued.body.parked, 0);
  assert.equal(requeued.body.audit.before, { parked: 1 });
  assert.equal(requeued.body.audit.after, { parked: 0, requeued: 1, selection: { all: true } });
  const back = await until('parked again', async () => {
    const r = await call('/capture/shop/errors', 'rita');
    return r.body.total === 1 ? r.body.parked[0] : null;
  });
  assert.is(back.stagingId, first.stagingId);

  const audit = fs
    .readFileSync(path.join(dir, 'data', 'ops', 'audit.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as { user: string; action: string });
  assert.equal(
    audit.map((a) => `${a.user} ${a.action}`),
    ['olga errors-purge', 'olga errors-requeue'],
  );
  for (const t of Object.values(tokens))
    assert.not.ok(
      fs.readFileSync(path.join(dir, 'data', 'ops', 'audit.jsonl'), 'utf8').includes(t),
    );
});

test('dead letters: listed for read; replay refused to read, done for operate (appended again), refused with 400 naming "to" when it is not a string; purge refused while the service runs', async () => {
  const appender = (await import('../index.js')).openQueueAppender;
  const orders = appender(running!.topology, 'orders');
  orders.appendJson('o1', { key: 'o1' });
  orders.appendJson('o2', { key: 'o2', bad: true });
  orders.close();
  await until('one dead letter', async () => {
    const r = await call('/dlq', 'rita');
    return (
      r.body.queues.find((q: { queue: string }) => q.queue === 'pricer.dlq')?.deadLetters === 1
    );
  });
  const queues = await call('/dlq', 'rita');
  assert.equal(queues.body.queues, [
    { queue: 'log.dlq', service: 'log', deadLetters: 0 },
    { queue: 'pricer.dlq', service: 'pricer', deadLetters: 1 },
  ]);
  const list = await call('/dlq/pricer.dlq', 'rita');
  assert.is(list.status, 200);
  assert.is(list.body.total, 1);
  const d = list.body.deadLetters[0];
  assert.equal(
    [d.dlqIndex, d.service, d.queue, d.partition, d.index, d.key, d.attempts, d.error],
    [0, 'pricer', 'orders', 0, 1, 'o2', 1, 'bad event on purpose'],
  );
  assert.equal(d.value, { key: 'o2', bad: true });
  assert.is((await call('/dlq/orders', 'rita')).status, 404);

  // A query string is text, so its integers are coerced; a JSON body has its own types.
  const limited = await call('/dlq/pricer.dlq?limit=1', 'rita');
  assert.is(limited.status, 200, JSON.stringify(limited.body));
  assert.is(limited.body.deadLetters.length, 1);
  for (const to of [5, true, ['retry']]) {
    const notAName = await call('/dlq/pricer.dlq/replay', 'olga', { to });
    assert.is(notAName.status, 400, `to: ${JSON.stringify(to)}: ${JSON.stringify(notAName.body)}`);
    assert.is(notAName.body.error, 'body/to must be string');
  }
  assert.is((await call('/dlq/pricer.dlq/replay', 'olga', { indexes: ['0'] })).status, 400);
  const five = path.join(dir, 'data', 'queues', '5', '0');
  if (fs.existsSync(five)) {
    const t5 = Tailer.open({ dir: five });
    assert.is(t5.next(), null, 'nothing was replayed into queue "5"');
    t5.close();
  }
  assert.is((await call('/dlq/pricer.dlq', 'rita')).body.total, 1);

  const refused = await call('/dlq/pricer.dlq/replay', 'rita', { to: 'retry' });
  assert.is(refused.status, 403);
  const replayed = await call('/dlq/pricer.dlq/replay', 'olga', { to: 'retry' });
  assert.is(replayed.status, 200, JSON.stringify(replayed.body));
  assert.equal(replayed.body.replayed, [{ dlqIndex: 0, queue: 'retry', partition: 0, index: 0 }]);
  assert.equal(
    [replayed.body.audit.user, replayed.body.audit.action, replayed.body.audit.target],
    ['olga', 'dlq-replay', 'queue:pricer.dlq'],
  );
  const t = Tailer.open({ dir: path.join(dir, 'data', 'queues', 'retry', '0') });
  const rec = t.next();
  t.close();
  assert.ok(rec, 'the event is in the retry queue');
  // A queue a service writes is refused (one writer per queue).
  const toOwned = await call('/dlq/pricer.dlq/replay', 'olga', { to: 'priced' });
  assert.is(toOwned.status, 409);
  assert.match(toOwned.body.error, /queue "priced" is written by "pricer"/);

  assert.is((await call('/dlq/pricer.dlq/purge', 'rita', {})).status, 403);
  const purge = await call('/dlq/pricer.dlq/purge', 'olga', {});
  assert.is(purge.status, 409);
  assert.match(purge.body.error, /dead-letter queue "pricer.dlq" is held by its running service/);
  assert.is((await call('/dlq/pricer.dlq', 'rita')).body.total, 1);
});

test.run();
