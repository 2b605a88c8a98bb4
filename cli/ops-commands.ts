/**
 * Operations commands of the `sluice` command line, against a running topology's HTTP API:
 *   sluice status --http URL [--interval-ms N] [--once]   the figures of GET /actors, refreshing
 *   sluice log-level --http URL [--actor NAME] [LEVEL]     show or set log levels (audited)
 *   sluice pumps --http URL --source NAME [COUNT]           show or change a capture source's pump count (audited)
 *   sluice user add --file users.json --name N --right R [--topology T] [--schema S]   add a user of the API, print its token
 *   sluice stats --http URL [--step minute|hour] [--from T] [--to T]   the statistics (GET /stats)
 *   sluice config export|import|history|restore <topology.yaml> ...   the capture section as JSON
 * and the parser of `sluice run --http [host:]port`.
 */
import os from 'node:os';
import { InvalidArgumentError, type Command } from 'commander';
import type { ActorStatus, CaptureSourceStats, Health } from '../ops/index.js';
import type { AuditEntry, StatsSeries } from '../ops/index.js';
import { addUser, RIGHTS, type Right } from '../ops/auth.js';
import { AuditLog } from '../ops/audit.js';
import {
  configHistory,
  exportCapture,
  historyFile,
  importCapture,
  restoreCapture,
  type ConfigVersion,
} from '../ops/capture-config.js';
import { loadTopology } from '../engine/config/index.js';

/** Authorization header from --token or SLUICE_TOKEN (never printed). */
function authHeaders(token: string | undefined): Record<string, string> {
  const t = token ?? process.env.SLUICE_TOKEN;
  return t ? { authorization: `Bearer ${t}` } : {};
}

/** `127.0.0.1:8080`, `:8080`, `8080`, `[::1]:8080` -> host and port (host default 127.0.0.1). */
export function parseHttpAddress(value: string): { host: string; port: number } {
  // The host, when given, ends at the last colon: "8080" is a port, not host "808" and port 0.
  const m = /^(?:(?:\[([0-9a-fA-F:.]+)\]|([^:[\]]*)):)?(\d{1,5})$/.exec(value.trim());
  const port = m ? Number(m[3]) : NaN;
  if (!m || !(port >= 0 && port <= 65535)) {
    throw new InvalidArgumentError(
      `--http must be [host:]port with port 0-65535 (e.g. 127.0.0.1:8080), got "${value}"`,
    );
  }
  const host = m[1] ?? (m[2] || '127.0.0.1');
  return { host, port };
}

function baseUrl(value: string): string {
  const url = /^https?:\/\//.test(value) ? value : `http://${value}`;
  try {
    return new URL(url).origin;
  } catch {
    throw new InvalidArgumentError(
      `--http must be the URL of a running topology (e.g. http://127.0.0.1:8080), got "${value}"`,
    );
  }
}

async function getJson<T>(
  base: string,
  route: string,
  init?: RequestInit,
): Promise<{ status: number; body: T }> {
  let res: Response;
  try {
    res = await fetch(`${base}${route}`, init);
  } catch (err) {
    const cause = (err as Error & { cause?: Error }).cause?.message ?? (err as Error).message;
    throw new Error(
      `cannot reach ${base}${route}: ${cause} (is the topology running with --http?)`,
    );
  }
  const text = await res.text();
  try {
    return { status: res.status, body: JSON.parse(text) as T };
  } catch {
    throw new Error(`${base}${route}: HTTP ${res.status}, not JSON: ${text.slice(0, 200)}`);
  }
}

const fmt = (n: number) =>
  n >= 1e6
    ? `${(n / 1e6).toFixed(2)}M`
    : n >= 1e4
      ? `${(n / 1e3).toFixed(1)}k`
      : String(Math.round(n * 10) / 10);

/**
 * The status table: one line per actor, then capture sources. An actor waiting out an outage
 * (counters.downSinceMs set) ends its line with `DOWN since <time>`, as `sluice run`'s status
 * lines do; a start still waiting for a broker (health.waiting) has one such line per wait.
 */
export function statusTable(
  actors: ActorStatus[],
  health: Health,
  capture: CaptureSourceStats[],
): string {
  const lines: string[] = [];
  lines.push(
    `health: ${health.status}${health.reasons.length ? ` (${health.reasons.join('; ')})` : ''}`,
  );
  const head = [
    'actor',
    'state',
    'restarts',
    'in',
    'out',
    'in/s 1s',
    'in/s 1m',
    'out/s 1m',
    'lag rec',
    'lag ms',
    'ring',
  ];
  const rows = actors.map((a) => {
    const lagRecords = a.inputs.reduce((m, l) => Math.max(m, l.lagRecords), 0);
    const lagMs = a.inputs.reduce((m, l) => Math.max(m, l.lagMs), 0);
    return [
      a.name,
      a.state,
      String(a.restarts),
      fmt(a.counters.eventsIn),
      fmt(a.counters.eventsOut),
      fmt(a.rates.eventsIn.perSecond1s),
      fmt(a.rates.eventsIn.perSecond1m),
      fmt(a.rates.eventsOut.perSecond1m),
      a.inputs.length ? fmt(lagRecords) : '-',
      a.inputs.length ? fmt(lagMs) : '-',
      a.ring ? `${Math.round(a.ring.ratio * 100)}%` : '-',
    ];
  });
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const line = (r: string[]) =>
    r.map((c, i) => (i === 0 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join('  ');
  const down = (a: ActorStatus) =>
    a.counters.downSinceMs > 0
      ? `  DOWN since ${new Date(a.counters.downSinceMs).toISOString()}`
      : '';
  lines.push(line(head), ...rows.map((r, i) => line(r) + down(actors[i])));
  // An older server's health has no `waiting`.
  for (const w of health.waiting ?? [])
    lines.push(`start: ${w.what} DOWN since ${w.since}: waiting to ${w.action}`);
  for (const s of capture) {
    if (s.error !== null) {
      lines.push(`capture ${s.source}: cannot read (${s.error})`);
      continue;
    }
    for (const t of s.tables ?? []) {
      lines.push(
        `capture ${s.source} ${t.table}: staged ${t.stagingDepth}, oldest ${fmt(t.oldestStagedAgeMs)} ms, parked ${t.parkedErrors ?? '-'}`,
      );
    }
  }
  return lines.join('\n');
}

/** The statistics as a table: one line per series and interval, oldest first. */
export function statsTable(series: StatsSeries[]): string {
  const head = ['start', 'kind', 'name', 'in', 'out', 'errors', 'lag p50 ms', 'lag p99 ms'];
  const rows: string[][] = [];
  for (const s of series) {
    for (const p of s.points) {
      rows.push([
        new Date(p.startMs).toISOString(),
        s.kind,
        s.name,
        String(p.eventsIn),
        String(p.eventsOut),
        String(p.errors),
        p.lagP50Ms === null ? '-' : String(p.lagP50Ms),
        p.lagP99Ms === null ? '-' : String(p.lagP99Ms),
      ]);
    }
  }
  rows.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const line = (r: string[]) =>
    r.map((c, i) => (i < 3 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join('  ');
  return [line(head), ...rows.map(line)].join('\n');
}

/** Adds `status`, `log-level`, `pumps`, `user add` and `stats` to the program. */
export function addOpsCommands(
  program: Command,
  intOption: (name: string, min: number) => (v: string) => number,
): void {
  program
    .command('status')
    .requiredOption('--http <url>', 'HTTP address of the running topology (sluice run --http)')
    .option(
      '--interval-ms <ms>',
      'refresh every <ms> milliseconds',
      intOption('--interval-ms', 100),
      2000,
    )
    .option('--once', 'print once and exit', false)
    .option('--json', 'print GET /actors as JSON (implies --once)', false)
    .option('--token <token>', "a user's token when the server has users (default: $SLUICE_TOKEN)")
    .description(
      'show every actor of a running topology: state, restarts, counters, rates, lag, ring',
    )
    .action(
      async (opts: {
        http: string;
        intervalMs: number;
        once: boolean;
        json: boolean;
        token?: string;
      }) => {
        const base = baseUrl(opts.http);
        const init = { headers: authHeaders(opts.token) };
        const once = opts.once || opts.json || !process.stdout.isTTY;
        for (;;) {
          const [actors, health, capture] = await Promise.all([
            getJson<{ actors: ActorStatus[]; error?: string }>(base, '/actors', init),
            getJson<Health>(base, '/health', init),
            getJson<{ sources: CaptureSourceStats[] }>(base, '/capture', init),
          ]);
          if (actors.status !== 200)
            throw new Error(`status: HTTP ${actors.status}: ${actors.body.error ?? ''}`);
          if (opts.json) {
            console.log(JSON.stringify(actors.body, null, 2));
            return;
          }
          const text = statusTable(actors.body.actors, health.body, capture.body.sources);
          if (once) {
            console.log(text);
            return;
          }
          process.stdout.write(`\x1b[H\x1b[2J${new Date().toISOString()}  ${base}\n${text}\n`);
          await new Promise((r) => setTimeout(r, opts.intervalMs));
        }
      },
    );

  program
    .command('user')
    .description('manage users of the operations API (a users file for sluice run --users)')
    .command('add')
    .requiredOption('--file <users.json>', 'users file (created if missing, mode 0600)')
    .requiredOption('--name <name>', 'user name')
    .requiredOption('--right <right>', `one of ${RIGHTS.join(', ')}`)
    .option('--topology <name>', 'topology the right is for (default: every topology, "*")', '*')
    .option(
      '--schema <name>',
      'the right is for this captured schema only (its error tables, pump counts, configuration), on --topology',
    )
    .description(
      'add a user (or give an existing one a new token and right); prints the token once',
    )
    .action(
      (opts: { file: string; name: string; right: string; topology: string; schema?: string }) => {
        const token = addUser(
          opts.file,
          opts.name,
          opts.right as Right,
          opts.topology,
          opts.schema,
        );
        const where = opts.topology === '*' ? 'every topology' : `topology "${opts.topology}"`;
        console.error(
          `sluice: user "${opts.name}" has ${opts.right} on ${opts.schema !== undefined ? `schema "${opts.schema}" of ${where}` : where} in ${opts.file}; the token (shown once):`,
        );
        console.log(token);
      },
    );

  program
    .command('log-level')
    .argument(
      '[level]',
      'trace, debug, info, warn, error, fatal or silent (omit to show the levels)',
    )
    .requiredOption('--http <url>', 'HTTP address of the running topology (sluice run --http)')
    .option('--actor <name>', 'only this actor (default: the global level)')
    .option('--token <token>', "a user's token when the server has users (default: $SLUICE_TOKEN)")
    .description('show or change log levels of a running topology (each change is audited)')
    .action(
      async (level: string | undefined, opts: { http: string; actor?: string; token?: string }) => {
        const base = baseUrl(opts.http);
        if (level === undefined) {
          const r = await getJson<{
            global: string;
            actors: Record<string, string>;
            error?: string;
          }>(base, '/log-level', { headers: authHeaders(opts.token) });
          if (r.status !== 200)
            throw new Error(`log-level: HTTP ${r.status}: ${r.body.error ?? ''}`);
          console.log(`global  ${r.body.global}`);
          for (const [name, l] of Object.entries(r.body.actors)) console.log(`${name}  ${l}`);
          return;
        }
        const r = await getJson<AuditEntry & { error?: string }>(base, '/log-level', {
          method: 'PUT',
          headers: {
            'content-type': 'application/json',
            'x-sluice-user': os.userInfo().username,
            ...authHeaders(opts.token),
          },
          body: JSON.stringify({ level, actor: opts.actor }),
        });
        if (r.status !== 200)
          throw new Error(`log-level: HTTP ${r.status}: ${r.body.error ?? JSON.stringify(r.body)}`);
        console.log(
          `${r.body.target}: ${String(r.body.before)} -> ${String(r.body.after)} (by ${r.body.user} at ${r.body.time})`,
        );
      },
    );

  program
    .command('pumps')
    .argument('[count]', 'the new pump count (omit to show the running one)')
    .requiredOption('--http <url>', 'HTTP address of the running topology (sluice run --http)')
    .requiredOption('--source <name>', 'the capture source')
    .option('--token <token>', "a user's token when the server has users (default: $SLUICE_TOKEN)")
    .description(
      "show or change a capture source's pump count while it runs: the pumps finish the batch in flight, then the new set starts, each key keeping its order (audited)",
    )
    .action(
      async (count: string | undefined, opts: { http: string; source: string; token?: string }) => {
        const base = baseUrl(opts.http);
        const route = `/capture/${encodeURIComponent(opts.source)}/pumps`;
        if (count === undefined) {
          const r = await getJson<{ source: string; pumps: number; error?: string }>(base, route, {
            headers: authHeaders(opts.token),
          });
          if (r.status !== 200) throw new Error(`pumps: HTTP ${r.status}: ${r.body.error ?? ''}`);
          console.log(`${r.body.source}  ${r.body.pumps}`);
          return;
        }
        if (!/^\d+$/.test(count))
          throw new InvalidArgumentError(`pumps: count must be a positive integer, got "${count}"`);
        const r = await getJson<AuditEntry & { switchMs: number; error?: string }>(base, route, {
          method: 'PUT',
          headers: {
            'content-type': 'application/json',
            'x-sluice-user': os.userInfo().username,
            ...authHeaders(opts.token),
          },
          body: JSON.stringify({ pumps: Number(count) }),
        });
        if (r.status !== 200)
          throw new Error(`pumps: HTTP ${r.status}: ${r.body.error ?? JSON.stringify(r.body)}`);
        console.log(
          `${r.body.target}: ${String(r.body.before)} -> ${String(r.body.after)} pumps in ${r.body.switchMs} ms (by ${r.body.user} at ${r.body.time})`,
        );
      },
    );

  program
    .command('stats')
    .requiredOption('--http <url>', 'HTTP address of the running topology (sluice run --http)')
    .option('--step <step>', 'minute or hour', 'minute')
    .option(
      '--from <time>',
      'first interval: ms since the epoch or ISO time (default: an hour ago, a day for hours)',
    )
    .option('--to <time>', 'end (exclusive): ms since the epoch or ISO time (default: now)')
    .option('--name <name>', 'only this actor or capture table (<source>/<table>)')
    .option('--json', 'print GET /stats as JSON', false)
    .option('--token <token>', "a user's token when the server has users (default: $SLUICE_TOKEN)")
    .description(
      'per-minute or hourly statistics per actor and capture table: events in/out, errors, lag p50/p99',
    )
    .action(
      async (opts: {
        http: string;
        step: string;
        from?: string;
        to?: string;
        name?: string;
        json: boolean;
        token?: string;
      }) => {
        if (opts.step !== 'minute' && opts.step !== 'hour')
          throw new InvalidArgumentError(`--step must be minute or hour, got "${opts.step}"`);
        const q = new URLSearchParams({ step: opts.step });
        if (opts.from !== undefined) q.set('from', opts.from);
        if (opts.to !== undefined) q.set('to', opts.to);
        if (opts.name !== undefined) q.set('name', opts.name);
        const r = await getJson<{ series: StatsSeries[]; error?: string }>(
          baseUrl(opts.http),
          `/stats?${q.toString()}`,
          { headers: authHeaders(opts.token) },
        );
        if (r.status !== 200) throw new Error(`stats: HTTP ${r.status}: ${r.body.error ?? ''}`);
        console.log(opts.json ? JSON.stringify(r.body, null, 2) : statsTable(r.body.series));
      },
    );

  const config = program
    .command('config')
    .description(
      'the capture configuration as JSON: export, import (validated, applied), history, restore',
    );
  config
    .command('export')
    .argument('<topology>', 'topology YAML file')
    .option('--schema <schema>', 'only the sources of this captured schema')
    .description("print the topology file's capture section as JSON")
    .action((file: string, opts: { schema?: string }) => {
      loadTopology(file);
      console.log(JSON.stringify(exportCapture(file, opts.schema), null, 2));
    });
  config
    .command('import')
    .argument('<topology>', 'topology YAML file')
    .argument('<file.json>', 'capture section as sluice config export writes it')
    .description(
      'validate a capture section (as the YAML is), install its triggers, rewrite the topology file, record the version',
    )
    .action(async (file: string, json: string) => {
      const user = os.userInfo().username;
      const before = exportCapture(file);
      const v = await importCapture(file, json, user);
      auditConfig(file, user, 'config-import', before.capture, v);
      console.log(versionLine(v));
    });
  config
    .command('history')
    .argument('<topology>', 'topology YAML file')
    .option('--json', 'one JSON object per version, the capture section included', false)
    .description('every applied version of the capture section: version, time, user, diff')
    .action((file: string, opts: { json: boolean }) => {
      const dataDir = loadTopology(file).dataDir;
      const versions = configHistory(dataDir);
      // --json is one line per version: none is no line, which a reader of lines takes as is.
      if (versions.length === 0 && !opts.json) console.log(noHistoryLine(historyFile(dataDir)));
      for (const v of versions) {
        if (opts.json) {
          console.log(JSON.stringify(v));
          continue;
        }
        console.log(versionLine(v));
        for (const d of v.diff)
          console.log(`  ${d.path}: ${JSON.stringify(d.before)} -> ${JSON.stringify(d.after)}`);
      }
    });
  config
    .command('restore')
    .argument('<topology>', 'topology YAML file')
    .argument(
      '<version>',
      'version to restore (sluice config history lists them)',
      intOption('<version>', 0),
    )
    .description('apply an earlier version of the capture section again, as a new version')
    .action(async (file: string, version: number) => {
      const user = os.userInfo().username;
      const before = exportCapture(file);
      const v = await restoreCapture(loadTopology(file), version, user);
      auditConfig(file, user, 'config-restore', before.capture, v);
      console.log(versionLine(v));
    });
}

/**
 * What `sluice config history` prints before any version is recorded. A restore needs a version
 * to restore, so the first version always comes from an import (applyImport records the section
 * as it was as version 0 and the import as version 1).
 */
export function noHistoryLine(file: string): string {
  return `no capture configuration history yet (${file}): the first "sluice config import" (or POST /config/capture) records version 0, the capture section as it was, and version 1, the import`;
}

/** `version 3 (import by olga at ...): 2 changes`. */
export function versionLine(v: ConfigVersion): string {
  const what = v.action === 'restore' ? `restore of version ${v.restoredFrom}` : v.action;
  return `version ${v.version} (${what} by ${v.user} at ${v.time}): ${v.diff.length} change${v.diff.length === 1 ? '' : 's'}`;
}

function auditConfig(
  file: string,
  user: string,
  action: string,
  before: unknown,
  v: ConfigVersion,
): void {
  const t = loadTopology(file);
  new AuditLog(t.dataDir).record({
    user,
    remote: 'cli',
    action,
    target: 'capture',
    before,
    after: { version: v.version, capture: v.capture },
  });
}
