/**
 * Case C10 end to end, as a user runs it: `sluice run` with a capture target whose record limit
 * (capture[].recordBytesMax) is below a 2,000,000-byte memo, on SQLite and PostgreSQL. Row 111
 * is delivered; row 110 is retried, parked with its reason and shown by `sluice errors list`;
 * after the limit is raised, `sluice errors requeue` delivers it. Also the CLI's refusals.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn, type ChildProcess } from 'node:child_process';
import { createAppDb, DIALECTS, LEDGER_DDL, PG_URL, sleepMs } from './cdc-helpers.js';
import type { AppDb, Dialect } from './cdc-helpers.js';
import { sluice } from './lib/cli.js';

const cli = new URL('../cli/sluice.js', import.meta.url).pathname;
const changeLog = new URL('./fixtures/services/change-log.js', import.meta.url).pathname;

/** Starts `sluice run` and resolves once it says it is up. */
async function runUp(file: string): Promise<{ child: ChildProcess; stop: () => Promise<string> }> {
  const child = spawn(process.execPath, [cli, 'run', file, '--status-ms', '0'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let err = '';
  child.stderr!.on('data', (b) => (err += b));
  const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()));
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`run not up in 30 s: ${err}`)), 30_000);
    child.stderr!.on('data', () => {
      if (err.includes('is up')) {
        clearTimeout(timer);
        resolve();
      }
    });
  });
  return {
    child,
    stop: async () => {
      child.kill('SIGTERM');
      await exited;
      return err;
    },
  };
}

async function until<T>(
  what: string,
  probe: () => Promise<T | null>,
  timeoutMs = 30_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== null) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleepMs(100);
  }
}

function topologyText(app: AppDb, dir: string, recordBytesMax: number): string {
  const db =
    app.dialect === 'sqlite'
      ? `{ dialect: sqlite, file: ${JSON.stringify((app.ref as { file: string }).file)} }`
      : `{ dialect: postgres, url: ${JSON.stringify(PG_URL)}, schema: ${(app.ref as { schema: string }).schema}, ` +
        `captureSchema: ${(app.ref as { captureSchema: string }).captureSchema} }`;
  return `name: c10
dataDir: ${JSON.stringify(path.join(dir, 'data'))}
queues:
  - { name: ledger-changes }
  - { name: ledger-log }
services:
  - { name: log, module: ${JSON.stringify(changeLog)}, inputs: [ledger-changes], output: ledger-log }
capture:
  - name: app
    database: ${db}
    recordBytesMax: ${recordBytesMax}
    errors: { retriesImmediate: 1, attemptsMax: 2, retryDelayMs: 200, retryDelayMaxMs: 200 }
    tables:
      - { table: ledger, operations: [insert, update, delete], target: ledger-changes }
`;
}

/** Keys of the change events in the capture target, in order. */
async function targetKeys(file: string): Promise<string[]> {
  const r = await sluice(['tail', file, 'ledger-changes', '-n', '100']);
  assert.is(r.code, 0, r.err);
  return r.out
    .trim()
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => (JSON.parse(l) as { key: string }).key);
}

for (const dialect of DIALECTS) {
  test(`${dialect}: C10 end to end: 111 delivered, 110 parked with its reason (errors list), requeued after the limit is raised and delivered`, async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-c10-'));
    const app = await createAppDb(dialect as Dialect);
    try {
      await app.exec(LEDGER_DDL[dialect]);
      const file = path.join(dir, 'topology.yaml');
      fs.writeFileSync(file, topologyText(app, dir, 1_000_000));
      assert.is((await sluice(['install', file])).code, 0);
      const memo = dialect === 'postgres' ? `repeat('x', 2000000)` : `printf('%.*c', 2000000, 'x')`;
      await app.exec(`INSERT INTO ledger(id, memo) VALUES (110, ${memo})`);
      await app.exec(`INSERT INTO ledger(id, holder) VALUES (111, 'ok')`);
      const run = await runUp(file);
      const listed = await until('110 to be parked', async () => {
        const r = await sluice(['errors', 'list', file]);
        return r.out.startsWith('app: 1 parked change') ? r.out : null;
      });
      assert.equal(await targetKeys(file), ['["111"]']);
      assert.match(
        listed,
        /^ {2}\d+ {2}ledger insert key=\["110"\] attempts=2 parked=\S+Z {2}refused 2 times \(2 tries each\): record of \d{7} bytes exceeds recordBytesMax 1000000 of capture source "app" \(target queue "ledger-changes"\)$/m,
      );
      const json = await sluice(['errors', 'list', file, '--json']);
      const parked = JSON.parse(json.out.trim()) as { source: string; key: string; after: string };
      assert.is(parked.source, 'app');
      assert.is((JSON.parse(parked.after) as { memo: string }).memo.length, 2_000_000);
      await run.stop();

      fs.writeFileSync(file, topologyText(app, dir, 4_000_000));
      const rq = await sluice(['errors', 'requeue', file, '--all']);
      assert.is(rq.out.trim(), 'requeued 1 change', rq.err);
      const again = await runUp(file);
      await until('110 in the target', async () =>
        (await targetKeys(file)).length === 2 ? true : null,
      );
      assert.equal(await targetKeys(file), ['["111"]', '["110"]']);
      assert.is((await sluice(['errors', 'list', file])).out.trim(), 'app: 0 parked changes');
      await again.stop();
    } finally {
      await app.destroy();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
}

test('errors requeue and purge refuse to act on everything without --all, and name a bad id or source', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-c10-'));
  const app = await createAppDb('sqlite');
  try {
    await app.exec(LEDGER_DDL.sqlite);
    const file = path.join(dir, 'topology.yaml');
    fs.writeFileSync(file, topologyText(app, dir, 1_000_000));
    await sluice(['install', file]);
    const r = await sluice(['errors', 'purge', file]);
    assert.is(r.code, 2);
    assert.is(
      r.err.trim(),
      'sluice: errors purge: name staging ids, or --all, or --older-than-ms <ms>',
    );
    const bad = await sluice(['errors', 'requeue', file, '12x']);
    assert.is(
      bad.err.trim(),
      'sluice: errors requeue: staging id must be a decimal integer, got "12x"',
    );
    const src = await sluice(['errors', 'list', file, '--source', 'nope']);
    assert.is(src.err.trim(), `sluice: unknown capture source "nope" in ${file} (known: app)`);
    const ok = await sluice(['errors', 'purge', file, '--all']);
    assert.is(ok.out.trim(), 'purged 0 changes');
  } finally {
    await app.destroy();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('uninstall refuses while staging holds changes, then --force removes triggers and tables; the application keeps writing', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-c10-'));
  const app = await createAppDb('sqlite');
  try {
    await app.exec(LEDGER_DDL.sqlite);
    const file = path.join(dir, 'topology.yaml');
    fs.writeFileSync(file, topologyText(app, dir, 1_000_000));
    await sluice(['install', file]);
    await app.exec(`INSERT INTO ledger(id) VALUES (1)`);
    const r = await sluice(['uninstall', file]);
    assert.is(r.code, 2);
    assert.is(
      r.err.trim(),
      'sluice: capture source "app": 1 staged and 0 parked change would be lost; ship them first (sluice run), or pass --force (or --keep-staging to drop only the triggers)',
    );
    const f = await sluice(['uninstall', file, '--force']);
    assert.is(f.out.trim(), 'uninstalled capture "app"', f.err);
    assert.equal(
      await app.query(`SELECT name FROM sqlite_master WHERE name LIKE 'sluice%' ORDER BY 1`),
      [],
    );
    await app.exec(`INSERT INTO ledger(id) VALUES (2)`);
  } finally {
    await app.destroy();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
