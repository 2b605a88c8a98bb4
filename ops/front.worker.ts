/**
 * The operations server's front: the worker thread that owns the listening socket (ops/front.ts
 * starts it). It parses HTTP with node:http, answers GET /metrics and GET /actors from the last
 * answer the main thread gave while that answer is fresh, and hands every other request to the
 * main thread, where the fastify app answers it (`inject`, no socket). The thread lowers its own
 * scheduling priority (Linux `setpriority` on its thread id, `nice` steps), so a flood of
 * requests slows the answers rather than the actors when the cores are busy.
 *
 * Messages (structured clone):
 * - to the main thread: `{ type: 'listening', port, tid, nice }`, `{ type: 'error', message }`,
 *   `{ type: 'request', id, method, url, headers, remote, body }`, `{ type: 'closed' }`;
 * - from it: `{ type: 'response', id, status, headers, body }`, `{ type: 'close' }`; the latest
 *   sample's time (answers read before it are stale) is in shared memory (FrontInit.sampledAt).
 */
import http from 'node:http';
import os from 'node:os';
import { parentPort, workerData } from 'node:worker_threads';
import { osThreadId } from '../engine/actor/counters.js';
import type { FrontInit, FrontResponse, FrontToMain, MainToFront } from './front.js';

const init = workerData as FrontInit;
const port = parentPort!;

// Hop-by-hop headers and those node:http sets itself from the body written.
const DROPPED = new Set(['connection', 'keep-alive', 'transfer-encoding', 'content-length']);

/**
 * A kept answer of the main thread: served to the same remote address, URL and Authorization
 * header.
 */
interface Entry {
  response: FrontResponse;
  /** When its figures were read (its AS_OF header), ms since the epoch. */
  asOfMs: number;
}

let nextId = 1;
const waiting = new Map<number, (r: FrontResponse) => void>();
const cache = new Map<string, Entry>();
const inFlight = new Map<string, Promise<FrontResponse>>();
const sampledAt = new BigInt64Array(init.sampledAt);
let closing = false;

/** Applies the priority step; returns the thread's nice value after it (null: unknown). */
function lowerPriority(): { tid: number; nice: number | null } {
  const tid = osThreadId();
  if (tid === 0) return { tid, nice: null };
  try {
    const base = os.getPriority(tid);
    if (init.nice > 0) os.setPriority(tid, Math.min(19, base + init.nice));
    return { tid, nice: os.getPriority(tid) };
  } catch {
    return { tid, nice: null };
  }
}

function toMain(m: FrontToMain): void {
  port.postMessage(m);
}

function ask(req: {
  method: string;
  url: string;
  headers: http.IncomingHttpHeaders;
  remote: string;
  body: Uint8Array;
}): Promise<FrontResponse> {
  const id = nextId++;
  return new Promise((resolve) => {
    waiting.set(id, resolve);
    toMain({ type: 'request', id, ...req });
  });
}

function isFresh(e: Entry, nowMs: number): boolean {
  return nowMs - e.asOfMs < init.cacheMs && e.asOfMs >= Number(Atomics.load(sampledAt, 0));
}

/**
 * The answer to a cacheable GET: the kept one while fresh, else the main thread's. Only a key
 * whose header the app accepted before (a kept answer, fresh or not) shares one request in flight
 * among concurrent ones; any other request goes to the app on its own, so each refused token
 * counts in the app's failure limiter. Only a 200 carrying the as-of header is kept.
 */
async function cached(
  key: string,
  req: Parameters<typeof ask>[0],
  nowMs: number,
): Promise<FrontResponse> {
  const e = cache.get(key);
  if (e && isFresh(e, nowMs)) return e.response;
  const keep = (r: FrontResponse): FrontResponse => {
    const asOf = r.headers[init.asOfHeader];
    const asOfMs = typeof asOf === 'string' ? Date.parse(asOf) : NaN;
    if (r.status === 200 && Number.isFinite(asOfMs)) {
      cache.delete(key);
      cache.set(key, { response: r, asOfMs });
      // Distinct Authorization headers are few (users' tokens); bound them anyway.
      if (cache.size > 64) cache.delete(cache.keys().next().value as string);
    }
    return r;
  };
  if (!e) return ask(req).then(keep);
  let pending = inFlight.get(key);
  if (!pending) {
    pending = ask(req).then((r) => {
      inFlight.delete(key);
      return keep(r);
    });
    inFlight.set(key, pending);
  }
  return pending;
}

/** Drops the kept answers of one remote address. */
function forget(remote: string): void {
  for (const key of cache.keys()) if (key.startsWith(`${remote}\n`)) cache.delete(key);
}

function send(res: http.ServerResponse, r: FrontResponse, head: boolean): void {
  for (const [name, value] of Object.entries(r.headers))
    if (value !== undefined && !DROPPED.has(name)) res.setHeader(name, value);
  res.statusCode = r.status;
  // A HEAD answer has no body: its length is the GET's, as the app said.
  const length = head ? r.headers['content-length'] : undefined;
  res.setHeader('content-length', length ?? r.body.byteLength);
  if (closing) res.setHeader('connection', 'close');
  res.end(head ? undefined : r.body);
}

/** A JSON error answer written by the front itself; `close`: the connection ends after it. */
function refuse(res: http.ServerResponse, status: number, error: string, close = false): void {
  if (res.headersSent) return;
  const body = Buffer.from(JSON.stringify({ error }));
  res.writeHead(status, {
    'content-type': 'application/json; charset=utf-8',
    'content-length': body.byteLength,
    ...(close || closing ? { connection: 'close' } : {}),
  });
  res.end(body);
}

/** Requests read and not yet answered (a close waits for them, CLOSE_WAIT_MS at most). */
let open = 0;
let onIdle: (() => void) | null = null;
const CLOSE_WAIT_MS = 2_000;

const server = http.createServer((req, res) => {
  if (closing) return refuse(res, 503, 'the server is closing', true);
  open++;
  res.on('close', () => {
    open--;
    if (open === 0) onIdle?.();
  });
  const tooLarge = () => {
    // Answered at once, without reading the rest; the connection ends after the answer.
    refuse(res, 413, `request body over ${init.bodyLimit} bytes (the API's limit)`, true);
    req.removeAllListeners('data');
    req.resume();
    res.on('finish', () => req.socket.destroy());
  };
  const declared = Number(req.headers['content-length'] ?? 0);
  if (declared > init.bodyLimit) return tooLarge();
  const chunks: Buffer[] = [];
  let bytes = 0;
  let refused = false;
  req.on('data', (c: Buffer) => {
    if (refused) return;
    bytes += c.length;
    if (bytes > init.bodyLimit) {
      refused = true;
      tooLarge();
    } else chunks.push(c);
  });
  req.on('end', () => {
    if (refused) return;
    const method = req.method ?? 'GET';
    const url = req.url ?? '/';
    const one = {
      method,
      url,
      headers: req.headers,
      remote: req.socket.remoteAddress ?? '127.0.0.1',
      body: bytes === 0 ? new Uint8Array(0) : new Uint8Array(Buffer.concat(chunks)),
    };
    const path = url.split('?')[0]!;
    const answer =
      method === 'GET' && init.cachedPaths.includes(path)
        ? cached(`${one.remote}\n${url}\n${req.headers.authorization ?? ''}`, one, Date.now())
        : ask(one);
    answer.then(
      (r) => {
        // A refused authentication may have limited the address (429 for every token): its kept
        // answers go, so its next request is the app's to decide.
        if (r.status === 401 || r.status === 403 || r.status === 429) forget(one.remote);
        send(res, r, method === 'HEAD');
      },
      (err: unknown) => refuse(res, 500, (err as Error).message),
    );
  });
  req.on('error', () => res.destroy());
});
// As fastify's default: dashboards and scrapers keep their connections between polls.
server.keepAliveTimeout = 72_000;

port.on('message', (m: MainToFront) => {
  if (m.type === 'response') {
    const resolve = waiting.get(m.id);
    waiting.delete(m.id);
    resolve?.(m);
  } else if (m.type === 'close') {
    // No new connection; idle ones end now; requests being answered get their answers (with
    // `connection: close`), CLOSE_WAIT_MS at most; a request arriving meanwhile on an open
    // connection gets 503.
    closing = true;
    server.close(() => toMain({ type: 'closed' }));
    server.closeIdleConnections();
    const end = () => {
      onIdle = null;
      server.closeAllConnections();
    };
    if (open === 0) end();
    else {
      onIdle = end;
      setTimeout(end, CLOSE_WAIT_MS).unref();
    }
  }
});

server.on('error', (err) => toMain({ type: 'error', message: err.message }));
server.listen({ host: init.host, port: init.port }, () => {
  const addr = server.address();
  const { tid, nice } = lowerPriority();
  toMain({
    type: 'listening',
    port: typeof addr === 'object' && addr ? addr.port : init.port,
    tid,
    nice,
  });
});
