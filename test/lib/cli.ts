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
