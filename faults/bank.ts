/**
 * The bank job under faults (examples/bank): pgbench's TPC-B workload writes the database while
 * capture triggers stage the changes, two pumps ship them, and two services keep branch totals
 * and account balances; `sluice run` of that topology is faulted throughout.
 *
 * SQLite: the workload is runTpcb (sluice/testing) in this process. PostgreSQL: the real
 * `pgbench` against a database of the suite's own (`faults_bank`) on a cluster of the shape's own
 * where it can make one (so `pg-restart` may stop the server), the pumps connecting as a role
 * of its own (`faults_pump`), so its sessions can be terminated and its logins refused without
 * touching anyone else's; and `sluice run` in a network scope of its own (faults/network.ts), so
 * its packets to PostgreSQL can be dropped (net-partition, net-loss) while pgbench and the
 * suite's checks keep their network.
 *
 * Checks after every fault: each change once in the targets and per key in staging-id order
 * (CaptureChecker); each service input with exactly one output, in order (CauseChecker); no
 * exit of `sluice run` by itself. At the end, after a drain: every pgbench_history row shipped
 * once, staging empty, every input with its output, and the bank job's own check
 * (examples/bank/verify.ts: branch totals and account balances equal the database's).
 *
 * The bounded variant (`bankShape(dialect, { bounded: true })`, `bank-<dialect>-bounded`, the
 * soak's `--bounded`; not among the fault suite's shapes): what a long run needs to stay
 * bounded. The services are faults/bank-snapshots/ (the example's handlers plus a snapshot every
 * {@link BOUNDED.snapshotEveryInputs} inputs), so a restart replays only the inputs after the
 * newest snapshot; every queue has retention ({@link BOUNDED}.retention), so the data directory
 * holds minutes of history, not all of it. The checks are the same except where a whole queue
 * was read: the incremental checkers read every {@link BOUNDED}.checkEveryMs as well (not only
 * after each fault), well within the retention age, so they see every record before it can be
 * deleted (a record deleted unread is a "reading failed" violation or a count mismatch at the
 * end, never silence); the bank check reads each output from its newest snapshot on (the
 * snapshot's state, then the later outputs) instead of from its first record.
 */
import fs from 'node:fs';
import path from 'node:path';
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import Database from 'better-sqlite3';
import pg from 'pg';
import { loadTopology, partitionDir, type Topology } from '../index.js';
import { createPgbenchSchema, runTpcb } from '../testing/index.js';
import { verifyBank, latestByKey, type LatestByKeyReader } from '../examples/bank/verify.js';
import { Tailer } from '../engine/journal/index.js';
import { scanOutput } from '../engine/replay/index.js';
import { EnvelopeView, decodeJson, EVENT_TYPE_JSON } from '../engine/codec/index.js';
import { ACCOUNTS_SNAPSHOT_TYPE, readAccountsSnapshot } from './bank-snapshots/accounts.js';
import {
  BRANCH_BALANCES_SNAPSHOT_TYPE,
  readBranchBalancesSnapshot,
} from './bank-snapshots/branch-balances.js';
import { TopologyProcess, Tmpfs, CLI, REPO_ROOT, FAULT_BOUNDS, between } from './harness.js';
import { CaptureChecker, CauseChecker } from './checks.js';
import { NetScope } from './network.js';
import { startBenchCluster, PG_BIN_DIR, type BenchCluster } from '../bench/lib/pg-cluster.js';
import {
  commonFaults,
  injectCommon,
  faultLoop,
  checkAll,
  recover,
  type Shape,
  type ShapeContext,
  type FaultTarget,
} from './shape.js';

/**
 * The suite's PostgreSQL objects (its own prefix: other sessions share the server).
 * SLUICE_FAULTS_PG_PREFIX (default `faults`) names them, so the soak and a fault run can share
 * one server.
 */
const PG_PREFIX = process.env.SLUICE_FAULTS_PG_PREFIX ?? 'faults';
export const FAULTS_PG = {
  adminUrl: process.env.SLUICE_FAULTS_PG_ADMIN_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres',
  database: `${PG_PREFIX}_bank`,
  role: `${PG_PREFIX}_pump`,
} as const;

/**
 * The admin URL of the server the running PostgreSQL shape uses: FAULTS_PG.adminUrl, or the
 * shape's own cluster while it runs (see {@link privatePg}).
 */
let serverUrl: string = FAULTS_PG.adminUrl;

/**
 * A PostgreSQL cluster of the shape's own (bench/lib/pg-cluster.ts: initdb in a temp directory,
 * its own port), so the `pg-restart` fault may stop and start the server: when the PostgreSQL 15
 * binaries are here and SLUICE_FAULTS_PG_ADMIN_URL does not name a server; else null (the
 * shared server, no pg-restart).
 */
async function privatePg(): Promise<BenchCluster | null> {
  if (process.env.SLUICE_FAULTS_PG_ADMIN_URL !== undefined) return null;
  if (!fs.existsSync(path.join(PG_BIN_DIR, 'initdb'))) return null;
  return startBenchCluster({});
}

function pgUrl(user: string, database: string): string {
  const u = new URL(serverUrl);
  u.username = user;
  u.pathname = `/${database}`;
  return u.toString();
}

async function admin<T>(database: string, work: (c: pg.Client) => Promise<T>): Promise<T> {
  const u = new URL(serverUrl);
  u.pathname = `/${database}`;
  const c = new pg.Client({ connectionString: u.toString() });
  await c.connect();
  try {
    return await work(c);
  } finally {
    await c.end();
  }
}

/** True when the suite's PostgreSQL (SLUICE_FAULTS_PG_ADMIN_URL) answers. */
export async function pgAvailable(): Promise<boolean> {
  try {
    await admin('postgres', (c) => c.query('SELECT 1'));
    return true;
  } catch {
    return false;
  }
}

/** Drops and creates the database (owned by the role), and the role with LOGIN. */
async function resetPg(): Promise<void> {
  await admin('postgres', async (c) => {
    await c.query(`DROP DATABASE IF EXISTS ${FAULTS_PG.database} WITH (FORCE)`);
    const r = await c.query('SELECT 1 FROM pg_roles WHERE rolname = $1', [FAULTS_PG.role]);
    if (r.rowCount === 0) await c.query(`CREATE ROLE ${FAULTS_PG.role} LOGIN`);
    else await c.query(`ALTER ROLE ${FAULTS_PG.role} LOGIN`);
    await c.query(`CREATE DATABASE ${FAULTS_PG.database} OWNER ${FAULTS_PG.role}`);
  });
}

/** Drops the suite's database and role. */
export async function dropPg(): Promise<void> {
  await admin('postgres', async (c) => {
    await c.query(`DROP DATABASE IF EXISTS ${FAULTS_PG.database} WITH (FORCE)`);
    await c.query(`DROP ROLE IF EXISTS ${FAULTS_PG.role}`);
  });
}

/** Settings of the bounded variant (see the file comment). */
export const BOUNDED = {
  /** Inputs between two snapshots of each service (topology `settings.snapshotEveryInputs`). */
  snapshotEveryInputs: 20_000,
  /** `queues[].retention` of every queue: per partition, 16 MiB or 10 minutes of sealed segments. */
  retention: { bytesMax: 16 * 1048576, ageMsMax: 10 * 60_000 },
  /** Period of the incremental checks between faults, ms. */
  checkEveryMs: 60_000,
} as const;

function topologyYaml(
  dialect: 'sqlite' | 'postgres',
  dataDir: string,
  dbFile: string,
  bounded: boolean,
): string {
  const services = path.join(
    REPO_ROOT,
    bounded ? 'faults/bank-snapshots' : 'examples/bank/services',
  );
  const retention = bounded
    ? `, retention: { bytesMax: ${BOUNDED.retention.bytesMax}, ageMsMax: ${BOUNDED.retention.ageMsMax} }`
    : '';
  const settings = bounded
    ? `\n    settings: { snapshotEveryInputs: ${BOUNDED.snapshotEveryInputs} }`
    : '';
  const database =
    dialect === 'sqlite'
      ? `{ dialect: sqlite, file: ${JSON.stringify(dbFile)} }`
      : `{ dialect: postgres, url: ${JSON.stringify(pgUrl(FAULTS_PG.role, FAULTS_PG.database))} }`;
  // examples/bank/topology*.yaml with the suite's paths and 1 MiB segments (the data directory
  // may be a small tmpfs); every other setting is the example's, the supervisor's the defaults
  // (bounded: snapshots and retention, see BOUNDED).
  return `name: faults-bank
dataDir: ${JSON.stringify(dataDir)}
supervisor: { backoffMaxMs: 1000 }   # restarts forever (the default); capped at 1 s, not 5 s, so more faults fit
rings:
  capacityBytes: 1048576
queues:
  - { name: history-changes, partitions: 2, segmentBytes: 1048576${retention} }
  - { name: account-changes, partitions: 2, segmentBytes: 1048576${retention} }
  - { name: branch-balances-out, segmentBytes: 1048576${retention} }
  - { name: accounts-out, segmentBytes: 1048576${retention} }
services:
  - name: branch-balances
    module: ${JSON.stringify(path.join(services, 'branch-balances.ts'))}
    inputs: [history-changes]
    output: branch-balances-out
    inputsReplay: INPUTS${settings}
  - name: accounts
    module: ${JSON.stringify(path.join(services, 'accounts.ts'))}
    inputs: [account-changes]
    output: accounts-out
    inputsReplay: INPUTS${settings}
capture:
  - name: bank-db
    database: ${database}
    pumps: 2
    batchSizeMax: 2000
    pollIntervalMs: 5
    tables:
      - table: pgbench_history
        operations: [insert]
        columns: [tid, bid, aid, delta, mtime]
        key: [aid]
        target: history-changes
      - table: pgbench_accounts
        operations: [update]
        columns: [aid, bid, abalance]
        target: account-changes
`;
}

/**
 * The workload running in the background: `burst()` before each fault (so the fault lands while
 * transactions commit; between faults the topology catches up, which bounds the volume),
 * stop() ends it and resolves when it has.
 */
interface Workload {
  burst(ms: number): void;
  stop(): Promise<void>;
}

function sqliteWorkload(file: string, seed: number): Workload {
  let running: Promise<unknown> = Promise.resolve();
  let n = 0;
  return {
    burst(ms: number) {
      running = running.then(() =>
        runTpcb({ file, clients: 2, durationMs: ms, scale: 1, seed: seed + 2 * n++ }),
      );
    },
    async stop() {
      await running;
    },
  };
}

function pgbenchWorkload(logFile: string): Workload {
  let child: ChildProcess | null = null;
  let stopped = false;
  const log = fs.createWriteStream(logFile, { flags: 'a' });
  // pgbench as the server's superuser (not the pumps' role, whose logins the suite refuses).
  const run = () => {
    child = spawn(
      'pgbench',
      [
        '-n',
        '-c',
        '2',
        '-j',
        '1',
        '-R',
        '300',
        '-T',
        '86400',
        pgUrl('postgres', FAULTS_PG.database),
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    child.stdout!.pipe(log, { end: false });
    child.stderr!.pipe(log, { end: false });
    child.on('exit', () => {
      child = null;
      if (!stopped) setTimeout(run, 200); // a client error ends pgbench: start it again
    });
  };
  run();
  return {
    burst() {
      // pgbench runs throughout, rate-limited (-R 300 transactions/s)
    },
    async stop() {
      stopped = true;
      const c = child as ChildProcess | null;
      if (c) {
        const exited = new Promise((r) => c.once('exit', r));
        c.kill('SIGINT');
        await exited;
      }
      log.end();
    },
  };
}

/** PostgreSQL faults on the pumps' sessions. */
type PgFault = 'pg-terminate' | 'pg-login-refused' | 'pg-row-lock';

/**
 * One bank shape: `dialect` sqlite (embedded) or postgres; `bounded`: the variant with snapshots
 * and retention (see the file comment), named `bank-<dialect>-bounded`.
 */
export function bankShape(dialect: 'sqlite' | 'postgres', opts: { bounded?: boolean } = {}): Shape {
  const bounded = opts.bounded ?? false;
  const name = `bank-${dialect}${bounded ? '-bounded' : ''}`;
  return {
    name,
    async run(ctx: ShapeContext) {
      const { ledger } = ctx;
      const dataDir = path.join(ctx.dir, 'data');
      const dbFile = path.join(ctx.dir, 'bank.db');
      const file = path.join(ctx.dir, 'topology.yaml');
      let cluster: BenchCluster | null = null;
      if (dialect === 'postgres') {
        try {
          cluster = await privatePg();
        } catch (e) {
          ledger.info(`${name}: no cluster of its own (${(e as Error).message}); the shared one`);
        }
        if (cluster) {
          serverUrl = cluster.url('postgres');
          ledger.info(`${name}: PostgreSQL cluster of its own on port ${cluster.port}`);
        }
      }
      fs.writeFileSync(file, topologyYaml(dialect, dataDir, dbFile, bounded));
      let disk: Tmpfs | null = null;
      if (ctx.tmpfs) {
        // Sized for the data, not only for the disk-full faults: at full speed the bank job on
        // SQLite writes ~40 MiB a minute (215 MiB 5 min into a run), and a 256 MiB tmpfs filled
        // up for good ~6 min into a 1,000-fault run, so every later fault "failed" to recover.
        disk = new Tmpfs(dataDir, 1024 * 1048576);
        disk.mount();
      }
      let workload: Workload | null = null;
      let checker: NodeJS.Timeout | null = null;
      // Network faults between the topology and PostgreSQL (the pumps' sessions); the pgbench
      // workload and the suite's checks keep theirs.
      const net = ctx.net && dialect === 'postgres' ? NetScope.open(name, [ctx.httpPort]) : null;
      const proc = new TopologyProcess({
        file,
        httpPort: ctx.httpPort,
        logFile: path.join(ctx.dir, 'sluice.log'),
        faultDir: path.join(ctx.dir, 'worker-faults'),
        ...(net ? { cgroupProcs: net.procsFile } : {}),
      });
      try {
        if (dialect === 'sqlite') {
          const db = new Database(dbFile);
          db.pragma('journal_mode = WAL');
          createPgbenchSchema(db, 1);
          db.close();
        } else {
          await resetPg();
          execFileSync(
            'pgbench',
            ['-i', '-q', '-s', '1', pgUrl(FAULTS_PG.role, FAULTS_PG.database)],
            { stdio: 'ignore' },
          );
        }
        execFileSync(process.execPath, [CLI, 'install', file], { stdio: 'ignore' });
        const topology = loadTopology(file);
        const capture = new CaptureChecker(
          ['history-changes', 'account-changes'].flatMap((queue) =>
            [0, 1].map((partition) => ({
              queue,
              partition,
              dir: partitionDir(topology, queue, partition),
            })),
          ),
        );
        const outputs = [
          new CauseChecker('branch-balances', partitionDir(topology, 'branch-balances-out', 0), [
            'history-changes',
          ]),
          new CauseChecker('accounts', partitionDir(topology, 'accounts-out', 0), [
            'account-changes',
          ]),
        ];
        const t: FaultTarget = {
          shape: name,
          ctx,
          proc,
          disk,
          net,
          netPeer: 'PostgreSQL',
          check: () => [...capture.check(), ...outputs.flatMap((o) => o.check())],
        };
        proc.start();
        if ((await recover(t, 'first start')) === null) return;
        // Retention deletes what the incremental checkers have not read if they read only after
        // faults minutes apart: read between faults too (synchronous reads of what is new).
        if (bounded)
          checker = setInterval(() => {
            for (const p of t.check() as string[]) ledger.violation(name, p);
          }, BOUNDED.checkEveryMs);
        workload =
          dialect === 'sqlite'
            ? sqliteWorkload(dbFile, Math.floor(ctx.random() * 1e9))
            : pgbenchWorkload(path.join(ctx.dir, 'pgbench.log'));
        const t0 = Date.now();
        const kinds: string[] = [...commonFaults(t)];
        if (dialect === 'postgres')
          kinds.push(
            'pg-terminate',
            'pg-terminate',
            'pg-login-refused',
            'pg-login-refused',
            'pg-row-lock',
            'pg-row-lock',
            ...(cluster ? ['pg-restart', 'pg-restart'] : []),
          );
        const n = await faultLoop(ctx, kinds, async (kind) => {
          const burstMs = between(ctx.random, 200, 1500);
          workload!.burst(burstMs);
          await sleep(between(ctx.random, 0, burstMs));
          if (kind === 'pg-restart') return injectPgRestart(t, cluster!, t0);
          if (kind.startsWith('pg-')) return injectPg(t, kind as PgFault, t0);
          return injectCommon(t, kind as Parameters<typeof injectCommon>[1], t0);
        });
        await workload.stop();
        workload = null;
        if (checker) clearInterval(checker);
        checker = null;
        ledger.info(`${name}: ${n} faults injected; workload stopped, draining`);
        await finalChecks(t, topology, capture, outputs, dialect, bounded);
        capture.close();
        for (const o of outputs) o.close();
      } finally {
        if (checker) clearInterval(checker);
        if (workload) await workload.stop().catch(() => undefined);
        if (proc.running) await proc.kill9();
        proc.close();
        net?.close();
        disk?.unmount();
        if (cluster) {
          await cluster
            .stop()
            .catch((e) => ledger.info(`could not stop the cluster: ${(e as Error).message}`));
          serverUrl = FAULTS_PG.adminUrl;
        } else if (dialect === 'postgres')
          await dropPg().catch((e) =>
            ledger.info(`could not drop ${FAULTS_PG.database}: ${(e as Error).message}`),
          );
      }
    },
  };
}

/** Drains, then the end-of-run checks (see the file comment). */
async function finalChecks(
  t: FaultTarget,
  topology: Topology,
  capture: CaptureChecker,
  outputs: CauseChecker[],
  dialect: 'sqlite' | 'postgres',
  bounded: boolean,
): Promise<void> {
  const { ledger } = t.ctx;
  if (!t.proc.running) t.proc.start();
  await recover(t, 'start before the final drain');
  if (!(await t.proc.waitSourcesUp(FAULT_BOUNDS.recoveryMs)))
    ledger.violation(t.shape, 'a capture source still down before the final drain');
  // A drain ships what is staged when it starts: wait until staging is empty first.
  const t0 = Date.now();
  let staged = await stagedRows(topology, dialect);
  while (staged > 0 && Date.now() - t0 < FAULT_BOUNDS.drainMs) {
    await sleep(200);
    staged = await stagedRows(topology, dialect);
  }
  if (staged > 0)
    ledger.violation(
      t.shape,
      `${staged} changes still staged ${FAULT_BOUNDS.drainMs} ms after the workload stopped`,
    );
  const code = await t.proc.stop(FAULT_BOUNDS.drainMs);
  if (code !== 0) ledger.violation(t.shape, `the final drain exited with code ${code}`);
  await checkAll(t);
  const lengths = capture.lengths();
  for (const o of outputs) {
    for (const [k, n] of lengths) {
      if (!k.startsWith(o.label === 'accounts' ? 'account-changes' : 'history-changes')) continue;
      const got = o.next.get(k) ?? 0;
      if (got !== n)
        ledger.violation(
          t.shape,
          `${o.label}: ${k} holds ${n} inputs but outputs cover ${got} (inputs without an effect)`,
        );
    }
  }
  const historyRows = await countHistory(topology, dialect);
  const shipped = capture.counts.get('pgbench_history/insert') ?? 0;
  if (historyRows !== shipped)
    ledger.violation(
      t.shape,
      `pgbench_history has ${historyRows} rows, history-changes ${shipped} inserts`,
    );
  const verdict = await verifyBank(topology, bounded ? latestFromSnapshot : latestByKey);
  for (const m of verdict.mismatches.slice(0, 20)) ledger.violation(t.shape, `bank check: ${m}`);
  ledger.info(
    `${t.shape}: final: ${historyRows} transactions, ${verdict.branches} branches and ${verdict.changedAccounts} changed accounts checked, ${verdict.mismatches.length} mismatches, ${t.proc.starts} runs of sluice run`,
  );
}

/** How {@link latestFromSnapshot} reads each bounded service's snapshot. */
const SNAPSHOTS: Record<
  string,
  { type: number; inputs: string; values: (bytes: Uint8Array) => Map<string, unknown> }
> = {
  'accounts-out': {
    type: ACCOUNTS_SNAPSHOT_TYPE,
    inputs: 'account-changes',
    values: (bytes) =>
      new Map(
        [...readAccountsSnapshot(bytes).balances].map(([aid, abalance]) => [
          aid,
          { aid: Number(aid), abalance: Number(abalance) },
        ]),
      ),
  },
  'branch-balances-out': {
    type: BRANCH_BALANCES_SNAPSHOT_TYPE,
    inputs: 'history-changes',
    values: (bytes) =>
      new Map(
        [...readBranchBalancesSnapshot(bytes).totals].map(([bid, total]) => [
          bid,
          { bid: Number(bid), total },
        ]),
      ),
  },
};

/**
 * The bounded variant's reader for the bank check: the newest value per key of a service's
 * output, from its newest complete snapshot on (the snapshot's state as outputs would carry it,
 * then every later JSON output), as a restart would rebuild it; retention has deleted the oldest
 * outputs, so a read from the first record would miss the keys not changed lately. Without any
 * snapshot it reads the whole output (latestByKey), which then finds what retention deleted
 * missing. Journal bus only.
 */
const latestFromSnapshot: LatestByKeyReader = <T>(topology: Topology, queue: string) => {
  const how = SNAPSHOTS[queue];
  if (!how) throw new Error(`latestFromSnapshot: no snapshot reader for queue ${queue}`);
  const dir = partitionDir(topology, queue, 0);
  const back = Tailer.open({ dir });
  let scan: ReturnType<typeof scanOutput>;
  try {
    back.moveToEnd();
    const inputs = [0, 1].map((partition) => ({ queue: how.inputs, partition }));
    scan = scanOutput(back, inputs, how.type, `${queue}/0`);
  } finally {
    back.close();
  }
  if (!scan.snapshot) return latestByKey<T>(topology, queue);
  const out = how.values(scan.snapshot.bytes) as Map<string, T>;
  const tailer = Tailer.open({ dir });
  const view = new EnvelopeView();
  try {
    if (!tailer.moveToIndex(scan.snapshot.markerIndex + 1))
      throw new Error(`${queue}/0: cannot move to index ${scan.snapshot.markerIndex + 1}`);
    for (let rec = tailer.next(); rec; rec = tailer.next()) {
      view.wrap(rec.bytes, 0, rec.bytes.length);
      if (view.type !== EVENT_TYPE_JSON) continue;
      out.set(view.key ?? '', decodeJson(view.payload) as T);
    }
  } finally {
    tailer.close();
  }
  return out;
};

async function stagedRows(topology: Topology, dialect: 'sqlite' | 'postgres'): Promise<number> {
  const src = topology.capture[0]!;
  if (dialect === 'sqlite') {
    if (src.database.dialect !== 'sqlite') throw new Error('not sqlite');
    const db = new Database(src.database.file, { readonly: true });
    try {
      return db.prepare(`SELECT count(*) FROM ${src.stagingTable}`).pluck().get() as number;
    } finally {
      db.close();
    }
  }
  return admin(FAULTS_PG.database, async (c) =>
    Number((await c.query(`SELECT count(*) AS n FROM sluice.${src.stagingTable}`)).rows[0].n),
  );
}

async function countHistory(topology: Topology, dialect: 'sqlite' | 'postgres'): Promise<number> {
  const src = topology.capture[0]!;
  if (dialect === 'sqlite') {
    if (src.database.dialect !== 'sqlite') throw new Error('not sqlite');
    const db = new Database(src.database.file, { readonly: true });
    try {
      return db.prepare('SELECT count(*) FROM pgbench_history').pluck().get() as number;
    } finally {
      db.close();
    }
  }
  return admin(FAULTS_PG.database, async (c) =>
    Number((await c.query('SELECT count(*) AS n FROM pgbench_history')).rows[0].n),
  );
}

/** Terminates every session of the pumps' role; returns how many. */
async function terminatePumpSessions(c: pg.Client): Promise<number> {
  const r = await c.query(
    'SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) AS n FROM pg_stat_activity WHERE usename = $1 AND datname = $2',
    [FAULTS_PG.role, FAULTS_PG.database],
  );
  return Number(r.rows[0].n);
}

/**
 * `pg-restart`: the shape's own PostgreSQL server stopped, by seed cleanly (`pg_ctl -m fast`) or
 * as in a crash (`-m immediate`: no shutdown checkpoint, crash recovery at the next start), for
 * 1-8 s (three in four) or 15-30 s, while pgbench and the pumps keep trying; then started again
 * on the same port and data. `sluice run` must wait it out (no exit), report the source down and
 * up again, and lose or repeat nothing (the checks after it).
 */
async function injectPgRestart(
  t: FaultTarget,
  cluster: BenchCluster,
  t0: number,
): Promise<boolean> {
  const r = t.ctx.random;
  const at = Date.now() - t0;
  const mode = r() < 0.5 ? 'fast' : 'immediate';
  const holdMs = r() < 0.75 ? between(r, 1000, 8000) : between(r, 15_000, 30_000);
  await cluster.stopServer(mode);
  try {
    await sleep(holdMs);
    for (const e of t.proc.unexpectedExits.splice(0)) t.ctx.ledger.violation(t.shape, e);
  } finally {
    await cluster.startServer();
  }
  const detail = `PostgreSQL stopped (${mode === 'fast' ? 'clean shutdown' : 'immediate: crash recovery at start'}) for ${holdMs} ms`;
  if (!(await t.proc.waitSourcesUp(FAULT_BOUNDS.recoveryMs)))
    t.ctx.ledger.violation(
      t.shape,
      `pg-restart: a capture source not up again within ${FAULT_BOUNDS.recoveryMs} ms`,
    );
  const ms = await recover(t, `after ${detail}`);
  t.ctx.ledger.fault({ shape: t.shape, fault: 'pg-restart', atMs: at, detail, recoveredMs: ms });
  await checkAll(t);
  return true;
}

/**
 * PostgreSQL faults:
 * - pg-terminate: a burst of 2..8 `pg_terminate_backend` of the pumps' sessions, 50..400 ms apart;
 * - pg-login-refused: `ALTER ROLE faults_pump NOLOGIN`, its sessions terminated, 1..8 s, LOGIN again;
 * - pg-row-lock: another session locks the oldest 200 staged rows FOR UPDATE for 1..10 s. The
 *   pump's delete of them must not wait silently: when the lock is held longer than its bound, the
 *   log must name the blocking session (its pid) while it is held.
 * After each: the pumps are up again (log), the topology healthy, the invariants hold.
 */
async function injectPg(t: FaultTarget, fault: PgFault, t0: number): Promise<boolean> {
  const r = t.ctx.random;
  const at = Date.now() - t0;
  let detail = '';
  const c = new pg.Client({
    connectionString: (() => {
      const u = new URL(serverUrl);
      u.pathname = `/${FAULTS_PG.database}`;
      return u.toString();
    })(),
  });
  await c.connect();
  try {
    if (fault === 'pg-terminate') {
      const burst = between(r, 2, 8);
      let killed = 0;
      for (let i = 0; i < burst; i++) {
        killed += await terminatePumpSessions(c);
        await sleep(between(r, 50, 400));
      }
      detail = `${burst} rounds of pg_terminate_backend, ${killed} sessions terminated`;
    } else if (fault === 'pg-login-refused') {
      const holdMs = between(r, 1000, 8000);
      await c.query(`ALTER ROLE ${FAULTS_PG.role} NOLOGIN`);
      let killed = 0;
      try {
        killed = await terminatePumpSessions(c);
        await sleep(holdMs);
      } finally {
        await c.query(`ALTER ROLE ${FAULTS_PG.role} LOGIN`);
      }
      detail = `login refused for ${holdMs} ms (${killed} sessions terminated)`;
    } else {
      const holdMs = between(r, 1000, 12_000);
      const logBefore = t.proc.currentLog().length;
      // Staging may be empty at this instant (the pumps keep up): wait for rows to lock.
      let locked = { rowCount: 0 as number | null };
      for (let i = 0; i < 50 && !locked.rowCount; i++) {
        if (i > 0) {
          await c.query('ROLLBACK');
          await sleep(50);
        }
        await c.query('BEGIN');
        locked = await c.query(
          `SELECT id FROM sluice.sluice_staging ORDER BY id LIMIT 200 FOR UPDATE`,
        );
      }
      const pid = Number((await c.query('SELECT pg_backend_pid() AS p')).rows[0].p);
      await sleep(holdMs);
      const during = t.proc.currentLog().slice(logBefore);
      await c.query('ROLLBACK');
      detail = `${locked.rowCount} staged rows locked FOR UPDATE by pid ${pid} for ${holdMs} ms`;
      // The pump's bound on a lock wait (engine/cdc/postgres.ts PG_LOCK_TIMEOUT_MS) plus slack.
      if (locked.rowCount && holdMs > PG_LOCK_WAIT_REPORT_MS && !during.includes(`pid ${pid}`)) {
        t.ctx.ledger.violation(
          t.shape,
          `${detail}: no log line named the blocking session (pid ${pid}) while it held the lock`,
        );
      }
    }
  } finally {
    await c.end().catch(() => undefined);
  }
  if (!(await t.proc.waitSourcesUp(FAULT_BOUNDS.recoveryMs)))
    t.ctx.ledger.violation(
      t.shape,
      `${fault}: a capture source not up again within ${FAULT_BOUNDS.recoveryMs} ms`,
    );
  const ms = await recover(t, fault);
  t.ctx.ledger.fault({ shape: t.shape, fault, atMs: at, detail, recoveredMs: ms });
  await checkAll(t);
  return true;
}

/** A row lock held longer than this must be reported by name in the log, ms. */
const PG_LOCK_WAIT_REPORT_MS = 5000;
