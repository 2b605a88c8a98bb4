/**
 * The operations HTTP API of a running topology, as an operator uses it: health (live, ready,
 * degraded), /topology without secrets, /actors with counters, rates and lag per input, /capture
 * from a real SQLite capture source, /metrics scraped and parsed, /openapi.json, log levels
 * changed at runtime and audited. Real topologies in worker threads, real HTTP on 127.0.0.1.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import {
  loadTopology,
  startTopology,
  openQueueAppender,
  installCapture,
  type RunningTopology,
  type Topology,
} from '../index.js';
import { CaptureStats, redactTopology, type ActorStatus, type Health } from '../ops/index.js';
import { parseProm, sampleOf } from './lib/prom-parse.js';
import { opsRoutes } from '../ops/server.js';
import { parseHttpAddress } from '../cli/ops-commands.js';

const service = new URL('./fixtures/services/ops-logger.js', import.meta.url).pathname;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let dir = '';
let running: RunningTopology | null = null;
test.before.each(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-ops-'));
});
test.after.each(async () => {
  await running?.stop();
  running = null;
  fs.rmSync(dir, { recursive: true, force: true });
});

function topologyFile(body: string): Topology {
  const file = path.join(dir, 'topology.yaml');
  fs.writeFileSync(file, `name: ops\ndataDir: ./data\n${body}`);
  return loadTopology(file);
}

const passTopology = (
  settings = '{}',
  supervisor = '{ restartsMax: 3, backoffInitialMs: 20 }',
) => `supervisor: ${supervisor}
queues:
  - { name: in, partitions: 2 }
  - { name: out }
services:
  - name: pass
    module: ${service}
    inputs: [in]
    output: out
    settings: ${settings}
`;

async function get<T>(url: string): Promise<{ status: number; body: T; type: string }> {
  const res = await fetch(url);
  const type = res.headers.get('content-type') ?? '';
  const text = await res.text();
  return { status: res.status, body: (type.includes('json') ? JSON.parse(text) : text) as T, type };
}

async function until<T>(
  what: string,
  probe: () => Promise<T | null | undefined | false>,
  timeoutMs = 30_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

function append(
  t: Topology,
  n: number,
  value: (i: number) => Record<string, unknown> = (i) => ({ n: i }),
): number[] {
  const a = openQueueAppender(t, 'in');
  const perPartition = [0, 0];
  try {
    for (let i = 0; i < n; i++) perPartition[a.appendJson(`k${i}`, value(i))[0]]++;
    a.flush();
  } finally {
    a.close();
  }
  return perPartition;
}

const actorsOf = async (url: string) =>
  (await get<{ actors: ActorStatus[] }>(`${url}/actors`)).body.actors;
const byName = (actors: ActorStatus[], name: string) => actors.find((a) => a.name === name)!;

test('startTopology with http serves on 127.0.0.1 by default; ready and /actors show exact counters once caught up', async () => {
  const t = topologyFile(passTopology());
  const perPartition = append(t, 300);
  running = await startTopology(t, { http: { port: 0 }, log: () => {} });
  const url = running.ops.server!.url;
  assert.match(url, /^http:\/\/127\.0\.0\.1:\d+$/);
  assert.equal((await get(`${url}/health/live`)).body, { status: 'live' });
  // Counters are read per request; lag at most LAG_FRESH_MS later: wait for both.
  const actors = await until('all 300 events handled', async () => {
    const a = await actorsOf(url);
    const s = byName(a, 'service:pass');
    return s.counters.eventsOut === 300 && s.inputs.every((l) => l.lagRecords === 0) ? a : null;
  });
  const svc = byName(actors, 'service:pass');
  assert.is(svc.state, 'live');
  assert.is(svc.kind, 'service');
  assert.is(svc.restarts, 0);
  assert.is(svc.counters.eventsIn, 300);
  assert.equal(
    svc.inputs.map((l) => [
      l.queue,
      l.partition,
      l.endIndex,
      l.handledIndex,
      l.lagRecords,
      l.lagMs,
    ]),
    [
      ['in', 0, perPartition[0], perPartition[0] - 1, 0, 0],
      ['in', 1, perPartition[1], perPartition[1] - 1, 0, 0],
    ],
  );
  for (const p of [0, 1]) {
    const r = byName(actors, `reader:in/${p}>pass`);
    assert.is(r.kind, 'reader');
    assert.is(r.counters.eventsIn, perPartition[p]);
    assert.is(r.ring!.capacityBytes, 1 << 20);
    assert.is(r.ring!.usedBytes, 0, 'the service released everything it read');
  }
  const ready = await get<Health>(`${url}/health/ready`);
  assert.is(ready.status, 200);
  assert.equal(ready.body, {
    status: 'ok',
    ready: true,
    reasons: [],
    degraded: [],
    waiting: [],
  });
  // Rates come from the per-second samples: the next one counts the 300 events in its minute,
  // and the history's per-second rates add up to them.
  const rated = await until('a sample with the events', async () => {
    const s = byName(await actorsOf(url), 'service:pass');
    return s.rates.eventsIn.perSecond1m > 0 ? s : null;
  });
  assert.ok(rated.rates.eventsOut.perSecond1m > 0);
  // A sample may have caught the service halfway: wait for the one after the last event.
  const total = await until('history adds up to 300', async () => {
    const h = await get<{ intervalMs: number[]; eventsInPerSecond: number[] }>(
      `${url}/actors/service:pass/history?step=second`,
    );
    assert.is(h.status, 200);
    // Each rate is a sample's count over the time it covers (not always 1000 ms on a busy host).
    const dts = h.body.intervalMs;
    const sum = h.body.eventsInPerSecond.reduce((acc, r, i) => acc + (r * dts[i]) / 1000, 0);
    return Math.abs(sum - 300) < 1e-6 ? sum : null;
  });
  assert.ok(Math.abs(total - 300) < 1e-6);
  assert.is((await get(`${url}/actors/nope/history`)).status, 404);
});

test("an actor's history is found by its name with plain slashes as with %2F; an unknown actor is a 404 naming it", async () => {
  const t = topologyFile(passTopology());
  append(t, 10);
  running = await startTopology(t, { http: { port: 0 }, log: () => {} });
  const url = running.ops.server!.url;
  // The history has a sample once the sampler has seen the reader.
  await until('a sample of reader:in/1>pass', async () => {
    const h = await get<{ timeMs: number[] }>(`${url}/actors/reader:in%2F1%3Epass/history`);
    return h.status === 200 && h.body.timeMs.length > 0;
  });
  for (const written of ['reader:in/1>pass', 'reader:in%2F1%3Epass', 'reader:in/1%3Epass']) {
    const h = await get<{ actor: string; step: string }>(
      `${url}/actors/${written}/history?step=minute`,
    );
    assert.is(h.status, 200, written);
    assert.is(h.body.actor, 'reader:in/1>pass', written);
    assert.is(h.body.step, 'minute', written);
  }
  assert.is((await get(`${url}/actors/service:pass/history`)).status, 200);
  assert.is((await get(`${url}/actors`)).status, 200, '/actors itself is still the list');
  // The query is validated on the plain form too.
  const badStep = await get<{ error: string }>(`${url}/actors/reader:in/1>pass/history?step=hour`);
  assert.is(badStep.status, 400);
  assert.is(
    badStep.body.error,
    'querystring/step must be equal to one of the allowed values (second, minute), got "hour"',
  );
  for (const [written, name] of [
    ['nope', 'nope'],
    ['reader:in/7>pass', 'reader:in/7>pass'],
    ['reader:in%2F7%3Epass', 'reader:in/7>pass'],
  ]) {
    const missing = await get<{ error: string }>(`${url}/actors/${written}/history`);
    assert.is(missing.status, 404, written);
    assert.is(missing.body.error, `unknown actor "${name}" (GET /actors lists them)`, written);
  }
  const elsewhere = await get<{ error: string }>(`${url}/actors/reader:in/1>pass/nothing`);
  assert.is(elsewhere.status, 404);
  assert.is(
    elsewhere.body.error,
    "no route GET /actors/reader:in/1%3Epass/nothing (GET /actors/{name}/history takes an actor's name)",
  );
});

test('GET /stats: a bad from, to or step is a 400 naming the parameter, the value and what it takes; so is from after to', async () => {
  const t = topologyFile(passTopology());
  running = await startTopology(t, { http: { port: 0 }, log: () => {} });
  const url = running.ops.server!.url;
  const time = (name: string, v: string) =>
    `querystring/${name} must be ms since the epoch or an ISO time (e.g. 2026-12-01T08:00:00Z), got ${JSON.stringify(v)}`;
  for (const [query, error] of [
    ['from=abc', time('from', 'abc')],
    ['to=abc', time('to', 'abc')],
    ['from=0&to=2026-13-45', time('to', '2026-13-45')],
    ['from=99999999999999999999', time('from', '99999999999999999999')],
    [
      'step=day',
      'querystring/step must be equal to one of the allowed values (minute, hour), got "day"',
    ],
    [
      'from=2026-12-02T00:00:00Z&to=1000',
      'querystring/from must not be after to, got from "2026-12-02T00:00:00Z" (2026-12-02T00:00:00.000Z) and to "1000" (1970-01-01T00:00:01.000Z)',
    ],
    [
      'from=99999999999999',
      'querystring/from must not be after to, got from "99999999999999" (5138-11-16T09:46:39.999Z) and to now',
    ],
  ]) {
    const r = await get<{ error: string }>(`${url}/stats?${query}`);
    assert.is(r.status, 400, query);
    assert.ok(r.body.error.startsWith(error), `${query}: ${r.body.error}`);
  }
  const ok = await get<{ fromMs: number; toMs: number }>(
    `${url}/stats?from=2026-12-01T00:00:00Z&to=1796169600000`,
  );
  assert.is(ok.status, 200);
  assert.equal([ok.body.fromMs, ok.body.toMs], [Date.parse('2026-12-01T00:00:00Z'), 1796169600000]);
});

test('lag per input: records and ms grow while the service is behind, and return to 0 when it catches up', async () => {
  const t = topologyFile(passTopology('{ spinUs: 3000 }'));
  running = await startTopology(t, { http: { port: 0 }, log: () => {} });
  const url = running.ops.server!.url;
  append(t, 1500);
  const behind = await until('lag seen', async () => {
    const s = byName(await actorsOf(url), 'service:pass');
    return s.inputs.every((l) => l.lagRecords > 50 && l.lagMs > 0) ? s : null;
  });
  for (const l of behind.inputs)
    assert.is(l.lagRecords, l.endIndex - l.handledIndex - 1, JSON.stringify(l));
  const reader = byName(await actorsOf(url), 'reader:in/0>pass');
  assert.is(reader.inputs.length, 1);
  assert.is(reader.inputs[0].queue, 'in');
  const metrics = parseProm((await get<string>(`${url}/metrics`)).body);
  assert.ok(
    sampleOf(metrics, 'sluice_input_lag_records', { service: 'pass', queue: 'in', partition: '0' })
      .value > 0,
  );
  const caught = await until(
    'caught up',
    async () => {
      const s = byName(await actorsOf(url), 'service:pass');
      return s.counters.eventsIn === 1500 && s.inputs.every((l) => l.lagRecords === 0) ? s : null;
    },
    60_000,
  );
  assert.equal(
    caught.inputs.map((l) => [l.lagRecords, l.lagMs]),
    [
      [0, 0],
      [0, 0],
    ],
  );
});

test('a failing service makes the topology degraded (naming actor, error, since) and not ready (503 with reasons)', async () => {
  // onFailure: stop: the bad event fails the service (the default would dead-letter it).
  const t = topologyFile(
    passTopology('{}', '{ restartsMax: 50, backoffInitialMs: 50, backoffMaxMs: 200 }').replace(
      '    settings: {}\n',
      '    settings: {}\n    errors: { onFailure: stop }\n',
    ),
  );
  running = await startTopology(t, { http: { port: 0 }, log: () => {} });
  const url = running.ops.server!.url;
  const before = Date.now();
  append(t, 1, () => ({ bad: true }));
  const ready = await until('not ready', async () => {
    const r = await get<Health>(`${url}/health/ready`);
    return r.status === 503 && r.body.status === 'degraded' ? r : null;
  });
  const d = ready.body.degraded[0];
  assert.is(ready.body.degraded.length, 1);
  assert.is(d.group, 'service:pass');
  assert.is(d.actor, 'service:pass');
  assert.match(d.error, 'bad event on purpose');
  assert.ok(Date.parse(d.since) >= before - 1000 && Date.parse(d.since) <= Date.now(), d.since);
  assert.ok(
    ready.body.reasons.some((r) =>
      // The group is named once: it is the failing actor's name too.
      r.startsWith(`service:pass: degraded since ${d.since}: failed: `),
    ),
    ready.body.reasons.join('\n'),
  );
  const health = await get<Health>(`${url}/health`);
  assert.is(health.status, 200, 'degraded still answers 200 on /health (it is running)');
  assert.is(health.body.status, 'degraded');
  const metrics = parseProm((await get<string>(`${url}/metrics`)).body);
  assert.is(sampleOf(metrics, 'sluice_topology_ready').value, 0);
  const restarts = await until('restarts counted', async () => {
    const m = parseProm((await get<string>(`${url}/metrics`)).body);
    const s = m
      .get('sluice_actor_restarts_total')!
      .samples.find((x) => x.labels.actor === 'service:pass');
    return s && s.value >= 1 ? s : null;
  });
  assert.is(restarts.labels.group, 'service:pass');
});

test('GET /topology redacts passwords in connection URLs and secret settings', async () => {
  const t = topologyFile(
    passTopology(
      '{ dbPassword: hunter2, apiToken: abc, upstream: "postgres://app:s3cret@db:5432/x", plain: visible }',
    ),
  );
  running = await startTopology(t, { http: { port: 0 }, log: () => {} });
  const r = await get<Record<string, unknown>>(`${running.ops.server!.url}/topology`);
  assert.is(r.status, 200);
  const text = JSON.stringify(r.body);
  for (const secret of ['hunter2', 'abc', 's3cret']) assert.not.match(text, secret);
  const settings = (r.body.services as { settings: Record<string, string> }[])[0].settings;
  assert.equal(settings, {
    dbPassword: '***',
    apiToken: '***',
    upstream: 'postgres://app:***@db:5432/x',
    plain: 'visible',
  });
  // A PostgreSQL capture source's URL, without starting it.
  const pg = redactTopology({
    ...t,
    capture: [
      {
        name: 'c',
        database: { dialect: 'postgres', url: 'postgresql://u:pw@h/d?password=pw2' },
        tables: [],
        pumps: 1,
        batchSizeMax: 1,
        pollIntervalMs: 1,
        stagingTable: 's',
      },
    ],
  });
  assert.equal((pg.capture as { database: unknown }[])[0].database, {
    dialect: 'postgres',
    url: 'postgresql://u:***@h/d?password=***',
  });
});

function captureTopology(db: string, pollIntervalMs = 20): Topology {
  return topologyFile(`queues:
  - { name: item-changes }
  - { name: note-changes }
capture:
  - name: shop
    database: { dialect: sqlite, file: ${db} }
    pollIntervalMs: ${pollIntervalMs}
    tables:
      - { table: items, operations: [insert, update, delete], target: item-changes }
      - { table: notes, operations: [insert], target: note-changes }
`);
}

test('capture figures: staging depth and oldest age per table, parked errors from the error table', async () => {
  const file = path.join(dir, 'shop.db');
  const db = new Database(file);
  db.exec(
    'CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT); CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)',
  );
  const t = captureTopology(file);
  await installCapture(t);
  for (let i = 1; i <= 3; i++) db.prepare('INSERT INTO items VALUES (?, ?)').run(i, `item ${i}`);
  // Key 101: a parked key holds every later change of that key, in any table (C4).
  db.prepare('INSERT INTO notes VALUES (101, ?)').run('n');
  await sleep(20);
  const stats = new CaptureStats(t.capture, 0);
  try {
    let [s] = await stats.read();
    assert.is(s.error, null);
    assert.equal(
      s.tables!.map((x) => [x.table, x.target, x.stagingDepth, x.parkedErrors]),
      [
        ['items', 'item-changes', 3, 0],
        ['notes', 'note-changes', 1, 0],
      ],
    );
    assert.ok(s.tables![0].oldestStagedAgeMs >= 20, String(s.tables![0].oldestStagedAgeMs));
    // A parked row (moved as the error handling parks one) is counted for its table.
    const staged = db
      .prepare('SELECT * FROM sluice_staging WHERE table_name = ? LIMIT 1')
      .get('notes') as Record<string, unknown>;
    db.prepare(
      `INSERT INTO sluice_staging_errors (id, table_name, op, key, key_hash, before, after, txid, time_ms, attempts, error, parked_time_ms)
      VALUES (@id, @table_name, @op, @key, @key_hash, @before, @after, @txid, @time_ms, 3, 'target refused', @time_ms)`,
    ).run(staged);
    // Parking moves the row out of staging; a copy left behind would be held behind it (C4).
    db.prepare('DELETE FROM sluice_staging WHERE id = ?').run(staged.id);
    [s] = await stats.read();
    assert.equal(
      s.tables!.map((x) => x.parkedErrors),
      [0, 1],
    );
    // Running: the pumps drain staging; /capture and /metrics show it.
    running = await startTopology(t, { http: { port: 0 }, log: () => {} });
    const url = running.ops.server!.url;
    const drained = await until('staging drained', async () => {
      const r = await get<{
        sources: {
          tables: { stagingDepth: number; oldestStagedAgeMs: number; parkedErrors: number }[];
          drainRate: { perSecond1m: number };
        }[];
      }>(`${url}/capture`);
      return r.body.sources[0].tables.every((x) => x.stagingDepth === 0) ? r.body : null;
    });
    assert.equal(
      drained.sources[0].tables.map((x) => [x.stagingDepth, x.oldestStagedAgeMs, x.parkedErrors]),
      [
        [0, 0, 0],
        [0, 0, 1],
      ],
    );
    const m = parseProm((await get<string>(`${url}/metrics`)).body);
    assert.is(
      sampleOf(m, 'sluice_capture_staging_depth', { source: 'shop', table: 'items' }).value,
      0,
    );
    assert.is(
      sampleOf(m, 'sluice_capture_parked_errors', { source: 'shop', table: 'notes' }).value,
      1,
    );
    assert.is(sampleOf(m, 'sluice_capture_source_up', { source: 'shop' }).value, 1);
    // 3 items; the notes row was parked (moved to the error table) before the start.
    const pump = await until('pump counted 3 shipped', async () => {
      const a = byName(await actorsOf(url), 'pump:shop/0');
      return a.counters.eventsIn === 3 ? a : null;
    });
    assert.is(pump.kind, 'pump');
  } finally {
    await stats.close();
    db.close();
  }
});

test('a capture source whose database is gone is reported with its error, not a failed request', async () => {
  const t = captureTopology(path.join(dir, 'missing.db'));
  const stats = new CaptureStats(t.capture, 0);
  const [s] = await stats.read();
  assert.is(s.tables, null);
  assert.match(s.error!, /unable to open|does not exist|SQLITE_CANTOPEN|directory does not exist/i);
  await stats.close();
});

test('GET /metrics is Prometheus text with stable names and labels, matching /actors', async () => {
  const t = topologyFile(passTopology());
  const perPartition = append(t, 120);
  running = await startTopology(t, { http: { port: 0 }, log: () => {} });
  const url = running.ops.server!.url;
  await until(
    'handled',
    async () => byName(await actorsOf(url), 'service:pass').counters.eventsOut === 120,
  );
  const r = await get<string>(`${url}/metrics`);
  assert.is(r.status, 200);
  assert.match(r.type, 'text/plain');
  const m = parseProm(r.body);
  assert.is(m.get('sluice_actor_events_in_total')!.type, 'counter');
  assert.is(m.get('sluice_input_lag_observed_seconds')!.type, 'histogram');
  assert.is(m.get('sluice_input_lag_seconds')!.type, 'gauge');
  assert.is(
    sampleOf(m, 'sluice_actor_events_in_total', { actor: 'service:pass', kind: 'service' }).value,
    120,
  );
  assert.is(sampleOf(m, 'sluice_actor_events_out_total', { actor: 'service:pass' }).value, 120);
  assert.is(
    sampleOf(m, 'sluice_actor_events_in_total', { actor: 'reader:in/1>pass', kind: 'reader' })
      .value,
    perPartition[1],
  );
  assert.is(sampleOf(m, 'sluice_actor_up', { actor: 'service:pass' }).value, 1);
  assert.is(sampleOf(m, 'sluice_actor_state', { actor: 'service:pass', state: 'live' }).value, 1);
  assert.is(sampleOf(m, 'sluice_actor_restarts_total', { actor: 'service:pass' }).value, 0);
  assert.is(
    sampleOf(m, 'sluice_ring_capacity_bytes', { actor: 'reader:in/0>pass' }).value,
    1 << 20,
  );
  assert.is(sampleOf(m, 'sluice_topology_ready').value, 1);
  assert.ok(sampleOf(m, 'sluice_process_cpu_seconds_total').value > 0);
  // The histogram got one observation per input per sample.
  const count = await until('lag observed', async () => {
    const mm = parseProm((await get<string>(`${url}/metrics`)).body);
    const c = mm
      .get('sluice_input_lag_observed_seconds')
      ?.samples.find(
        (x) => x.name === 'sluice_input_lag_observed_seconds_count' && x.labels.partition === '0',
      );
    return c && c.value >= 2 ? c : null;
  });
  assert.ok(count.value >= 2);
});

test('GET /metrics and /actors are rendered once per http.cacheMs and per sample: the same bytes within it, new figures after it', async () => {
  const t = topologyFile(passTopology());
  append(t, 100);
  const cacheMs = 3000;
  // No timer sample during the test: only the explicit sample() below invalidates.
  running = await startTopology(t, {
    http: { port: 0, cacheMs },
    sampler: { intervalMs: 3_600_000 },
    log: () => {},
  });
  const url = running.ops.server!.url;
  const sampler = running.ops.sampler;
  await until('handled', async () => sampler.statuses().some((a) => a.counters.eventsOut === 100));
  const scrape = async () => {
    const res = await fetch(`${url}/metrics`);
    const body = await res.text();
    return { body, asOf: Date.parse(res.headers.get('x-sluice-as-of') ?? ''), atMs: Date.now() };
  };
  const outOf = (body: string) =>
    sampleOf(parseProm(body), 'sluice_actor_events_out_total', { actor: 'service:pass' }).value;
  const m1 = await scrape();
  const m2 = await scrape();
  assert.ok(Number.isFinite(m1.asOf), 'x-sluice-as-of names when the figures were read');
  // Uncached, two renderings differ (heartbeat ages, process CPU): the same bytes are one.
  assert.is(m2.body, m1.body);
  assert.is(m2.asOf, m1.asOf);
  assert.is(outOf(m1.body), 100);

  append(t, 50);
  await until('more handled', async () =>
    sampler.statuses().some((a) => a.counters.eventsOut === 150),
  );
  const m3 = await until('new figures on /metrics', async () => {
    const m = await scrape();
    assert.ok(m.atMs - m.asOf <= cacheMs + 100, `served ${m.atMs - m.asOf} ms old`);
    return outOf(m.body) === 150 ? m : null;
  });
  assert.ok(m3.asOf - m1.asOf >= cacheMs, 'not read again before the interval ended');

  const a1 = await get<{ time: string }>(`${url}/actors`);
  const res = await fetch(`${url}/actors`);
  const a2 = (await res.json()) as { time: string };
  assert.is(a2.time, a1.body.time, 'the same rendering');
  assert.is(res.headers.get('x-sluice-as-of'), a2.time);
  // A sample makes the cached answers stale (its rates are the newest).
  sampler.sample();
  const a3 = await get<{ time: string }>(`${url}/actors`);
  assert.ok(Date.parse(a3.body.time) >= sampler.sampledAtMs, 'read again after the sample');
  assert.ok(Date.parse(a3.body.time) > Date.parse(a1.body.time));
});

/** Nice value of thread `tid` of this process (field 19 of /proc/self/task/<tid>/stat). */
function niceOf(tid: number): number {
  const stat = fs.readFileSync(`/proc/self/task/${tid}/stat`, 'utf8');
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[16]);
}

test('the socket is served by a thread of its own, http.nice steps below the actors; HEAD, body limit and errors pass through it', async () => {
  const t = topologyFile(passTopology());
  append(t, 20);
  running = await startTopology(t, { http: { port: 0, nice: 7 }, log: () => {} });
  const server = running.ops.server!;
  const sampler = running.ops.sampler;
  await until('handled', async () => sampler.statuses().some((a) => a.counters.eventsOut === 20));
  const mainNice = niceOf(process.pid);
  assert.ok(server.thread.tid > 0 && server.thread.tid !== process.pid, 'not the main thread');
  assert.is(niceOf(server.thread.tid), Math.min(19, mainNice + 7));
  assert.is(server.thread.nice, niceOf(server.thread.tid));
  const actorThreads = sampler.statuses().map((a) => a.counters.threadId);
  assert.ok(actorThreads.length >= 1 && actorThreads.every((tid) => tid > 0));
  for (const tid of actorThreads) assert.is(niceOf(tid), mainNice, `actor thread ${tid}`);

  // What the app answers, the front writes: status, type, body; HEAD without a body.
  const head = await fetch(`${server.url}/health`, { method: 'HEAD' });
  assert.is(head.status, 200);
  assert.match(head.headers.get('content-type') ?? '', /application\/json/);
  assert.is(await head.text(), '');
  const got = await fetch(`${server.url}/health`);
  const gotBytes = Buffer.byteLength(await got.text());
  assert.is(Number(got.headers.get('content-length')), gotBytes);
  assert.is(Number(head.headers.get('content-length')), gotBytes, "HEAD names the GET's length");
  const missing = await fetch(`${server.url}/no-such-route`);
  assert.is(missing.status, 404);
  // A body over the limit is refused before it reaches the app, and changes nothing.
  const big = await fetch(`${server.url}/log-level`, {
    method: 'PUT',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ level: 'debug', pad: 'x'.repeat(1 << 20) }),
  });
  assert.is(big.status, 413);
  assert.match(((await big.json()) as { error: string }).error, /over 1048576 bytes/);
  // A declared length over the limit is refused before the body comes: only headers are sent.
  const { port } = new URL(server.url);
  const early = await new Promise<string>((resolve, reject) => {
    const sock = net.connect(Number(port), '127.0.0.1', () =>
      sock.write(
        'PUT /log-level HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\ncontent-length: 3000000\r\n\r\n{"level":',
      ),
    );
    let text = '';
    sock.on('data', (b) => (text += b));
    sock.on('close', () => resolve(text));
    sock.on('error', reject);
    setTimeout(() => reject(new Error(`no answer within 5 s: ${text}`)), 5000).unref();
  });
  assert.match(early, /^HTTP\/1\.1 413 /);
  assert.match(early, /request body over 1048576 bytes/);
  const levels = await get<{ global: string }>(`${server.url}/log-level`);
  assert.is.not(levels.body.global, 'debug');
  // A bad body is the app's 400, naming the field.
  const bad = await fetch(`${server.url}/log-level`, {
    method: 'PUT',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ level: 'loud' }),
  });
  assert.is(bad.status, 400);
  assert.match(((await bad.json()) as { error: string }).error, /level/);

  const other = path.join(dir, 'other');
  fs.mkdirSync(other);
  fs.writeFileSync(path.join(other, 't.yaml'), `name: ops2\ndataDir: ./data\n${passTopology()}`);
  let refused: Error | null = null;
  try {
    const r = await startTopology(loadTopology(path.join(other, 't.yaml')), {
      http: { port: 0, nice: 20 },
      log: () => {},
    });
    await r.stop();
  } catch (err) {
    refused = err as Error;
  }
  assert.match(String(refused?.message), /http\.nice must be an integer 0-19, got 20/);
});

test('/openapi.json describes every route with its schemas', async () => {
  const t = topologyFile(passTopology());
  running = await startTopology(t, { http: { port: 0 }, log: () => {} });
  const r = await get<{
    openapi: string;
    paths: Record<
      string,
      Record<string, { responses: Record<string, unknown>; requestBody?: unknown }>
    >;
  }>(`${running.ops.server!.url}/openapi.json`);
  assert.is(r.status, 200);
  assert.is(r.body.openapi, '3.0.3');
  const described = Object.entries(r.body.paths)
    .flatMap(([p, methods]) => Object.keys(methods).map((m) => `${m.toUpperCase()} ${p}`))
    .sort();
  const registered = opsRoutes(running.ops.server!.app)
    .map((x) => `${x.method} ${x.url.replace(/:(\w+)/g, '{$1}')}`)
    .sort();
  assert.equal(described, registered, 'every route the server registered is described');
  for (const route of [
    'GET /actors',
    'GET /actors/{name}/history',
    'GET /audit',
    'GET /capture',
    'GET /capture/{source}/errors',
    'POST /capture/{source}/errors/requeue',
    'POST /capture/{source}/errors/purge',
    'GET /capture/{source}/pumps',
    'PUT /capture/{source}/pumps',
    'GET /config/capture',
    'POST /config/capture',
    'GET /config/history',
    'GET /config/history/{version}',
    'POST /config/restore',
    'GET /dlq',
    'GET /dlq/{queue}',
    'POST /dlq/{queue}/replay',
    'POST /dlq/{queue}/purge',
    'GET /health',
    'GET /health/live',
    'GET /health/ready',
    'GET /log-level',
    'PUT /log-level',
    'GET /metrics',
    'GET /stats',
    'GET /topology',
    'GET /version',
  ])
    assert.ok(described.includes(route), `${route} is described`);
  assert.is(described.length, 27);
  for (const [p, methods] of Object.entries(r.body.paths))
    for (const [m, op] of Object.entries(methods))
      assert.ok((op as { summary?: string }).summary, `${m} ${p} has a summary`);
  assert.ok(
    r.body.paths['/capture/{source}/errors/requeue'].post.requestBody,
    'requeue body documented',
  );
  assert.ok(r.body.paths['/config/capture'].post.responses['400'], 'refused import documented');
  assert.ok(
    (r.body.paths['/stats'].get as { parameters?: unknown[] }).parameters,
    'stats query documented',
  );
  assert.ok(r.body.paths['/health/ready'].get.responses['503'], '503 documented');
  assert.ok(r.body.paths['/log-level'].put.requestBody, 'PUT body documented');
  assert.ok(r.body.paths['/capture/{source}/pumps'].put.requestBody, 'pump count body documented');
});

test('log level per actor changes at runtime through PUT /log-level, is audited, and a bad level is a 400', async () => {
  const t = topologyFile(passTopology());
  const lines: string[] = [];
  running = await startTopology(t, { http: { port: 0 }, log: (l) => lines.push(l) });
  const url = running.ops.server!.url;
  await until('live line', async () =>
    lines.some((l) => l === '[service:pass] ops-logger is live'),
  );
  append(t, 3);
  await until(
    '3 handled',
    async () => byName(await actorsOf(url), 'service:pass').counters.eventsOut === 3,
  );
  assert.is(lines.filter((l) => l.includes('handled')).length, 0, 'debug lines are off at info');
  const put = async (body: unknown, user?: string) => {
    const res = await fetch(`${url}/log-level`, {
      method: 'PUT',
      headers: { 'content-type': 'application/json', ...(user ? { 'x-sluice-user': user } : {}) },
      body: JSON.stringify(body),
    });
    return { status: res.status, body: (await res.json()) as Record<string, unknown> };
  };
  const changed = await put({ level: 'debug', actor: 'service:pass' }, 'alice');
  assert.is(changed.status, 200);
  assert.equal(
    [
      changed.body.user,
      changed.body.action,
      changed.body.target,
      changed.body.before,
      changed.body.after,
    ],
    ['alice', 'log-level', 'service:pass', 'info', 'debug'],
  );
  const other = append(t, 4);
  await until(
    '7 handled',
    async () => byName(await actorsOf(url), 'service:pass').counters.eventsOut === 7,
  );
  await until(
    '4 debug lines',
    async () => lines.filter((l) => l.startsWith('[service:pass] handled')).length === 4,
  );
  assert.ok(other[0] + other[1] === 4);
  assert.equal(
    lines
      .filter((l) => l.startsWith('[service:pass] handled'))
      .map((l) => /n=(\d+)/.exec(l)![1])
      .sort(),
    ['0', '1', '2', '3'],
  );
  const levels = await get<{ global: string; actors: Record<string, string> }>(`${url}/log-level`);
  assert.equal(levels.body, {
    global: 'info',
    actors: { 'service:pass': 'debug', 'reader:in/0>pass': 'info', 'reader:in/1>pass': 'info' },
  });
  assert.is((await put({ level: 'loud' })).status, 400);
  const unknown = await put({ level: 'warn', actor: 'service:nope' });
  assert.is(unknown.status, 404);
  assert.match(String(unknown.body.error), 'unknown actor "service:nope"');
  const global = await put({ level: 'warn' });
  assert.equal(
    [global.body.user, global.body.target, global.body.before, global.body.after],
    ['anonymous', '*', 'info', 'warn'],
  );
  const audit = await get<{ entries: { user: string; target: string; after: string }[] }>(
    `${url}/audit`,
  );
  assert.equal(
    audit.body.entries.map((e) => [e.user, e.target, e.after]),
    [
      ['anonymous', '*', 'warn'],
      ['alice', 'service:pass', 'debug'],
    ],
  );
  // The audit log is a file in the data directory and survives the topology.
  await running.stop();
  running = null;
  const file = fs
    .readFileSync(path.join(t.dataDir, 'ops', 'audit.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as { user: string });
  assert.equal(
    file.map((e) => e.user),
    ['alice', 'anonymous'],
  );
});

test('a port already taken is an error naming host and port, and the topology does not start', async () => {
  const t = topologyFile(passTopology());
  running = await startTopology(t, { http: { port: 0 }, log: () => {} });
  const port = Number(new URL(running.ops.server!.url).port);
  const file2 = path.join(dir, 'second.yaml');
  fs.writeFileSync(file2, `name: ops2\ndataDir: ./data2\n${passTopology()}`);
  const err = await startTopology(loadTopology(file2), { http: { port }, log: () => {} }).then(
    () => null,
    (e: Error) => e,
  );
  assert.ok(err);
  assert.match(err!.message, `http: cannot listen on 127.0.0.1:${port}`);
  assert.not.ok(fs.existsSync(path.join(dir, 'data2', 'topology.lock')), 'the lock was released');
  assert.not.ok(fs.existsSync(path.join(dir, 'data2', 'ops')), 'no ops directory left behind');
});

test('--http takes port, host:port and [ipv6]:port; a bare port is never split into a host', () => {
  assert.equal(parseHttpAddress('8080'), { host: '127.0.0.1', port: 8080 });
  assert.equal(parseHttpAddress('19777'), { host: '127.0.0.1', port: 19777 });
  assert.equal(parseHttpAddress('0'), { host: '127.0.0.1', port: 0 });
  assert.equal(parseHttpAddress(':9090'), { host: '127.0.0.1', port: 9090 });
  assert.equal(parseHttpAddress('0.0.0.0:9090'), { host: '0.0.0.0', port: 9090 });
  assert.equal(parseHttpAddress('localhost:1'), { host: 'localhost', port: 1 });
  assert.equal(parseHttpAddress('[::1]:8080'), { host: '::1', port: 8080 });
  for (const bad of ['', 'abc', '65536', 'host:', '1.2.3.4:123456', '::1:80'])
    assert.throws(() => parseHttpAddress(bad), /--http must be \[host:\]port/, bad);
});

test.run();
