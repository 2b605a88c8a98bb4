import type autocannon from 'autocannon';

/** What bench/ops-overhead.ts records of one autocannon run. */
export interface CannonSummary {
  total: number;
  perS: number;
  p99Ms: number;
  non2xx: number;
  errors: number;
  /** CPU (user + system) of the process that ran autocannon over the load, s. */
  cpuS: number;
}

type Result = Awaited<ReturnType<typeof autocannon>>;

/** The summary of autocannon result `r`, with `cpu` the CPU used meanwhile (process.cpuUsage). */
export function cannonSummary(r: Result, cpu: NodeJS.CpuUsage): CannonSummary {
  return {
    total: r.requests.total,
    perS: Math.round(r.requests.average),
    p99Ms: r.latency.p99,
    non2xx: r.non2xx,
    errors: r.errors,
    cpuS: (cpu.user + cpu.system) / 1e6,
  };
}
