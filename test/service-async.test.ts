/**
 * Service handlers run synchronously: an `async` handler (whose outputs after an `await` would
 * only run at shutdown and be lost without a word) is refused by `sluice check` and at start,
 * naming the module and the handler; a plain handler that returns a promise fails its group at
 * run time with the reason instead of counting the input as handled. Real CLI and worker threads.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { loadTopology, openQueueAppender, startTopology } from '../index.js';
import { sluice } from './lib/cli.js';

const fixture = (name: string) =>
  new URL(`./fixtures/services/${name}.js`, import.meta.url).pathname;

function topologyFile(dir: string, module: string, supervisor = ''): string {
  const file = path.join(dir, 'topology.yaml');
  fs.writeFileSync(
    file,
    `name: asyncsvc\ndataDir: ./data\n${supervisor}queues:\n  - { name: in }\n  - { name: out }\nservices:\n  - { name: svc, module: ${module}, inputs: [in], output: out }\n`,
  );
  return file;
}

test('an async handler is refused by sluice check and at start, naming the handler', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-async-'));
  try {
    const file = topologyFile(dir, fixture('async-handler'));
    const r = await sluice(['check', file]);
    assert.is(r.code, 2, r.out + r.err);
    assert.match(
      r.err + r.out,
      /handlers\.json is an async function; service handlers run synchronously/,
    );
    let failed: Error | null = null;
    try {
      const running = await startTopology(loadTopology(file), { log: () => {} });
      await running.stop();
    } catch (e) {
      failed = e as Error;
    }
    assert.ok(failed, 'startTopology refuses it');
    assert.match(failed!.message, /handlers\.json is an async function/);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('a handler that returns a promise fails its group with the reason; nothing is counted as handled', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-async-'));
  try {
    const file = topologyFile(
      dir,
      fixture('promise-handler'),
      'supervisor: { restartsMax: 1, backoffInitialMs: 10 }\n',
    );
    const t = loadTopology(file);
    const lines: string[] = [];
    const running = await startTopology(t, { log: (l) => lines.push(l) });
    const a = openQueueAppender(t, 'in');
    a.appendJson('k1', { v: 1 });
    a.close();
    const deadline = Date.now() + 30_000;
    while (!lines.some((l) => l.includes('returned a promise')) && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 50));
    await running.stop().catch(() => undefined);
    assert.ok(
      lines.some((l) =>
        /service svc: handler for type \d+ returned a promise; service handlers run synchronously/.test(
          l,
        ),
      ),
      lines.join('\n'),
    );
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
