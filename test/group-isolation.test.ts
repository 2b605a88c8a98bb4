/**
 * A group that keeps failing does not stop the world (issue 9, section 3): a service whose init
 * fails while a file exists fails every start; the supervisor restarts it forever with a capped
 * delay, reports only it as restarting, and the healthy service keeps processing. Once the file
 * is gone the group comes up.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {
  loadTopology,
  startTopology,
  partitionDir,
  type Topology,
  type RestartEvent,
} from '../index.js';
import { Appender, Tailer } from '../engine/journal/index.js';
import { EnvelopeWriter, EVENT_TYPE_JSON, encodeJson } from '../engine/codec/index.js';

const thrower = new URL('./fixtures/services/thrower.js', import.meta.url).pathname;
const initFails = new URL('./fixtures/services/init-fails.js', import.meta.url).pathname;

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

test('a group that keeps failing restarts forever with capped backoff; the others keep running', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-isolation-'));
  let stop: (() => Promise<unknown>) | null = null;
  try {
    const failFile = path.join(dir, 'broken');
    fs.writeFileSync(failFile, '');
    const file = path.join(dir, 'topology.yaml');
    fs.writeFileSync(
      file,
      [
        'name: isolation',
        'dataDir: ./data',
        'supervisor: { backoffInitialMs: 20, backoffMaxMs: 160 }',
        'queues:',
        '  - { name: in }',
        '  - { name: out }',
        '  - { name: other-in }',
        '  - { name: other-out }',
        'services:',
        '  - name: pass',
        `    module: ${thrower}`,
        '    inputs: [in]',
        '    output: out',
        '  - name: broken',
        `    module: ${initFails}`,
        '    inputs: [other-in]',
        '    output: other-out',
        `    settings: { failFile: ${JSON.stringify(failFile)} }`,
        '',
      ].join('\n'),
    );
    const t = loadTopology(file);
    const restarts: RestartEvent[] = [];
    const run = await startTopology(t, {
      log: () => undefined,
      onSupervisor: (s) => s.on('restart', (e: RestartEvent) => restarts.push(e)),
    });
    stop = () => run.stop();
    let fatal: Error | null = null;
    run.supervisor.done.catch((e: Error) => (fatal = e));

    await until('8 restarts', () => restarts.length >= 8);
    const status = run.supervisor.groupStatus();
    assert.is(status['service:broken'].state, 'restarting');
    assert.match(status['service:broken'].lastError ?? '', 'init fails');
    assert.is(status['service:pass'].state, 'up');
    assert.equal(
      restarts.slice(0, 8).map((r) => r.delayMs),
      [20, 40, 80, 160, 160, 160, 160, 160],
    );
    assert.ok(
      restarts.every((r) => r.group === 'service:broken'),
      JSON.stringify(restarts.map((r) => r.group)),
    );

    // The healthy service processes events appended while the other group keeps failing.
    const writer = new EnvelopeWriter();
    const a = Appender.open({ dir: partitionDir(t, 'in', 0) });
    for (let n = 0; n < 50; n++) {
      a.append(writer.encode({ type: EVENT_TYPE_JSON, key: `k${n}`, payload: encodeJson({ n }) }));
    }
    a.close();
    await until('50 outputs', () => count(t, 'out') === 50);
    assert.is(fatal, null);

    // The cause goes away: the failing group comes up and processes its input.
    fs.rmSync(failFile);
    const b = Appender.open({ dir: partitionDir(t, 'other-in', 0) });
    b.append(writer.encode({ type: EVENT_TYPE_JSON, key: 'x', payload: encodeJson({ n: 0 }) }));
    b.close();
    await until(
      'the broken service up',
      () => run.supervisor.groupStatus()['service:broken'].state === 'up',
    );
    await until('its output', () => count(t, 'other-out') === 1);
    assert.is(fatal, null);
  } finally {
    await stop?.();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
