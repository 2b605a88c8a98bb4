/**
 * Network faults of one process (root only): the process runs in a cgroup v2 of its own, and an
 * nftables table of the suite's own drops the packets of that cgroup's sockets, all of them (a
 * partition) or a random share (loss), in both directions, on loopback as on any other
 * interface. Nothing else on the machine is touched: the broker, PostgreSQL and the suite's own
 * clients keep their network, so the fault is between the topology and what it talks to.
 *
 * Packets to and from the ports in `except` (the topology's operations API) pass, so the suite
 * can still ask the process how it is while its dependencies are cut off.
 *
 * Why not `tc netem` in a network namespace (what issue 13 names): the kernels of the machines
 * here have no netem qdisc (`tc qdisc add dev lo root netem delay 10ms` answers "Specified qdisc
 * kind is unknown"), so delay is not injected; partition and loss need only nftables and the
 * `socket cgroupv2` match (Linux 4.10+, nftables 0.9+).
 *
 * The rules (one table per scope, `inet sluice_faults_<pid>_<n>`):
 * ```
 * chain out { type filter hook output priority 0; }   # the process's packets leaving
 *   socket cgroupv2 level 1 "<cgroup>" tcp sport <except> accept
 *   socket cgroupv2 level 1 "<cgroup>" [numgen random mod 100 < <percent>] drop
 * chain in  { type filter hook input priority 0; }    # packets for the process's sockets
 *   socket cgroupv2 level 1 "<cgroup>" tcp dport <except> accept
 *   socket cgroupv2 level 1 "<cgroup>" [numgen random mod 100 < <percent>] drop
 * ```
 * A socket belongs to the cgroup its process was in when it was created, so the process is put
 * there before it runs (`procsFile`, see faults/harness.ts TopologyProcess `cgroupProcs`).
 */
import fs from 'node:fs';
import path from 'node:path';
import { execFileSync } from 'node:child_process';

/** Where nftables resolves `socket cgroupv2` paths from. */
const CGROUP_ROOT = '/sys/fs/cgroup';

let scopes = 0;

/** A cgroup and an nftables table of the suite's own for one process's network faults. */
export class NetScope {
  /** Write a pid here to put that process (and the sockets it creates later) in the scope. */
  readonly procsFile: string;
  private readonly table: string;
  private readonly cgroupPath: string;
  private closed = false;

  private constructor(
    private readonly dir: string,
    private readonly except: readonly number[],
  ) {
    this.procsFile = path.join(dir, 'cgroup.procs');
    this.table = `sluice_faults_${process.pid}_${++scopes}`;
    this.cgroupPath = path.relative(CGROUP_ROOT, dir);
    nft(`add table inet ${this.table}
add chain inet ${this.table} out { type filter hook output priority 0; policy accept; }
add chain inet ${this.table} in { type filter hook input priority 0; policy accept; }`);
  }

  /**
   * The cgroup v2 mount point under /sys/fs/cgroup when network faults work here (root, a
   * cgroup2 mount nftables can name, the `nft` command, a scope that can be made and removed),
   * else null.
   */
  static available(): string | null {
    const mount = cgroup2Mount();
    if (mount === null) return null;
    try {
      const s = NetScope.open('probe', []);
      s.close();
      return mount;
    } catch {
      return null;
    }
  }

  /**
   * A new scope named after `name` (letters, digits, `-`; a cgroup `sluice-faults-<pid>-<n>-<name>`
   * at the cgroup2 root). Packets to or from the TCP ports `except` are never dropped.
   * Throws when the cgroup or the table cannot be made (see {@link available}).
   */
  static open(name: string, except: readonly number[]): NetScope {
    const mount = cgroup2Mount();
    if (mount === null) throw new Error('no cgroup2 mount under /sys/fs/cgroup');
    const dir = path.join(
      mount,
      `sluice-faults-${process.pid}-${scopes + 1}-${name.replace(/[^A-Za-z0-9-]/g, '-')}`,
    );
    fs.mkdirSync(dir);
    try {
      return new NetScope(dir, except);
    } catch (e) {
      fs.rmdirSync(dir);
      throw e;
    }
  }

  /** Drops every packet of the scope's sockets, both ways (except the `except` ports). */
  partition(): void {
    this.set('');
  }

  /** Drops `percent` % (1..99) of the scope's packets at random, both ways. */
  loss(percent: number): void {
    if (!(percent >= 1 && percent <= 99))
      throw new Error(`loss percent must be 1..99, got ${percent}`);
    this.set(`numgen random mod 100 < ${Math.round(percent)} `);
  }

  /** Lets every packet through again. */
  heal(): void {
    nft(`flush chain inet ${this.table} out\nflush chain inet ${this.table} in`);
  }

  /**
   * Removes the table and the cgroup. The processes put in the scope must have exited (a
   * cgroup with members cannot be removed: then it stays, empty of rules). Idempotent.
   */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    try {
      nft(`delete table inet ${this.table}`);
    } finally {
      try {
        fs.rmdirSync(this.dir);
      } catch {
        // a member is still alive; the empty cgroup goes with the machine
      }
    }
  }

  private set(match: string): void {
    const sel = `socket cgroupv2 level 1 "${this.cgroupPath}"`;
    const rules: string[] = [
      `flush chain inet ${this.table} out`,
      `flush chain inet ${this.table} in`,
    ];
    for (const p of this.except) {
      rules.push(`add rule inet ${this.table} out ${sel} tcp sport ${p} accept`);
      rules.push(`add rule inet ${this.table} in ${sel} tcp dport ${p} accept`);
    }
    rules.push(`add rule inet ${this.table} out ${sel} ${match}drop`);
    rules.push(`add rule inet ${this.table} in ${sel} ${match}drop`);
    nft(rules.join('\n'));
  }
}

/**
 * The command and arguments that run `command args` inside the scope whose `cgroup.procs` is
 * `procsFile`: `/bin/sh` writes its own pid there, then execs the command (same pid), so every
 * socket the command creates is in the scope from its first instruction.
 */
export function inScope(
  procsFile: string,
  command: string,
  args: readonly string[],
): [string, string[]] {
  return ['/bin/sh', ['-c', 'echo $$ > "$0" && exec "$@"', procsFile, command, ...args]];
}

/** The cgroup2 mount point if it lies under /sys/fs/cgroup (where nftables looks), else null. */
function cgroup2Mount(): string | null {
  let mounts: string;
  try {
    mounts = fs.readFileSync('/proc/mounts', 'utf8');
  } catch {
    return null;
  }
  for (const line of mounts.split('\n')) {
    const [, at, type] = line.split(' ');
    if (type === 'cgroup2' && at && (at === CGROUP_ROOT || at.startsWith(`${CGROUP_ROOT}/`)))
      return at;
  }
  return null;
}

/** Runs an nftables script (`nft -f -`); throws with nft's message. */
function nft(script: string): void {
  execFileSync('nft', ['-f', '-'], { input: `${script}\n`, stdio: ['pipe', 'ignore', 'pipe'] });
}
