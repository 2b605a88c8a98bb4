/**
 * A group that keeps failing does not stop the world (issue 9, section 3): its capture pump's
 * staging table is dropped under it, so every start fails; the supervisor restarts it forever
 * with a capped delay, reports only it as restarting, and the healthy service keeps processing.
 * Once the staging table is back the pump runs again.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { loadTopology, startTopology, installCapture, partitionDir, type Topology, type RestartEvent } from '../index.js';
import { Appender, Tailer } from '../engine/journal/index.js';
import { EnvelopeWriter, EVENT_TYPE_JSON, encodeJson } from '../engine/codec/index.js';

const thrower = new URL('./fixtures/services/thrower.js', import.meta.url).pathname;

function count(t: Topology, queue: string): number {
  const dir = partitionDir(t, queue, 0);
  if (!fs.existsSync(dir)) return 0;
  const tail = Tailer.open({ dir });
  tail.moveToEnd();
  const n = tail.index;
  tail.close();
  return n;
}

async function until(what: string, ok: () => boolean, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!ok()) {
    assert.ok(Date.now() < deadline, `timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

test('a pump that keeps failing restarts forever with capped backoff; the service keeps running', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-isolation-'));
  let stop: (() => Promise<unknown>) | null = null;
  try {
    const db = new Database(path.join(dir, 'app.db'));
    db.exec('CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER)');
    const file = path.join(dir, 'topology.yaml');
    fs.writeFileSync(file, [
      'name: isolation',
      'dataDir: ./data',
      'supervisor: { backoffInitialMs: 20, backoffMaxMs: 160 }',
      'queues:',
      '  - { name: in }',
      '  - { name: out }',
      '  - { name: account-changes }',
      'services:',
      '  - name: pass',
      `    module: ${thrower}`,
      '    inputs: [in]',
      '    output: out',
      'capture:',
      '  - name: app',
      '    database: { dialect: sqlite, file: ./app.db }',
      '    pollIntervalMs: 5',
      '    tables:',
      '      - { table: accounts, operations: [insert, update, delete], target: account-changes }',
      '',
    ].join('\n'));
    const t = loadTopology(file);
    await installCapture(t);
    const restarts: RestartEvent[] = [];
    const run = await startTopology(t, { log: () => undefined });
    stop = () => run.stop();
    run.supervisor.on('restart', (e: RestartEvent) => restarts.push(e));
    let fatal: Error | null = null;
    run.supervisor.done.catch((e: Error) => (fatal = e));

    // The fault: the pump's staging table disappears (renamed away; SQLite renames it in the
    // capture triggers too).
    db.exec('ALTER TABLE sluice_staging RENAME TO sluice_staging_away');
    await until('8 pump restarts', () => restarts.length >= 8);
    const status = run.supervisor.groupStatus();
    assert.is(status['pump:app/0'].state, 'restarting');
    assert.match(status['pump:app/0'].lastError ?? '', 'sluice_staging');
    assert.is(status['service:pass'].state, 'up');
    assert.equal(restarts.slice(0, 8).map((r) => r.delayMs), [20, 40, 80, 160, 160, 160, 160, 160]);
    assert.ok(restarts.every((r) => r.group === 'pump:app/0'), JSON.stringify(restarts.map((r) => r.group)));

    // The healthy service processes events appended during the outage.
    const writer = new EnvelopeWriter();
    const a = Appender.open({ dir: partitionDir(t, 'in', 0) });
    for (let n = 0; n < 50; n++) a.append(writer.encode({ type: EVENT_TYPE_JSON, key: `k${n}`, payload: encodeJson({ n }) }));
    a.close();
    await until('50 outputs', () => count(t, 'out') === 50);
    assert.is(fatal, null);

    // The dependency comes back: the pump runs again and ships captured changes.
    db.exec('ALTER TABLE sluice_staging_away RENAME TO sluice_staging');
    db.prepare('INSERT INTO accounts (id, balance) VALUES (?, ?)').run(1, 100);
    await until('the captured insert', () => count(t, 'account-changes') === 1);
    await until('the pump up', () => run.supervisor.groupStatus()['pump:app/0'].state === 'up');
    assert.is(fatal, null);
    db.close();
  } finally {
    await stop?.();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
