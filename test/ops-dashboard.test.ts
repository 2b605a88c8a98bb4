/**
 * The dashboard at / in a real headless Chromium (Debian's /usr/bin/chromium driven by
 * playwright-core; no browser is downloaded): against a running SQLite capture topology it shows
 * the topology picture, the actors table with the figures of /actors, the capture table with the
 * figures of /capture, a chart per service and pump, and changes a log level through its form
 * (audited). It makes no request outside the server. Screenshots go to .tmp/artifacts/.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { chromium, type Browser, type Page } from 'playwright-core';
import { loadTopology, startTopology, installCapture, type RunningTopology } from '../index.js';
import type { ActorStatus } from '../ops/index.js';

const CHROMIUM = '/usr/bin/chromium';
const service = new URL('./fixtures/services/change-log.js', import.meta.url).pathname;
const artifacts = path.resolve(new URL('../../.tmp/artifacts', import.meta.url).pathname);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let dir = '';
let topologyFile = '';
let dbFile = '';
let running: RunningTopology | null = null;
let browser: Browser | null = null;
let db: Database.Database | null = null;

test.before(async () => {
  if (!fs.existsSync(CHROMIUM))
    throw new Error(`${CHROMIUM} is missing: install Debian's chromium (bash .ci/deps does)`);
  fs.mkdirSync(artifacts, { recursive: true });
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-dash-'));
  const file = path.join(dir, 'shop.db');
  dbFile = file;
  db = new Database(file);
  db.exec('CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT)');
  topologyFile = path.join(dir, 'topology.yaml');
  fs.writeFileSync(topologyFile, topologyText(file, 4000));
  const t = loadTopology(topologyFile);
  await installCapture(t);
  running = await startTopology(t, { http: { port: 0 }, log: () => {} });
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-gpu',
      '--no-first-run',
    ],
  });
});

/**
 * The topology of the test: a capture target taking records up to `recordBytesMax` bytes, a
 * refused change parked at once (one round of one try).
 */
function topologyText(file: string, recordBytesMax: number): string {
  return `name: dash
dataDir: ./data
queues:
  - { name: item-changes, partitions: 2 }
  - { name: item-log }
capture:
  - name: shop
    database: { dialect: sqlite, file: ${file} }
    pumps: 2
    pollIntervalMs: 20
    recordBytesMax: ${recordBytesMax}
    errors: { retriesImmediate: 0, attemptsMax: 1 }
    tables:
      - { table: items, operations: [insert, update, delete], target: item-changes }
services:
  - name: item-log
    module: ${service}
    inputs: [item-changes]
    output: item-log
`;
}

test.after(async () => {
  await browser?.close();
  await running?.stop();
  db?.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

async function actorsNow(url: string): Promise<ActorStatus[]> {
  return ((await (await fetch(`${url}/actors`)).json()) as { actors: ActorStatus[] }).actors;
}

async function until<T>(
  what: string,
  probe: () => Promise<T | null | false>,
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

/** The actors table as the page shows it: actor name -> field -> text. */
async function shownActors(page: Page): Promise<Record<string, Record<string, string>>> {
  return page.$$eval('#actors tbody tr', (rows) =>
    Object.fromEntries(
      rows.map((tr) => [
        tr.getAttribute('data-actor'),
        Object.fromEntries(
          [...tr.querySelectorAll('td')].map((td) => [
            td.getAttribute('data-field'),
            td.textContent ?? '',
          ]),
        ),
      ]),
    ),
  );
}

test('the dashboard shows the topology, actors and capture figures of the API, charts, and sets a log level', async () => {
  const url = running!.ops.server!.url;
  const insert = db!.prepare('INSERT INTO items (name) VALUES (?)');
  for (let i = 0; i < 40; i++) insert.run(`item ${i}`);
  db!.prepare("UPDATE items SET name = name || '!' WHERE id <= 10").run();
  // Quiescent: everything shipped and handled, so the page and the API must agree exactly.
  await until('50 changes handled', async () => {
    const s = (await actorsNow(url)).find((a) => a.name === 'service:item-log');
    return (
      s !== undefined && s.counters.eventsOut === 50 && s.inputs.every((l) => l.lagRecords === 0)
    );
  });
  const page = await browser!.newPage({ viewport: { width: 1400, height: 1000 } });
  const outside: string[] = [];
  const pageErrors: string[] = [];
  page.on('request', (r) => {
    if (!r.url().startsWith(url)) outside.push(r.url());
  });
  page.on('pageerror', (e) => pageErrors.push(e.message));
  await page.goto(`${url}/`);
  await page.waitForSelector('#actors tbody tr[data-actor="service:item-log"]');
  // Wait for a refresh after which the sampler has rated the work (the charts need samples).
  await sleep(2500);
  const updated = await page.getAttribute('body', 'data-updated');
  await page.waitForFunction(`document.body.dataset.updated !== ${JSON.stringify(updated)}`);

  const api = await actorsNow(url);
  const shown = await shownActors(page);
  assert.equal(Object.keys(shown).sort(), api.map((a) => a.name).sort(), 'one row per actor');
  for (const a of api) {
    const row = shown[a.name];
    assert.is(row.state, a.state, a.name);
    assert.is(row.restarts, String(a.restarts), a.name);
    assert.is(row.eventsIn, String(a.counters.eventsIn), a.name);
    assert.is(row.eventsOut, String(a.counters.eventsOut), a.name);
    if (a.inputs.length)
      assert.is(row.lagRecords, String(Math.max(...a.inputs.map((l) => l.lagRecords))), a.name);
  }
  assert.is(shown['service:item-log'].eventsIn, '50');
  assert.is(Number(shown['pump:shop/0'].eventsIn) + Number(shown['pump:shop/1'].eventsIn), 50);
  assert.is(await page.textContent('#health'), 'ok');
  assert.is(await page.textContent('#topology-name'), 'dash');

  // Topology picture: capture source -> topic -> service -> topic, with live figures.
  const nodes = await page.$$eval('#graph [data-node]', (gs) =>
    gs.map((g) => g.getAttribute('data-node')),
  );
  assert.equal(nodes.sort(), [
    'capture:shop',
    'queue:item-changes',
    'queue:item-log',
    // The service's dead-letter queue, declared implicitly (services[].errors).
    'queue:item-log.dlq',
    'service:item-log',
  ]);
  assert.match(
    (await page.textContent('[data-node="capture:shop"] text.figure')) ?? '',
    /staged 0$/,
  );
  assert.match(
    (await page.textContent('[data-node="service:item-log"] text.figure')) ?? '',
    /lag 0 rec, 0 ms$/,
  );

  // Capture table: the figures of /capture.
  const capture = (
    (await (await fetch(`${url}/capture`)).json()) as {
      sources: { tables: { stagingDepth: number; parkedErrors: number | null }[] }[];
    }
  ).sources[0].tables[0];
  const cells = await page.$$eval('#capture tr[data-table="items"] td', (tds) =>
    Object.fromEntries(tds.map((td) => [td.getAttribute('data-field'), td.textContent])),
  );
  assert.equal(
    [cells.source, cells.table, cells.target, cells.stagingDepth, cells.parkedErrors],
    ['shop', 'items', 'item-changes', String(capture.stagingDepth), String(capture.parkedErrors)],
  );

  // A chart (uPlot canvas) per service and pump.
  await page.waitForSelector('[data-chart="service:item-log"] canvas');
  const charts = await page.$$eval('#charts [data-chart]', (cs) =>
    cs.map((c) => c.getAttribute('data-chart')),
  );
  assert.equal(charts.sort(), ['pump:shop/0', 'pump:shop/1', 'service:item-log']);
  await page.screenshot({ path: path.join(artifacts, 'dashboard.png'), fullPage: true });

  // Log level control: set the service to debug; the change is applied and audited.
  await page.selectOption('#log-actor', 'service:item-log');
  await page.selectOption('#log-level', 'debug');
  await page.click('#log-apply');
  await page.waitForFunction(`document.querySelector('#log-result').textContent !== ''`);
  assert.is(await page.textContent('#log-result'), 'service:item-log: info -> debug');
  const levels = (await (await fetch(`${url}/log-level`)).json()) as {
    actors: Record<string, string>;
  };
  assert.is(levels.actors['service:item-log'], 'debug');
  const firstAudit = await page.$$eval('#audit tbody tr:first-child td', (tds) =>
    tds.map((td) => td.textContent),
  );
  assert.equal(firstAudit.slice(1), [
    'dashboard',
    'log-level',
    'service:item-log',
    'info',
    'debug',
  ]);
  await page.screenshot({ path: path.join(artifacts, 'dashboard-log-level.png'), fullPage: true });

  assert.equal(outside, [], 'no request leaves the server (no CDN)');
  assert.equal(pageErrors, [], 'no script error');
  await page.close();
});

test('loading the dashboard asks the server only for what it has: no 404 (no /favicon.ico)', async () => {
  // The browser fetches a page's icon itself, unseen by the page's request events: a proxy in
  // front of the server records every request the load makes, as the server answers it.
  const target = new URL(running!.ops.server!.url);
  const answered: string[] = [];
  const proxy = http.createServer((req, res) => {
    const upstream = http.request(
      {
        host: target.hostname,
        port: target.port,
        path: req.url,
        method: req.method,
        headers: req.headers,
      },
      (up) => {
        answered.push(`${up.statusCode} ${req.method} ${req.url}`);
        res.writeHead(up.statusCode ?? 502, up.headers);
        up.pipe(res);
      },
    );
    req.pipe(upstream);
  });
  await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
  const page = await browser!.newPage();
  try {
    await page.goto(`http://127.0.0.1:${(proxy.address() as AddressInfo).port}/`);
    await page.waitForSelector('#actors tbody tr[data-actor="service:item-log"]');
    // The icon is asked for after the page has loaded.
    await sleep(1500);
    assert.ok(answered.includes('200 GET /'), answered.join('\n'));
    assert.equal(
      answered.filter((a) => !a.startsWith('200 ')),
      [],
      'every request of the load is answered 200',
    );
  } finally {
    await page.close();
    proxy.closeAllConnections();
    await new Promise((r) => proxy.close(r));
  }
});

test('a parked change shows in the capture errors with a requeue button; once the limit is raised, requeue takes it out of the table and it is delivered', async () => {
  const name = 'x'.repeat(10_000);
  db!.prepare('INSERT INTO items (id, name) VALUES (?, ?)').run(1000, name);
  const parked = await until('the big change parked', async () => {
    const r = await fetch(`${running!.ops.server!.url}/capture/shop/errors`);
    const body = (await r.json()) as {
      total: number;
      parked: { stagingId: string; error: string; key: string; afterChars: number }[];
    };
    return body.total === 1 ? body.parked[0] : null;
  });
  assert.match(parked.error, /exceeds recordBytesMax 4000 of capture source "shop"/);
  assert.is(parked.key, '["1000"]');

  const page = await browser!.newPage({ viewport: { width: 1400, height: 1000 } });
  const pageErrors: string[] = [];
  page.on('pageerror', (e) => pageErrors.push(e.message));
  await page.goto(`${running!.ops.server!.url}/`);
  const row = `#errors tr[data-staging-id="${parked.stagingId}"]`;
  await page.waitForSelector(row);
  const shown = await page.$$eval(`${row} td`, (tds) =>
    Object.fromEntries(tds.map((td) => [td.getAttribute('data-field'), td.textContent])),
  );
  assert.is(shown.source, 'shop');
  assert.is(shown.table, 'items');
  assert.is(shown.op, 'insert');
  assert.is(shown.key, '["1000"]');
  assert.is(shown.error, parked.error);
  await page.waitForSelector(
    '#capture tr[data-table="items"] td[data-field="parkedErrors"]:text-is("1")',
  );
  await page.screenshot({ path: path.join(artifacts, 'dashboard-parked.png'), fullPage: true });
  await page.close();

  // The operator's fix: raise the limit (a restart), then requeue from the dashboard.
  await running!.stop();
  fs.writeFileSync(topologyFile, topologyText(dbFile, 1_000_000));
  running = await startTopology(loadTopology(topologyFile), { http: { port: 0 }, log: () => {} });
  const url = running.ops.server!.url;
  const again = await browser!.newPage({ viewport: { width: 1400, height: 1000 } });
  again.on('pageerror', (e) => pageErrors.push(e.message));
  await again.goto(`${url}/`);
  await again.waitForSelector(row);
  await again.click(`${row} button.requeue`);
  await again.waitForSelector(row, { state: 'detached' });
  assert.is(
    await again.textContent('#errors-result'),
    `requeued 1 of shop (staging id ${parked.stagingId}); 0 parked`,
  );
  // Delivered: the pumps of this run shipped exactly that change, nothing is staged or parked.
  await until('the requeued change shipped', async () => {
    const pumps = (await actorsNow(url)).filter((a) => a.kind === 'pump');
    return pumps.reduce((n, p) => n + p.counters.eventsIn, 0) === 1;
  });
  const capture = (await (await fetch(`${url}/capture`)).json()) as {
    sources: { tables: { stagingDepth: number; parkedErrors: number }[] }[];
  };
  await until('the capture table shows nothing staged or parked', async () => {
    const t = ((await (await fetch(`${url}/capture`)).json()) as typeof capture).sources[0]
      .tables[0];
    return t.stagingDepth === 0 && t.parkedErrors === 0;
  });
  assert.is(await again.isVisible('#errors-empty'), true);
  const firstAudit = await again.$$eval('#audit tbody tr:first-child td', (tds) =>
    tds.map((td) => td.textContent),
  );
  assert.equal(firstAudit.slice(1, 4), ['dashboard', 'errors-requeue', 'capture:shop']);
  assert.equal(JSON.parse(firstAudit[4] ?? ''), { parked: 1 });
  assert.equal(JSON.parse(firstAudit[5] ?? '').requeued, 1);
  await again.screenshot({ path: path.join(artifacts, 'dashboard-requeued.png'), fullPage: true });

  // A capture configuration change (deletes no longer captured) shows in the history, its diff
  // on a click.
  const exported = (await (await fetch(`${url}/config/capture`)).json()) as {
    capture: Array<{ tables: Array<{ operations: string[] }> }>;
  };
  exported.capture[0].tables[0].operations = ['insert', 'update'];
  const imported = await fetch(`${url}/config/capture`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-sluice-user': 'ops-test' },
    body: JSON.stringify(exported),
  });
  assert.is(imported.status, 200, await imported.clone().text());
  await again.reload();
  await again.waitForSelector('#config-history tr[data-version="1"]');
  const versions = await again.$$eval('#config-history tbody tr', (trs) =>
    trs.map((tr) => [...tr.querySelectorAll('td')].map((td) => td.textContent)),
  );
  assert.equal(
    versions.map((v) => [v[0], v[2], v[3], v[4]]),
    [
      ['1', 'ops-test', 'import', '1'],
      ['0', 'ops-test', 'initial', '0'],
    ],
  );
  await again.click('#config-history tr[data-version="1"]');
  const diff = (await again.textContent('#config-diff')) ?? '';
  assert.match(
    diff,
    /^version 1 \(import by ops-test at \S+\)\n- capture\[0\]\.tables\[0\]\.operations\[2\]: "delete"$/,
  );
  await again.screenshot({
    path: path.join(artifacts, 'dashboard-config-history.png'),
    fullPage: true,
  });
  assert.equal(pageErrors, [], 'no script error');
  await again.close();
});

test.run();
