/**
 * Sluice library entry. Embedding in an application:
 * ```ts
 * import { loadTopology, startTopology } from 'sluice';
 * const running = await startTopology(loadTopology('topology.yaml'));
 * // ... later
 * const result = await running.stop(); // drains, flushes and fsyncs every queue
 * ```
 */
import { Supervisor, type StopResult, type RestartEvent } from './engine/supervisor/index.js';
import { ConfigError, problemAt, type Topology } from './engine/config/index.js';
import {
  planTopology,
  checkServiceModules,
  checkProcessorModules,
  serviceWarnings,
  openTopologyBus,
  createKafkaTopics,
  type TopologyPlan,
  type TopologyBusHost,
} from './actors/index.js';
import { prepareKafkaTopics } from './actors/kafka-capture.js';
import { StartWaits } from './actors/start-waits.js';
import { PumpCounts } from './actors/pump-count.js';
import { captureStepError, openCaptureSource } from './capture-steps.js';
import { startQueueRetention, type QueueRetentionRunner } from './actors/queue-retention.js';
import type { BusBackend } from './engine/bus/index.js';
import {
  checkLoads,
  installLoads,
  openStaging,
  type ParkedChange,
  type ParkedSelection,
  type StagingClient,
} from './engine/cdc/index.js';
import {
  acquireAppenderLock,
  JournalLockedError,
  type AppenderLock,
} from './engine/journal/index.js';
import { linkProducerNotifiers } from './engine/producer/index.js';
import fs from 'node:fs';
import path from 'node:path';
import type { Logger } from 'pino';
import {
  attachSupervisorLogs,
  createLogger,
  startOps,
  type HttpOptions,
  type LogFormat,
  type Ops,
  type StatsOptions,
  type SamplerOptions,
  removeStatsTable,
} from './ops/index.js';

// The documented surface only (README "Embedding"); service authors import 'sluice/service',
// the bus and its patterns are 'sluice/bus' and 'sluice/patterns'.
export {
  loadTopology,
  parseTopology,
  ConfigError,
  formatProblem,
  TOPOLOGY_DEFAULTS,
  type ConfigProblem,
  type InputsReplay,
  type QueueFsync,
  type StartFrom,
  type Topology,
  type TopologyLoadOptions,
  type TopologyQueue,
  type TopologyRings,
  type TopologyService,
  type TopologyServiceErrors,
  type OnFailure,
} from './engine/config/index.js';
export {
  listDeadLetters,
  replayDeadLetterQueue,
  purgeDeadLetters,
  type DeadLetter,
  type DeadLetterEntry,
  type ReplayedDeadLetter,
} from './engine/service/index.js';
export type {
  Supervisor,
  StopResult,
  RestartEvent,
  GroupStatus,
} from './engine/supervisor/index.js';
export { checkServiceModules, partitionDir } from './actors/index.js';
export type { TopologyPlan, ServiceReadyInfo, ServiceSummary } from './actors/index.js';
export { PumpCounts, PumpCountError, type PumpCountChange } from './actors/pump-count.js';
export type {
  CaptureSource,
  CaptureTable,
  CaptureErrorPolicy,
  ParkedChange,
  ParkedSelection,
} from './engine/cdc/index.js';
export {
  openQueueAppender,
  RecordInputError,
  BrokerAwayError,
  JSON_DEPTH_MAX,
  type QueueAppender,
} from './engine/producer/index.js';
export {
  queueId,
  EVENT_TYPE_CHANGE,
  EVENT_TYPE_JSON,
  USER_EVENT_TYPE_MIN,
  type Change,
  type ChangeOp,
} from './engine/codec/index.js';

/** A topology that is up. */
export interface RunningTopology {
  readonly topology: Topology;
  readonly supervisor: Supervisor;
  readonly plan: TopologyPlan;
  /** The operations layer: sampler, and the HTTP server when `http` was given (`ops.server.url`). */
  readonly ops: Ops;
  /** The topology's structured logger (pino). */
  readonly logger: Logger;
  /**
   * The bus its processors run on, for producing their inputs and reading their outputs (null
   * when the topology has no processors). Journal: the one instance of `<dataDir>/bus` (no
   * other process or thread can open it while the topology runs); kafka: a connection to the
   * brokers. Closed by stop().
   */
  readonly bus: BusBackend | null;
  /**
   * The running pump counts of the capture sources: `pumps.set(source, n)` changes one while
   * the topology runs, keeping each key's order (actors/pump-count.ts). Not audited here (the
   * HTTP endpoint and `sluice pumps` are).
   */
  readonly pumps: PumpCounts;
  /**
   * The queue retention pass (`queues[].retention`; engine/service/retention.ts), run every
   * `retentionIntervalMs`; null when no queue sets retention. `retention.pass()` runs one now.
   */
  readonly retention: QueueRetentionRunner | null;
  /**
   * Drains pumps, then readers, then services (in graph order); flushes and fsyncs every queue;
   * then closes the HTTP server.
   */
  stop(): Promise<StopResult>;
}

/** Options of {@link startTopology}. */
export interface StartOptions {
  /**
   * Receives the text log lines (supervisor: restarts, drain timeouts; actors' log lines as
   * `[actor] msg`). Default: stderr with a `sluice: ` prefix. Ignored when `logFormat` is json.
   */
  log?: (line: string) => void;
  /** `text` (default: the lines above) or `json` (pino JSON lines on stdout). */
  logFormat?: LogFormat;
  /** A pino logger of your own instead (logFormat and log are then ignored). */
  logger?: Logger;
  /**
   * Starts the operations HTTP server (health, /actors, /metrics, dashboard at /) before the
   * actors, and before the start waits for its Kafka topics (GET /health names each wait),
   * bound to `host` (default 127.0.0.1) and `port` (0: a free one, see ops.server.url).
   */
  http?: HttpOptions;
  /**
   * Per-minute statistics in the journal and the capture databases (README Operations:
   * Statistics): options (e.g. a short `intervalMs` in tests), or false for none. Default:
   * recorded when `http` is given.
   */
  stats?: Partial<StatsOptions> | false;
  /**
   * Bounds of the operations sampler (ops/sampler.ts: `intervalMs`, default 1000, and the
   * history sizes). A test that takes its samples itself (`ops.sampler.sample()`) gives a long
   * interval.
   */
  sampler?: Partial<SamplerOptions>;
  /** Called with the supervisor before any actor starts, e.g. to watch replay progress in its counters. */
  onSupervisor?: (supervisor: Supervisor) => void;
  /**
   * Period of the queue retention pass, ms (default 60000, QUEUE_RETENTION_DEFAULTS); 0: only
   * on `retention.pass()`.
   */
  retentionIntervalMs?: number;
}

/**
 * Plans and starts a topology: every capture pump, queue reader and service in its own worker.
 * Resolves once every service has finished its restart protocol (LAST_WRITTEN, replay) and its
 * readers are running. Holds `<dataDir>/topology.lock` from before the first actor starts until
 * the supervisor has stopped or failed.
 * @throws TopologyRunningError if the topology (its dataDir) is already running, in this or
 *   another live process; Error if the plan is invalid or a group keeps failing while starting
 *   (restartsMax).
 */
export async function startTopology(
  topology: Topology,
  options: StartOptions = {},
): Promise<RunningTopology> {
  const logger =
    options.logger ??
    (await createLogger({
      format: options.logFormat ?? 'text',
      topology: topology.name,
      lineSink: options.log,
    }));
  const log = (line: string) => logger.info(line);
  let busHost: TopologyBusHost | null = null;
  const plan = planTopology(topology, { connectBus: () => busHost!.connect!() });
  await checkServiceModules(topology);
  await checkProcessorModules(topology);
  for (const w of await serviceWarnings(topology)) log(w);
  const lock = lockTopology(topology);
  let ops: Ops | null = null;
  let retention: QueueRetentionRunner | null = null;
  let unlinkProducers = (): void => {};
  try {
    // Producers (this thread's openQueueAppender, other processes' appends) wake the readers.
    unlinkProducers = linkProducerNotifiers(topology, plan.notifiers);
    await checkCaptureInstalled(topology, log);
    const supervisor = new Supervisor(topology.supervisor);
    attachSupervisorLogs(supervisor, logger);
    supervisor.on('restart', (e: RestartEvent) =>
      logger.warn(
        `restarting ${e.group} in ${e.delayMs} ms (attempt ${e.attempt}) after ${e.actor} failed: ${e.error}`,
      ),
    );
    supervisor.on('fatal', (e: Error) => logger.error(`stopped: ${e.message}`));
    // The topology is no longer running once the supervisor has stopped (stop(), by whoever
    // calls it) or failed (its workers terminated). The bus is opened below: read at release.
    const release = (): void => {
      unlinkProducers();
      // The bus is closed once every processor is gone (stopped, or terminated on a failure).
      void (busHost?.close() ?? Promise.resolve())
        .catch(() => undefined)
        .finally(() => lock.release());
    };
    supervisor.done.then(release, release);
    const pumps = new PumpCounts(topology, supervisor, plan, {
      connectBus: () => busHost!.connect!(),
      journalBus: () => busHost?.bus ?? null,
    });
    // Before the topics are waited for: a broker that is down at the start holds the start for
    // as long as it is down, and the API says so meanwhile (the health names each wait).
    const waits = new StartWaits();
    ops = await startOps({
      topology,
      supervisor,
      logger,
      http: options.http,
      stats: options.stats,
      ...(options.sampler ? { sampler: options.sampler } : {}),
      pumps,
      waits,
    });
    if (ops.server) logger.info(`http: operations API and dashboard at ${ops.server.url}/`);
    // A topology that failed leaves nothing running behind it (the sampler's kafka client kept
    // the process alive), unless an HTTP server is there to show what failed: stop() ends it.
    const opsStarted = ops;
    supervisor.done.catch(() => (opsStarted.server ? undefined : opsStarted.close()));
    await createKafkaTopics(topology, { log, waits });
    await prepareKafkaTopics(topology, { log, waits });
    if (topology.processors.length > 0) busHost = await openTopologyBus(topology);
    const host = busHost;
    // Only now: a caller given the supervisor may stop it (sluice run on Ctrl-C); before, a start
    // waiting for a broker has nothing to drain and is ended as it is (sluice run exits).
    options.onSupervisor?.(supervisor);
    retention = await startQueueRetention(
      topology,
      (e) => logger.warn(`queue retention pass failed (retried at the next): ${e.message}`),
      options.retentionIntervalMs,
    );
    const stopRetention = () => retention?.stop();
    supervisor.done.then(stopRetention, stopRetention);
    await supervisor.start(plan.groups);
    const opsNow = ops;
    const stop = async (): Promise<StopResult> => {
      retention?.stop();
      const result = await supervisor.stop();
      await host?.close().catch(() => undefined);
      await opsNow.close();
      return result;
    };
    return {
      topology,
      supervisor,
      plan,
      ops: opsNow,
      logger,
      bus: host?.bus ?? null,
      pumps,
      retention,
      stop,
    };
  } catch (err) {
    retention?.stop();
    await ops?.close();
    unlinkProducers();
    await busHost?.close().catch(() => undefined);
    lock.release();
    throw err;
  }
}

/** Lock file of a running topology, in its dataDir (same protocol as a queue's appender.lock). */
const TOPOLOGY_LOCK_FILE_NAME = 'topology.lock';

/** Another live process (or this one) is running the topology: its dataDir is locked. */
export class TopologyRunningError extends Error {
  override readonly name = 'TopologyRunningError';
  /** @param ownerPid the pid recorded in the lock file (0: being created). */
  constructor(
    topology: Topology,
    readonly lockFile: string,
    readonly ownerPid: number,
  ) {
    super(
      `topology "${topology.name}" (${topology.file}) is already running (pid ${ownerPid}): its data directory ${topology.dataDir} is locked by ${lockFile}`,
    );
  }
}

/**
 * Takes the running topology's lock `<dataDir>/topology.lock` before any actor starts, so a second
 * run of the same topology (same dataDir) fails at once instead of in its actors' queue locks.
 * A lock left by a dead process is taken over. @throws TopologyRunningError when it is held.
 */
function lockTopology(topology: Topology): AppenderLock {
  fs.mkdirSync(topology.dataDir, { recursive: true });
  const file = path.resolve(topology.dataDir, TOPOLOGY_LOCK_FILE_NAME);
  try {
    return acquireAppenderLock(topology.dataDir, TOPOLOGY_LOCK_FILE_NAME);
  } catch (err) {
    if (err instanceof JournalLockedError)
      throw new TopologyRunningError(topology, file, err.ownerPid);
    // acquireAppenderLock's "already open in this process": started twice in this process.
    if (
      fs.existsSync(file) &&
      (err as Error).message.startsWith(`${file}: an Appender is already open`)
    ) {
      throw new TopologyRunningError(topology, file, process.pid);
    }
    throw err;
  }
}

/**
 * Installs every capture source of a topology: staging table, error table and triggers
 * (idempotent; re-running it regenerates the triggers from the current config).
 * @throws ConfigError at the topology field (`file:line:col: capture[i].tables[k].table: ...`)
 *   when a captured table, column, key or a condition's SQL is wrong, at the source's database
 *   field (`capture[i].database.url` / `.file`) when its database cannot be opened, and at
 *   `capture[i].name` with the driver's message for any other failure (captureStepError); each
 *   names the sources installed before the failure.
 */
export async function installCapture(topology: Topology): Promise<void> {
  const done: string[] = [];
  for (const [i, source] of topology.capture.entries()) {
    try {
      const staging = await openCaptureSource(topology, i);
      try {
        await checkLoads(staging);
        await staging.install();
        // Tables with initialLoad: true get their load requested (once; sluice snapshot redoes one).
        await installLoads(staging);
      } finally {
        await staging.close();
      }
    } catch (err) {
      throw captureStepError(topology, i, err, 'install', { done, doneVerb: 'installed' });
    }
    done.push(source.name);
  }
}

/**
 * Compares each captured table of the live database with what its installed triggers capture
 * (`sluice check --live`): one line per difference, naming source, table and column, e.g.
 * `capture source "app": table "ledger": column "memo" is captured by the installed triggers but
 * the table no longer has it (dropped or renamed; run sluice install)`, or (PostgreSQL, MariaDB)
 * `... : capture schema "sluice" has no insert, delete trigger on the table: ...` when the
 * source's own triggers are gone; on PostgreSQL also a key column of the installed triggers
 * dropped or renamed since install. A column the table has and the triggers do not name is
 * reported (`... is not captured yet ...: run sluice install to capture it`) only where the
 * triggers name their columns (SQLite, MariaDB, Oracle, listed columns): on PostgreSQL a table
 * that captures all columns has it captured already (TableDescription.capturesAddedColumns).
 * Empty when all match.
 * @throws when a database cannot be reached.
 */
export async function checkCaptureLive(topology: Topology): Promise<string[]> {
  const out: string[] = [];
  for (const source of topology.capture) {
    const staging = await openStaging(source);
    try {
      if (staging.describeTable === undefined) continue;
      for (const t of source.tables) {
        const where = `capture source "${source.name}": table "${t.table}"`;
        const { live, installed, key, captureSchema, triggersMissing, capturesAddedColumns } =
          await staging.describeTable(t.table);
        if (live.length === 0) {
          out.push(`${where}: the table does not exist`);
          continue;
        }
        const gone = triggersMissing !== undefined && triggersMissing.length > 0;
        if (gone) {
          out.push(
            `${where}: capture schema "${captureSchema}" has no ${triggersMissing.join(', ')} trigger on the table: ` +
              `those changes are not staged for this source (triggers dropped, or replaced by another capture source's install; run sluice install)`,
          );
        }
        if (installed === null) {
          if (!gone) out.push(`${where}: capture is not installed (run sluice install)`);
          continue;
        }
        for (const c of key ?? []) {
          if (c.live === null)
            out.push(
              `${where}: key column "${c.installed}" no longer exists (dropped): its changes are parked in the error table under key "*" instead of staged; give the table a key and run sluice install`,
            );
          else if (c.live !== c.installed)
            out.push(
              `${where}: key column "${c.installed}" is now "${c.live}" (renamed): the installed triggers still key on it; name it so in the topology's key (if listed) and run sluice install`,
            );
        }
        for (const c of installed) {
          if (!live.includes(c))
            out.push(
              `${where}: column "${c}" is captured by the installed triggers but the table no longer has it (dropped or renamed; run sluice install)`,
            );
        }
        const wanted = t.columns ?? live;
        for (const c of wanted) {
          if (installed.includes(c)) continue;
          if (!live.includes(c)) out.push(`${where}: columns: column "${c}" is not in the table`);
          // PostgreSQL, all columns: the triggers already render it from the current columns.
          else if (!capturesAddedColumns)
            out.push(
              `${where}: column "${c}" is not captured yet (added or renamed since install; the installed triggers name their columns): run sluice install to capture it`,
            );
        }
      }
    } finally {
      await staging.close();
    }
  }
  return out;
}

/** Options of {@link uninstallCapture}. */
export interface UninstallCaptureOptions {
  /** Keep the staging and error tables (and the capture schema); drop only triggers. Default false. */
  keepStaging?: boolean;
  /** Drop the staging and error tables even when they hold changes. Default false. */
  force?: boolean;
}

/**
 * Removes what installCapture created, for every capture source: the triggers on the captured
 * tables, their functions, and (unless keepStaging) the staging and error tables, the key hash
 * function, this topology's statistics rows (and the stats table once empty), and the capture
 * schema if install created it and it is empty; nothing else.
 * @throws Error naming the source when staging or error tables hold changes and neither
 * keepStaging nor force is given (nothing is dropped then, for any source); ConfigError at the
 * source's database field when it cannot be opened, or at `capture[i].name` naming the step and
 * the driver's message (captureStepError), with the sources uninstalled before the failure.
 */
export async function uninstallCapture(
  topology: Topology,
  options: UninstallCaptureOptions = {},
): Promise<void> {
  if (!options.keepStaging && !options.force) {
    for (const [i, source] of topology.capture.entries()) {
      const staging = await openCaptureSource(topology, i);
      try {
        const [staged, parked] = await Promise.all([
          staging.stagedCount(),
          staging.parkedCount(),
        ]).catch(() => [0, 0]);
        if (staged + parked > 0) {
          throw new Error(
            `capture source "${source.name}": ${staged} staged and ${parked} parked change${staged + parked === 1 ? '' : 's'} ` +
              'would be lost; ship them first (sluice run), or pass --force (or --keep-staging to drop only the triggers)',
          );
        }
      } finally {
        await staging.close();
      }
    }
  }
  const done: string[] = [];
  for (const [i, source] of topology.capture.entries()) {
    const dropping = options.keepStaging ? 'triggers' : 'triggers, staging and error tables';
    let doing = 'uninstall';
    try {
      // Opened first: an unreachable database is named at its field before anything is dropped.
      const staging = await openCaptureSource(topology, i);
      try {
        if (!options.keepStaging) {
          // The operations layer's statistics rows of this topology (ops/stats.ts) go with the
          // staging tables, so the capture schema install created can be dropped.
          doing = `uninstall (removing the statistics rows of topology "${topology.name}")`;
          await removeStatsTable(source, topology.name);
        }
        doing = `uninstall (dropping its ${dropping} of ${source.tables.map((t) => `"${t.table}"`).join(', ')})`;
        await staging.uninstall({ dropStaging: !options.keepStaging });
      } finally {
        await staging.close();
      }
    } catch (err) {
      throw captureStepError(topology, i, err, doing, { done, doneVerb: 'uninstalled' });
    }
    done.push(source.name);
  }
}

/**
 * Preflight: every capture source's database opens and its staging table exists, so a topology
 * whose capture was never installed fails at once with what to do, not after restartsMax pump
 * restarts. @throws ConfigError at the source's database field when its database cannot be
 *   opened; Error naming the source and the fix when it is not installed.
 */
async function checkCaptureInstalled(
  topology: Topology,
  log: (line: string) => void,
): Promise<void> {
  for (const [i, source] of topology.capture.entries()) {
    let staging: StagingClient;
    try {
      staging = await openCaptureSource(topology, i);
    } catch (err) {
      // A database server that is down or refuses the login is waited out by the pumps (they
      // retry forever); a bad config or a missing SQLite file is an error now.
      const cause = (err as { cause?: unknown }).cause ?? err;
      if (source.database.dialect === 'sqlite' || !isUnreachable(cause)) throw err;
      log(`${(err as Error).message}; its pumps wait for it`);
      continue;
    }
    try {
      await staging.stagedCount();
    } catch (err) {
      throw new Error(
        `capture source "${source.name}" is not installed (${(err as Error).message}); ` +
          `install its staging table and triggers first: sluice install ${topology.file}`,
      );
    } finally {
      await staging.close();
    }
  }
}

/**
 * A connection failure that a wait can cure: refused, reset, timed out, the server starting or
 * shutting down, or a login refused (SQLSTATE class 08, 57P0x, 28xxx; on MariaDB also too many
 * connections; on Oracle the driver's NJS-50x/51x connection errors and the ORA- login, startup
 * and listener errors).
 */
function isUnreachable(err: unknown): boolean {
  const code = String((err as { code?: unknown })?.code ?? '');
  // MariaDB (mysql2): the SQLSTATE is in sqlState; code is a name like ER_ACCESS_DENIED_ERROR.
  const sqlState = String((err as { sqlState?: unknown })?.sqlState ?? '');
  return (
    [
      'ECONNREFUSED',
      'ECONNRESET',
      'ETIMEDOUT',
      'EHOSTUNREACH',
      'ENOTFOUND',
      'EAI_AGAIN',
      'PROTOCOL_CONNECTION_LOST',
      'ER_CON_COUNT_ERROR',
    ].includes(code) ||
    /^(08|28|57P0)/.test(code) ||
    // Oracle (node-oracledb): connection not established, broken, timed out, refused by the
    // listener or the service unknown to it yet; a login refused or an account locked.
    /^(NJS-50[0-3]|NJS-51[01]|ORA-(01017|01033|01034|01089|12514|12516|12519|12520|12528|12537|12541|28000))$/.test(
      code,
    ) ||
    /^(08|28)/.test(sqlState)
  );
}

/** Options of the capture error-table functions: which source (default all) and which changes. */
export interface CaptureErrorsOptions extends ParkedSelection {
  /** Capture source name; default every source of the topology. */
  source?: string;
}

/**
 * Staging ids are numbered per capture source, so ids without a source would select a change
 * of every source that has that id: with several sources, ids need `source`.
 * @throws Error naming the sources when ids are given without a source and there are several.
 */
function idsNeedSource(topology: Topology, options: CaptureErrorsOptions, verb: string): void {
  if (options.source !== undefined || !options.ids?.length || topology.capture.length < 2) return;
  throw new Error(
    `errors ${verb}: staging ids are numbered per capture source and ${topology.file} has ${topology.capture.length} (${topology.capture.map((c) => c.name).join(', ')}): name one with --source`,
  );
}

/**
 * Runs `work` on a staging client of each selected source.
 * @throws Error for an unknown source; ConfigError at the source's database field when it
 *   cannot be opened (openCaptureSource).
 */
async function eachSource<T>(
  topology: Topology,
  source: string | undefined,
  work: (s: StagingClient) => Promise<T>,
): Promise<Array<{ source: string; result: T }>> {
  const sources = topology.capture.filter((c) => source === undefined || c.name === source);
  if (source !== undefined && sources.length === 0) {
    throw new Error(
      `unknown capture source "${source}" in ${topology.file} (known: ${topology.capture.map((c) => c.name).join(', ') || 'none'})`,
    );
  }
  const out: Array<{ source: string; result: T }> = [];
  for (const c of sources) {
    const staging = await openCaptureSource(topology, topology.capture.indexOf(c));
    try {
      out.push({ source: c.name, result: await work(staging) });
    } finally {
      await staging.close();
    }
  }
  return out;
}

/**
 * Parked changes (the error table, cases C4 and C10) of each selected source, lowest staging id
 * first, at most `limit` per source (default 1000).
 */
export async function listCaptureErrors(
  topology: Topology,
  options: CaptureErrorsOptions = {},
  limit = 1000,
): Promise<Array<{ source: string; parked: ParkedChange[]; total: number }>> {
  const res = await eachSource(topology, options.source, async (s) => ({
    parked: await s.listParked(options, limit),
    total: await s.parkedCount(),
  }));
  return res.map((r) => ({ source: r.source, ...r.result }));
}

/**
 * Moves parked changes back into staging under their own staging ids (so they are delivered
 * before any later change of their key); returns how many. Raise the limit that refused them first.
 */
export async function requeueCaptureErrors(
  topology: Topology,
  options: CaptureErrorsOptions = {},
): Promise<number> {
  idsNeedSource(topology, options, 'requeue');
  return (await eachSource(topology, options.source, (s) => s.requeue(options))).reduce(
    (n, r) => n + r.result,
    0,
  );
}

/** Deletes parked changes for good (their keys are released); returns how many. */
export async function purgeCaptureErrors(
  topology: Topology,
  options: CaptureErrorsOptions = {},
): Promise<number> {
  idsNeedSource(topology, options, 'purge');
  return (await eachSource(topology, options.source, (s) => s.purge(options))).reduce(
    (n, r) => n + r.result,
    0,
  );
}
