/**
 * The operations server's socket in a worker thread of its own, at a lower scheduling priority
 * than the actors (ops/front.worker.ts). The fastify app (ops/server.ts) stays on the main
 * thread, which holds what its routes read and change; the front hands it every request through
 * `app.inject` and keeps the fresh answers of GET /metrics and GET /actors itself, so a client
 * polling them many times a second costs the main thread one answer per cache interval and the
 * cores only what the front thread is given when the actors want them.
 *
 * Authorization is the app's: an answer is kept per remote address, URL and Authorization header,
 * only when it was a 200, and for at most the cache interval; a request with another header goes
 * to the app, so every failed authentication reaches the app's failure limiter, and a refusal
 * (401, 403, 429) drops the kept answers of its address, so an address the limiter refuses is
 * refused from its next request on, whatever token it then sends.
 */
import { Worker } from 'node:worker_threads';
import type { FastifyInstance } from 'fastify';
import type { IncomingHttpHeaders, OutgoingHttpHeaders } from 'node:http';

/** Default of HttpOptions.nice (ops/server.ts): priority steps below the actors. */
export const HTTP_NICE_DEFAULT = 10;

/** What the front thread starts with (workerData). */
export interface FrontInit {
  host: string;
  /** 0: any free port. */
  port: number;
  /** Longest age of a kept answer, ms (0: none kept). */
  cacheMs: number;
  /** Paths (no query) whose GET answers are kept. */
  cachedPaths: string[];
  /** Header holding when an answer's figures were read (ISO time); answers without it are not kept. */
  asOfHeader: string;
  /** Priority steps the thread lowers itself by (Linux nice, 0-19; 0: as the actors). */
  nice: number;
  /** Largest request body, bytes (larger: 413). */
  bodyLimit: number;
  /**
   * 8 bytes (one BigInt64, ms since the epoch, Atomics): the latest sample's time, written by
   * the main thread; answers read before it are stale.
   */
  sampledAt: SharedArrayBuffer;
}

/** One answer of the app, as the front writes it. */
export interface FrontResponse {
  type: 'response';
  id: number;
  status: number;
  headers: OutgoingHttpHeaders;
  body: Uint8Array;
}

/** Messages of the front thread. */
export type FrontToMain =
  | { type: 'listening'; port: number; tid: number; nice: number | null }
  | { type: 'error'; message: string }
  | {
      type: 'request';
      id: number;
      method: string;
      url: string;
      headers: IncomingHttpHeaders;
      remote: string;
      body: Uint8Array;
    }
  | { type: 'closed' };

/** Messages to the front thread. */
export type MainToFront = FrontResponse | { type: 'close' };

/** A listening front. */
export interface Front {
  /** The bound port. */
  readonly port: number;
  /** OS thread id of the front thread (0: unknown) and its nice value after lowering (null: unknown). */
  readonly thread: { tid: number; nice: number | null };
  /** Answers kept before `atMs` (ms since the epoch) are stale from now on (a new sample). */
  sampled(atMs: number): void;
  /** Stops listening, destroys open connections, ends the thread. Idempotent. */
  close(): Promise<void>;
}

const WORKER = new URL('./front.worker.js', import.meta.url);

/**
 * Starts the front thread and listens.
 * @param app the fastify app answering every request the front does not keep (ready()ed here).
 * @param log where a failure of the front after it listens is reported.
 * @throws Error with the listen error's message (address in use, not bindable).
 */
export async function startFront(
  app: FastifyInstance,
  init: Omit<FrontInit, 'sampledAt'>,
  log: (message: string) => void,
): Promise<Front> {
  await app.ready();
  const sampledAt = new BigInt64Array(new SharedArrayBuffer(8));
  const worker = new Worker(WORKER, { workerData: { ...init, sampledAt: sampledAt.buffer } });
  worker.unref();
  let closed: Promise<void> | null = null;
  let onClosed: (() => void) | null = null;

  const answer = async (m: Extract<FrontToMain, { type: 'request' }>): Promise<FrontResponse> => {
    try {
      const res = await app.inject({
        method: m.method as 'GET',
        url: m.url,
        headers: m.headers as Record<string, string>,
        remoteAddress: m.remote,
        ...(m.body.byteLength > 0 ? { payload: Buffer.from(m.body) } : {}),
      });
      return {
        type: 'response',
        id: m.id,
        status: res.statusCode,
        headers: res.headers as OutgoingHttpHeaders,
        body: new Uint8Array(res.rawPayload),
      };
    } catch (err) {
      const body = Buffer.from(JSON.stringify({ error: (err as Error).message }));
      return {
        type: 'response',
        id: m.id,
        status: 500,
        headers: { 'content-type': 'application/json; charset=utf-8' },
        body: new Uint8Array(body),
      };
    }
  };

  const listening = await new Promise<Extract<FrontToMain, { type: 'listening' }>>(
    (resolve, reject) => {
      let up = false;
      worker.on('message', (m: FrontToMain) => {
        if (m.type === 'listening') {
          up = true;
          resolve(m);
        } else if (m.type === 'error') {
          if (up) log(`http: the operations server's socket failed: ${m.message}`);
          else reject(new Error(m.message));
        } else if (m.type === 'request') {
          void answer(m).then((r) => worker.postMessage(r));
        } else if (m.type === 'closed') {
          onClosed?.();
        }
      });
      worker.on('error', (err) => {
        if (up) log(`http: the operations server's thread failed: ${err.message}`);
        else reject(err);
      });
      worker.on('exit', (code) => {
        if (!up) reject(new Error(`the operations server's thread exited (code ${code})`));
        onClosed?.();
      });
    },
  ).catch(async (err: Error) => {
    await worker.terminate();
    throw err;
  });

  return {
    port: listening.port,
    thread: { tid: listening.tid, nice: listening.nice },
    // Shared memory, not a message: a request sent after sample() sees it.
    sampled: (atMs) => {
      if (BigInt(atMs) > Atomics.load(sampledAt, 0)) Atomics.store(sampledAt, 0, BigInt(atMs));
    },
    close: () =>
      (closed ??= (async () => {
        await new Promise<void>((resolve) => {
          onClosed = resolve;
          worker.postMessage({ type: 'close' } satisfies MainToFront);
          // The front waits up to 2 s for requests being answered (front.worker.ts).
          setTimeout(resolve, 3000).unref();
        });
        await worker.terminate();
      })()),
  };
}
