/** The part of autocannon's API the ops bench uses (the package ships no types). */
declare module 'autocannon' {
  interface Request {
    method?: string;
    path: string;
  }
  interface Options {
    url: string;
    connections?: number;
    duration?: number;
    /** Requests per second over all connections; 0 or absent: as fast as answered. */
    overallRate?: number;
    requests?: Request[];
  }
  interface Result {
    requests: { average: number; total: number };
    latency: { p50: number; p99: number };
    non2xx: number;
    errors: number;
  }
  interface Instance extends PromiseLike<Result> {
    stop(): void;
  }
  function autocannon(options: Options): Instance;
  export default autocannon;
}
