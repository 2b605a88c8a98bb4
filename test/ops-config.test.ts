/**
 * The capture configuration as JSON on a real SQLite capture source: `sluice config export`
 * prints the capture section; `import` validates a JSON file exactly as the YAML is (the same
 * path and message, at the JSON file's line:col), installs the new triggers, rewrites the
 * topology file (its comments kept) and records the version with its diff; `history` lists the
 * versions; `restore` re-applies one (the triggers of a table no longer captured are dropped).
 * Over HTTP on a running topology with users: export for read, import and restore refused to
 * operate and done for admin, a refused import answered with its problems, each change audited.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import {
  ConfigError,
  loadTopology,
  startTopology,
  installCapture,
  type RunningTopology,
} from '../index.js';
import { addUser } from '../ops/index.js';
import { sluice } from './lib/cli.js';

const changeLog = new URL('./fixtures/services/change-log.js', import.meta.url).pathname;

function setup(): { dir: string; file: string; dbFile: string } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ops2-config-'));
  const dbFile = path.join(dir, 'shop.db');
  const db = new Database(dbFile);
  db.exec(
    'CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT); CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)',
  );
  db.close();
  const file = path.join(dir, 'topology.yaml');
  fs.writeFileSync(
    file,
    `# the shop's topology (this comment stays)
name: cfg
dataDir: ./data
queues:
  - { name: item-changes }
  - { name: note-changes }
  - { name: item-log }
capture:
  - name: shop
    database: { dialect: sqlite, file: ${dbFile} }
    tables:
      - { table: items, operations: [insert, update, delete], target: item-changes }
services:
  - { name: log, module: ${changeLog}, inputs: [item-changes], output: item-log }
`,
  );
  return { dir, file, dbFile };
}

const triggersOf = (dbFile: string) => {
  const db = new Database(dbFile, { readonly: true });
  try {
    return (
      db
        .prepare("SELECT tbl_name AS t FROM sqlite_master WHERE type = 'trigger' ORDER BY 1")
        .all() as { t: string }[]
    )
      .map((r) => r.t)
      .filter((t, i, all) => all.indexOf(t) === i);
  } finally {
    db.close();
  }
};

test('export prints the capture section; import validates as the YAML does, installs, rewrites, records; history and restore', async () => {
  const { dir, file, dbFile } = setup();
  try {
    assert.is((await sluice(['install', file])).code, 0);
    // Before the first import there is no version: history says so (--json: no line at all).
    const none = await sluice(['config', 'history', file]);
    assert.is(none.code, 0, none.err);
    assert.is(
      none.out,
      `no capture configuration history yet (${path.join(dir, 'data', 'ops', 'config-history.jsonl')}): the first "sluice config import" (or POST /config/capture) records version 0, the capture section as it was, and version 1, the import\n`,
    );
    const noneJson = await sluice(['config', 'history', file, '--json']);
    assert.equal([noneJson.code, noneJson.out], [0, '']);
    const exported = await sluice(['config', 'export', file]);
    assert.is(exported.code, 0, exported.err);
    const doc = JSON.parse(exported.out) as { capture: Array<{ tables: unknown[] }> };
    assert.equal(doc, {
      capture: [
        {
          name: 'shop',
          database: { dialect: 'sqlite', file: dbFile },
          tables: [
            { table: 'items', operations: ['insert', 'update', 'delete'], target: 'item-changes' },
          ],
        },
      ],
    });
    assert.equal(
      JSON.parse((await sluice(['config', 'export', file, '--schema', 'main'])).out).capture,
      doc.capture,
    );
    assert.equal(
      JSON.parse((await sluice(['config', 'export', file, '--schema', 'other'])).out).capture,
      [],
    );

    // The same mistake in the YAML and in the JSON: the same path and message.
    const bad = structuredClone(doc);
    bad.capture[0].tables.push({ table: 'notes', operations: ['inserts'], target: 'note-changes' });
    const badFile = path.join(dir, 'bad.json');
    fs.writeFileSync(badFile, JSON.stringify(bad, null, 2));
    const refused = await sluice(['config', 'import', file, badFile]);
    assert.is(refused.code, 2);
    const yamlBad = path.join(dir, 'bad.yaml');
    fs.writeFileSync(
      yamlBad,
      fs
        .readFileSync(file, 'utf8')
        .replace(
          '      - { table: items, operations: [insert, update, delete], target: item-changes }\n',
          '      - { table: items, operations: [insert, update, delete], target: item-changes }\n      - { table: notes, operations: [inserts], target: note-changes }\n',
        ),
    );
    let yamlProblem = '';
    try {
      loadTopology(yamlBad);
    } catch (err) {
      yamlProblem = (err as ConfigError).message;
    }
    const afterPos = (line: string) => line.slice(line.indexOf(': ') + 2);
    assert.match(yamlProblem, /capture\[0\]\.tables\[1\]\.operations\[0\]: /);
    assert.is(afterPos(refused.err.trim()), afterPos(yamlProblem.trim()));
    const jsonLines = fs.readFileSync(badFile, 'utf8').split('\n');
    const at = /^(.*):(\d+):(\d+): /.exec(refused.err.trim())!;
    assert.is(at[1], badFile);
    assert.match(jsonLines[Number(at[2]) - 1]!, /"inserts"/, 'line:col is in the JSON file');
    assert.equal(triggersOf(dbFile), ['items'], 'nothing installed');

    // A column that does not exist: install refuses it at its JSON field.
    const noColumn = structuredClone(doc);
    noColumn.capture[0].tables.push({
      table: 'notes',
      operations: ['insert'],
      target: 'note-changes',
      columns: ['id', 'nope'],
    });
    fs.writeFileSync(badFile, JSON.stringify(noColumn, null, 2));
    const col = await sluice(['config', 'import', file, badFile]);
    assert.is(col.code, 2);
    assert.match(
      col.err,
      new RegExp(
        `^${badFile.replace(/[.]/g, '\\.')}:\\d+:\\d+: capture\\[0\\]\\.tables\\[1\\]\\.columns\\[1\\]: capture source "shop": .*nope`,
      ),
    );
    const before = fs.readFileSync(file, 'utf8');

    // A good import: notes captured too.
    const good = structuredClone(doc);
    good.capture[0].tables.push({
      table: 'notes',
      operations: ['insert', 'delete'],
      target: 'note-changes',
    });
    const goodFile = path.join(dir, 'good.json');
    fs.writeFileSync(goodFile, JSON.stringify(good));
    const user = os.userInfo().username;
    const ok = await sluice(['config', 'import', file, goodFile]);
    assert.is(ok.code, 0, ok.err);
    assert.match(
      ok.out.trim(),
      new RegExp(`^version 1 \\(import by ${user} at \\S+Z\\): 1 change$`),
    );
    assert.equal(triggersOf(dbFile), ['items', 'notes']);
    const rewritten = fs.readFileSync(file, 'utf8');
    assert.ok(rewritten.startsWith("# the shop's topology (this comment stays)\n"), rewritten);
    assert.is.not(rewritten, before);
    assert.equal(
      loadTopology(file).capture[0]!.tables.map((t) => t.table),
      ['items', 'notes'],
    );

    const history = await sluice(['config', 'history', file]);
    assert.is(history.code, 0, history.err);
    const lines = history.out.trim().split('\n');
    assert.match(lines[0]!, /^version 0 \(initial by \S+ at \S+\): 0 changes$/);
    assert.match(lines[1]!, /^version 1 \(import by \S+ at \S+\): 1 change$/);
    assert.is(
      lines[2],
      '  capture[0].tables[1]: null -> {"table":"notes","operations":["insert","delete"],"target":"note-changes"}',
    );

    const restored = await sluice(['config', 'restore', file, '0']);
    assert.is(restored.code, 0, restored.err);
    assert.match(
      restored.out.trim(),
      /^version 2 \(restore of version 0 by \S+ at \S+\): 1 change$/,
    );
    assert.equal(triggersOf(dbFile), ['items'], "the notes' triggers are dropped");
    assert.equal(
      loadTopology(file).capture[0]!.tables.map((t) => t.table),
      ['items'],
    );
    const missing = await sluice(['config', 'restore', file, '7']);
    assert.is(missing.code, 2);
    assert.match(
      missing.err,
      /no capture configuration version 7 in .*config-history\.jsonl \(versions: 0, 1, 2\)/,
    );

    const audit = fs
      .readFileSync(path.join(dir, 'data', 'ops', 'audit.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { action: string; user: string; after: { version: number } });
    assert.equal(
      audit.map((a) => [a.action, a.user, a.after.version]),
      [
        ['config-import', user, 1],
        ['config-restore', user, 2],
      ],
    );
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('over HTTP: export for read, import and restore refused to operate and done for admin, problems answered, audited', async () => {
  const { dir, file, dbFile } = setup();
  let running: RunningTopology | null = null;
  try {
    const usersFile = path.join(dir, 'users.json');
    const tokens = {
      rita: addUser(usersFile, 'rita', 'read'),
      olga: addUser(usersFile, 'olga', 'operate'),
      adam: addUser(usersFile, 'adam', 'admin'),
    };
    const t = loadTopology(file);
    await installCapture(t);
    running = await startTopology(t, { http: { port: 0, usersFile }, stats: false, log: () => {} });
    const url = running.ops.server!.url;
    const call = async (route: string, user: keyof typeof tokens, body?: unknown) => {
      const res = await fetch(`${url}${route}`, {
        method: body === undefined ? 'GET' : 'POST',
        headers: {
          authorization: `Bearer ${tokens[user]}`,
          ...(body === undefined ? {} : { 'content-type': 'application/json' }),
        },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      return { status: res.status, body: (await res.json()) as Record<string, any> };
    };
    const exported = await call('/config/capture', 'rita');
    assert.is(exported.status, 200);
    assert.is(exported.body.capture[0].name, 'shop');
    const next = structuredClone(exported.body);
    next.capture[0].tables.push({ table: 'notes', operations: ['insert'], target: 'note-changes' });

    const refused = await call('/config/capture', 'olga', next);
    assert.is(refused.status, 403);
    assert.match(
      refused.body.error,
      /user "olga" has operate right on topology "cfg"; this needs admin/,
    );

    const bad = structuredClone(exported.body);
    bad.capture[0].tables[0].target = 'no-such-queue';
    const problems = await call('/config/capture', 'adam', bad);
    assert.is(problems.status, 400);
    assert.is(problems.body.problems[0].path, 'capture[0].tables[0].target');
    assert.match(problems.body.problems[0].file, /config-import\.json$/);
    assert.ok(problems.body.problems[0].line > 0);

    const applied = await call('/config/capture', 'adam', next);
    assert.is(applied.status, 200, JSON.stringify(applied.body));
    assert.is(applied.body.version.version, 1);
    assert.is(applied.body.version.user, 'adam');
    assert.equal(applied.body.audit.action, 'config-import');
    assert.equal(triggersOf(dbFile), ['items', 'notes']);

    const history = await call('/config/history', 'rita');
    assert.equal(
      history.body.versions.map((v: { version: number; action: string }) => [v.version, v.action]),
      [
        [0, 'initial'],
        [1, 'import'],
      ],
    );
    assert.is(history.body.versions[1].diff[0].path, 'capture[0].tables[1]');
    const v0 = await call('/config/history/0', 'rita');
    assert.is(v0.body.capture[0].tables.length, 1);

    assert.is((await call('/config/restore', 'olga', { version: 0 })).status, 403);
    assert.is((await call('/config/restore', 'adam', { version: 9 })).status, 404);
    const restored = await call('/config/restore', 'adam', { version: 0 });
    assert.is(restored.status, 200, JSON.stringify(restored.body));
    assert.equal([restored.body.version.version, restored.body.version.restoredFrom], [2, 0]);
    assert.equal(triggersOf(dbFile), ['items']);
    const audit = fs
      .readFileSync(path.join(dir, 'data', 'ops', 'audit.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { action: string; user: string });
    assert.equal(
      audit.map((a) => `${a.user} ${a.action}`),
      ['adam config-import', 'adam config-restore'],
    );
  } finally {
    await running?.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
