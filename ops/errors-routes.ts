/**
 * Routes of the capture error table and of the services' dead-letter queues, the HTTP side of
 * `sluice errors` and `sluice dlq`:
 *
 * | route                                   | right   | what                                   |
 * |-----------------------------------------|---------|----------------------------------------|
 * | GET  /capture/{source}/errors           | read    | parked changes, lowest staging id first|
 * | POST /capture/{source}/errors/requeue   | operate | back into staging under their own ids  |
 * | POST /capture/{source}/errors/purge     | operate | deleted for good (their keys flow)     |
 * | GET  /dlq                               | read    | every dead-letter queue and its count  |
 * | GET  /dlq/{queue}                       | read    | the dead letters, oldest first         |
 * | POST /dlq/{queue}/replay                | operate | append the events again                |
 * | POST /dlq/{queue}/purge                 | operate | remove every dead letter               |
 *
 * Every change is audited (who, when, what, before and after counts). They call the same
 * staging-client methods and dead-letter functions as the command line, on their own
 * connection (opened per request: these are rare operator actions).
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import {
  openStaging,
  type CaptureSource,
  type ParkedChange,
  type ParkedSelection,
  type StagingClient,
} from '../engine/cdc/index.js';
import {
  deadLetterOwner,
  DeadLetterReplayError,
  listDeadLetters,
  purgeDeadLetters,
  replayDeadLetterQueue,
} from '../engine/service/index.js';
import { JournalLockedError } from '../engine/journal/index.js';
import {
  EnvelopeView,
  decodeChange,
  decodeJson,
  EVENT_TYPE_CHANGE,
  EVENT_TYPE_JSON,
} from '../engine/codec/index.js';
import type { AuditEntry } from './audit.js';
import { userOf } from './request-user.js';
import type { OpsContext } from './server.js';
import * as S from './schemas.js';
import { kafkaListDeadLetters, kafkaReplayDeadLetters } from './kafka-dlq.js';

/** Parked changes served per request at most. */
export const ERRORS_LIST_MAX = 10_000;

/** Records an audited change and logs it (without images or tokens). */
export function auditChange(
  ctx: OpsContext,
  req: FastifyRequest,
  change: Pick<AuditEntry, 'action' | 'target' | 'before' | 'after'>,
): AuditEntry {
  const entry = ctx.audit.record({ user: userOf(req), remote: req.ip, ...change });
  ctx.logger.info(
    {
      user: entry.user,
      action: entry.action,
      target: entry.target,
      before: entry.before,
      after: entry.after,
    },
    `${entry.action} by ${entry.user}`,
  );
  return entry;
}

function sourceOf(ctx: OpsContext, name: string): CaptureSource | null {
  return ctx.topology.capture.find((c) => c.name === name) ?? null;
}

function unknownSource(ctx: OpsContext, reply: FastifyReply, name: string) {
  const known = ctx.topology.capture.map((c) => c.name).join(', ') || 'none';
  return reply
    .code(404)
    .send({ error: `unknown capture source "${name}" (capture sources: ${known})` });
}

async function withStaging<T>(
  source: CaptureSource,
  work: (s: StagingClient) => Promise<T>,
): Promise<T> {
  const staging = await openStaging(source);
  try {
    return await work(staging);
  } finally {
    await staging.close();
  }
}

/** A parked change as served: images only when asked for (one may be megabytes). */
function shownParked(p: ParkedChange, images: boolean) {
  const { keyHash: _keyHash, before, after, ...rest } = p;
  return {
    ...rest,
    beforeChars: before === null ? null : before.length,
    afterChars: after === null ? null : after.length,
    before: images ? before : null,
    after: images ? after : null,
  };
}

/**
 * The selection of a requeue or purge: ids, or `all`, or (purge) `olderThanMs`; never
 * everything by accident. @returns the selection, or an error text.
 */
export function parkedSelection(
  body: { ids?: string[]; all?: boolean; olderThanMs?: number } | undefined,
  verb: 'requeue' | 'purge',
): ParkedSelection | string {
  const b = body ?? {};
  if (b.ids === undefined && !b.all && b.olderThanMs === undefined) {
    return `errors ${verb}: name staging ids ("ids"), or "all": true${verb === 'purge' ? ', or "olderThanMs"' : ''}`;
  }
  if (b.ids !== undefined && b.all) return `errors ${verb}: "ids" and "all" exclude each other`;
  return {
    ...(b.ids !== undefined ? { ids: b.ids } : {}),
    ...(b.olderThanMs !== undefined ? { parkedBeforeMs: Date.now() - b.olderThanMs } : {}),
  };
}

/** Decodes a dead letter's original event for JSON output (as `sluice dlq list` prints it). */
function eventValue(view: EnvelopeView, bytes: Uint8Array): unknown {
  if (bytes.length === 0) return null;
  view.wrap(bytes, 0, bytes.length);
  return view.type === EVENT_TYPE_CHANGE
    ? decodeChange(view.payload)
    : view.type === EVENT_TYPE_JSON
      ? decodeJson(view.payload)
      : `<${view.payload.length} bytes>`;
}

/** The dead-letter queues of the topology and the service writing each. */
function deadLetterQueues(ctx: OpsContext): Array<{ queue: string; service: string }> {
  return ctx.topology.services
    .filter((s) => s.errors.onFailure === 'dead-letter')
    .map((s) => ({ queue: s.errors.deadLetterQueue, service: s.name }));
}

/**
 * Dead letters on the topology's bus: the journal's synchronous functions (engine/service), or
 * on a kafka bus their asynchronous equivalents (./kafka-dlq.ts), which never block the main
 * thread on the broker.
 */
function deadLetters(ctx: OpsContext) {
  const t = ctx.topology;
  if (t.bus.kind === 'kafka') {
    return {
      list: (queue: string) => kafkaListDeadLetters(t, queue),
      replay: (queue: string, o: { to?: string; indexes?: number[] }) =>
        kafkaReplayDeadLetters(t, queue, o),
    };
  }
  return {
    list: async (queue: string) => listDeadLetters(t, queue),
    replay: async (queue: string, o: { to?: string; indexes?: number[] }) =>
      replayDeadLetterQueue(t, queue, o),
  };
}

/** 404 for a queue that is no dead-letter queue of the topology; null when it is one. */
function notADeadLetterQueue(ctx: OpsContext, reply: FastifyReply, queue: string) {
  try {
    deadLetterOwner(ctx.topology, queue);
    return null;
  } catch (err) {
    return reply.code(404).send({ error: (err as Error).message });
  }
}

/** Registers the routes of the module comment on `app`. */
export function registerErrorRoutes(app: FastifyInstance, ctx: OpsContext): void {
  app.get<{ Params: { source: string }; Querystring: { limit?: number; images?: boolean } }>(
    '/capture/:source/errors',
    {
      schema: {
        summary:
          'Parked changes of a capture source (the error table), lowest staging id first; images with images=true.',
        tags: ['capture'],
        params: S.sourceParams,
        querystring: S.errorsQuery,
        response: { 200: S.errorsList, 404: S.error, 503: S.error },
      },
    },
    async (req, reply) => {
      const source = sourceOf(ctx, req.params.source);
      if (!source) return unknownSource(ctx, reply, req.params.source);
      const limit = req.query.limit ?? 100;
      try {
        const { parked, total } = await withStaging(source, async (s) => ({
          parked: await s.listParked({}, limit),
          total: await s.parkedCount(),
        }));
        return {
          source: source.name,
          total,
          parked: parked.map((p) => shownParked(p, req.query.images === true)),
        };
      } catch (err) {
        return reply
          .code(503)
          .send({ error: `capture source "${source.name}": ${(err as Error).message}` });
      }
    },
  );

  for (const verb of ['requeue', 'purge'] as const) {
    app.post<{
      Params: { source: string };
      Body: { ids?: string[]; all?: boolean; olderThanMs?: number } | undefined;
    }>(
      `/capture/:source/errors/${verb}`,
      {
        schema: {
          summary:
            verb === 'requeue'
              ? 'Moves parked changes back into staging under their own staging ids (ids, or all); audited.'
              : 'Deletes parked changes for good (ids, all, or olderThanMs); audited.',
          tags: ['capture'],
          params: S.sourceParams,
          body: verb === 'requeue' ? S.requeueBody : S.purgeBody,
          response: { 200: S.errorsChange, 400: S.error, 404: S.error, 503: S.error },
        },
      },
      async (req, reply) => {
        const source = sourceOf(ctx, req.params.source);
        if (!source) return unknownSource(ctx, reply, req.params.source);
        const selection = parkedSelection(req.body, verb);
        if (typeof selection === 'string') return reply.code(400).send({ error: selection });
        let result: { before: number; changed: number; after: number };
        try {
          result = await withStaging(source, async (s) => {
            const before = await s.parkedCount();
            const changed =
              verb === 'requeue' ? await s.requeue(selection) : await s.purge(selection);
            return { before, changed, after: await s.parkedCount() };
          });
        } catch (err) {
          return reply
            .code(503)
            .send({ error: `capture source "${source.name}": ${(err as Error).message}` });
        }
        const audit = auditChange(ctx, req, {
          action: `errors-${verb}`,
          target: `capture:${source.name}`,
          before: { parked: result.before },
          after: {
            parked: result.after,
            [verb === 'requeue' ? 'requeued' : 'purged']: result.changed,
            selection: req.body ?? {},
          },
        });
        return { source: source.name, changed: result.changed, parked: result.after, audit };
      },
    );
  }

  const dl = deadLetters(ctx);
  /** A kafka broker that does not answer: 503 with the reason (the journal's errors are thrown). */
  const brokerDown = (reply: FastifyReply, err: unknown) => {
    if (ctx.topology.bus.kind !== 'kafka') throw err;
    return reply.code(503).send({ error: (err as Error).message });
  };

  app.get(
    '/dlq',
    {
      schema: {
        summary: "Every service's dead-letter queue with the number of dead letters it holds.",
        tags: ['dead letters'],
        response: { 200: S.dlqQueues, 503: S.error },
      },
    },
    async (_req, reply) => {
      try {
        const queues = [];
        for (const q of deadLetterQueues(ctx))
          queues.push({ ...q, deadLetters: (await dl.list(q.queue)).length });
        return { queues };
      } catch (err) {
        return brokerDown(reply, err);
      }
    },
  );

  app.get<{ Params: { queue: string }; Querystring: { limit?: number } }>(
    '/dlq/:queue',
    {
      schema: {
        summary:
          'The dead letters of a queue, oldest first: position, attempts, error, the event (as sluice dlq list).',
        tags: ['dead letters'],
        params: S.queueParams,
        querystring: S.dlqQuery,
        response: { 200: S.dlqList, 404: S.error, 503: S.error },
      },
    },
    async (req, reply) => {
      if (notADeadLetterQueue(ctx, reply, req.params.queue)) return reply;
      let entries;
      try {
        entries = await dl.list(req.params.queue);
      } catch (err) {
        return brokerDown(reply, err);
      }
      const view = new EnvelopeView();
      const shown = entries.slice(0, req.query.limit ?? 1000).map((d) => ({
        dlqIndex: d.dlqIndex,
        service: d.service,
        queue: d.queue,
        partition: d.partition,
        index: d.index,
        key: d.key,
        attempts: d.attempts,
        error: d.error,
        failedAtMs: d.failedAtMs,
        value: eventValue(view, d.bytes),
      }));
      return { queue: req.params.queue, total: entries.length, deadLetters: shown };
    },
  );

  app.post<{ Params: { queue: string }; Body: { to?: string; indexes?: number[] } | undefined }>(
    '/dlq/:queue/replay',
    {
      schema: {
        summary:
          'Appends the dead-lettered events again, to their source partition or to "to" (partitioned by key); "indexes" picks some; audited. On a kafka bus the broker assigns the offsets (index -1).',
        tags: ['dead letters'],
        params: S.queueParams,
        body: S.dlqReplayBody,
        response: { 200: S.dlqReplayed, 400: S.error, 404: S.error, 409: S.error, 503: S.error },
      },
    },
    async (req, reply) => {
      const queue = req.params.queue;
      if (notADeadLetterQueue(ctx, reply, queue)) return reply;
      let replayed;
      try {
        replayed = await dl.replay(queue, { to: req.body?.to, indexes: req.body?.indexes });
      } catch (err) {
        if (ctx.topology.bus.kind === 'kafka' && /^kafka bus /.test((err as Error).message))
          return brokerDown(reply, err);
        // The request names what is not there (400); anything else conflicts with the queues' state.
        const code = err instanceof DeadLetterReplayError ? 400 : 409;
        return reply.code(code).send({ error: (err as Error).message });
      }
      let held: number;
      try {
        held = (await dl.list(queue)).length;
      } catch (err) {
        return brokerDown(reply, err);
      }
      const audit = auditChange(ctx, req, {
        action: 'dlq-replay',
        target: `queue:${queue}`,
        before: { deadLetters: held },
        after: {
          replayed: replayed.length,
          to: req.body?.to ?? 'source partitions',
          indexes: req.body?.indexes ?? 'all',
        },
      });
      return { queue, replayed, audit };
    },
  );

  app.post<{ Params: { queue: string } }>(
    '/dlq/:queue/purge',
    {
      schema: {
        summary:
          'Removes every dead letter of the queue; 409 while the service writing it runs (it holds the queue, as for sluice dlq purge; a kafka bus cannot tell, stop the service first); audited.',
        tags: ['dead letters'],
        params: S.queueParams,
        response: { 200: S.dlqPurged, 404: S.error, 409: S.error, 503: S.error },
      },
    },
    async (req, reply) => {
      const queue = req.params.queue;
      if (notADeadLetterQueue(ctx, reply, queue)) return reply;
      // The API runs inside the running topology, so its services write their dead-letter
      // queues now: the journal's appender lock refuses the purge (409 below); a kafka bus has
      // no such lock, and a purge there could delete a dead letter appended meanwhile.
      if (ctx.topology.bus.kind === 'kafka') {
        return reply.code(409).send({
          error: `dead-letter queue "${queue}" is written by its running service (${ctx.topology.file}: bus kind kafka); purge with the topology stopped: sluice dlq purge`,
        });
      }
      let before: number;
      let purged: number;
      try {
        before = (await dl.list(queue)).length;
        purged = purgeDeadLetters(ctx.topology, queue);
      } catch (err) {
        if (!(err instanceof JournalLockedError) && !/already open/.test((err as Error).message))
          throw err;
        return reply.code(409).send({
          error: `dead-letter queue "${queue}" is held by its running service: ${(err as Error).message} (purge with the service stopped: sluice dlq purge)`,
        });
      }
      const audit = auditChange(ctx, req, {
        action: 'dlq-purge',
        target: `queue:${queue}`,
        before: { deadLetters: before },
        after: { deadLetters: 0, purged },
      });
      return { queue, purged, audit };
    },
  );
}
