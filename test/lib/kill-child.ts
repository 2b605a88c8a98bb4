/**
 * Test helper for kill -9 loops: runs a child node process and kills it with SIGKILL `afterMs`
 * after its spawn, or after it prints "live" on stdout (so the kill lands mid-stream whatever
 * the machine's load), or not at all (kill = null).
 */
import { spawn } from 'node:child_process';

/** When to kill: from the spawn or from the child's "live" line, after `afterMs` ms. */
export interface KillAt {
  from: 'spawn' | 'live';
  afterMs: number;
}

/** How the child ended; `liveToExitMs` is null if it never printed "live". */
export interface ChildRun {
  code: number | null;
  signal: string | null;
  out: string;
  liveToExitMs: number | null;
}

/** Runs `node <file> ...args` and kills it as `kill` says. */
export function runChild(file: string, args: string[], kill: KillAt | null): Promise<ChildRun> {
  return new Promise((resolve) => {
    const p = spawn(process.execPath, [file, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let liveAt: number | null = null;
    let timer: NodeJS.Timeout | null = null;
    if (kill?.from === 'spawn') timer = setTimeout(() => p.kill('SIGKILL'), kill.afterMs);
    p.stdout.on('data', (b) => {
      out += b;
      if (liveAt === null && out.includes('live\n')) {
        liveAt = Date.now();
        if (kill?.from === 'live') timer = setTimeout(() => p.kill('SIGKILL'), kill.afterMs);
      }
    });
    p.stderr.on('data', (b) => (out += b));
    p.on('exit', (code, signal) => {
      if (timer) clearTimeout(timer);
      resolve({ code, signal, out, liveToExitMs: liveAt === null ? null : Date.now() - liveAt });
    });
  });
}
