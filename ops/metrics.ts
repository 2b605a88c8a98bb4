/**
 * Prometheus metrics through prom-client, on a registry of the running topology (not the
 * process-global one, so two topologies in one process do not mix). The figures are the ones of
 * GET /actors and GET /capture, read at scrape time from the actors' shared counters and the
 * sampler; only the lag histogram is fed by the sampler once per second.
 *
 * Names and labels are stable (documented in README "Operations"):
 *  - sluice_actor_events_in_total, _events_out_total, _batches_total, _waits_total,
 *    _errors_total {actor, kind}: counters of the current incarnation (a restart starts them
 *    from 0 again, which Prometheus' rate() reads as a counter reset);
 *  - sluice_actor_restarts_total {actor, group}; sluice_actor_up {actor, kind} (1 when live);
 *    sluice_actor_state {actor, state} (1 for the current state); sluice_actor_replayed {actor};
 *    sluice_actor_heartbeat_age_seconds {actor};
 *  - sluice_input_lag_records, sluice_input_lag_seconds {service, queue, partition} (gauges);
 *    sluice_input_lag_observed_seconds {service, queue, partition} (histogram of the per-second
 *    samples);
 *  - sluice_ring_used_bytes, sluice_ring_capacity_bytes {actor} (queue reader -> service rings);
 *  - sluice_capture_staging_depth, sluice_capture_oldest_staged_age_seconds,
 *    sluice_capture_parked_errors {source, table}; sluice_capture_source_up {source};
 *  - sluice_topology_ready (1 when every actor is live);
 *  - prom-client's process metrics with the prefix `sluice_` (sluice_process_cpu_seconds_total...).
 */
import client from 'prom-client';
import { ACTOR_STATES } from '../engine/actor/index.js';
import type { Sampler, ActorStatus } from './sampler.js';
import type { CaptureStats } from './capture-stats.js';

/** Buckets of the lag histogram, seconds. */
export const LAG_BUCKETS_SECONDS = [0.001, 0.01, 0.1, 0.5, 1, 5, 10, 60, 300, 3600];

/** What the metrics read from. */
export interface MetricsSources {
  sampler: Sampler;
  capture: CaptureStats;
  /** True when every actor is live (the readiness check). */
  ready(): boolean;
  /**
   * Largest age of the lag figures a scrape reads, ms (Sampler.statuses); default LAG_FRESH_MS.
   * The server renders /metrics once per cache interval and passes that interval.
   */
  lagMaxAgeMs?: number;
}

/** Builds the registry; call `registry.metrics()` to scrape. */
export function createMetrics(src: MetricsSources): client.Registry {
  const registry = new client.Registry();
  client.collectDefaultMetrics({ register: registry, prefix: 'sluice_' });
  let statuses: ActorStatus[] = [];
  // One read of the actors per scrape, shared by every collect() below (the first one reads).
  let readAtMs = 0;
  const current = (): ActorStatus[] => {
    const nowMs = Date.now();
    if (nowMs - readAtMs > 50) {
      statuses = src.sampler.statuses(src.lagMaxAgeMs);
      readAtMs = nowMs;
    }
    return statuses;
  };
  const counter = (name: string, help: string, pick: (s: ActorStatus) => number) =>
    new client.Counter({
      name,
      help,
      labelNames: ['actor', 'kind'] as const,
      registers: [registry],
      collect() {
        this.reset();
        for (const s of current()) this.inc({ actor: s.name, kind: s.kind }, pick(s));
      },
    });
  counter(
    'sluice_actor_events_in_total',
    'Events an actor took from its inputs.',
    (s) => s.counters.eventsIn,
  );
  counter(
    'sluice_actor_events_out_total',
    'Events an actor appended or handed on.',
    (s) => s.counters.eventsOut,
  );
  counter(
    'sluice_actor_batches_total',
    'Input batches an actor processed.',
    (s) => s.counters.batches,
  );
  counter(
    'sluice_actor_waits_total',
    'Times an actor parked because it had no input.',
    (s) => s.counters.waits,
  );
  counter(
    'sluice_actor_errors_total',
    'Errors an actor handled (retries, rejected records).',
    (s) => s.counters.errors,
  );
  new client.Counter({
    name: 'sluice_actor_restarts_total',
    help: "Restarts of the actor's group.",
    labelNames: ['actor', 'group'] as const,
    registers: [registry],
    collect() {
      this.reset();
      for (const s of current()) this.inc({ actor: s.name, group: s.group }, s.restarts);
    },
  });
  new client.Gauge({
    name: 'sluice_actor_up',
    help: '1 when the actor is live, else 0.',
    labelNames: ['actor', 'kind'] as const,
    registers: [registry],
    collect() {
      this.reset();
      for (const s of current())
        this.set({ actor: s.name, kind: s.kind }, s.state === 'live' ? 1 : 0);
    },
  });
  new client.Gauge({
    name: 'sluice_actor_state',
    help: "1 for the actor's current lifecycle state.",
    labelNames: ['actor', 'state'] as const,
    registers: [registry],
    collect() {
      this.reset();
      for (const s of current())
        for (const st of ACTOR_STATES)
          this.set({ actor: s.name, state: st }, s.state === st ? 1 : 0);
    },
  });
  new client.Gauge({
    name: 'sluice_actor_replayed',
    help: "Events replayed by the actor's last restart.",
    labelNames: ['actor'] as const,
    registers: [registry],
    collect() {
      this.reset();
      for (const s of current()) this.set({ actor: s.name }, s.counters.replayed);
    },
  });
  new client.Gauge({
    name: 'sluice_actor_heartbeat_age_seconds',
    help: "Seconds since the actor's loop last ran.",
    labelNames: ['actor'] as const,
    registers: [registry],
    collect() {
      this.reset();
      for (const s of current())
        if (s.heartbeatAgeMs >= 0) this.set({ actor: s.name }, s.heartbeatAgeMs / 1000);
    },
  });
  const inputGauge = (
    name: string,
    help: string,
    pick: (l: ActorStatus['inputs'][number]) => number,
  ) =>
    new client.Gauge({
      name,
      help,
      labelNames: ['service', 'queue', 'partition'] as const,
      registers: [registry],
      collect() {
        this.reset();
        for (const s of current()) {
          if (s.kind !== 'service') continue;
          const service = s.name.slice('service:'.length);
          for (const l of s.inputs)
            this.set({ service, queue: l.queue, partition: String(l.partition) }, pick(l));
        }
      },
    });
  inputGauge(
    'sluice_input_lag_records',
    'Records of an input partition the service has not handled yet.',
    (l) => l.lagRecords,
  );
  inputGauge(
    'sluice_input_lag_seconds',
    'Age of the oldest record of an input partition not handled yet.',
    (l) => l.lagMs / 1000,
  );
  const lagHistogram = new client.Histogram({
    name: 'sluice_input_lag_observed_seconds',
    help: 'Input lag sampled once per second, per input partition.',
    labelNames: ['service', 'queue', 'partition'] as const,
    buckets: LAG_BUCKETS_SECONDS,
    registers: [registry],
  });
  src.sampler.onSample = (all) => {
    for (const s of all) {
      if (s.kind !== 'service') continue;
      const service = s.name.slice('service:'.length);
      for (const l of s.inputs)
        lagHistogram.observe(
          { service, queue: l.queue, partition: String(l.partition) },
          l.lagMs / 1000,
        );
    }
  };
  const ringGauge = (
    name: string,
    help: string,
    pick: (r: NonNullable<ActorStatus['ring']>) => number,
  ) =>
    new client.Gauge({
      name,
      help,
      labelNames: ['actor'] as const,
      registers: [registry],
      collect() {
        this.reset();
        for (const s of current()) if (s.ring) this.set({ actor: s.name }, pick(s.ring));
      },
    });
  ringGauge(
    'sluice_ring_used_bytes',
    'Bytes in the ring from a queue reader to its service.',
    (r) => r.usedBytes,
  );
  ringGauge('sluice_ring_capacity_bytes', 'Data area of the ring, bytes.', (r) => r.capacityBytes);
  const captureGauge = (
    name: string,
    help: string,
    pick: (t: CaptureTableFigures) => number | null,
  ) =>
    new client.Gauge({
      name,
      help,
      labelNames: ['source', 'table'] as const,
      registers: [registry],
      async collect() {
        this.reset();
        for (const s of await src.capture.read()) {
          for (const t of s.tables ?? []) {
            const v = pick(t);
            if (v !== null) this.set({ source: s.source, table: t.table }, v);
          }
        }
      },
    });
  captureGauge(
    'sluice_capture_staging_depth',
    'Rows staged for a captured table, not shipped yet.',
    (t) => t.stagingDepth,
  );
  captureGauge(
    'sluice_capture_oldest_staged_age_seconds',
    'Age of the oldest staged row of a table.',
    (t) => t.oldestStagedAgeMs / 1000,
  );
  captureGauge(
    'sluice_capture_parked_errors',
    'Rows of a table parked in the error table.',
    (t) => t.parkedErrors,
  );
  new client.Gauge({
    name: 'sluice_capture_source_up',
    help: "1 when the capture source's database could be read.",
    labelNames: ['source'] as const,
    registers: [registry],
    async collect() {
      this.reset();
      for (const s of await src.capture.read())
        this.set({ source: s.source }, s.error === null ? 1 : 0);
    },
  });
  new client.Gauge({
    name: 'sluice_topology_ready',
    help: '1 when every actor of the topology is live.',
    registers: [registry],
    collect() {
      this.set(src.ready() ? 1 : 0);
    },
  });
  return registry;
}

type CaptureTableFigures = NonNullable<
  Awaited<ReturnType<CaptureStats['read']>>[number]['tables']
>[number];
