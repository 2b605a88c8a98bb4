/**
 * The operations HTTP server of a running topology, on fastify: health, topology, actors,
 * capture, Prometheus metrics, log levels, the audit log, and the dashboard's files. Every route
 * declares a JSON schema (querystring, body, response); @fastify/swagger turns them into the
 * OpenAPI 3 description served at GET /openapi.json, and fastify validates requests with them
 * (a bad body or query is a 400 naming the field).
 *
 * Binds to 127.0.0.1 unless told otherwise: the API can change log levels, so exposing it is a
 * decision the operator makes (`--http 0.0.0.0:8080`).
 */
import fs from 'node:fs';
import path from 'node:path';
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import swagger from '@fastify/swagger';
import AjvModule from 'ajv';
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import { LOG_LEVELS, logLevelName } from '../engine/actor/index.js';
import type { Supervisor } from '../engine/supervisor/index.js';
import type { Topology } from '../engine/config/index.js';
import { LAG_FRESH_MS, type Sampler } from './sampler.js';
import type { CaptureStats } from './capture-stats.js';
import type { AuditLog } from './audit.js';
import { healthOf } from './health.js';
import type { StartWaits } from '../actors/start-waits.js';
import { redactTopology } from './redact.js';
import { parseLogLevel } from './logging.js';
import * as S from './schemas.js';
import type { Authenticator, Right } from './auth.js';
import { setRequestUser, userOf } from './request-user.js';
import { registerErrorRoutes } from './errors-routes.js';
import { registerConfigRoutes } from './config-routes.js';
import { exportCapture, schemaOfSource } from './capture-config.js';
import { readStats, STATS_DEFAULTS, type StatsRecorder, type StatsStep } from './stats.js';
import { ResponseCache, type Rendered } from './response-cache.js';
import { startFront, HTTP_NICE_DEFAULT } from './front.js';

/**
 * Response header of GET /metrics and GET /actors: when the figures served were read (ISO time,
 * ms). The answer is at most HttpOptions.cacheMs older than the response.
 */
export const AS_OF_HEADER = 'x-sluice-as-of';

/** The tail of an actor's history route after the name. */
const HISTORY_SUFFIX = '/history';

/** Default of {@link HttpOptions.cacheMs}: the sampler's interval, at most 1000 ms. */
export const defaultCacheMs = (sampler: Sampler): number =>
  Math.min(sampler.options.intervalMs, 1000);

/** Largest age of the lag figures of an answer cached for `cacheMs` (0: LAG_FRESH_MS). */
export const lagMaxAgeMs = (cacheMs: number): number => (cacheMs === 0 ? LAG_FRESH_MS : cacheMs);

const sendRendered = (reply: import('fastify').FastifyReply, type: string, r: Rendered) =>
  reply.type(type).header(AS_OF_HEADER, new Date(r.asOfMs).toISOString()).send(r.body);

// ajv is CommonJS; under NodeNext its class is the default export's `default`.
const Ajv = AjvModule.default;

/** fastify's own request-validation options (@fastify/ajv-compiler's defaults). */
const REQUEST_AJV_OPTIONS = {
  coerceTypes: 'array',
  useDefaults: true,
  removeAdditional: true,
  allErrors: false,
} as const;

/**
 * The validator of each request part. A querystring, the URL's params and headers are text, so
 * `?limit=5` must be coerced to the integer the schema declares; a body is JSON and carries its
 * own types, so a `{"to": 5}` where a queue name is declared is refused (400 "body/to must be
 * string") rather than coerced into queue "5".
 */
function requestValidators(): (part: string | undefined) => InstanceType<typeof Ajv> {
  const coercing = new Ajv(REQUEST_AJV_OPTIONS);
  const typed = new Ajv({ ...REQUEST_AJV_OPTIONS, coerceTypes: false });
  return (part) => (part === 'body' ? typed : coercing);
}

/**
 * The right a request needs: runtime changes operate, capture configuration changes and the audit
 * log admin, the rest read.
 */
function rightNeeded(req: FastifyRequest): Right | null {
  const url = req.url.split('?')[0];
  if (url === '/health/live' || url === '/' || url.startsWith('/assets/')) return null;
  // Changing the capture configuration rewrites triggers and the topology file: admin.
  if (req.method !== 'GET' && req.method !== 'HEAD')
    return url.startsWith('/config/') ? 'admin' : 'operate';
  return url === '/audit' ? 'admin' : 'read';
}

/** Routes about captured schemas (see ops/auth.ts: rights per schema). */
const SCHEMA_ROUTE = /^\/(capture\/[^/]+\/(errors|pumps)|config\/)/;

/**
 * The captured schemas a request of SCHEMA_ROUTE concerns: one source's (its error table, its
 * pump count), the `schema` of an export or import, else every schema of the capture section
 * (the topology file's, and an import's new sources'). Empty: none known (the topology right
 * decides; an unknown source is then the route's 404).
 */
function schemasOfRequest(ctx: OpsContext, req: FastifyRequest): string[] {
  const url = req.url.split('?')[0];
  const one = /^\/capture\/([^/]+)\//.exec(url);
  if (one) {
    const name = decodeURIComponent(one[1]!);
    const source = ctx.topology.capture.find((c) => c.name === name);
    return source ? [schemaOfSource(source as unknown as Record<string, unknown>)] : [];
  }
  const query = req.query as { schema?: unknown } | undefined;
  const body = req.body as { schema?: unknown; capture?: unknown } | undefined;
  if (url === '/config/capture' && req.method === 'GET' && typeof query?.schema === 'string')
    return [query.schema];
  if (url === '/config/capture' && req.method === 'POST' && typeof body?.schema === 'string')
    return [body.schema];
  let section: Array<Record<string, unknown>>;
  try {
    section = exportCapture(ctx.topology.file).capture;
  } catch {
    section = ctx.topology.capture as unknown as Array<Record<string, unknown>>;
  }
  const incoming =
    url === '/config/capture' && Array.isArray(body?.capture)
      ? (body.capture as unknown[]).filter(
          (x): x is Record<string, unknown> => x !== null && typeof x === 'object',
        )
      : [];
  return [...new Set([...section, ...incoming].map((x) => schemaOfSource(x)))];
}

/** Where the server listens. */
export interface HttpOptions {
  /** Default 127.0.0.1. */
  host?: string;
  /** 0: any free port (read the bound one from OpsServer.url). */
  port: number;
  /**
   * Users file (see ops/auth.ts; `sluice user add` writes it): when given, every request but
   * GET /health/live and the dashboard's static files needs a user's token with the route's right.
   */
  usersFile?: string;
  /**
   * Longest age of the GET /metrics and GET /actors answers, ms (ops/response-cache.ts): each is
   * rendered at most once per this interval and once per sampler sample, however often it is
   * asked for; their lag figures are at most this much older than the rest (Sampler.statuses).
   * 0: rendered for every request. Default: the sampler's interval, at most 1000.
   */
  cacheMs?: number;
  /**
   * Priority steps (Linux nice, 0-19) the server's thread runs below the actors' threads: the
   * socket, HTTP parsing and the cached answers are served by a worker thread of their own
   * (ops/front.ts), so many requests a second slow the answers rather than the pipeline when the
   * cores are busy. 0: the same priority. Default {@link HTTP_NICE_DEFAULT}. Without Linux's
   * per-thread priorities the thread runs at the actors' priority.
   */
  nice?: number;
}

/** Largest request body the API takes, bytes (fastify's default). */
const BODY_LIMIT = 1 << 20;

/** What the routes read and change. */
export interface OpsContext {
  topology: Topology;
  supervisor: Supervisor;
  sampler: Sampler;
  capture: CaptureStats;
  metrics: Registry;
  logger: Logger;
  audit: AuditLog;
  /** Package version, for GET /version and the dashboard. */
  version: string;
  /** Null: no authentication (the server then should stay on 127.0.0.1). */
  auth: Authenticator | null;
  /** The statistics recorder; null or absent: statistics are off (GET /stats reads the journal). */
  stats?: StatsRecorder | null;
  /** Runtime pump counts (actors/pump-count.ts); absent: PUT /capture/:source/pumps is a 501. */
  pumps?: PumpCountControl | null;
  /** {@link HttpOptions.cacheMs}; absent: its default. */
  responseCacheMs?: number;
  /** What the start waits for before its first actor (actors/start-waits.ts); absent: none. */
  waits?: StartWaits | null;
}

/**
 * The running pump counts of the capture sources and their change (actors/pump-count.ts
 * implements it; the ops layer only calls it). `set` rejects with an error carrying `status`
 * 400 (a count it cannot apply), 404 (an unknown source) or 503 (the change failed on the way and
 * the old count runs again).
 */
export interface PumpCountControl {
  current(source: string): number | null;
  set(
    source: string,
    pumps: number,
  ): Promise<{ before: number; after: number; terminated: string[]; switchMs: number }>;
}

/** Directory of the dashboard's files (copied next to this module at build). */
export const DASHBOARD_DIR = path.join(
  path.dirname(new URL(import.meta.url).pathname),
  'dashboard',
);
const DASHBOARD_TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
};

const documentedRoutes = new WeakMap<FastifyInstance, Array<{ method: string; url: string }>>();

/**
 * The routes of an app built by {@link buildOpsApp} that /openapi.json must describe (method,
 * fastify URL with `:param`s), in registration order.
 */
export function opsRoutes(app: FastifyInstance): Array<{ method: string; url: string }> {
  return [...(documentedRoutes.get(app) ?? [])];
}

/**
 * Builds the fastify app (not listening yet). @throws Error when a plugin fails to load.
 */
export async function buildOpsApp(ctx: OpsContext): Promise<FastifyInstance> {
  // On close, open keep-alive connections (a dashboard, a scraper) are destroyed, so stop() does
  // not wait for clients; a request arriving while closing gets 503.
  const app = Fastify({ logger: false, forceCloseConnections: true });
  const validatorOf = requestValidators();
  app.setValidatorCompiler(({ schema, httpPart }) => validatorOf(httpPart).compile(schema));
  await app.register(swagger, {
    openapi: {
      openapi: '3.0.3',
      info: {
        title: `Sluice operations API (topology ${ctx.topology.name})`,
        version: ctx.version,
        description: 'Health, status, metrics and runtime changes of one running Sluice topology.',
      },
    },
  });
  app.setErrorHandler((err: Error & { statusCode?: number } & ValidationFailure, req, reply) => {
    const status = err.statusCode ?? 500;
    if (status >= 500) ctx.logger.error({ url: req.url, err: err.message }, 'http request failed');
    void reply.code(status).send({ error: err.message + givenOf(err, req) });
  });

  if (ctx.auth) {
    const auth = ctx.auth;
    // Routes about captured schemas are authorized per schema once the body is parsed.
    const perSchema = new WeakMap<FastifyRequest, { user: string; needed: Right }>();
    app.addHook('onRequest', async (req, reply) => {
      const needed = rightNeeded(req);
      if (needed === null) return;
      const scoped = SCHEMA_ROUTE.test(req.url.split('?')[0]);
      const outcome = auth.check(req.headers.authorization, req.ip, scoped ? null : needed);
      if (!outcome.ok) return reply.code(outcome.status).send({ error: outcome.error });
      setRequestUser(req, outcome.user);
      if (scoped) perSchema.set(req, { user: outcome.user, needed });
    });
    app.addHook('preHandler', async (req, reply) => {
      const pending = perSchema.get(req);
      if (!pending) return;
      const refused = auth.authorize(pending.user, pending.needed, schemasOfRequest(ctx, req));
      if (refused) return reply.code(refused.status).send({ error: refused.error });
    });
  }

  // Every documented route, so a test can check /openapi.json describes them all.
  const documented: Array<{ method: string; url: string }> = [];
  documentedRoutes.set(app, documented);
  app.addHook('onRoute', (r) => {
    if ((r.schema as { hide?: boolean } | undefined)?.hide) return;
    for (const method of [r.method].flat())
      if (method !== 'HEAD') documented.push({ method, url: r.url });
  });

  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());

  // Rendered at most once per interval and per sampler sample (see ops/response-cache.ts).
  const cacheMs = ctx.responseCacheMs ?? defaultCacheMs(ctx.sampler);
  const sampledAt = () => ctx.sampler.sampledAtMs;
  const actorsCache = new ResponseCache(cacheMs, sampledAt);
  const metricsCache = new ResponseCache(cacheMs, sampledAt);

  app.get(
    '/health/live',
    { schema: { summary: 'The process answers.', tags: ['health'], response: { 200: S.live } } },
    async () => ({ status: 'live' as const }),
  );

  app.get(
    '/health/ready',
    {
      schema: {
        summary: 'Ready when every actor is live; 503 with the reasons otherwise.',
        tags: ['health'],
        response: { 200: S.health, 503: S.health },
      },
    },
    async (_req, reply) => {
      const h = healthOf(ctx.supervisor, ctx.waits ?? null);
      return reply.code(h.ready ? 200 : 503).send(h);
    },
  );

  app.get(
    '/health',
    {
      schema: {
        summary:
          'Overall state: ok, starting, degraded (naming the failing actor, or what the start ' +
          'waits for, and since when), draining, stopped, failed.',
        tags: ['health'],
        response: { 200: S.health, 503: S.health },
      },
    },
    async (_req, reply) => {
      const h = healthOf(ctx.supervisor, ctx.waits ?? null);
      return reply.code(h.status === 'failed' || h.status === 'stopped' ? 503 : 200).send(h);
    },
  );

  app.get(
    '/version',
    { schema: { summary: 'Package version.', response: { 200: S.version } } },
    async () => ({ version: ctx.version, topology: ctx.topology.name }),
  );

  app.get(
    '/topology',
    {
      schema: {
        summary: 'The running topology, secrets redacted.',
        tags: ['status'],
        response: { 200: S.anyObject },
      },
    },
    async () => redactTopology(ctx.topology),
  );

  app.get(
    '/actors',
    {
      schema: {
        summary:
          'Every actor: state, restarts, counters, rates over 1 s and 1 min, lag per input, ring occupancy. Read at `time` (also the x-sluice-as-of header), at most one sampler interval (1 s) before the response.',
        tags: ['status'],
        response: { 200: S.actors },
      },
    },
    async (_req, reply) =>
      sendRendered(
        reply,
        'application/json; charset=utf-8',
        await actorsCache.get((nowMs) =>
          Buffer.from(
            reply.serialize({
              topology: ctx.topology.name,
              time: new Date(nowMs).toISOString(),
              actors: ctx.sampler.statuses(lagMaxAgeMs(cacheMs)),
            }) as string,
          ),
        ),
      ),
  );

  // Actor names hold slashes (`pump:shop/0`, `reader:in/1>pass`): the documented route takes the
  // name as one path segment (`%2F` for each `/`); the hidden wildcard route beside it takes the
  // plain slashes, which fastify leaves to it only when no other /actors/... route matches.
  type HistoryQuery = { step?: 'second' | 'minute'; samples?: number };
  const history = (name: string, query: HistoryQuery, reply: FastifyReply) => {
    const h = ctx.sampler.history(name, query.step ?? 'second', query.samples);
    if (!h)
      return reply.code(404).send({ error: `unknown actor "${name}" (GET /actors lists them)` });
    return h;
  };
  app.get<{ Params: { name: string }; Querystring: HistoryQuery }>(
    '/actors/:name/history',
    {
      schema: {
        summary:
          'Per-second (last hour) or per-minute (last day) samples of one actor. The slashes of a name (pump:shop/0) may be written plain or as %2F.',
        tags: ['status'],
        params: S.actorParams,
        querystring: S.historyQuery,
        response: { 200: S.history, 404: S.error },
      },
    },
    async (req, reply) => history(req.params.name, req.query, reply),
  );
  app.get<{ Params: { '*': string }; Querystring: HistoryQuery }>(
    '/actors/*',
    {
      schema: {
        hide: true,
        querystring: S.historyQuery,
        response: { 200: S.history, 404: S.error },
      },
    },
    async (req, reply) => {
      const rest = req.params['*'];
      const name = rest.endsWith(HISTORY_SUFFIX) ? rest.slice(0, -HISTORY_SUFFIX.length) : '';
      if (name === '')
        return reply.code(404).send({
          error: `no route GET ${req.url.split('?')[0]} (GET /actors/{name}/history takes an actor's name)`,
        });
      return history(name, req.query, reply);
    },
  );

  app.get(
    '/capture',
    {
      schema: {
        summary:
          'Per capture source and table: staging depth, oldest staged age, drain rate, parked errors.',
        tags: ['status'],
        response: { 200: S.capture },
      },
    },
    async () => {
      const statuses = ctx.sampler.statuses();
      const sources = (await ctx.capture.read()).map((s) => {
        const pumps = statuses.filter(
          (a) => a.kind === 'pump' && a.name.startsWith(`pump:${s.source}/`),
        );
        const drain = pumps.reduce(
          (acc, p) => ({
            s1: acc.s1 + p.rates.eventsIn.perSecond1s,
            m1: acc.m1 + p.rates.eventsIn.perSecond1m,
          }),
          { s1: 0, m1: 0 },
        );
        return {
          ...s,
          pumps: ctx.pumps?.current(s.source) ?? s.pumps,
          drainRate: { perSecond1s: drain.s1, perSecond1m: drain.m1 },
        };
      });
      return { topology: ctx.topology.name, sources };
    },
  );

  app.get<{ Params: { source: string } }>(
    '/capture/:source/pumps',
    {
      schema: {
        summary: 'The running pump count of one capture source.',
        tags: ['capture'],
        params: S.sourceParams,
        response: { 200: S.pumpCount, 404: S.error },
      },
    },
    async (req, reply) => {
      const source = ctx.topology.capture.find((c) => c.name === req.params.source);
      if (!source)
        return reply.code(404).send({
          error: `unknown capture source "${req.params.source}" (GET /capture lists them)`,
        });
      return { source: source.name, pumps: ctx.pumps?.current(source.name) ?? source.pumps };
    },
  );

  app.put<{ Params: { source: string }; Body: { pumps: number } }>(
    '/capture/:source/pumps',
    {
      schema: {
        summary:
          'Changes the pump count of one capture source while it runs: the pumps stop taking claims, finish the batch in flight, then the new set starts (per-key order kept); audited. Resolves once the new pumps run.',
        tags: ['capture'],
        params: S.sourceParams,
        body: S.pumpCountBody,
        response: {
          200: S.pumpCountChange,
          400: S.error,
          404: S.error,
          409: S.error,
          501: S.error,
          503: S.error,
        },
      },
    },
    async (req, reply) => {
      if (!ctx.pumps)
        return reply.code(501).send({ error: 'this server cannot change pump counts' });
      let change;
      try {
        change = await ctx.pumps.set(req.params.source, req.body.pumps);
      } catch (err) {
        const status = (err as { status?: number }).status;
        if (status === 400 || status === 404 || status === 409 || status === 503)
          return reply.code(status).send({ error: (err as Error).message });
        throw err;
      }
      const entry = ctx.audit.record({
        user: userOf(req),
        remote: req.ip,
        action: 'pumps',
        target: req.params.source,
        before: change.before,
        after: change.after,
      });
      ctx.logger.info(
        {
          user: entry.user,
          target: entry.target,
          before: change.before,
          after: change.after,
          switchMs: change.switchMs,
          terminated: change.terminated,
        },
        'pump count changed',
      );
      return { ...entry, switchMs: change.switchMs, terminated: change.terminated };
    },
  );

  app.get(
    '/metrics',
    {
      schema: {
        summary:
          'Prometheus text format (prom-client). Read at the x-sluice-as-of header, at most one sampler interval (1 s) before the response.',
        tags: ['status'],
        produces: ['text/plain'],
      },
    },
    async (_req, reply) =>
      sendRendered(
        reply,
        ctx.metrics.contentType,
        await metricsCache.get(async () => Buffer.from(await ctx.metrics.metrics())),
      ),
  );

  app.get(
    '/log-level',
    {
      schema: {
        summary: "The global log level and each actor's.",
        tags: ['logs'],
        response: { 200: S.logLevels },
      },
    },
    async () => logLevels(ctx),
  );

  app.put<{ Body: { level: string; actor?: string } }>(
    '/log-level',
    {
      schema: {
        summary: 'Sets the log level of one actor, or the global one; audited.',
        tags: ['logs'],
        body: S.logLevelBody,
        response: { 200: S.auditEntry, 400: S.error, 404: S.error },
      },
    },
    async (req, reply) => {
      let level;
      try {
        level = parseLogLevel(req.body.level, 'body.level');
      } catch (err) {
        return reply.code(400).send({ error: (err as Error).message });
      }
      const actor = req.body.actor;
      if (actor !== undefined && !ctx.supervisor.actors().some((a) => a.name === actor)) {
        return reply.code(404).send({ error: `unknown actor "${actor}" (GET /actors lists them)` });
      }
      const before =
        actor === undefined ? ctx.logger.level : logLevelName(ctx.supervisor.logLevel(actor));
      ctx.supervisor.setLogLevel(LOG_LEVELS[level], actor);
      if (actor === undefined) ctx.logger.level = level;
      const entry = ctx.audit.record({
        user: userOf(req),
        remote: req.ip,
        action: 'log-level',
        target: actor ?? '*',
        before,
        after: level,
      });
      ctx.logger.info(
        { user: entry.user, target: entry.target, before, after: level },
        'log level changed',
      );
      return entry;
    },
  );

  app.get<{ Querystring: { limit?: number } }>(
    '/audit',
    {
      schema: {
        summary: 'Runtime changes, newest first: who, when, what, before and after.',
        tags: ['logs'],
        querystring: S.auditQuery,
        response: { 200: S.audit },
      },
    },
    async (req) => ({ entries: ctx.audit.list(req.query.limit ?? 100) }),
  );

  registerErrorRoutes(app, ctx);
  registerConfigRoutes(app, ctx);

  app.get<{ Querystring: { from?: string; to?: string; step?: StatsStep; name?: string } }>(
    '/stats',
    {
      schema: {
        summary:
          'Per-minute (step=minute) or hourly (step=hour) statistics per actor and capture table from the journal: events in/out, errors, lag p50/p99 ms. from/to: ms since the epoch or ISO time; default the last hour (minute) or day (hour).',
        tags: ['status'],
        querystring: S.statsQuery,
        response: { 200: S.stats, 400: S.error },
      },
    },
    async (req, reply) => {
      const step = req.query.step ?? 'minute';
      const opts = ctx.stats?.options ?? STATS_DEFAULTS;
      const to = timeParam('to', req.query.to);
      if (typeof to === 'string') return reply.code(400).send({ error: to });
      const from = timeParam('from', req.query.from);
      if (typeof from === 'string') return reply.code(400).send({ error: from });
      const toMs = to ?? Date.now() + 1;
      const fromMs = from ?? toMs - (step === 'minute' ? 3_600_000 : 86_400_000);
      if (fromMs > toMs)
        return reply.code(400).send({
          error: `querystring/from must not be after to, got from ${JSON.stringify(req.query.from)} (${isoOf(fromMs)}) and to ${req.query.to === undefined ? 'now' : JSON.stringify(req.query.to)} (${isoOf(toMs)})`,
        });
      const hourMs = opts.intervalMs * opts.hourIntervals;
      return {
        topology: ctx.topology.name,
        step,
        fromMs,
        toMs,
        intervalMs: step === 'minute' ? opts.intervalMs : hourMs,
        series: readStats(
          ctx.topology.dataDir,
          { fromMs, toMs, step, ...(req.query.name !== undefined ? { name: req.query.name } : {}) },
          hourMs,
        ),
      };
    },
  );

  app.get('/', { schema: { hide: true } }, async (_req, reply) =>
    sendDashboardFile(reply, 'index.html'),
  );
  app.get<{ Params: { file: string } }>(
    '/assets/:file',
    { schema: { hide: true } },
    async (req, reply) => sendDashboardFile(reply, req.params.file),
  );

  return app;
}

/**
 * The time of query parameter `name` (`12345`: ms since the epoch, else an ISO time), undefined
 * when absent, or the 400's message naming the parameter, the value and what it takes.
 */
function timeParam(name: string, v: string | undefined): number | undefined | string {
  if (v === undefined) return undefined;
  const ms = /^\d+$/.test(v) ? Number(v) : Date.parse(v);
  // A Date holds ±8.64e15 ms: beyond that there is no time to name.
  if (Number.isFinite(ms) && Math.abs(ms) <= 8.64e15) return ms;
  return `querystring/${name} must be ms since the epoch or an ISO time (e.g. 2026-12-01T08:00:00Z), got ${JSON.stringify(v)}`;
}

const isoOf = (ms: number): string => new Date(ms).toISOString();

function logLevels(ctx: OpsContext) {
  const actors: Record<string, string> = {};
  for (const a of ctx.supervisor.actors())
    actors[a.name] = logLevelName(ctx.supervisor.logLevel(a.name));
  return { global: String(ctx.logger.level), actors };
}

async function sendDashboardFile(reply: import('fastify').FastifyReply, file: string) {
  // Only plain file names of the dashboard's own directory: no path can leave it.
  const type = DASHBOARD_TYPES[path.extname(file)];
  if (!/^[\w.-]+$/.test(file) || !type)
    return reply.code(404).send({ error: `no dashboard file "${file}"` });
  try {
    const body = await fs.promises.readFile(path.join(DASHBOARD_DIR, file));
    return reply.type(type).header('cache-control', 'no-cache').send(body);
  } catch {
    return reply
      .code(404)
      .send({ error: `no dashboard file "${file}" (was the package built? npm run build)` });
  }
}

/** What fastify adds to the error of a request its schemas refuse. */
interface ValidationFailure {
  validation?: Array<{ instancePath?: string; keyword?: string; params?: Record<string, unknown> }>;
  validationContext?: string;
}

/**
 * The tail of a refused query parameter's, path parameter's or body field's message: the values
 * the schema allows and the value given (`querystring/step must be equal to one of the allowed
 * values` alone does not say which were meant, nor what was sent). A body field only for an enum
 * (its other refusals name their types); '' for any other error.
 */
function givenOf(err: ValidationFailure, req: FastifyRequest): string {
  const first = err.validation?.[0];
  const part =
    err.validationContext === 'querystring'
      ? req.query
      : err.validationContext === 'params'
        ? req.params
        : err.validationContext === 'body' && first?.keyword === 'enum'
          ? req.body
          : undefined;
  const key = /^\/([^/]+)$/.exec(first?.instancePath ?? '')?.[1];
  if (!first || key === undefined || part === null || typeof part !== 'object') return '';
  const allowed = first.keyword === 'enum' ? first.params?.allowedValues : undefined;
  return (
    (Array.isArray(allowed) ? ` (${allowed.join(', ')})` : '') +
    `, got ${JSON.stringify((part as Record<string, unknown>)[key])}`
  );
}

/** A listening server. */
export interface OpsServer {
  /** `http://host:port` as bound. */
  readonly url: string;
  readonly app: FastifyInstance;
  /** The thread serving the socket: OS thread id (0: unknown), nice value (null: unknown). */
  readonly thread: { tid: number; nice: number | null };
  close(): Promise<void>;
}

/**
 * Builds the app and listens, the socket in a thread of its own (ops/front.ts).
 * @throws Error when the address is taken or cannot be bound (message names host and port), or
 *   when `options.nice` is not an integer 0-19.
 */
export async function listenOps(ctx: OpsContext, options: HttpOptions): Promise<OpsServer> {
  const host = options.host ?? '127.0.0.1';
  const nice = options.nice ?? HTTP_NICE_DEFAULT;
  if (!Number.isInteger(nice) || nice < 0 || nice > 19)
    throw new Error(`http.nice must be an integer 0-19, got ${nice}`);
  const app = await buildOpsApp(ctx);
  let front;
  try {
    front = await startFront(
      app,
      {
        host,
        port: options.port,
        cacheMs: ctx.responseCacheMs ?? defaultCacheMs(ctx.sampler),
        cachedPaths: ['/metrics', '/actors'],
        asOfHeader: AS_OF_HEADER,
        nice,
        bodyLimit: BODY_LIMIT,
      },
      (line) => ctx.logger.error(line),
    );
  } catch (err) {
    await app.close().catch(() => undefined);
    throw new Error(`http: cannot listen on ${host}:${options.port}: ${(err as Error).message}`);
  }
  // Answers the front keeps are stale once the sampler has a newer sample.
  const onSample = ctx.sampler.onSample;
  const started = front;
  ctx.sampler.onSample = (all) => {
    onSample?.(all);
    started.sampled(ctx.sampler.sampledAtMs);
  };
  const shown = host.includes(':') ? `[${host}]` : host;
  return {
    url: `http://${shown}:${front.port}`,
    app,
    thread: front.thread,
    close: async () => {
      await started.close();
      await app.close();
    },
  };
}
