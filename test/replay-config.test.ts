/**
 * Bad restart configuration fails at load with a clear message naming the service and the
 * field: OUTPUT_REVERSE without an output-replay handler, a snapshot without its type,
 * snapshotEveryInputs without a snapshot, an unknown strategy name. The service host refuses to
 * start with the same message (when checkServiceModules was not called).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { loadTopology, startTopology, ConfigError } from '../index.js';
import { checkServiceModules } from '../actors/index.js';

const fixture = (name: string) =>
  new URL(`./fixtures/services/${name}.js`, import.meta.url).pathname;

function topologyFile(
  dir: string,
  service: { module: string; inputsReplay: string; settings?: string },
): string {
  const file = path.join(dir, 'topology.yaml');
  fs.writeFileSync(
    file,
    [
      'name: bad',
      'dataDir: ./data',
      'supervisor: { restartsMax: 0 }',
      'queues:',
      '  - { name: in }',
      '  - { name: out }',
      '  - { name: out2 }',
      'services:',
      '  - name: fine',
      `    module: ${fixture('lww-product')}`,
      '    inputs: [in]',
      '    output: out2',
      '  - name: positions',
      `    module: ${service.module}`,
      '    inputs: [in]',
      '    output: out',
      `    inputsReplay: ${service.inputsReplay}`,
      ...(service.settings ? [`    settings: ${service.settings}`] : []),
      '',
    ].join('\n'),
  );
  return file;
}

async function rejection(p: Promise<unknown>): Promise<Error> {
  try {
    await p;
  } catch (err) {
    return err as Error;
  }
  throw new Error('expected a rejection');
}

const cases = [
  {
    name: 'OUTPUT_REVERSE without an output-replay handler',
    service: { module: fixture('no-replay-handler'), inputsReplay: 'OUTPUT_REVERSE' },
    message:
      /topology\.yaml:17:19: services\[1\]\.inputsReplay: service "positions": inputsReplay OUTPUT_REVERSE needs an output-replay handler replayOutput\(state, event\) => boolean/,
    host: /inputsReplay: service "positions": inputsReplay OUTPUT_REVERSE needs an output-replay handler/,
  },
  {
    name: 'a snapshot without its type',
    service: { module: fixture('snapshot-no-type'), inputsReplay: 'INPUTS' },
    message:
      /topology\.yaml:14:13: services\[1\]\.module: service "positions": snapshot\.type is not declared/,
    host: /snapshot\.type: service "positions": snapshot\.type is not declared/,
  },
  {
    name: 'snapshotEveryInputs without a snapshot',
    service: {
      module: fixture('lww-product'),
      inputsReplay: 'OUTPUT',
      settings: '{ snapshotEveryInputs: 100 }',
    },
    message:
      /services\[1\]\.settings\.snapshotEveryInputs: service "positions": settings\.snapshotEveryInputs is set but the service definition declares no snapshot/,
    host: /settings\.snapshotEveryInputs: service "positions": settings\.snapshotEveryInputs is set/,
  },
  {
    name: 'snapshots every N timer events without periodic update events',
    service: { module: fixture('lww-timer-snapshot'), inputsReplay: 'OUTPUT' },
    message:
      /topology\.yaml:14:13: services\[1\]\.module: service "positions": snapshots every N periodic update events need them: set settings\.timerQueue and settings\.timerIntervalMs/,
    host: /snapshot\.everyTimerEvents: service "positions": snapshots every N periodic update events need them/,
  },
  {
    name: 'a key-value store with an input replay',
    service: { module: fixture('kv-counter'), inputsReplay: 'INPUTS' },
    message:
      /topology\.yaml:17:19: services\[1\]\.inputsReplay: service "positions": a service with a key-value store rebuilds it from its output; inputsReplay must be NONE, not INPUTS/,
    host: /inputsReplay: service "positions": a service with a key-value store rebuilds it from its output/,
  },
];

for (const c of cases) {
  test(`${c.name} fails at load, naming the service and the field; the host refuses to start with it`, async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-replay-config-'));
    try {
      const topology = loadTopology(topologyFile(dir, c.service));
      const err = await rejection(checkServiceModules(topology));
      assert.match(err.message, c.message);
      assert.is(err.message.split('\n').length, 1, err.message);
      // startTopology runs the same load-time check before any actor starts (the host keeps
      // its own refusal, c.host, as a second line of defence for embedders who skip it).
      const started = await rejection(startTopology(topology, { log: () => {} }));
      assert.match(started.message, c.message);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
}

test('an unknown strategy name fails at load, naming the service entry and the allowed values', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-replay-config-'));
  try {
    const file = topologyFile(dir, { module: fixture('lww-product'), inputsReplay: 'OUTPUTS' });
    let err: unknown = null;
    try {
      loadTopology(file);
    } catch (e) {
      err = e;
    }
    assert.instance(err, ConfigError);
    assert.match(
      (err as Error).message,
      /topology\.yaml:\d+:\d+: services\[1\]\.inputsReplay: .*OUTPUT_REVERSE/,
    );
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('a service with every hook passes the check for each strategy it supports', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-replay-config-'));
  try {
    for (const inputsReplay of ['NONE', 'INPUTS', 'OUTPUT', 'OUTPUT_REVERSE']) {
      await checkServiceModules(
        loadTopology(topologyFile(dir, { module: fixture('lww-product'), inputsReplay })),
      );
    }
    for (const inputsReplay of ['NONE', 'INPUTS', 'OUTPUT']) {
      await checkServiceModules(
        loadTopology(
          topologyFile(dir, {
            module: fixture('lww-product-snapshot'),
            inputsReplay,
            settings: '{ snapshotEveryInputs: 10 }',
          }),
        ),
      );
    }
    const err = await rejection(
      checkServiceModules(
        loadTopology(
          topologyFile(dir, {
            module: fixture('lww-product-snapshot'),
            inputsReplay: 'OUTPUT_REVERSE',
          }),
        ),
      ),
    );
    assert.match(
      err.message,
      /services\[1\]\.inputsReplay: service "positions": snapshots and inputsReplay OUTPUT_REVERSE are alternatives/,
    );
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('settings.timerQueue without onTimer (or a key-value store) fails at load: the timer events would be dropped', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-replay-config-'));
  try {
    const file = path.join(dir, 'topology.yaml');
    fs.writeFileSync(
      file,
      `name: x\nqueues:\n  - { name: events }\n  - { name: out }\nservices:\n  - name: s\n    module: ${fixture('lww-product')}\n    inputs: [events]\n    output: out\n    settings: { timerQueue: events, timerIntervalMs: 10 }\n`,
    );
    const err = await rejection(checkServiceModules(loadTopology(file)));
    assert.match(
      err.message,
      'services[0].settings.timerQueue: service "s": settings.timerQueue is set but the service definition has no onTimer',
    );
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
