/**
 * A rendered HTTP answer shared by the requests of a short interval: GET /metrics and GET /actors
 * read every actor's counters and every input partition's end, and prom-client renders ~30 KB
 * of text, on the main thread that also runs the topology's bus and supervisor. Served from one
 * rendering per interval, a scraper or dashboard polling many times a second costs the
 * pipeline one rendering per interval plus the HTTP exchange, whatever its rate.
 *
 * Freshness: an answer is at most `ttlMs` old (the time its figures were read, `asOfMs`), and
 * never older than the latest event `staleSince()` reports (the sampler's latest sample, so the
 * rates it serves are the newest ones). Concurrent requests while a rendering is running wait
 * for that one (single flight) unless such an event came after it started. With `ttlMs` 0 every
 * request renders its own.
 */

/** One rendered answer: its bytes and when its figures were read (ms since the epoch). */
export interface Rendered {
  body: Buffer;
  asOfMs: number;
}

/** See the module comment. */
export class ResponseCache {
  private current: Rendered | null = null;
  private pending: { promise: Promise<Rendered>; asOfMs: number } | null = null;

  /**
   * @param ttlMs longest age of a served answer, ms (integer >= 0; 0: no caching).
   * @param staleSince time (ms since the epoch) of the latest event that makes earlier answers
   *   stale; an answer read before it is rendered again. Default: none.
   * @param now the clock, ms since the epoch (tests give their own).
   * @throws Error when ttlMs is not an integer >= 0.
   */
  constructor(
    readonly ttlMs: number,
    private readonly staleSince: () => number = () => 0,
    private readonly now: () => number = Date.now,
  ) {
    if (!Number.isInteger(ttlMs) || ttlMs < 0)
      throw new Error(`http.cacheMs must be an integer >= 0 (ms), got ${ttlMs}`);
  }

  /**
   * The answer: the cached one while fresh (see the module comment), else `render`'s. `render`
   * reads the figures at `nowMs` and renders them; its rejection reaches every request waiting
   * on it, and nothing is cached.
   */
  get(render: (nowMs: number) => Promise<Buffer> | Buffer): Promise<Rendered> {
    if (this.ttlMs === 0) return this.renderAt(render, this.now());
    const c = this.current;
    if (c !== null && this.isFresh(c.asOfMs)) return Promise.resolve(c);
    // A rendering in flight is shared unless an invalidating event came after it started.
    if (this.pending === null || !this.isFresh(this.pending.asOfMs)) {
      const asOfMs = this.now();
      const promise = this.renderAt(render, asOfMs).then(
        (r) => {
          if (this.pending?.promise === promise) this.pending = null;
          if (this.current === null || this.current.asOfMs < r.asOfMs) this.current = r;
          return r;
        },
        (err: unknown) => {
          if (this.pending?.promise === promise) this.pending = null;
          throw err;
        },
      );
      this.pending = { promise, asOfMs };
    }
    return this.pending.promise;
  }

  private isFresh(asOfMs: number): boolean {
    return this.now() - asOfMs < this.ttlMs && this.staleSince() < asOfMs;
  }

  private async renderAt(
    render: (nowMs: number) => Promise<Buffer> | Buffer,
    asOfMs: number,
  ): Promise<Rendered> {
    return { body: await render(asOfMs), asOfMs };
  }
}
