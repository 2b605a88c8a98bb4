/**
 * Routes of the capture configuration (ops/capture-config.ts), the HTTP side of `sluice config`:
 *
 * | route                          | right | what                                              |
 * |--------------------------------|-------|---------------------------------------------------|
 * | GET  /config/capture?schema=S  | read  | the capture section as JSON (one schema's)        |
 * | POST /config/capture           | admin | import: validate, install triggers, rewrite, keep |
 * | GET  /config/history           | read  | every version: version, time, user, diff          |
 * | GET  /config/history/{version} | read  | one version with its whole capture section        |
 * | POST /config/restore           | admin | `{"version": n}` applied again as a new version   |
 *
 * An import's body is kept as `<dataDir>/ops/config-import.json` and validated from there, so a
 * problem names that file, a line:col in it and the field path. Changes are audited.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { FastifyInstance } from 'fastify';
import { ConfigError } from '../engine/config/index.js';
import {
  applyImport,
  configHistory,
  exportCapture,
  planImport,
  restoreCapture,
} from './capture-config.js';
import { auditChange } from './errors-routes.js';
import { userOf } from './request-user.js';
import type { OpsContext } from './server.js';
import * as S from './schemas.js';

/** A refused import: the problems as the CLI prints them, and each one's fields. */
function refused(err: unknown) {
  if (err instanceof ConfigError)
    return { status: 400, body: { error: err.message, problems: [...err.problems] } };
  return { status: 503, body: { error: (err as Error).message } };
}

/** Registers the routes of the module comment on `app`. */
export function registerConfigRoutes(app: FastifyInstance, ctx: OpsContext): void {
  const file = ctx.topology.file;
  app.get<{ Querystring: { schema?: string } }>(
    '/config/capture',
    {
      schema: {
        summary:
          "The topology file's capture section as JSON (as sluice config export); schema=S: one captured schema's sources.",
        tags: ['config'],
        querystring: S.configQuery,
        response: { 200: S.captureExport },
      },
    },
    async (req) => exportCapture(file, req.query.schema),
  );

  app.post<{ Body: Record<string, unknown> }>(
    '/config/capture',
    {
      schema: {
        summary:
          'Imports a capture section ({"capture": [...]}, "schema" for one schema): validated as the YAML, triggers regenerated, topology file rewritten, version kept; audited.',
        tags: ['config'],
        body: S.captureImport,
        response: { 200: S.configChange, 400: S.configProblems, 503: S.error },
      },
    },
    async (req, reply) => {
      const json = path.join(ctx.topology.dataDir, 'ops', 'config-import.json');
      fs.mkdirSync(path.dirname(json), { recursive: true });
      fs.writeFileSync(json, `${JSON.stringify(req.body, null, 2)}\n`);
      const before = exportCapture(file).capture;
      try {
        const plan = planImport(file, json);
        const version = await applyImport(file, json, plan, {
          user: userOf(req),
          action: 'import',
        });
        const audit = auditChange(ctx, req, {
          action: 'config-import',
          target: 'capture',
          before,
          after: { version: version.version, capture: version.capture },
        });
        return { version, audit };
      } catch (err) {
        const r = refused(err);
        return reply.code(r.status).send(r.body);
      }
    },
  );

  app.get(
    '/config/history',
    {
      schema: {
        summary:
          'Every applied version of the capture section, oldest first: version, time, user, action, diff.',
        tags: ['config'],
        response: { 200: S.configHistory },
      },
    },
    async () => ({
      versions: configHistory(ctx.topology.dataDir).map(({ capture: _c, ...v }) => v),
    }),
  );

  app.get<{ Params: { version: number } }>(
    '/config/history/:version',
    {
      schema: {
        summary: 'One version of the capture section, with the whole section.',
        tags: ['config'],
        params: S.versionParams,
        response: { 200: S.configVersion, 404: S.error },
      },
    },
    async (req, reply) => {
      const v = configHistory(ctx.topology.dataDir).find((h) => h.version === req.params.version);
      if (!v)
        return reply
          .code(404)
          .send({ error: `no capture configuration version ${req.params.version}` });
      return v;
    },
  );

  app.post<{ Body: { version: number } }>(
    '/config/restore',
    {
      schema: {
        summary:
          'Applies an earlier version of the capture section again, as a new version; audited.',
        tags: ['config'],
        body: S.restoreBody,
        response: { 200: S.configChange, 400: S.configProblems, 404: S.error, 503: S.error },
      },
    },
    async (req, reply) => {
      const history = configHistory(ctx.topology.dataDir);
      if (!history.some((h) => h.version === req.body.version)) {
        return reply.code(404).send({
          error: `no capture configuration version ${req.body.version} (versions: ${history.map((h) => h.version).join(', ') || 'none yet'})`,
        });
      }
      const before = exportCapture(file).capture;
      try {
        const version = await restoreCapture(ctx.topology, req.body.version, userOf(req));
        const audit = auditChange(ctx, req, {
          action: 'config-restore',
          target: 'capture',
          before,
          after: {
            version: version.version,
            restoredFrom: req.body.version,
            capture: version.capture,
          },
        });
        return { version, audit };
      } catch (err) {
        const r = refused(err);
        return reply.code(r.status).send(r.body);
      }
    },
  );
}
