/**
 * Fuzzing of the operations HTTP API (issue "Faults survived", security basics: "the HTTP API is
 * fuzzed for malformed requests and refuses them without side effects"), on a real running
 * topology with a SQLite capture source, a parked capture error, a dead-lettered event and named
 * users. fast-check generates requests against every documented route and around them: methods,
 * path parameters (long, percent-encoded, `..`, NUL), query strings, bodies (no body, garbage
 * bytes, broken JSON, arbitrary and deeply nested JSON, over the body limit), content types and
 * tokens (none, malformed, wrong, a read user's, the admin's). Properties, for every request:
 * - the answer is never a 5xx (503 only from the health routes, which report readiness);
 * - a refusal (4xx) carries a JSON body with an `error` string, and changes nothing: the audit
 *   log, the capture configuration and its history, the log levels, the parked capture errors and
 *   the dead-letter queues read back exactly as before;
 * - an accepted request that changed any of that also added an audit entry (who, what);
 * - the server still answers /health/live afterwards.
 * Raw malformed HTTP (bad request lines, oversized headers, broken chunked bodies, a request cut
 * off mid-way) goes over real sockets; each gets a 4xx or a closed connection, and the server keeps
 * serving.
 *
 * Counts: SLUICE_FUZZ_HTTP_RUNS (default 300; `npm run fuzz` runs 20,000). The seed is printed;
 * SLUICE_FUZZ_SEED=<seed> replays a run.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import fc from 'fast-check';
import type { FastifyInstance, InjectOptions } from 'fastify';
import {
  loadTopology,
  startTopology,
  installCapture,
  openQueueAppender,
  type RunningTopology,
} from '../index.js';
import { addUser } from '../ops/index.js';

const changeLog = new URL('./fixtures/services/change-log.js', import.meta.url).pathname;
const thrower = new URL('./fixtures/services/thrower.js', import.meta.url).pathname;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const runs = Number(process.env.SLUICE_FUZZ_HTTP_RUNS ?? 300);
const seed = Number(process.env.SLUICE_FUZZ_SEED ?? Date.now() % 2 ** 31);
console.log(`fuzz-http: seed ${seed}, ${runs} requests (SLUICE_FUZZ_SEED=${seed} replays)`);

let dir = '';
let running: RunningTopology | null = null;
let db: Database.Database | null = null;
let app: FastifyInstance;
let baseUrl = '';
const tokens: Record<string, string> = {};

test.before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-fuzz-http-'));
  const file = path.join(dir, 'shop.db');
  db = new Database(file);
  db.exec('CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT)');
  const topologyFile = path.join(dir, 'topology.yaml');
  fs.writeFileSync(
    topologyFile,
    `name: fuzz
dataDir: ./data
queues:
  - { name: item-changes }
  - { name: item-log }
  - { name: orders }
  - { name: priced }
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
  tokens.adam = addUser(usersFile, 'adam', 'admin');
  const t = loadTopology(topologyFile);
  await installCapture(t);
  running = await startTopology(t, { http: { port: 0, usersFile }, log: () => {} });
  app = running.ops.server!.app as FastifyInstance;
  baseUrl = running.ops.server!.url;

  // Some state to protect: one parked capture error (over recordBytesMax), one small change and
  // one dead-lettered event (the pricer throws on `bad`).
  const orders = openQueueAppender(t, 'orders');
  orders.appendJson('o1', { key: 'o1' });
  orders.appendJson('o2', { key: 'o2', bad: true });
  orders.close();
  db.prepare('INSERT INTO items (id, name) VALUES (?, ?)').run(1, 'x'.repeat(10_000));
  db.prepare('INSERT INTO items (id, name) VALUES (?, ?)').run(2, 'small');
  const deadline = Date.now() + 60_000;
  for (;;) {
    const parked = (await admin('GET', '/capture/shop/errors')).json as { total?: number };
    const dlq = (await admin('GET', '/dlq')).json as {
      queues?: Array<{ queue: string; deadLetters: number }>;
    };
    const dead = dlq.queues?.find((q) => q.queue === 'pricer.dlq')?.deadLetters;
    if (parked.total === 1 && dead === 1) break;
    if (Date.now() > deadline)
      throw new Error('timed out waiting for the parked error and dead letter');
    await sleep(100);
  }
});

test.after(async () => {
  await running?.stop();
  db?.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

interface Answer {
  status: number;
  json: unknown;
  text: string;
}

async function send(opts: InjectOptions): Promise<Answer> {
  const res = await app.inject(opts);
  let json: unknown = undefined;
  try {
    json = JSON.parse(res.body);
  } catch {
    /* not JSON */
  }
  return { status: res.statusCode, json, text: res.body };
}

const admin = (method: 'GET' | 'POST', url: string) =>
  send({ method, url, headers: { authorization: `Bearer ${tokens.adam}` } });

/** Everything a refused request must leave unchanged, read through the API as the admin. */
async function snapshot(): Promise<Record<string, unknown>> {
  const dlq = (await admin('GET', '/dlq')).json as { queues?: Array<{ queue: string }> };
  const queues: Record<string, unknown> = {};
  for (const q of dlq.queues ?? [])
    queues[q.queue] = (await admin('GET', `/dlq/${encodeURIComponent(q.queue)}?limit=1000`)).json;
  return {
    audit: (await admin('GET', '/audit?limit=1000')).json,
    config: (await admin('GET', '/config/capture')).json,
    history: (await admin('GET', '/config/history')).json,
    levels: (await admin('GET', '/log-level')).json,
    parked: (await admin('GET', '/capture/shop/errors?limit=1000&images=true')).json,
    dlq,
    queues,
  };
}

const ROUTES: Array<{ method: string; url: string }> = [];

test('the API documents its routes (the fuzzer targets each of them)', async () => {
  const spec = (await admin('GET', '/openapi.json')).json as {
    paths: Record<string, Record<string, unknown>>;
  };
  for (const [p, methods] of Object.entries(spec.paths))
    for (const m of Object.keys(methods)) ROUTES.push({ method: m.toUpperCase(), url: p });
  assert.ok(ROUTES.length >= 20, `documented routes: ${ROUTES.length}`);
  for (const must of ['/log-level', '/config/capture', '/dlq/{queue}/replay', '/config/restore'])
    assert.ok(
      ROUTES.some((r) => r.url === must),
      `${must} documented`,
    );
});

const weirdSegment = fc.oneof(
  fc.constantFrom('shop', 'orders.dlq', 'nope', '..', '.', '%2e%2e', '%00', '%ff', '1', '-1', '0'),
  fc.constantFrom('1e309', 'NaN', '9'.repeat(40), 'a'.repeat(3000), '%252F', 'ş', '🙂', '%0d%0a'),
  fc.string({ maxLength: 40 }).map((s) => encodeURIComponent(s)),
);

const routeWithParams = fc
  .record({
    i: fc.nat(),
    params: fc.array(weirdSegment, { minLength: 3, maxLength: 3 }),
  })
  .map(({ i, params }) => {
    const r = ROUTES[i % ROUTES.length];
    let k = 0;
    return r.url.replace(/\{[^}]+\}/g, () => params[k++ % params.length]);
  });

/** A path: a documented route with its parameters filled in oddly, or something near one. */
const pathArb = fc.oneof(
  { weight: 6, arbitrary: routeWithParams },
  {
    weight: 2,
    arbitrary: fc
      .array(weirdSegment, { minLength: 1, maxLength: 4 })
      .map((segs) => '/' + segs.join('/')),
  },
  {
    weight: 1,
    arbitrary: fc.constantFrom(
      '//actors',
      '/actors/',
      '/ACTORS',
      '/assets/../../package.json',
      '/assets/%2e%2e%2fpackage.json',
      '/assets/..%2f..%2fpackage.json',
      '/config/history/abc',
      '/config/history/-1',
      '/config/history/99999999999999999999',
      '/dlq/%00',
      '/capture/%00/errors',
    ),
  },
);

const queryArb = fc
  .array(
    fc.tuple(
      fc.constantFrom('limit', 'images', 'from', 'to', 'step', 'name', 'schema', 'x', 'limit[]'),
      fc.oneof(
        fc.constantFrom('', '0', '-1', '1', '1000000', 'true', 'hour', 'week', 'NaN', '1e400'),
        fc.constantFrom('2026-13-45T99:00:00Z', '%zz', 'a'.repeat(5000)),
        fc.string({ maxLength: 20 }).map(encodeURIComponent),
      ),
    ),
    { maxLength: 4 },
  )
  .map((pairs) => (pairs.length ? '?' + pairs.map(([k, v]) => `${k}=${v}`).join('&') : ''));

const deepJson = fc
  .integer({ min: 100, max: 5000 })
  .map((n) => '{"a":'.repeat(n) + '1' + '}'.repeat(n));

const bodyArb = fc.oneof(
  { weight: 2, arbitrary: fc.constant(undefined) },
  { weight: 3, arbitrary: fc.jsonValue({ maxDepth: 4 }).map((v) => JSON.stringify(v)) },
  {
    weight: 3,
    arbitrary: fc
      .record({
        level: fc.oneof(fc.constantFrom('debug', 'loud', '', 'INFO'), fc.jsonValue()),
        actor: fc.oneof(fc.constantFrom('service:log', 'service:nope'), fc.jsonValue()),
        version: fc.oneof(fc.constantFrom(0, -1, 1.5, 1e308, '1'), fc.jsonValue()),
        all: fc.jsonValue(),
        ids: fc.jsonValue(),
        indexes: fc.jsonValue(),
        to: fc.jsonValue(),
        capture: fc.jsonValue(),
      })
      .map((o) => JSON.stringify(o)),
  },
  { weight: 1, arbitrary: fc.constantFrom('{', '{"level":', 'nul', '[1,2', '\u0000', '"\ud800"') },
  { weight: 1, arbitrary: fc.uint8Array({ maxLength: 200 }).map((b) => Buffer.from(b)) },
  { weight: 1, arbitrary: deepJson },
  { weight: 1, arbitrary: fc.constant('{"a":"' + 'x'.repeat(1_100_000) + '"}') },
);

const contentTypeArb = fc.constantFrom(
  undefined,
  'application/json',
  'application/json; charset=utf-8',
  'application/json; charset=utf-16',
  'text/plain',
  'application/x-www-form-urlencoded',
  'multipart/form-data; boundary=x',
  'application/octet-stream',
  'application/json, text/plain',
);

const authArb = fc.oneof(
  { weight: 6, arbitrary: fc.constant(() => `Bearer ${tokens.adam}`) },
  { weight: 2, arbitrary: fc.constant(() => `Bearer ${tokens.rita}`) },
  {
    weight: 2,
    arbitrary: fc
      .constantFrom(
        undefined,
        '',
        'Bearer',
        'Bearer ',
        'Basic YWRhbTphZGFt',
        'Bearer adam.',
        'Bearer .',
        'Bearer adam.' + 'A'.repeat(4000),
        'bearer x.y',
      )
      .map((v) => () => v),
  },
);

const requestArb = fc.record({
  method: fc.oneof(
    { weight: 8, arbitrary: fc.constant(null) },
    { weight: 2, arbitrary: fc.constantFrom('GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS') },
  ),
  path: pathArb,
  query: queryArb,
  body: bodyArb,
  contentType: contentTypeArb,
  auth: authArb,
  remote: fc.integer({ min: 2, max: 250 }),
});

/** Requests that an operator sends on purpose (accepted, audited changes) among the noise. */
const validChangeArb = fc
  .record({
    level: fc.constantFrom('trace', 'debug', 'info', 'warn', 'error'),
    actor: fc.constantFrom(undefined, 'service:log', 'service:pricer'),
    remote: fc.integer({ min: 2, max: 250 }),
  })
  .map(({ level, actor, remote }) => ({
    method: 'PUT' as string | null,
    path: '/log-level',
    query: '',
    body: JSON.stringify(actor === undefined ? { level } : { level, actor }) as
      string | Buffer | undefined,
    contentType: 'application/json' as string | undefined,
    auth: () => `Bearer ${tokens.adam}` as string | undefined,
    remote,
  }));

const MUTATING = new Set(['POST', 'PUT', 'DELETE', 'PATCH']);

test('generated and malformed requests: never a 5xx, a refusal changes nothing, a change is audited', async () => {
  assert.ok(ROUTES.length > 0);
  let before = await snapshot();
  const tally: Record<string, number> = {};
  let changes = 0;
  await fc.assert(
    fc.asyncProperty(
      fc.oneof({ weight: 9, arbitrary: requestArb }, { weight: 1, arbitrary: validChangeArb }),
      async (r) => {
        const url = r.path + r.query;
        const documented = ROUTES.find((d) => url.split('?')[0] === d.url);
        const method =
          r.method ??
          ROUTES.find((d) => r.path.startsWith(d.url.replace(/\{.*$/, '')))?.method ??
          'GET';
        const headers: Record<string, string> = {};
        const auth = r.auth();
        if (auth !== undefined) headers.authorization = auth;
        if (r.contentType !== undefined) headers['content-type'] = r.contentType;
        const opts: InjectOptions = {
          method: method as InjectOptions['method'],
          url,
          headers,
          // A distinct remote address per request, so the failed-login limit of one address does
          // not turn the admin's snapshot reads (from 127.0.0.1) into 429s.
          remoteAddress: `10.9.0.${r.remote}`,
        };
        if (r.body !== undefined && method !== 'GET' && method !== 'HEAD') opts.payload = r.body;
        const a = await send(opts);
        tally[String(a.status)] = (tally[String(a.status)] ?? 0) + 1;
        const where = `${method} ${url.slice(0, 200)} -> ${a.status} ${a.text.slice(0, 300)}`;
        if (a.status >= 500)
          assert.ok(a.status === 503 && /^\/health/.test(r.path), `5xx answer: ${where}`);
        const after = await snapshot();
        if (a.status >= 400) {
          if (a.status !== 404 || documented)
            assert.type(
              (a.json as { error?: unknown })?.error ?? (a.json as any)?.message,
              'string',
            );
          assert.equal(after, before, `a refused request changed state: ${where}`);
        } else if (MUTATING.has(method)) {
          const { audit: ab, ...restBefore } = before;
          const { audit: aa, ...restAfter } = after;
          if (JSON.stringify(restBefore) !== JSON.stringify(restAfter)) {
            assert.not.equal(aa, ab, `a change without an audit entry: ${where}`);
            changes++;
          }
        } else {
          assert.equal(after, before, `a read changed state: ${where}`);
        }
        before = after;
      },
    ),
    { numRuns: runs, seed, endOnFailure: true },
  );
  console.log(
    `fuzz-http: answers by status ${JSON.stringify(tally)}; ${changes} accepted changes, each audited`,
  );
  assert.is((await send({ method: 'GET', url: '/health/live' })).status, 200);
});

/** Writes raw bytes to the server and returns what came back before it closed (or 3 s passed). */
function raw(bytes: string | Buffer, endAfter = true): Promise<string> {
  const u = new URL(baseUrl);
  return new Promise((resolve) => {
    const sock = net.connect(Number(u.port), u.hostname);
    let got = '';
    const done = () => {
      clearTimeout(timer);
      sock.destroy();
      resolve(got);
    };
    const timer = setTimeout(done, 3000);
    sock.on('data', (d) => {
      got += d.toString('latin1');
    });
    sock.on('close', done);
    sock.on('error', done);
    sock.write(bytes, () => {
      if (endAfter) sock.end();
    });
  });
}

test('raw malformed HTTP over a socket: a 4xx or a closed connection, and the server keeps serving', async () => {
  const before = await snapshot();
  const cases: Array<[string, string | Buffer]> = [
    ['garbage request line', 'HELLO\r\n\r\n'],
    ['no version', 'GET /actors\r\n\r\n'],
    ['bad version', 'GET /actors HTTP/9.9\r\nHost: x\r\n\r\n'],
    ['header without colon', 'GET /health/live HTTP/1.1\r\nHost x\r\n\r\n'],
    ['NUL in the path', 'GET /act\0ors HTTP/1.1\r\nHost: x\r\n\r\n'],
    [
      'oversized header',
      `GET /actors HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(100_000)}\r\n\r\n`,
    ],
    [
      'content-length and chunked',
      'POST /log-level HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n',
    ],
    [
      'broken chunk size',
      `PUT /log-level HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${tokens.adam}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n`,
    ],
    [
      'body shorter than its length',
      `PUT /log-level HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${tokens.adam}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"level":"debug"}`,
    ],
    ['negative length', 'POST /dlq/x/purge HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n'],
    ['binary', Buffer.from([0x16, 0x03, 0x01, 0x00, 0xff, 0x01, 0x00, 0x00, 0x00])],
  ];
  for (const [name, bytes] of cases) {
    const got = await raw(bytes);
    const status = /^HTTP\/1\.[01] (\d{3})/.exec(got)?.[1];
    assert.ok(
      status === undefined || (Number(status) >= 400 && Number(status) < 500),
      `${name}: ${got.slice(0, 200)}`,
    );
  }
  // A request cut off mid-way, its socket left open, does not block others.
  const u = new URL(baseUrl);
  const hanging = net.connect(Number(u.port), u.hostname);
  hanging.write('PUT /log-level HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{"le');
  const live = await fetch(`${baseUrl}/health/live`);
  assert.is(live.status, 200);
  hanging.destroy();
  assert.equal(await snapshot(), before, 'raw malformed requests changed state');
});

test.run();
