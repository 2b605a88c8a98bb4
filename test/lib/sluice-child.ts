/**
 * Test helper (not a test file): `sluice run <topology>` in a child process (this checkout's
 * dist/cli/sluice.js), killed with SIGKILL a given time after it printed that it is up, or
 * stopped with SIGTERM once a condition holds.
 */
import { spawn } from 'node:child_process';

const cli = new URL('../../cli/sluice.js', import.meta.url).pathname;

/** How a `sluice run` child ended. */
export interface Run {
  code: number | null;
  signal: string | null;
  out: string;
}

/**
 * `sluice run file` in a child; killed `killAfterMs` after it is up (null: SIGTERM once `until` holds); `fault`
 * sets SLUICE_FAULT=after-append. Every run is bounded: killed after 90 s whatever happens.
 */
export function runSluice(
  file: string,
  opts: { killAfterMs: number | null; fault?: boolean; until?: () => boolean | Promise<boolean> },
): Promise<Run> {
  return new Promise((resolve) => {
    const env = { ...process.env };
    if (opts.fault) env.SLUICE_FAULT = 'after-append';
    else delete env.SLUICE_FAULT;
    const p = spawn(process.execPath, [cli, 'run', file], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env,
    });
    let out = '';
    let up = false;
    const timers: NodeJS.Timeout[] = [];
    const onData = (b: Buffer) => {
      out += b;
      if (up || !out.includes(' is up (')) return;
      up = true;
      if (opts.killAfterMs !== null)
        timers.push(setTimeout(() => p.kill('SIGKILL'), opts.killAfterMs));
      else {
        let busy = false;
        const poll = setInterval(() => {
          if (busy) return;
          busy = true;
          Promise.resolve(opts.until!()).then(
            (done) => {
              busy = false;
              if (!done) return;
              clearInterval(poll);
              p.kill('SIGTERM');
            },
            () => (busy = false),
          );
        }, 100);
        timers.push(poll);
      }
    };
    p.stdout.on('data', onData);
    p.stderr.on('data', onData);
    // Bound every run: a child that never comes up is killed and reported.
    timers.push(setTimeout(() => p.kill('SIGKILL'), 90_000));
    p.on('exit', (code, signal) => {
      for (const t of timers) clearTimeout(t);
      resolve({ code, signal, out });
    });
  });
}
