/**
 * Runs the compiled `sluice` CLI (dist/cli/sluice.js) in a child process for CLI tests.
 */
import { spawn } from 'node:child_process';

/** Absolute path of the compiled CLI entry. */
export const SLUICE_CLI = new URL('../../cli/sluice.js', import.meta.url).pathname;

/** What one CLI run gave: exit code (null when killed), stdout and stderr as text. */
export interface CliResult {
  code: number | null;
  out: string;
  err: string;
}

/**
 * `sluice <args>` with `stdin` written to its standard input (then closed; the command may exit
 * before reading all of it). Killed with SIGKILL after `timeoutMs` (default 60 s), which then
 * resolves with code null. Never rejects.
 */
export function sluice(
  args: string[],
  stdin: string | Buffer = '',
  timeoutMs = 60_000,
): Promise<CliResult> {
  return new Promise((resolve) => {
    const p = spawn(process.execPath, [SLUICE_CLI, ...args], { stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    p.stdout.on('data', (b) => (out += b));
    p.stderr.on('data', (b) => (err += b));
    const timer = setTimeout(() => p.kill('SIGKILL'), timeoutMs);
    p.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, out, err });
    });
    p.stdin.on('error', () => {
      /* the command may exit before reading all of stdin */
    });
    p.stdin.end(stdin);
  });
}

/**
 * The values of every record of `queue`'s partitions 0..partitions-1, as `sluice tail
 * --from-start` prints them (partition by partition, each in offset order).
 * @throws Error when a tail exits non-zero.
 */
export async function tailValues<T>(file: string, queue: string, partitions: number): Promise<T[]> {
  const out: T[] = [];
  for (let p = 0; p < partitions; p++) {
    const r = await sluice(['tail', file, queue, '-p', String(p), '--from-start', '-n', '1000000']);
    if (r.code !== 0) throw new Error(`sluice tail ${queue} -p ${p} exited ${r.code}: ${r.err}`);
    for (const line of r.out.split('\n'))
      if (line !== '') out.push((JSON.parse(line) as { value: T }).value);
  }
  return out;
}
