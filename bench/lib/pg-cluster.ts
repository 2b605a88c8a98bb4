/**
 * A throwaway PostgreSQL 15 cluster for benchmarks that must change server settings (the
 * Debezium peer needs wal_level=logical) and for the fault suite, which stops and starts it
 * (faults/bank.ts `pg-restart`): initdb into a fresh temp directory, started with
 * pg_ctl on a free port, listening on 127.0.0.1 only, trust authentication, stopped and removed
 * by stop(). The system cluster (port 5432) is never touched.
 *
 * When run as root, initdb and pg_ctl run as the `postgres` user (initdb refuses root), and the
 * directory is handed to that user.
 */
import { execFile } from 'node:child_process';
import { chownSync, mkdtempSync, rmSync, writeFileSync, appendFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** Where Debian puts PostgreSQL 15's server binaries. */
export const PG_BIN_DIR = '/usr/lib/postgresql/15/bin';

/** A running benchmark cluster. */
export interface BenchCluster {
  /** TCP port on 127.0.0.1. */
  port: number;
  /** Temp directory holding the data directory, the server log and any files of the bench. */
  dir: string;
  /** postgres:// URL of `database` on this cluster (user postgres, no password). */
  url(database: string): string;
  /**
   * Stops the server and keeps its data: `fast` (clients disconnected, a clean shutdown) or
   * `immediate` (no shutdown checkpoint: the next start runs crash recovery, as after a crash
   * of the server's processes). For fault tests; start it again with {@link startServer}.
   */
  stopServer(mode: 'fast' | 'immediate'): Promise<void>;
  /** Starts the stopped server again on the same port and data; resolves once it accepts. */
  startServer(): Promise<void>;
  /** Stops the server (fast shutdown) and removes `dir`. Idempotent. */
  stop(): Promise<void>;
}

/** Resolves a TCP port the OS reports free on 127.0.0.1 (listen on 0, close). */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address !== null ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

/** Runs a PostgreSQL binary (as `postgres` when we are root); rejects with its output. */
async function pgRun(binary: string, args: string[]): Promise<string> {
  const asRoot = userInfo().uid === 0;
  const file = asRoot ? 'runuser' : join(PG_BIN_DIR, binary);
  const argv = asRoot ? ['-u', 'postgres', '--', join(PG_BIN_DIR, binary), ...args] : args;
  try {
    const { stdout, stderr } = await run(file, argv, { maxBuffer: 16 << 20 });
    return stdout + stderr;
  } catch (err) {
    const e = err as { stdout?: string; stderr?: string; message: string };
    throw new Error(
      `${binary} ${args.join(' ')} failed: ${e.message}\n${e.stdout ?? ''}` + `${e.stderr ?? ''}`,
    );
  }
}

/**
 * Creates and starts a cluster with `settings` appended to its postgresql.conf (for example
 * `{ wal_level: 'logical' }`); values are written as given, strings quoted by the caller.
 * Throws Error naming the failed step (initdb or pg_ctl start, with their output); on a failed
 * start the directory is removed.
 */
export async function startBenchCluster(
  settings: Record<string, string | number>,
): Promise<BenchCluster> {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-bench-pg-'));
  const dataDir = join(dir, 'data');
  const logFile = join(dir, 'server.log');
  if (userInfo().uid === 0) {
    const { uid, gid } = await postgresIds();
    chownSync(dir, uid, gid);
    writeFileSync(logFile, '');
    chownSync(logFile, uid, gid);
  }
  const port = await freePort();
  let started = false;
  try {
    await pgRun('initdb', [
      '-D',
      dataDir,
      '-U',
      'postgres',
      '-A',
      'trust',
      '-E',
      'UTF8',
      '--no-sync',
    ]);
    const conf = {
      port,
      listen_addresses: `'127.0.0.1'`,
      unix_socket_directories: `'${dir}'`,
      ...settings,
    };
    appendFileSync(
      join(dataDir, 'postgresql.conf'),
      '\n# bench/lib/pg-cluster.ts\n' +
        Object.entries(conf)
          .map(([k, v]) => `${k} = ${v}`)
          .join('\n') +
        '\n',
    );
    await pgRun('pg_ctl', ['-D', dataDir, '-l', logFile, '-w', '-t', '60', 'start']);
    started = true;
  } finally {
    if (!started) rmSync(dir, { recursive: true, force: true });
  }
  let stopped = false;
  return {
    port,
    dir,
    url: (database) => `postgres://postgres@127.0.0.1:${port}/${database}`,
    async stopServer(mode) {
      await pgRun('pg_ctl', ['-D', dataDir, '-m', mode, '-w', '-t', '60', 'stop']);
    },
    async startServer() {
      await pgRun('pg_ctl', ['-D', dataDir, '-l', logFile, '-w', '-t', '120', 'start']);
    },
    async stop() {
      if (stopped) return;
      stopped = true;
      try {
        // Already stopped (a fault test's stopServer): pg_ctl fails; the directory goes anyway.
        await pgRun('pg_ctl', ['-D', dataDir, '-m', 'fast', '-w', '-t', '60', 'stop']).catch(
          () => undefined,
        );
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
  };
}

async function postgresIds(): Promise<{ uid: number; gid: number }> {
  const { stdout: uid } = await run('id', ['-u', 'postgres']);
  const { stdout: gid } = await run('id', ['-g', 'postgres']);
  return { uid: Number(uid.trim()), gid: Number(gid.trim()) };
}
