/**
 * CPU time of processes from /proc (Linux): for a child process we did not start in this
 * process (the JVM of a peer), and for a whole PostgreSQL cluster (postmaster and backends).
 */
import { readFileSync, readdirSync } from 'node:fs';
import { execFileSync } from 'node:child_process';

/** Clock ticks per second of /proc's times (getconf CLK_TCK; 100 on Linux almost always). */
const TICKS_PER_S = Number(execFileSync('getconf', ['CLK_TCK']).toString().trim()) || 100;

/** Fields of /proc/<pid>/stat after the command name: [state, ppid, ...]; null if gone. */
function statFields(pid: number): string[] | null {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return null;
  }
  return text.slice(text.lastIndexOf(')') + 2).split(' ');
}

/**
 * CPU time (user + system, ms) of process `pid`; with `children`, plus that of its children it
 * has waited for (cutime + cstime: exited backends, for a postmaster). 0 if the process is gone.
 */
export function processCpuMs(pid: number, children = false): number {
  const f = statFields(pid);
  if (f === null) return 0;
  // After the name: index 11 utime, 12 stime, 13 cutime, 14 cstime (stat fields 14-17).
  let ticks = Number(f[11]) + Number(f[12]);
  if (children) ticks += Number(f[13]) + Number(f[14]);
  return (ticks * 1000) / TICKS_PER_S;
}

/**
 * CPU time (ms) of a PostgreSQL cluster: the postmaster with the backends it has reaped, plus
 * every live process whose parent is the postmaster. Read before and after a phase; the
 * difference is the cluster's CPU in the phase (client backends, WAL senders, checkpointer...).
 */
export function clusterCpuMs(postmasterPid: number): number {
  let total = processCpuMs(postmasterPid, true);
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const f = statFields(Number(name));
    if (f !== null && Number(f[1]) === postmasterPid) total += processCpuMs(Number(name));
  }
  return total;
}
