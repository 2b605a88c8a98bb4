// Sluice dashboard: polls the operations API of the topology that serves it (same origin) and
// draws the topology graph, the actors table, capture tables, per-actor charts (uPlot, last hour
// of per-second samples) and the log level control. No build step, no external requests.
'use strict';

const $ = (sel) => document.querySelector(sel);
const REFRESH_MS = 1000;
const CHART_REFRESH_MS = 5000;

// With users configured on the server, the API wants a token: asked for once, kept for the tab.
const TOKEN_KEY = 'sluice-token';

class Unauthorized extends Error {}

async function getJson(route, init = {}) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  const headers = {
    ...(init.headers || {}),
    ...(token ? { authorization: `Bearer ${token}` } : {}),
  };
  const res = await fetch(route, { ...init, headers });
  const body = await res.json();
  if (res.status === 401) {
    $('#login').hidden = false;
    throw new Unauthorized(body.error);
  }
  return { status: res.status, body };
}

$('#login').addEventListener('submit', (ev) => {
  ev.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $('#token').value.trim());
  $('#token').value = '';
  $('#login').hidden = true;
  if (!started) main();
});

function el(tag, attrs = {}, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = String(text);
  return e;
}

const round1 = (x) => Math.round(x * 10) / 10;
const maxOf = (xs, f) => xs.reduce((m, x) => Math.max(m, f(x)), 0);

// ---- topology graph -------------------------------------------------------------------------
// Columns: capture sources, then queues and services by depth (a queue sits one column right of
// whatever writes it; a service one column right of its deepest input).
function layoutTopology(t) {
  const nodes = new Map();
  const edges = [];
  const add = (id, kind, label) => nodes.set(id, { id, kind, label, col: 0 });
  const writerOf = new Map();
  for (const c of t.capture) {
    add(`capture:${c.name}`, 'capture', c.name);
    for (const tb of c.tables) {
      writerOf.set(tb.target, `capture:${c.name}`);
      edges.push([`capture:${c.name}`, `queue:${tb.target}`]);
    }
  }
  for (const q of t.queues) add(`queue:${q.name}`, 'queue', q.name);
  for (const s of t.services) {
    add(`service:${s.name}`, 'service', s.name);
    writerOf.set(s.output, `service:${s.name}`);
    for (const i of s.inputs) edges.push([`queue:${i}`, `service:${s.name}`]);
    edges.push([`service:${s.name}`, `queue:${s.output}`]);
  }
  const colOf = (id, seen = new Set()) => {
    const n = nodes.get(id);
    if (seen.has(id)) return n.col;
    seen.add(id);
    if (n.kind === 'capture') return (n.col = 0);
    if (n.kind === 'queue') {
      const w = writerOf.get(n.label);
      return (n.col = w ? colOf(w, seen) + 1 : 1);
    }
    const s = t.services.find((x) => x.name === n.label);
    return (n.col = 1 + Math.max(0, ...s.inputs.map((i) => colOf(`queue:${i}`, seen))));
  };
  for (const id of nodes.keys()) colOf(id);
  return { nodes: [...nodes.values()], edges };
}

const NODE_W = 170,
  NODE_H = 44,
  COL_GAP = 60,
  ROW_GAP = 14;
let graph = null;

function drawGraph(t) {
  graph = layoutTopology(t);
  const cols = new Map();
  for (const n of graph.nodes) {
    if (!cols.has(n.col)) cols.set(n.col, []);
    cols.get(n.col).push(n);
  }
  let height = 0;
  for (const [c, list] of cols)
    list.forEach((n, i) => {
      n.x = 10 + c * (NODE_W + COL_GAP);
      n.y = 10 + i * (NODE_H + ROW_GAP);
      height = Math.max(height, n.y + NODE_H + 10);
    });
  const width = 20 + Math.max(...graph.nodes.map((n) => n.col + 1)) * (NODE_W + COL_GAP);
  const ns = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('viewBox', `0 0 ${width} ${height}`);
  svg.setAttribute('style', `max-width:${width}px`);
  svg.innerHTML =
    '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" markerHeight="6" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#9aa5b8"/></marker></defs>';
  const byId = new Map(graph.nodes.map((n) => [n.id, n]));
  for (const [a, b] of graph.edges) {
    const p = byId.get(a),
      q = byId.get(b);
    const path = document.createElementNS(ns, 'path');
    const x1 = p.x + NODE_W,
      y1 = p.y + NODE_H / 2,
      x2 = q.x,
      y2 = q.y + NODE_H / 2;
    path.setAttribute(
      'd',
      `M${x1},${y1} C${x1 + COL_GAP / 2},${y1} ${x2 - COL_GAP / 2},${y2} ${x2},${y2}`,
    );
    path.setAttribute('class', 'edge');
    svg.appendChild(path);
  }
  for (const n of graph.nodes) {
    const g = document.createElementNS(ns, 'g');
    g.setAttribute('class', `node ${n.kind}`);
    g.setAttribute('data-node', n.id);
    g.innerHTML =
      `<rect x="${n.x}" y="${n.y}" width="${NODE_W}" height="${NODE_H}"></rect>` +
      `<text x="${n.x + 8}" y="${n.y + 17}"></text><text class="figure" x="${n.x + 8}" y="${n.y + 34}"></text>`;
    g.querySelector('text').textContent = `${n.kind === 'queue' ? 'topic' : n.kind} ${n.label}`;
    svg.appendChild(g);
  }
  $('#graph').replaceChildren(svg);
}

function updateGraph(actors, captureSources) {
  if (!graph) return;
  for (const n of graph.nodes) {
    let figure = '';
    if (n.kind === 'service') {
      const a = actors.find((x) => x.name === `service:${n.label}`);
      if (a)
        figure = `${round1(a.rates.eventsIn.perSecond1s)}/s in · lag ${maxOf(a.inputs, (l) => l.lagRecords)} rec, ${maxOf(a.inputs, (l) => l.lagMs)} ms`;
    } else if (n.kind === 'capture') {
      const pumps = actors.filter((x) => x.name.startsWith(`pump:${n.label}/`));
      const rate = pumps.reduce((s, p) => s + p.rates.eventsIn.perSecond1s, 0);
      const src = captureSources.find((s) => s.source === n.label);
      const staged = src && src.tables ? src.tables.reduce((s, t) => s + t.stagingDepth, 0) : '?';
      figure = `${round1(rate)}/s · staged ${staged}`;
    } else {
      // A queue: what its readers took per second.
      const readers = actors.filter(
        (x) => x.kind === 'reader' && x.name.startsWith(`reader:${n.label}/`),
      );
      if (readers.length)
        figure = `${round1(readers.reduce((s, r) => s + r.rates.eventsIn.perSecond1s, 0))}/s read`;
    }
    const t = document.querySelector(`[data-node="${CSS.escape(n.id)}"] text.figure`);
    if (t) t.textContent = figure;
  }
}

// ---- tables ---------------------------------------------------------------------------------
function cell(field, value, text) {
  const td = el('td', { 'data-field': field, 'data-value': value }, text ?? value);
  return td;
}

function drawActors(actors) {
  const rows = actors.map((a) => {
    const tr = el('tr', { 'data-actor': a.name });
    const lagRecords = maxOf(a.inputs, (l) => l.lagRecords);
    const lagMs = maxOf(a.inputs, (l) => l.lagMs);
    tr.append(
      cell('name', a.name),
      cell('state', a.state),
      cell('restarts', a.restarts),
      cell('eventsIn', a.counters.eventsIn),
      cell('eventsOut', a.counters.eventsOut),
      cell('in1s', a.rates.eventsIn.perSecond1s),
      cell('in1m', a.rates.eventsIn.perSecond1m),
      cell('out1m', a.rates.eventsOut.perSecond1m),
      cell('lagRecords', a.inputs.length ? lagRecords : '', a.inputs.length ? lagRecords : '-'),
      cell('lagMs', a.inputs.length ? lagMs : '', a.inputs.length ? lagMs : '-'),
      cell(
        'ring',
        a.ring ? a.ring.usedBytes : '',
        a.ring ? `${Math.round(a.ring.ratio * 100)}%` : '-',
      ),
    );
    return tr;
  });
  $('#actors tbody').replaceChildren(...rows);
  const select = $('#log-actor');
  const known = new Set([...select.options].map((o) => o.value));
  for (const a of actors)
    if (!known.has(a.name)) select.append(el('option', { value: a.name }, a.name));
}

function drawCapture(sources) {
  $('#capture-empty').hidden = sources.length > 0;
  const rows = [];
  for (const s of sources) {
    if (!s.tables) {
      const tr = el('tr', { 'data-source': s.source });
      tr.append(el('td', {}, s.source), el('td', { colspan: 6 }, `cannot read: ${s.error}`));
      rows.push(tr);
      continue;
    }
    for (const t of s.tables) {
      const tr = el('tr', { 'data-source': s.source, 'data-table': t.table });
      tr.append(
        cell('source', s.source),
        cell('table', t.table),
        cell('target', t.target),
        cell('stagingDepth', t.stagingDepth),
        cell('oldestStagedAgeMs', t.oldestStagedAgeMs),
        cell('parkedErrors', t.parkedErrors ?? '', t.parkedErrors ?? '-'),
        cell('drain1m', s.drainRate.perSecond1m),
      );
      rows.push(tr);
    }
  }
  $('#capture tbody').replaceChildren(...rows);
}

// ---- parked errors (the capture error table) ------------------------------------------------
// Fetched only for sources that have parked changes (or showed some last time): each read opens
// a connection to the captured database.
const PARKED_SHOWN_MAX = 50;
const parkedShown = new Map();

async function drawErrors(sources) {
  for (const s of sources) {
    const parked = s.tables ? s.tables.reduce((n, t) => n + (t.parkedErrors || 0), 0) : 0;
    if (parked === 0 && !(parkedShown.get(s.source) || []).length) continue;
    const r = await getJson(
      `capture/${encodeURIComponent(s.source)}/errors?limit=${PARKED_SHOWN_MAX}`,
    );
    if (r.status === 200) parkedShown.set(s.source, r.body.parked);
  }
  const rows = [];
  for (const [source, parked] of parkedShown) {
    for (const p of parked) {
      const tr = el('tr', { 'data-source': source, 'data-staging-id': p.stagingId });
      const button = el('button', { class: 'requeue', type: 'button' }, 'requeue');
      button.addEventListener('click', () => requeue(source, p.stagingId));
      const action = el('td', { 'data-field': 'action' });
      action.append(button);
      tr.append(
        cell('source', source),
        cell('stagingId', p.stagingId),
        cell('table', p.table),
        cell('op', p.op),
        cell('key', p.key),
        cell('attempts', p.attempts),
        cell('parkedTime', p.parkedTimeMs, new Date(p.parkedTimeMs).toISOString()),
        cell('error', p.error),
        action,
      );
      rows.push(tr);
    }
  }
  $('#errors tbody').replaceChildren(...rows);
  $('#errors-empty').hidden = rows.length > 0;
}

async function requeue(source, stagingId) {
  const r = await getJson(`capture/${encodeURIComponent(source)}/errors/requeue`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-sluice-user': 'dashboard' },
    body: JSON.stringify({ ids: [stagingId] }),
  });
  $('#errors-result').textContent =
    r.status === 200
      ? `requeued ${r.body.changed} of ${source} (staging id ${stagingId}); ${r.body.parked} parked`
      : `refused: ${r.body.error}`;
  if (r.status === 200) {
    const left = (parkedShown.get(source) || []).filter((p) => p.stagingId !== stagingId);
    parkedShown.set(source, left);
    const capture = await getJson('capture');
    await drawErrors(capture.body.sources);
  }
  await drawAudit();
}

// ---- capture configuration history with a diff view --------------------------------------
const CONFIG_REFRESH_MS = 10000;
let lastConfig = 0;

function diffText(v) {
  if (v.diff.length === 0) return `version ${v.version}: no change`;
  const lines = [
    `version ${v.version} (${v.action}${v.restoredFrom !== undefined ? ` of version ${v.restoredFrom}` : ''} by ${v.user} at ${v.time})`,
  ];
  for (const d of v.diff) {
    if (d.before !== null) lines.push(`- ${d.path}: ${JSON.stringify(d.before)}`);
    if (d.after !== null) lines.push(`+ ${d.path}: ${JSON.stringify(d.after)}`);
  }
  return lines.join('\n');
}

async function drawConfigHistory() {
  const { status, body } = await getJson('config/history');
  if (status !== 200) return;
  const rows = body.versions
    .slice()
    .reverse()
    .map((v) => {
      const tr = el('tr', { 'data-version': v.version, class: 'clickable' });
      tr.append(
        cell('version', v.version),
        cell('time', v.time),
        cell('user', v.user),
        cell('action', v.restoredFrom !== undefined ? `restore of ${v.restoredFrom}` : v.action),
        cell('changes', v.diff.length),
      );
      tr.addEventListener('click', () => {
        $('#config-diff').textContent = diffText(v);
        $('#config-diff').dataset.version = String(v.version);
      });
      return tr;
    });
  $('#config-history tbody').replaceChildren(...rows);
  $('#config-empty').hidden = rows.length > 0;
}

// ---- charts ---------------------------------------------------------------------------------
const charts = new Map();

async function drawCharts(actors) {
  const shown = actors.filter((a) => a.kind === 'service' || a.kind === 'pump');
  for (const a of shown) {
    const { status, body: h } = await getJson(
      `actors/${encodeURIComponent(a.name)}/history?step=second`,
    );
    if (status !== 200) continue;
    const t = h.timeMs.map((x) => x / 1000);
    const data = [t, h.eventsInPerSecond, h.eventsOutPerSecond, h.lagMs];
    let c = charts.get(a.name);
    if (!c) {
      const box = el('div', { class: 'chart', 'data-chart': a.name });
      box.append(el('h4', {}, a.name));
      $('#charts').append(box);
      const opts = {
        width: 420,
        height: 160,
        series: [
          {},
          { label: 'in/s', stroke: '#2b6cb0' },
          { label: 'out/s', stroke: '#c48a3a' },
          { label: 'lag ms', stroke: '#c0262d', scale: 'ms' },
        ],
        axes: [{}, { label: 'events/s' }, { side: 1, scale: 'ms', grid: { show: false } }],
      };
      c = new uPlot(opts, data, box);
      charts.set(a.name, c);
    } else {
      c.setData(data);
    }
  }
}

// ---- log level ------------------------------------------------------------------------------
async function drawAudit() {
  const { status, body } = await getJson('audit?limit=20');
  if (status !== 200) {
    // The audit log needs the admin right; a read or operate user sees why it is empty.
    const tr = el('tr');
    tr.append(el('td', { colspan: 6 }, body.error));
    $('#audit tbody').replaceChildren(tr);
    return;
  }
  $('#audit tbody').replaceChildren(
    ...body.entries.map((e) => {
      const tr = el('tr');
      for (const v of [e.time, e.user, e.action, e.target, e.before, e.after])
        tr.append(el('td', {}, typeof v === 'object' && v !== null ? JSON.stringify(v) : v));
      return tr;
    }),
  );
}

$('#log-level-form').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const actor = $('#log-actor').value;
  const level = $('#log-level').value;
  const body = actor ? { level, actor } : { level };
  const r = await getJson('log-level', {
    method: 'PUT',
    headers: { 'content-type': 'application/json', 'x-sluice-user': 'dashboard' },
    body: JSON.stringify(body),
  });
  $('#log-result').textContent =
    r.status === 200
      ? `${r.body.target}: ${r.body.before} -> ${r.body.after}`
      : `refused: ${r.body.error}`;
  await drawAudit();
});

// ---- loop -----------------------------------------------------------------------------------
let lastCharts = 0;

async function refresh() {
  try {
    const [actors, health, capture] = await Promise.all([
      getJson('actors'),
      getJson('health'),
      getJson('capture'),
    ]);
    const h = health.body;
    $('#health').textContent = h.status;
    $('#health').dataset.status = h.status;
    $('#health-reasons').textContent = h.reasons.join('; ');
    drawActors(actors.body.actors);
    drawCapture(capture.body.sources);
    await drawErrors(capture.body.sources);
    updateGraph(actors.body.actors, capture.body.sources);
    $('#updated').textContent = `updated ${new Date(actors.body.time).toLocaleTimeString()}`;
    document.body.dataset.updated = actors.body.time;
    if (Date.now() - lastConfig > CONFIG_REFRESH_MS) {
      lastConfig = Date.now();
      await drawConfigHistory();
    }
    if (Date.now() - lastCharts > CHART_REFRESH_MS) {
      lastCharts = Date.now();
      await drawCharts(actors.body.actors);
    }
  } catch (err) {
    if (err instanceof Unauthorized) {
      $('#health').textContent = 'sign in';
      return;
    }
    $('#health').textContent = 'unreachable';
    $('#health').dataset.status = 'failed';
    $('#health-reasons').textContent = String(err);
  }
}

let started = false;

/**
 * A first answer that is not a 200: 403 (the token's user has no right on this topology) or 429
 * (too many failed tokens from this address) is said, with the server's message, and the token is
 * asked for again.
 */
function refused(r) {
  $('#health').textContent = r.status === 429 ? 'rate-limited' : 'refused';
  $('#health').dataset.status = 'failed';
  $('#login-error').textContent = (r.body && r.body.error) || `HTTP ${r.status}`;
  $('#login').hidden = false;
}

async function main() {
  let v, t;
  try {
    // One after the other: a refused token then costs one failure in the server's limiter.
    const version = await getJson('version');
    if (version.status !== 200) return refused(version);
    const topology = await getJson('topology');
    if (topology.status !== 200) return refused(topology);
    v = version.body;
    t = topology.body;
  } catch (err) {
    if (err instanceof Unauthorized) {
      $('#health').textContent = 'sign in';
      $('#login-error').textContent = sessionStorage.getItem(TOKEN_KEY) ? err.message : '';
      return;
    }
    throw err;
  }
  $('#login-error').textContent = '';
  started = true;
  $('#topology-name').textContent = t.name;
  $('#version').textContent = `v${v.version}`;
  document.title = `Sluice ${t.name}`;
  drawGraph(t);
  await drawAudit();
  await refresh();
  setInterval(refresh, REFRESH_MS);
}

main();
