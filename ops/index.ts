/**
 * ops/: operating a running topology from the main thread: the sampler of the actors'
 * shared-memory counters, capture figures from the captured databases, Prometheus metrics,
 * structured logs with runtime levels, the audit log, and the HTTP server with its dashboard.
 * It sits beside index.ts (above engine/ and actors/) and only reads what the actors publish.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { Logger } from 'pino';
import type { RetiredEvent, Supervisor } from '../engine/supervisor/index.js';
import type { Topology } from '../engine/config/index.js';
import { Sampler, SAMPLER_DEFAULTS, type SamplerOptions } from './sampler.js';
import { KafkaEnds } from './kafka-lag.js';
import { kafkaConnectionOf } from '../actors/kafka-capture.js';
import { CaptureStats } from './capture-stats.js';
import { AuditLog } from './audit.js';
import { Authenticator, loadUsers } from './auth.js';
import { healthOf } from './health.js';
import type { StartWaits } from '../actors/start-waits.js';
import type { HttpOptions, OpsServer, PumpCountControl } from './server.js';
import { packageVersion } from './version.js';
import { StatsRecorder, type StatsOptions } from './stats.js';

export {
  Sampler,
  SAMPLER_DEFAULTS,
  kindOf,
  type ActorStatus,
  type ActorHistory,
  type InputLag,
  type Rates,
  type SamplerOptions,
} from './sampler.js';
export { CaptureStats, type CaptureSourceStats, type CaptureTableStats } from './capture-stats.js';
// metrics.js (prom-client) and server.js (fastify) are loaded only when a server is asked for:
// import them from 'sluice/ops/metrics' style paths directly if you need them without startOps.
export { AuditLog, type AuditEntry } from './audit.js';
export {
  Authenticator,
  addUser,
  hashToken,
  verifyToken,
  loadUsers,
  RIGHTS,
  AUTH_LIMITS_DEFAULTS,
  type Right,
  type StoredUser,
  type AuthLimits,
} from './auth.js';
export { healthOf, type Health, type HealthStatus, type Degraded, type Waiting } from './health.js';
export {
  createLogger,
  attachSupervisorLogs,
  parseLogLevel,
  type LoggerOptions,
} from './logging.js';
export { LOG_FORMATS, type LogFormat } from './formats.js';
export { redactTopology, redactUrl } from './redact.js';
export type { HttpOptions, OpsServer, OpsContext, PumpCountControl } from './server.js';
export { HTTP_NICE_DEFAULT } from './front.js';
export { packageVersion } from './version.js';
export {
  StatsRecorder,
  STATS_DEFAULTS,
  readStats,
  percentile,
  condense,
  statsDir,
  removeStatsTable,
  type StatsOptions,
  type StatsPoint,
  type StatsQuery,
  type StatsSeries,
  type StatsStep,
} from './stats.js';

/** The operations layer of one running topology. */
export interface Ops {
  readonly sampler: Sampler;
  /** The statistics recorder (ops/stats.ts); null when statistics are off. */
  readonly stats: StatsRecorder | null;
  /** Null when no HTTP server was asked for. */
  readonly server: OpsServer | null;
  /** Stops sampling, closes the server and the capture connections. Idempotent. */
  close(): Promise<void>;
}

/** Options of {@link startOps}. */
export interface OpsOptions {
  topology: Topology;
  supervisor: Supervisor;
  logger: Logger;
  http?: HttpOptions;
  sampler?: Partial<SamplerOptions>;
  /**
   * Per-minute statistics (ops/stats.ts): options, or false for none. Default: recorded when
   * `http` is given (with STATS_DEFAULTS), not otherwise.
   */
  stats?: Partial<StatsOptions> | false;
  /** Runtime pump counts (actors/pump-count.ts), for PUT /capture/:source/pumps. */
  pumps?: PumpCountControl;
  /**
   * What the start waits for before its first actor (actors/start-waits.ts): the health reports
   * it while it lasts (startOps runs before the start's waits, so the API answers during them).
   */
  waits?: StartWaits;
}

/**
 * Starts sampling and, when `http` is given, the HTTP server (before the actors start, and
 * before the start waits for brokers, so /health/ready reports the start). @throws Error when
 * the server cannot listen.
 */
export async function startOps(options: OpsOptions): Promise<Ops> {
  const { topology, supervisor, logger } = options;
  // On a kafka bus the partitions' ends come from the broker (ops/kafka-lag.ts).
  const kafkaEnds =
    topology.bus.kind === 'kafka'
      ? new KafkaEnds(
          kafkaConnectionOf(topology.bus),
          options.sampler?.intervalMs ?? SAMPLER_DEFAULTS.intervalMs,
          (level, line) => logger[level](line),
        )
      : null;
  const sampler = new Sampler(supervisor, options.sampler, kafkaEnds);
  const capture = new CaptureStats(topology.capture);
  // A start that fails (the port is taken) leaves no ops directory it created behind.
  const opsDir = path.join(topology.dataDir, 'ops');
  const opsDirExisted = fs.existsSync(opsDir);
  sampler.start();
  let server: OpsServer | null = null;
  let stats: StatsRecorder | null = null;
  try {
    const statsOptions = options.stats ?? (options.http ? {} : false);
    if (statsOptions !== false) {
      stats = new StatsRecorder(topology, supervisor, capture, logger, statsOptions);
      stats.open();
      const recorder = stats;
      supervisor.on('retired', (e: RetiredEvent) =>
        recorder.retired(e.name, e.startedMs, e.counters),
      );
    }
    if (options.http) {
      const [{ createMetrics }, { listenOps, defaultCacheMs, lagMaxAgeMs }] = await Promise.all([
        import('./metrics.js'),
        import('./server.js'),
      ]);
      const cacheMs = options.http.cacheMs ?? defaultCacheMs(sampler);
      const metrics = createMetrics({
        sampler,
        capture,
        ready: () => healthOf(supervisor, options.waits ?? null).ready,
        lagMaxAgeMs: lagMaxAgeMs(cacheMs),
      });
      const metricsOnSample = sampler.onSample;
      if (stats) {
        const recorder = stats;
        sampler.onSample = (all) => {
          metricsOnSample?.(all);
          recorder.observe(all);
        };
      }
      const audit = new AuditLog(topology.dataDir);
      const auth = options.http.usersFile
        ? new Authenticator(loadUsers(options.http.usersFile), topology.name)
        : null;
      server = await listenOps(
        {
          topology,
          supervisor,
          sampler,
          capture,
          metrics,
          logger,
          audit,
          auth,
          stats,
          pumps: options.pumps ?? null,
          version: packageVersion(),
          responseCacheMs: cacheMs,
          waits: options.waits ?? null,
        },
        options.http,
      );
    }
    if (stats && !options.http) {
      const recorder = stats;
      sampler.onSample = (all) => recorder.observe(all);
    }
  } catch (err) {
    sampler.stop();
    await kafkaEnds?.close();
    await stats?.close();
    await capture.close();
    if (!opsDirExisted) fs.rmSync(opsDir, { recursive: true, force: true });
    throw err;
  }
  let closed: Promise<void> | null = null;
  return {
    sampler,
    stats,
    server,
    close: () =>
      (closed ??= (async () => {
        sampler.stop();
        await kafkaEnds?.close();
        await server?.close();
        await stats?.close();
        await capture.close();
      })()),
  };
}
