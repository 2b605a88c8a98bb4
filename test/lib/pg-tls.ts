/**
 * A private PostgreSQL server that accepts only TLS connections on 127.0.0.1, for tests of TLS
 * to PostgreSQL: initdb into a temporary directory, a CA and a server certificate for
 * 127.0.0.1 made with openssl, `hostssl ... trust` and `hostnossl ... reject` in pg_hba.conf.
 * Runs as the `postgres` OS user when started as root (initdb refuses root). Needs the
 * PostgreSQL server binaries (Debian: /usr/lib/postgresql/<version>/bin) and openssl.
 */
import { execFileSync } from 'node:child_process';
import {
  chmodSync,
  chownSync,
  existsSync,
  mkdtempSync,
  readdirSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';

/** A running TLS-only server made by {@link startPostgresTls}. */
export interface PostgresTls {
  /** Client port on 127.0.0.1. */
  port: number;
  /** The CA that signed the server's certificate (PEM), for `sslrootcert`. */
  caFile: string;
  /** Stops the server (fast shutdown) and removes its directory. Idempotent. */
  stop(): void;
}

function binDir(): string {
  const root = '/usr/lib/postgresql';
  const versions = existsSync(root) ? readdirSync(root).sort((a, b) => Number(b) - Number(a)) : [];
  for (const v of versions)
    if (existsSync(path.join(root, v, 'bin', 'initdb'))) return path.join(root, v, 'bin');
  throw new Error(`no PostgreSQL server binaries under ${root}`);
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const port = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(port));
    });
    s.on('error', reject);
  });
}

/**
 * Starts the server and waits until it accepts connections (pg_ctl -w).
 * @throws Error with initdb's, openssl's or the server log's output when a step fails.
 */
export async function startPostgresTls(): Promise<PostgresTls> {
  const bin = binDir();
  const dir = mkdtempSync(path.join(tmpdir(), 'sluice-pgtls-'));
  const root = process.getuid?.() === 0;
  const uid = root
    ? Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim())
    : -1;
  const gid = root
    ? Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim())
    : -1;
  const asPg = (cmd: string, args: string[]): string =>
    root
      ? execFileSync('runuser', ['-u', 'postgres', '--', cmd, ...args], {
          encoding: 'utf8',
          stdio: ['ignore', 'pipe', 'pipe'],
        })
      : execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  const ssl = (args: string[]) =>
    execFileSync('openssl', args, { stdio: ['ignore', 'pipe', 'pipe'] });
  const caFile = path.join(dir, 'ca.pem');
  const crt = path.join(dir, 'server.crt');
  const key = path.join(dir, 'server.key');
  ssl([
    'req',
    '-x509',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-days',
    '2',
    '-subj',
    '/CN=sluice test CA',
    '-keyout',
    path.join(dir, 'ca.key'),
    '-out',
    caFile,
  ]);
  ssl([
    'req',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-subj',
    '/CN=127.0.0.1',
    '-keyout',
    key,
    '-out',
    path.join(dir, 'server.csr'),
  ]);
  writeFileSync(path.join(dir, 'san.ext'), 'subjectAltName=IP:127.0.0.1,DNS:localhost\n');
  ssl([
    'x509',
    '-req',
    '-in',
    path.join(dir, 'server.csr'),
    '-CA',
    caFile,
    '-CAkey',
    path.join(dir, 'ca.key'),
    '-CAcreateserial',
    '-days',
    '2',
    '-extfile',
    path.join(dir, 'san.ext'),
    '-out',
    crt,
  ]);
  chmodSync(key, 0o600);
  if (root) {
    chownSync(dir, uid, gid);
    for (const f of readdirSync(dir)) chownSync(path.join(dir, f), uid, gid);
  }
  const data = path.join(dir, 'data');
  const port = await freePort();
  let started = false;
  const stop = (): void => {
    if (started) {
      started = false;
      try {
        asPg(path.join(bin, 'pg_ctl'), ['-D', data, '-m', 'fast', '-w', 'stop']);
      } catch {
        /* already stopped */
      }
    }
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    asPg(path.join(bin, 'initdb'), ['-D', data, '-A', 'trust', '-U', 'postgres', '--no-sync']);
    writeFileSync(
      path.join(data, 'pg_hba.conf'),
      [
        'local all all trust',
        'hostssl all all 127.0.0.1/32 trust',
        'hostnossl all all 127.0.0.1/32 reject',
        '',
      ].join('\n'),
    );
    const opts = [
      `-p ${port}`,
      `-k ${dir}`,
      '-c listen_addresses=127.0.0.1',
      '-c ssl=on',
      `-c ssl_cert_file=${crt}`,
      `-c ssl_key_file=${key}`,
      '-c fsync=off',
      '-c shared_buffers=16MB',
    ].join(' ');
    asPg(path.join(bin, 'pg_ctl'), [
      '-D',
      data,
      '-o',
      opts,
      '-l',
      path.join(dir, 'server.log'),
      '-w',
      '-t',
      '120',
      'start',
    ]);
    started = true;
  } catch (e) {
    const err = e as { stderr?: string; stdout?: string; message: string };
    stop();
    throw new Error(`startPostgresTls: ${err.message}\n${err.stdout ?? ''}${err.stderr ?? ''}`);
  }
  return { port, caFile, stop };
}
