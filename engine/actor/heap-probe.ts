/**
 * Debug-only memory probe of a thread (a worker thread's actor, or the main thread of `sluice
 * run`), for finding where memory goes in a long run (issue 13 §3 soak). Off unless the
 * environment variable {@link HEAP_PROBE_DIR_ENV} names a directory; then every
 * {@link HEAP_PROBE_INTERVAL_ENV} ms (default 10,000) the thread appends one JSON line to
 * `<dir>/heap.jsonl`:
 * `{ t, name, threadId, heapUsed, heapTotal, external, arrayBuffers, malloced, contexts,
 *    detachedContexts, rss, newSpace, oldSpace }` (bytes; `t` ms since the epoch; `external`, `arrayBuffers` and `rss`
 * from process.memoryUsage(), which in a worker thread reports its own isolate's external and
 * array buffer memory and the whole process's rss), and for every file `<dir>/snapshot-<tag>` it
 * has not served yet it writes a V8 heap snapshot `<dir>/<encodeURIComponent(name)>-<tag>.heapsnapshot`
 * (v8.writeHeapSnapshot: synchronous, stops the thread for a few seconds; open it in Chrome
 * DevTools' Memory tab or compare two with the Comparison view). Every thread serves every tag
 * once, so `touch <dir>/snapshot-m05` asks all of them; a request older than the thread (made
 * before a restart) is not served.
 */
import fs from 'node:fs';
import path from 'node:path';
import v8 from 'node:v8';
import { threadId } from 'node:worker_threads';

/** Environment variable naming the probe's directory (unset: the probe is off and costs nothing). */
export const HEAP_PROBE_DIR_ENV = 'SLUICE_DEBUG_HEAP_DIR';

/** Environment variable with the probe's interval in ms (default {@link HEAP_PROBE_DEFAULT_MS}). */
export const HEAP_PROBE_INTERVAL_ENV = 'SLUICE_DEBUG_HEAP_INTERVAL_MS';

/** Default interval between two samples of a thread, ms. */
export const HEAP_PROBE_DEFAULT_MS = 10_000;

/** One line of `heap.jsonl`. */
export interface HeapSample {
  t: number;
  name: string;
  threadId: number;
  heapUsed: number;
  heapTotal: number;
  external: number;
  arrayBuffers: number;
  malloced: number;
  contexts: number;
  detachedContexts: number;
  rss: number;
  /** Size (committed bytes) of V8's young generation (new_space) and old space. */
  newSpace: number;
  oldSpace: number;
}

/** Takes one sample of the calling thread. */
export function heapSample(name: string): HeapSample {
  const h = v8.getHeapStatistics();
  const m = process.memoryUsage();
  const space = (n: string) =>
    v8.getHeapSpaceStatistics().find((x) => x.space_name === n)?.space_size ?? 0;
  return {
    t: Date.now(),
    name,
    threadId,
    heapUsed: h.used_heap_size,
    heapTotal: h.total_heap_size,
    external: m.external,
    arrayBuffers: m.arrayBuffers,
    malloced: h.malloced_memory,
    contexts: h.number_of_native_contexts,
    detachedContexts: h.number_of_detached_contexts,
    rss: m.rss,
    newSpace: space('new_space'),
    oldSpace: space('old_space'),
  };
}

/**
 * Returns the probe of thread `name` — a function to call often (it does its work at most once
 * per interval) — or null when {@link HEAP_PROBE_DIR_ENV} is unset. Errors writing the probe's
 * files are swallowed: a debugging aid must not fail the actor.
 */
export function heapProbe(name: string, env: NodeJS.ProcessEnv = process.env): (() => void) | null {
  const dir = env[HEAP_PROBE_DIR_ENV];
  if (!dir) return null;
  const everyMs = Number(env[HEAP_PROBE_INTERVAL_ENV]) || HEAP_PROBE_DEFAULT_MS;
  const served = new Set<string>();
  const bornMs = Date.now();
  let lastMs = 0;
  return () => {
    const now = Date.now();
    if (now - lastMs < everyMs) return;
    lastMs = now;
    try {
      fs.mkdirSync(dir, { recursive: true });
      fs.appendFileSync(path.join(dir, 'heap.jsonl'), JSON.stringify(heapSample(name)) + '\n');
      for (const f of fs.readdirSync(dir)) {
        if (!f.startsWith('snapshot-') || served.has(f)) continue;
        served.add(f);
        // A request older than this thread was for its predecessor (before a restart): a
        // restarted actor would otherwise overwrite that snapshot with one of its own. A second
        // of slack: file times come from the kernel's coarse clock, a few ms behind Date.now().
        if (fs.statSync(path.join(dir, f)).mtimeMs < bornMs - 1000) continue;
        const tag = f.slice('snapshot-'.length);
        v8.writeHeapSnapshot(path.join(dir, `${encodeURIComponent(name)}-${tag}.heapsnapshot`));
      }
    } catch {
      /* a debugging aid: never fail the thread */
    }
  };
}
