/**
 * The installed package as a user gets it: `npm pack`, then `npm ci` of the tarball into a fresh
 * directory (dependencies from the npm cache that this checkout's own install filled, pinned by
 * a lockfile derived from ours; the registry only for what the cache lacks), then, in child node
 * processes there: every documented name of every entry point, the pattern examples copied out
 * of the repository, the `sluice` bin on a user's service module, and tsc on a user's TypeScript
 * file against the shipped types.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFile } from 'node:child_process';

const root = new URL('../../', import.meta.url).pathname;
const tsc = path.join(root, 'node_modules', 'typescript', 'bin', 'tsc');

/** The value exports each entry point documents (README), exactly. */
const DOCUMENTED: Record<string, string[]> = {
  sluice: [
    'ConfigError',
    'EVENT_TYPE_CHANGE',
    'EVENT_TYPE_JSON',
    'TOPOLOGY_DEFAULTS',
    'TopologyRunningError',
    'PumpCountError',
    'PumpCounts',
    'USER_EVENT_TYPE_MIN',
    'checkCaptureLive',
    'checkServiceModules',
    'formatProblem',
    'installCapture',
    'listCaptureErrors',
    'listDeadLetters',
    'loadTopology',
    'openQueueAppender',
    'RecordInputError',
    'BrokerAwayError',
    'JSON_DEPTH_MAX',
    'parseTopology',
    'partitionDir',
    'purgeCaptureErrors',
    'purgeDeadLetters',
    'queueId',
    'replayDeadLetterQueue',
    'requeueCaptureErrors',
    'startTopology',
    'uninstallCapture',
  ],
  'sluice/service': [
    'EVENT_TYPE_CHANGE',
    'EVENT_TYPE_JSON',
    'USER_EVENT_TYPE_MIN',
    'defineService',
  ],
  'sluice/bus': [
    'BUS_DEFAULTS',
    'BusError',
    'createJournalBus',
    'createKafkaBus',
    'createMemoryBus',
    'murmur2',
    'partitionForKey',
  ],
  'sluice/patterns': [
    'PATTERN_DEFAULTS',
    'RPC_TIMEOUT_MS_DEFAULT',
    'RpcConnectionError',
    'RpcRemoteError',
    'RpcTimeoutError',
    'bytesCodec',
    'jsonCodec',
    'partitionTransactionalId',
    'startCompacted',
    'startDurable',
    'startPubSub',
    'startRpcResponder',
    'startRpcSender',
    'startStateAndEvent',
    'stringCodec',
  ],
};
/** `sluice/testing` grows (test helpers); these must be there. */
const TESTING_AT_LEAST = [
  'PGBENCH_ACCOUNTS_PER_BRANCH',
  'PGBENCH_SCALE_MAX',
  'PGBENCH_TELLERS_PER_BRANCH',
  'TPCB_DEFAULTS',
  'createPgbenchSchema',
  'runTpcb',
  'runTpcbClient',
  'resolveKafkaLibs',
  'sharedKafkaBrokers',
  'startKafka',
  'testKafka',
];
const EXAMPLES = ['compacted', 'pubsub', 'rpc', 'state-and-event', 'durable'];

function run(
  cmd: string,
  args: string[],
  cwd: string,
  timeoutMs = 120_000,
): Promise<{ code: number; out: string; err: string }> {
  return new Promise((resolve) => {
    execFile(cmd, args, { cwd, timeout: timeoutMs, maxBuffer: 64 << 20 }, (error, out, err) => {
      const code = error ? (typeof error.code === 'number' ? error.code : 1) : 0;
      resolve({ code, out: String(out), err: String(err) });
    });
  });
}

/**
 * A lockfile for a project that depends on the tarball only: our lock's non-dev entries (same
 * versions, resolved URLs and integrity, so `npm ci` finds them in the cache) plus the tarball.
 */
function consumerLock(tarball: string, integrity: string): object {
  const lock = JSON.parse(fs.readFileSync(path.join(root, 'package-lock.json'), 'utf8')) as {
    packages: Record<string, Record<string, unknown>>;
  };
  const self = lock.packages['']!;
  const packages: Record<string, unknown> = {
    '': { name: 'consumer', dependencies: { sluice: `file:${tarball}` } },
    'node_modules/sluice': {
      version: self.version,
      resolved: `file:${tarball}`,
      integrity,
      license: self.license,
      dependencies: self.dependencies,
      bin: self.bin,
      engines: self.engines,
    },
  };
  for (const [key, entry] of Object.entries(lock.packages)) {
    if (key !== '' && entry.dev !== true) packages[key] = entry;
  }
  return { name: 'consumer', lockfileVersion: 3, requires: true, packages };
}

let dir = '';
let consumer = '';

test.before(async () => {
  const t0 = Date.now();
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-package-'));
  const packed = await run('npm', ['pack', '--json', '--pack-destination', dir], root);
  assert.is(packed.code, 0, packed.err);
  const [info] = JSON.parse(packed.out) as Array<{
    filename: string;
    integrity: string;
    files: Array<{ path: string }>;
  }>;
  fs.writeFileSync(path.join(dir, 'files.json'), JSON.stringify(info!.files.map((f) => f.path)));
  consumer = path.join(dir, 'app');
  fs.mkdirSync(consumer);
  fs.renameSync(path.join(dir, info!.filename), path.join(consumer, info!.filename));
  fs.writeFileSync(
    path.join(consumer, 'package.json'),
    JSON.stringify(
      {
        name: 'consumer',
        private: true,
        type: 'module',
        dependencies: { sluice: `file:${info!.filename}` },
      },
      null,
      2,
    ),
  );
  fs.writeFileSync(
    path.join(consumer, 'package-lock.json'),
    JSON.stringify(consumerLock(info!.filename, info!.integrity), null, 2),
  );
  // --ignore-scripts: better-sqlite3 would compile its addon (minutes); nothing here opens SQLite.
  const installed = await run(
    'npm',
    ['ci', '--prefer-offline', '--ignore-scripts', '--no-audit', '--no-fund'],
    consumer,
  );
  assert.is(installed.code, 0, `${installed.out}\n${installed.err}`);
  process.stdout.write(`\n  packed and installed in ${Date.now() - t0} ms\n`);
});

test.after(() => {
  fs.rmSync(dir, { recursive: true, force: true });
});

test('the tarball carries the compiled package and its types, not the tests, benchmarks or sources', () => {
  const files = JSON.parse(fs.readFileSync(path.join(dir, 'files.json'), 'utf8')) as string[];
  for (const f of [
    'package.json',
    'README.md',
    'dist/cli/sluice.js',
    'dist/index.js',
    'dist/index.d.ts',
    'dist/service.d.ts',
    'dist/bus.d.ts',
    'dist/patterns.d.ts',
    'dist/testing/index.d.ts',
    'dist/engine/workload/tpcb-client.worker.js',
    'dist/actors/service-host.js',
  ]) {
    assert.ok(files.includes(f), `${f} is not in the tarball`);
  }
  const unwanted = files.filter(
    (f) =>
      /^dist\/(test|bench|examples|tools)\//.test(f) || (f.endsWith('.ts') && !f.endsWith('.d.ts')),
  );
  assert.equal(unwanted, []);
});

test('every entry point exports exactly its documented names; internals are not importable', async () => {
  const script = [
    'const out = {};',
    `for (const e of ${JSON.stringify([...Object.keys(DOCUMENTED), 'sluice/testing'])}) out[e] = Object.keys(await import(e)).sort();`,
    "try { await import('sluice/engine/journal/index.js'); out.deep = 'imported'; } catch (e) { out.deep = e.code; }",
    "try { await import('sluice/dist/engine/journal/index.js'); out.dist = 'imported'; } catch (e) { out.dist = e.code; }",
    'console.log(JSON.stringify(out));',
  ].join('\n');
  fs.writeFileSync(path.join(consumer, 'names.mjs'), script);
  const r = await run(process.execPath, ['names.mjs'], consumer);
  assert.is(r.code, 0, r.err);
  const got = JSON.parse(r.out) as Record<string, string[] | string>;
  for (const [entry, names] of Object.entries(DOCUMENTED))
    assert.equal(got[entry], [...names].sort(), entry);
  for (const name of TESTING_AT_LEAST)
    assert.ok((got['sluice/testing'] as string[]).includes(name), `sluice/testing lacks ${name}`);
  assert.is(got.deep, 'ERR_PACKAGE_PATH_NOT_EXPORTED');
  assert.is(got.dist, 'ERR_PACKAGE_PATH_NOT_EXPORTED');
});

test("every exported name is in the README's row for its entry point", () => {
  const readme = fs.readFileSync(path.join(root, 'README.md'), 'utf8');
  for (const [entry, names] of Object.entries({
    ...DOCUMENTED,
    'sluice/testing': TESTING_AT_LEAST,
  })) {
    const row = readme.split('\n').find((l) => l.startsWith(`| \`${entry}\` |`));
    assert.ok(row, `no README row for ${entry}`);
    const documented = new Set(
      [...row!.matchAll(/`([A-Za-z_][A-Za-z0-9_]*)[`(*]/g)].map((m) => m[1]),
    );
    const missing = names.filter(
      (n) => !documented.has(n) && !(n.startsWith('PGBENCH_') && documented.has('PGBENCH_')),
    );
    assert.equal(missing, [], entry);
  }
});

test('the pattern examples copied out of the repository run on the installed package with the same output', async () => {
  fs.mkdirSync(path.join(consumer, 'examples'));
  const runs = await Promise.all(
    EXAMPLES.map(async (name) => {
      const file = path.join(root, 'dist', 'examples', 'patterns', `${name}.js`);
      fs.copyFileSync(file, path.join(consumer, 'examples', `${name}.js`));
      const [inRepo, installed] = await Promise.all([
        run(process.execPath, [file], root),
        run(process.execPath, [path.join('examples', `${name}.js`)], consumer),
      ]);
      return { name, inRepo, installed };
    }),
  );
  for (const { name, inRepo, installed } of runs) {
    assert.is(inRepo.code, 0, inRepo.err);
    assert.is(installed.code, 0, `${name}: ${installed.err}`);
    assert.ok(installed.out.trim().length > 0, name);
    assert.is(installed.out, inRepo.out, name);
  }
});

test("the sluice bin checks a topology whose service imports 'sluice/service'", async () => {
  fs.mkdirSync(path.join(consumer, 'services'));
  fs.writeFileSync(
    path.join(consumer, 'services', 'echo.mjs'),
    [
      "import { defineService } from 'sluice/service';",
      'export default defineService({',
      '  init: () => ({ n: 0 }),',
      '  handlers: { json(state, event, ctx) { state.n++; ctx.emit(event.key, event.json()); } },',
      '});',
    ].join('\n'),
  );
  fs.writeFileSync(
    path.join(consumer, 'topology.yaml'),
    [
      'name: app',
      'queues:',
      '  - { name: in }',
      '  - { name: out }',
      'services:',
      '  - { name: echo, module: ./services/echo.mjs, inputs: [in], output: out }',
      '',
    ].join('\n'),
  );
  const r = await run(
    path.join(consumer, 'node_modules', '.bin', 'sluice'),
    ['check', 'topology.yaml'],
    consumer,
  );
  assert.is(r.code, 0, r.err);
  assert.match(r.out, 'topology.yaml: ok (3 queues, 1 service, 0 capture sources)');
});

test("a user's TypeScript file compiles against the shipped types (and type errors are caught)", async () => {
  fs.writeFileSync(
    path.join(consumer, 'app.ts'),
    [
      "import { loadTopology, startTopology, queueId, type Topology, type RunningTopology } from 'sluice';",
      "import { defineService, type ServiceEvent, type Change } from 'sluice/service';",
      "import { createJournalBus, createMemoryBus, type BusBackend } from 'sluice/bus';",
      "import { jsonCodec, startDurable, type Subscription } from 'sluice/patterns';",
      "import { createPgbenchSchema, TPCB_DEFAULTS } from 'sluice/testing';",
      '',
      'export const service = defineService<{ totals: Map<string, number> }>({',
      '  init: () => ({ totals: new Map() }),',
      '  handlers: {',
      '    change(state, event: ServiceEvent, ctx) {',
      '      const change: Change = event.change();',
      '      if (change.after === null) return;',
      '      const row = JSON.parse(change.after) as { bid: string; delta: string };',
      '      state.totals.set(row.bid, (state.totals.get(row.bid) ?? 0) + Number(row.delta));',
      '      ctx.emit(row.bid, { total: state.totals.get(row.bid) });',
      '    },',
      '  },',
      '});',
      'export async function start(file: string): Promise<RunningTopology> {',
      '  const t: Topology = loadTopology(file);',
      '  return startTopology(t);',
      '}',
      'export async function durable(dir: string): Promise<Subscription> {',
      '  const bus: BusBackend = dir === "" ? createMemoryBus() : await createJournalBus({ dir });',
      '  return startDurable({ bus, groupId: "g", topics: ["in"], transactionalId: "t",',
      '    codec: jsonCodec<{ n: number }>(), processor: { onNext: (rs) => rs.map((r) =>',
      '      ({ topic: "out", key: r.key, value: new TextEncoder().encode(String(r.value?.n)) })) } });',
      '}',
      'export const id: number = queueId("trades") + TPCB_DEFAULTS.clientsMax + createPgbenchSchema.length;',
      '// @ts-expect-error: the state type is checked (a number is not a Map)',
      'defineService<{ totals: Map<string, number> }>({ init: () => 1, handlers: {} });',
      '// @ts-expect-error: queueId takes a queue name',
      'queueId(42);',
      '',
    ].join('\n'),
  );
  fs.writeFileSync(
    path.join(consumer, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: {
        target: 'ES2022',
        module: 'NodeNext',
        moduleResolution: 'NodeNext',
        strict: true,
        noEmit: true,
        types: ['node'],
        typeRoots: [path.join(root, 'node_modules', '@types')],
        skipLibCheck: true,
      },
      files: ['app.ts'],
    }),
  );
  const r = await run(process.execPath, [tsc, '-p', 'tsconfig.json'], consumer);
  assert.is(r.code, 0, `${r.out}\n${r.err}`);
});

test.run();
