/**
 * A network namespace made by a test (issue "Faults survived": network faults inside network
 * namespaces the test creates, loopback and test-made namespaces only). The namespace is joined to
 * the host by a veth pair on a /30 of 10.213.0.0/16; `forward(port)` makes the host's
 * 127.0.0.1:port (PostgreSQL, a Kafka broker) reachable as 127.0.0.1:port inside the namespace,
 * through a forwarder in the namespace -> the veth -> a forwarder on the host, so every byte
 * crosses the veth. `impair` then drops a share of the packets on the veth or all of them (a
 * partition) with nftables rules inside the namespace (`numgen random`; TCP sees real loss and
 * retransmits), and delays every chunk in the host's forwarder.
 *
 * Why not `tc netem`: this machine's kernel (Firecracker, 6.18) is built without any queueing
 * discipline but the default (no CONFIG_NET_SCH_NETEM; `tc qdisc add ... netem` answers
 * "Specified qdisc kind is unknown") and loads no modules, so loss and partitions use netfilter,
 * which it has, and delay is added in user space. Needs root, iproute2 and nftables.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import type net from 'node:net';
import { forward as hostForward } from './tcp-forward.js';

const forwarderScript = new URL('./tcp-forward.js', import.meta.url).pathname;

/** Why namespaces cannot be made here, or null when they can (root, `ip`, `tc`). */
export function netnsUnavailable(): string | null {
  if (process.getuid?.() !== 0) return 'not root';
  try {
    execFileSync('ip', ['-V'], { stdio: 'ignore' });
  } catch {
    return 'iproute2 (ip) not installed';
  }
  try {
    execFileSync('nft', ['--version'], { stdio: 'ignore' });
  } catch {
    return 'nftables (nft) not installed';
  }
  return null;
}

/** A test's namespace. */
export interface Netns {
  /** The namespace's name (`sluice-<tag>-<pid>`). */
  readonly name: string;
  /** Address of the host's end of the veth pair. */
  readonly hostIp: string;
  /** Runs `command args` inside the namespace (the child is the command itself: `ip netns exec` execs). */
  spawn(command: string, args: string[], opts?: Parameters<typeof spawn>[2]): ChildProcess;
  /** Makes the host's 127.0.0.1:port reachable as 127.0.0.1:port inside the namespace. */
  forward(port: number): Promise<void>;
  /**
   * Impairs the link from now on, replacing what was set: `lossPercent` of the packets crossing
   * the veth (either direction) dropped (100: a partition), every chunk forwarded `delayMs` plus
   * up to `jitterMs` later (in order). `{}` heals the link.
   */
  impair(spec: { lossPercent?: number; delayMs?: number; jitterMs?: number }): void;
  /** Stops the forwarders and deletes the namespace (its veth goes with it). */
  destroy(): Promise<void>;
}

function ip(...args: string[]): void {
  execFileSync('ip', args, { stdio: ['ignore', 'ignore', 'pipe'] });
}

/**
 * Creates a namespace with a veth to the host. @throws Error from `ip` when it cannot.
 */
export function createNetns(tag: string): Netns {
  const n = (process.pid % 16000) * 4;
  const net3 = 10 + Math.floor(n / 256);
  const base = `10.213.${net3 % 256}`;
  const hostIp = `${base}.${(n % 256) + 1}`;
  const nsIp = `${base}.${(n % 256) + 2}`;
  const name = `sluice-${tag}-${process.pid}`;
  const hostIf = `sh${process.pid % 100000}`;
  const nsIf = `sn${process.pid % 100000}`;
  try {
    ip('netns', 'del', name);
  } catch {
    /* not there */
  }
  ip('netns', 'add', name);
  ip('link', 'add', hostIf, 'type', 'veth', 'peer', 'name', nsIf);
  ip('link', 'set', nsIf, 'netns', name);
  ip('addr', 'add', `${hostIp}/30`, 'dev', hostIf);
  ip('link', 'set', hostIf, 'up');
  ip('netns', 'exec', name, 'ip', 'addr', 'add', `${nsIp}/30`, 'dev', nsIf);
  ip('netns', 'exec', name, 'ip', 'link', 'set', nsIf, 'up');
  ip('netns', 'exec', name, 'ip', 'link', 'set', 'lo', 'up');

  const children: ChildProcess[] = [];
  const servers: Array<ReturnType<typeof hostForward>> = [];
  let delay = { delayMs: 0, jitterMs: 0 };
  const nft = (...args: string[]) =>
    execFileSync('ip', ['netns', 'exec', name, 'nft', ...args], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
  nft('add', 'table', 'inet', 'sluice_fault');
  nft('add', 'chain', 'inet', 'sluice_fault', 'in', '{ type filter hook input priority 0; }');
  nft('add', 'chain', 'inet', 'sluice_fault', 'out', '{ type filter hook output priority 0; }');
  const run = (command: string, args: string[], opts: Parameters<typeof spawn>[2] = {}) =>
    spawn('ip', ['netns', 'exec', name, command, ...args], opts);

  return {
    name,
    hostIp,
    spawn: run,
    async forward(port: number) {
      const server = hostForward(
        hostIp,
        0,
        '127.0.0.1',
        port,
        () => delay.delayMs + Math.random() * delay.jitterMs,
      );
      servers.push(server);
      await new Promise<void>((resolve, reject) => {
        server.once('listening', resolve);
        server.once('error', reject);
      });
      const hostPort = (server.address() as net.AddressInfo).port;
      const child = run(
        process.execPath,
        [forwarderScript, '127.0.0.1', String(port), hostIp, String(hostPort)],
        { stdio: ['ignore', 'pipe', 'pipe'] },
      );
      children.push(child);
      await new Promise<void>((resolve, reject) => {
        let err = '';
        child.stderr!.on('data', (b) => (err += b));
        child.stdout!.on('data', (b) => String(b).includes('listening') && resolve());
        child.on('exit', (code) => reject(new Error(`forwarder exited ${code}: ${err}`)));
      });
    },
    impair(spec) {
      delay = { delayMs: spec.delayMs ?? 0, jitterMs: spec.jitterMs ?? 0 };
      nft('flush', 'chain', 'inet', 'sluice_fault', 'in');
      nft('flush', 'chain', 'inet', 'sluice_fault', 'out');
      const loss = spec.lossPercent ?? 0;
      if (loss <= 0) return;
      const match = loss >= 100 ? [] : ['numgen', 'random', 'mod', '100', '<', String(loss)];
      nft('add', 'rule', 'inet', 'sluice_fault', 'in', 'iifname', nsIf, ...match, 'drop');
      nft('add', 'rule', 'inet', 'sluice_fault', 'out', 'oifname', nsIf, ...match, 'drop');
    },
    async destroy() {
      for (const c of children) c.kill('SIGKILL');
      for (const s of servers) {
        s.close();
        for (const sock of s.sockets) sock.destroy();
      }
      try {
        ip('link', 'del', hostIf);
      } catch {
        /* gone with the namespace */
      }
      try {
        ip('netns', 'del', name);
      } catch {
        /* already gone */
      }
    },
  };
}
