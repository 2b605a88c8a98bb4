/**
 * Case C2 with a real crash: the pump appends to its sink, then its process is SIGKILLed before
 * the staging row is deleted. After restart the sink holds the event exactly once, with the same
 * staging id: the restarted pump acks the row it finds among the sink's recent ids instead of
 * appending it again.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { openStaging } from '../engine/cdc/index.js';
import type { StagedChange } from '../engine/cdc/index.js';
import { stagingName, createAppDb, DIALECTS, LEDGER_DDL, sourceFor, view } from './cdc-helpers.js';

const CHILD = fileURLToPath(new URL('./cdc-crash.child.js', import.meta.url));

function runChild(
  arg: string,
  fault: string | null,
): { status: number | null; signal: NodeJS.Signals | null; stdout: string; stderr: string } {
  const env = { ...process.env };
  if (fault) env.SLUICE_FAULT = fault;
  else delete env.SLUICE_FAULT;
  const r = spawnSync(process.execPath, [CHILD, arg], { env, encoding: 'utf8', timeout: 30_000 });
  return { status: r.status, signal: r.signal, stdout: r.stdout, stderr: r.stderr };
}

function sinkLines(file: string): StagedChange[] {
  if (!existsSync(file)) return [];
  return readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l.length > 0)
    .map((l) => JSON.parse(l) as StagedChange);
}

for (const dialect of [...DIALECTS, 'mariadb'] as const) {
  test(`${dialect}: C2 SIGKILL after append and before ack; after restart the sink holds the event once with the same staging id`, async () => {
    const app = await createAppDb(dialect);
    const dir = mkdtempSync(join(tmpdir(), 'sluice-cdc-crash-'));
    const sinkFile = join(dir, 'sink.jsonl');
    const source = sourceFor(app, [{}]);
    const staging = await openStaging(source);
    try {
      await app.exec(LEDGER_DDL[dialect]);
      await staging.install();
      await app.exec(`INSERT INTO ledger(id, holder) VALUES (10, 'twice')`);
      // Read the id directly: claiming here would make this session the owner of pump 0.
      const [staged] = await app.query<{ stagingId: string }>(
        dialect === 'mariadb'
          ? `SELECT CAST(id AS CHAR) AS stagingId FROM ${stagingName(app)}`
          : `SELECT CAST(id AS TEXT) AS "stagingId" FROM ${stagingName(app)}`,
      );
      const arg = JSON.stringify({ source, sinkFile });

      const crashed = runChild(arg, 'after-append');
      assert.is(
        crashed.signal,
        'SIGKILL',
        `child killed itself: status=${crashed.status} stderr=${crashed.stderr}`,
      );
      assert.equal(
        sinkLines(sinkFile).map((c) => c.stagingId),
        [staged!.stagingId],
        'appended before the crash',
      );
      assert.is(await staging.stagedCount(), 1, 'never acked: still staged');

      const restarted = runChild(arg, null);
      assert.is(restarted.status, 0, restarted.stderr);
      assert.equal(JSON.parse(restarted.stdout), { reconciled: 1, shipped: 0 });

      const held = sinkLines(sinkFile);
      assert.is(held.length, 1, 'exactly once in the sink');
      assert.is(held[0]!.stagingId, staged!.stagingId, 'same staging id');
      assert.equal(view(held[0]!), {
        table: 'ledger',
        op: 'insert',
        key: ['10'],
        before: null,
        after: {
          id: '10',
          holder: 'twice',
          memo: null,
          amount: null,
          booked: null,
          booked_tz: null,
        },
      });
      assert.is(await staging.stagedCount(), 0, 'staging cleaned after restart');

      // A later change flows normally after recovery.
      await app.exec(`UPDATE ledger SET memo = 'later' WHERE id = 10`);
      const again = runChild(arg, null);
      assert.equal(JSON.parse(again.stdout), { reconciled: 0, shipped: 1 });
      assert.equal(
        sinkLines(sinkFile).map((c) => c.op),
        ['insert', 'update'],
      );
    } finally {
      await staging.close();
      await app.destroy();
      rmSync(dir, { recursive: true, force: true });
    }
  });
}

test.run();
