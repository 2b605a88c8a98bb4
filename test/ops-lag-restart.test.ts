/**
 * Consumer lag while a restarted service starts: inputs whose effect is already written are not
 * lag. A service handles 3 events, the topology stops, and starts again with an init that blocks
 * 3 s; during that start /actors must report no lag for the service's input (before the fix it
 * reported the whole history: handled -1 until the service was live, a false alarm after every
 * restart), and afterwards still none.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { loadTopology, openQueueAppender, startTopology } from '../index.js';

const service = new URL('./fixtures/services/ops-logger.js', import.meta.url).pathname;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(port));
    });
    s.on('error', reject);
  });
}

interface Lag {
  queue: string;
  lagRecords: number;
}

test('a restarted service with a slow start reports no lag for inputs it already handled', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-lag-restart-'));
  const file = path.join(dir, 'topology.yaml');
  const write = (settings: string) =>
    fs.writeFileSync(
      file,
      `name: lagrestart\ndataDir: ./data\nqueues:\n  - { name: in }\n  - { name: out }\nservices:\n  - { name: svc, module: ${service}, inputs: [in], output: out, settings: ${settings} }\n`,
    );
  try {
    write('{}');
    let t = loadTopology(file);
    let running = await startTopology(t, { log: () => {} });
    const a = openQueueAppender(t, 'in');
    for (let i = 0; i < 3; i++) a.appendJson(`k${i}`, { n: i });
    a.close();
    for (let i = 0; i < 300 && running.supervisor.counters()['service:svc']!.eventsIn < 3; i++)
      await sleep(50);
    assert.is(running.supervisor.counters()['service:svc']!.eventsIn, 3);
    await running.stop();

    write('{ initDelayMs: 3000 }');
    t = loadTopology(file);
    const port = await freePort();
    const starting = startTopology(t, { http: { host: '127.0.0.1', port }, log: () => {} });
    const seen: number[] = [];
    const t0 = Date.now();
    while (Date.now() - t0 < 2500) {
      try {
        const res = await fetch(`http://127.0.0.1:${port}/actors`);
        const body = (await res.json()) as {
          actors: Array<{ name: string; inputs: Lag[] }>;
        };
        const svc = body.actors.find((x) => x.name === 'service:svc');
        for (const i of svc?.inputs ?? []) seen.push(i.lagRecords);
      } catch {
        /* the server is not listening yet */
      }
      await sleep(100);
    }
    running = await starting;
    assert.ok(seen.length > 0, 'lag was sampled during the slow start');
    assert.equal([...new Set(seen)], [0], `lag during the start: ${seen.join(',')}`);
    await running.stop();
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
