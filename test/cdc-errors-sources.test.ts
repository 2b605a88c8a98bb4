/**
 * The error table's commands across capture sources (index.ts requeueCaptureErrors /
 * purgeCaptureErrors / listCaptureErrors): staging ids are numbered per source, so ids without
 * a source are refused when the topology has several (a fresh user's `sluice errors purge t 1`
 * deleted id 1 of every source); a source whose database cannot be reached is named at its
 * field (file:line:col), not as a bare driver error.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import {
  ConfigError,
  listCaptureErrors,
  parseTopology,
  purgeCaptureErrors,
  requeueCaptureErrors,
} from '../index.js';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-errors-sources-'));
test.after(() => fs.rmSync(dir, { recursive: true, force: true }));

/** A topology with capture sources `names` (SQLite files under dir, or `url` for the last). */
function topology(names: string[], url?: string) {
  const file = path.join(dir, 'topology.yaml');
  const lines = ['name: t', `dataDir: ${dir}/data`, 'queues:'];
  for (const n of names) lines.push(`  - { name: ${n}-changes }`);
  lines.push('capture:');
  names.forEach((n, i) => {
    const last = i === names.length - 1 && url !== undefined;
    lines.push(
      `  - name: ${n}`,
      last
        ? `    database: { dialect: postgres, url: "${url}" }`
        : `    database: { dialect: sqlite, file: ${dir}/${n}.db }`,
      '    tables:',
      `      - { table: orders, operations: [insert], target: ${n}-changes }`,
    );
  });
  fs.writeFileSync(file, lines.join('\n') + '\n');
  return parseTopology(fs.readFileSync(file, 'utf8'), file, { env: {} });
}

test('staging ids without --source are refused when the topology has several sources; nothing is opened', async () => {
  const t = topology(['pg', 'my']);
  for (const run of [purgeCaptureErrors, requeueCaptureErrors]) {
    const e = await run(t, { ids: ['1'] }).then(
      () => null,
      (x: unknown) => x as Error,
    );
    assert.ok(e, 'refused');
    assert.match(
      e!.message,
      /^errors (purge|requeue): staging ids are numbered per capture source and .*topology\.yaml has 2 \(pg, my\): name one with --source$/,
    );
  }
  assert.not.ok(fs.existsSync(path.join(dir, 'pg.db')), 'no database opened');
});

test('a source whose database cannot be reached is named at its field', async () => {
  const t = topology(['down'], 'postgres://nobody@127.0.0.1:1/none');
  const e = await listCaptureErrors(t).then(
    () => null,
    (x: unknown) => x as Error,
  );
  assert.instance(e, ConfigError);
  assert.match(
    e!.message,
    /topology\.yaml:7:\d+: capture\[0\]\.database\.url: capture source "down": cannot connect to postgres:\/\/nobody@127\.0\.0\.1:1\/none: .*ECONNREFUSED/,
  );
});

test.run();
