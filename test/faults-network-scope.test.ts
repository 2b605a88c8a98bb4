/**
 * The fault suite's network faults (faults/network.ts NetScope): a child process put in a scope
 * loses its network to everything outside (a partition) or a share of its packets (loss), while
 * the processes outside the scope and the excepted port keep theirs, and healing gives it back.
 * Real sockets on loopback: a TCP echo server and a UDP sink in this process, a real child
 * process as the client. Needs root, nft and a cgroup2 mount under /sys/fs/cgroup; prints a SKIP
 * line otherwise.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import dgram from 'node:dgram';
import net from 'node:net';
import { spawn } from 'node:child_process';
import type { AddressInfo } from 'node:net';
import { NetScope, inScope } from '../faults/network.js';

const mount = NetScope.available();
if (mount === null)
  console.log(
    '  SKIP faults-network-scope: network faults need root, nft and a cgroup2 mount under /sys/fs/cgroup',
  );
const maybe = mount === null ? test.skip : test;

/** A TCP server answering each line with the same line. */
async function echoServer(): Promise<net.Server> {
  const server = net.createServer((s) => s.pipe(s));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return server;
}

const portOf = (s: net.Server | dgram.Socket) => (s.address() as AddressInfo).port;

/**
 * Runs `script` (ESM, argv[1..] = `args`) in a child node process inside `scope` and returns
 * what it printed.
 */
async function inChild(scope: NetScope, script: string, args: string[]): Promise<string> {
  const [cmd, argv] = inScope(scope.procsFile, process.execPath, [
    '--input-type=module',
    '-e',
    script,
    ...args,
  ]);
  const child = spawn(cmd, argv, { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  child.stdout.on('data', (b: Buffer) => (out += b.toString()));
  await new Promise((resolve) => child.on('exit', resolve));
  return out.trim();
}

/** A child's TCP round trip to 127.0.0.1:port: `ok` or `timeout` after 1.5 s. */
const ROUND_TRIP = `
import net from 'node:net';
const s = net.connect(Number(process.argv[1]), '127.0.0.1');
const t = setTimeout(() => { console.log('timeout'); process.exit(0); }, 1500);
s.on('error', (e) => { console.log('error ' + e.code); process.exit(0); });
s.on('connect', () => s.write('ping\\n'));
s.on('data', () => { clearTimeout(t); console.log('ok'); process.exit(0); });
`;

maybe(
  'a partition cuts the scoped process off (both ways), spares the excepted port and other processes, and heals',
  async () => {
    const server = await echoServer();
    const spared = await echoServer();
    const scope = NetScope.open('test-partition', [portOf(spared)]);
    try {
      assert.is(await inChild(scope, ROUND_TRIP, [String(portOf(server))]), 'ok', 'before');
      scope.partition();
      assert.is(await inChild(scope, ROUND_TRIP, [String(portOf(server))]), 'timeout', 'cut off');
      // The excepted port is the scoped process's own listener in the suite (its operations API):
      // here a server outside, reached from inside, on a source port that is not excepted, so
      // only the inbound rule's exception would let it through: it does not.
      assert.is(await inChild(scope, ROUND_TRIP, [String(portOf(spared))]), 'timeout');
      // A process outside the scope keeps its network.
      const outside = net.connect(portOf(server), '127.0.0.1');
      const echoed = await new Promise<string>((resolve, reject) => {
        outside.on('error', reject);
        outside.on('data', (b) => resolve(b.toString()));
        outside.write('hello\n');
      });
      outside.destroy();
      assert.is(echoed, 'hello\n');
      scope.heal();
      assert.is(await inChild(scope, ROUND_TRIP, [String(portOf(server))]), 'ok', 'healed');
    } finally {
      scope.close();
      server.close();
      spared.close();
    }
  },
);

maybe('an excepted port of the scoped process stays reachable during a partition', async () => {
  // The port must be known before the scope is made: take one, free it, give it to the child.
  const probe = await echoServer();
  const port = portOf(probe);
  await new Promise((resolve) => probe.close(resolve));
  const scoped = NetScope.open('test-except', [port]);
  const [cmd, argv] = inScope(scoped.procsFile, process.execPath, [
    '--input-type=module',
    '-e',
    `import net from 'node:net';
     net.createServer((s) => s.pipe(s)).listen(${port}, '127.0.0.1', () => console.log('listening'));`,
  ]);
  const child = spawn(cmd, argv, { stdio: ['ignore', 'pipe', 'inherit'] });
  try {
    await new Promise<void>((resolve) => child.stdout.once('data', () => resolve()));
    scoped.partition();
    const s = net.connect(port, '127.0.0.1');
    const echoed = await new Promise<string>((resolve, reject) => {
      const t = setTimeout(
        () => reject(new Error('the excepted port did not answer in 3 s')),
        3000,
      );
      s.on('error', reject);
      s.on('data', (b) => {
        clearTimeout(t);
        resolve(b.toString());
      });
      s.write('through\n');
    });
    s.destroy();
    assert.is(echoed, 'through\n');
  } finally {
    child.kill('SIGKILL');
    await new Promise((resolve) => child.on('exit', resolve));
    scoped.close();
  }
});

maybe('loss drops about the given share of the scoped process packets', async () => {
  const sink = dgram.createSocket('udp4');
  await new Promise<void>((resolve) => sink.bind(0, '127.0.0.1', resolve));
  let received = 0;
  sink.on('message', () => received++);
  const scope = NetScope.open('test-loss', []);
  const SENT = 400;
  try {
    scope.loss(50);
    const out = await inChild(
      scope,
      `import dgram from 'node:dgram';
       const s = dgram.createSocket('udp4');
       for (let i = 0; i < ${SENT}; i++)
         await new Promise((r) => s.send('x', Number(process.argv[1]), '127.0.0.1', r));
       s.close(); console.log('sent');`,
      [String(portOf(sink))],
    );
    assert.is(out, 'sent');
    await new Promise((r) => setTimeout(r, 200));
    // Binomial(400, 0.5): sd 10, so 130..270 is 7 sd either way; none and all are both failures.
    assert.ok(received > 130 && received < 270, `received ${received} of ${SENT} with 50% loss`);
  } finally {
    scope.close();
    sink.close();
  }
});

test.run();
