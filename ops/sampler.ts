/**
 * The operations layer's view of a running topology: once per second it reads every actor's
 * shared-memory counters (engine/actor/counters.ts), the service hosts' handled positions, the
 * rings' head/tail words and the end of every input partition, and keeps
 *  - the rates of events in/out over the last second and the last minute,
 *  - consumer lag per input partition: records (end index - handled index - 1) and milliseconds
 *    (age of the oldest record not yet handled, from its envelope's event time),
 *  - a history per actor: one sample per second for the last hour and one per minute for the
 *    last day (fixed-size rings, so memory is bounded whatever the uptime).
 * Nothing here sends a message to an actor: it reads what the actors publish anyway.
 *
 * On a kafka bus ({@link Sampler} given `kafkaEnds`) the ends are the partitions' last stable
 * offsets from ops/kafka-lag.ts (one ListOffsets round per sampler interval, answered
 * asynchronously: the figures are at most one interval old) and the indexes are offsets, which
 * commit markers make non-contiguous: a partition whose reader found nothing more to read at or
 * after the end, and whose service handled every record the reader gave it, has no lag (the
 * markers after its last record are not records); otherwise lag counts the offsets after the
 * first unhandled one, markers included (over by at most one per transaction in the backlog,
 * and the one that ended the last handled record's).
 * Lag in ms there is the time since the first unhandled offset became readable (KafkaEnds).
 */
import { Tailer } from '../engine/journal/index.js';
import { EnvelopeView } from '../engine/codec/index.js';
import { inputKey } from '../engine/service/index.js';
import type { ActorInfo, Supervisor } from '../engine/supervisor/index.js';
import type { CounterSnapshot, Outage } from '../engine/actor/index.js';
import {
  HOST_SHARED,
  READER_SHARED,
  SINK_SHARED,
  type QueueReaderData,
  type ServiceHostData,
  type SinkData,
} from '../actors/contracts.js';
import { ringOccupancy, type RingOccupancy } from './ring-occupancy.js';
import type { KafkaEnds } from './kafka-lag.js';

/** Bounds of the sampler, all with defaults in {@link SAMPLER_DEFAULTS}. */
export interface SamplerOptions {
  /** Time between two samples, ms. */
  intervalMs: number;
  /** Per-second samples kept per actor (3600: the last hour). */
  secondSamplesMax: number;
  /** Per-minute samples kept per actor (1440: the last day). */
  minuteSamplesMax: number;
}

/** Defaults of {@link SamplerOptions}. */
export const SAMPLER_DEFAULTS: SamplerOptions = {
  intervalMs: 1000,
  secondSamplesMax: 3600,
  minuteSamplesMax: 1440,
};

/** Largest age of the lag figures GET /actors serves, ms. */
export const LAG_FRESH_MS = 200;

/** Actor kinds, from the name's prefix (`pump:`, `reader:`, `service:`, `timer:`). */
export type ActorKind = 'pump' | 'reader' | 'service' | 'timer' | 'other';

/** Consumer lag of one input partition of a service (or of the partition a sink ships). */
export interface InputLag {
  queue: string;
  partition: number;
  /** Index the partition's next record will get (records in it, counting from 0). */
  endIndex: number;
  /** Index of the last record the service handled live (a sink: shipped); -1: none. */
  handledIndex: number;
  /** Records appended but not handled (a sink: shipped) yet. */
  lagRecords: number;
  /** Age of the oldest record not handled yet (now - its event time), ms; 0 when caught up. */
  lagMs: number;
}

/** Events per second over two windows. */
export interface Rates {
  /** Over the last sample interval (1 s). */
  perSecond1s: number;
  /** Over the last minute (or since the first sample, if younger). */
  perSecond1m: number;
}

/** What GET /actors returns per actor. */
export interface ActorStatus {
  name: string;
  kind: ActorKind;
  group: string;
  state: CounterSnapshot['state'];
  /** Restarts of the actor's group. */
  restarts: number;
  /** ISO time of the actor's (last) start. */
  startedAt: string;
  /** Ms since the actor's loop last stamped its heartbeat. */
  heartbeatAgeMs: number;
  lastError: string | null;
  /**
   * While the actor waits out an outage (counters.downSinceMs set): what it cannot reach, `side`
   * `source` (a pump's capture source database, a sink's journal queue) or `target` (its Kafka
   * brokers and topics, the bus, the journal), `what` naming it and `error` the failure's message; null while up, and
   * for an actor that does not say (a halted actor).
   */
  outage: Outage | null;
  counters: Omit<CounterSnapshot, 'state' | 'heartbeatMs'>;
  rates: { eventsIn: Rates; eventsOut: Rates };
  /**
   * Services: every input partition; readers: the one they read; sinks: the one they ship
   * (lag: its records not shipped yet). Others: empty.
   */
  inputs: InputLag[];
  /** Readers: the ring they write into the service. Others: null. */
  ring: RingOccupancy | null;
}

/** Per-actor history, oldest first, equal-length arrays (for charts). */
export interface ActorHistory {
  actor: string;
  /** 'second' or 'minute' samples. */
  step: 'second' | 'minute';
  /** Sample times, ms since the epoch. */
  timeMs: number[];
  /** Time each sample covers, ms (the rates are its counts over it). */
  intervalMs: number[];
  eventsInPerSecond: number[];
  eventsOutPerSecond: number[];
  /** Largest lag over the actor's inputs at that time, records and ms. */
  lagRecords: number[];
  lagMs: number[];
}

/** Fixed-capacity ring of samples (oldest overwritten). */
class SampleRing {
  private readonly cols: Float64Array[];
  private next = 0;
  private size = 0;
  constructor(
    readonly capacity: number,
    columns: number,
  ) {
    this.cols = Array.from({ length: columns }, () => new Float64Array(capacity));
  }
  push(values: number[]): void {
    for (let c = 0; c < this.cols.length; c++) this.cols[c][this.next] = values[c];
    this.next = (this.next + 1) % this.capacity;
    this.size = Math.min(this.size + 1, this.capacity);
  }
  get length(): number {
    return this.size;
  }
  /** Column `c`, oldest first; the last `n` samples at most. */
  column(c: number, n = this.size): number[] {
    const k = Math.min(n, this.size);
    const out = new Array<number>(k);
    for (let i = 0; i < k; i++)
      out[i] = this.cols[c][(this.next - k + i + this.capacity) % this.capacity];
    return out;
  }
}

const COL_TIME = 0;
const COL_IN = 1; // events in during the interval
const COL_OUT = 2;
const COL_DT = 3; // interval length, ms
const COL_LAG_RECORDS = 4;
const COL_LAG_MS = 5;
const COLUMNS = 6;

interface Track {
  /** startedMs of the incarnation `last` was read from (a restart launches a new one). */
  startedMs: number;
  last: CounterSnapshot | null;
  seconds: SampleRing;
  minutes: SampleRing;
  minuteAcc: {
    in: number;
    out: number;
    dt: number;
    lagRecords: number;
    lagMs: number;
    n: number;
    startMs: number;
  };
}

interface PartitionProbe {
  dir: string;
  end: Tailer | null;
  at: Tailer | null;
}

/** Reads the topology once per interval; see the module comment. */
export class Sampler {
  readonly options: SamplerOptions;
  private readonly tracks = new Map<string, Track>();
  private readonly probes = new Map<string, PartitionProbe>();
  private readonly lags = new Map<string, InputLag[]>();
  private readonly view = new EnvelopeView();
  private timer: NodeJS.Timeout | null = null;
  private lastSampleMs = 0;
  private lagsAtMs = 0;
  /** Called after every sample (the metrics layer observes lag histograms there). */
  onSample: ((statuses: ActorStatus[]) => void) | null = null;

  /**
   * @param kafkaEnds on a kafka bus: where the partitions' ends come from (closed by stop()).
   * @throws Error when an option is not a positive integer.
   */
  constructor(
    private readonly supervisor: Supervisor,
    options: Partial<SamplerOptions> = {},
    private readonly kafkaEnds: KafkaEnds | null = null,
  ) {
    this.options = { ...SAMPLER_DEFAULTS, ...options };
    for (const [k, v] of Object.entries(this.options)) {
      if (!Number.isInteger(v) || v < 1)
        throw new Error(`sampler option ${k} must be an integer >= 1, ${k}=${v}`);
    }
  }

  /** Time of the latest sample (ms since the epoch); 0 before the first. */
  get sampledAtMs(): number {
    return this.lastSampleMs;
  }

  /** Takes a first sample now and then one per interval (the timer does not keep Node alive). */
  start(): void {
    if (this.timer) return;
    this.sample();
    this.timer = setInterval(() => this.sample(), this.options.intervalMs);
    this.timer.unref();
  }

  /** Stops sampling and closes the partition tailers. Idempotent. */
  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    for (const p of this.probes.values()) {
      p.end?.close();
      p.at?.close();
    }
    this.probes.clear();
    void this.kafkaEnds?.close();
  }

  /** One sample of every actor (also called by the timer). */
  sample(): ActorStatus[] {
    const nowMs = Date.now();
    const dtMs = this.lastSampleMs === 0 ? this.options.intervalMs : nowMs - this.lastSampleMs;
    this.lastSampleMs = nowMs;
    const actors = this.supervisor.actors();
    this.refreshLags(actors, nowMs);
    for (const a of actors) {
      const t = this.track(a);
      // A restarted actor has fresh counters: count from zero again instead of a negative delta.
      const prev = t.startedMs === a.startedMs ? t.last : null;
      const dIn = Math.max(0, a.counters.eventsIn - (prev?.eventsIn ?? 0));
      const dOut = Math.max(0, a.counters.eventsOut - (prev?.eventsOut ?? 0));
      t.startedMs = a.startedMs;
      t.last = a.counters;
      const lags = this.lags.get(a.name) ?? [];
      const lagRecords = lags.reduce((m, l) => Math.max(m, l.lagRecords), 0);
      const lagMs = lags.reduce((m, l) => Math.max(m, l.lagMs), 0);
      t.seconds.push([nowMs, dIn, dOut, dtMs, lagRecords, lagMs]);
      const acc = t.minuteAcc;
      if (acc.n === 0) acc.startMs = nowMs;
      acc.in += dIn;
      acc.out += dOut;
      acc.dt += dtMs;
      acc.lagRecords = Math.max(acc.lagRecords, lagRecords);
      acc.lagMs = Math.max(acc.lagMs, lagMs);
      acc.n++;
      if (nowMs - acc.startMs >= 60_000 - this.options.intervalMs / 2) {
        t.minutes.push([nowMs, acc.in, acc.out, acc.dt, acc.lagRecords, acc.lagMs]);
        t.minuteAcc = { in: 0, out: 0, dt: 0, lagRecords: 0, lagMs: 0, n: 0, startMs: nowMs };
      }
    }
    const statuses = actors.map((a) => this.status(a, nowMs));
    this.onSample?.(statuses);
    return statuses;
  }

  /**
   * Status of every actor: counters read now, lag at most `lagMaxAgeMs` old (reading the end of
   * every input partition costs file reads and checksums of its tail, so callers share them:
   * the latest sample's, or another caller's within that age), rates from the latest samples.
   * @param lagMaxAgeMs default LAG_FRESH_MS; the cached HTTP answers pass their cache interval.
   */
  statuses(lagMaxAgeMs = LAG_FRESH_MS): ActorStatus[] {
    const nowMs = Date.now();
    const actors = this.supervisor.actors();
    if (nowMs - this.lagsAtMs > lagMaxAgeMs) this.refreshLags(actors, nowMs);
    else {
      // An actor started (or restarted under a new name) since the last refresh has no lag
      // entry yet: probe just its inputs now rather than report it without inputs.
      let probed: Map<string, InputLag> | null = null;
      for (const a of actors) {
        if (this.lags.has(a.name)) continue;
        probed ??= new Map();
        this.lags.set(a.name, this.inputLags(a, actors, nowMs, probed));
      }
    }
    return actors.map((a) => this.status(a, nowMs));
  }

  private refreshLags(actors: ActorInfo[], nowMs: number): void {
    if (this.kafkaEnds) {
      const tps = new Map<string, { topic: string; partition: number }>();
      for (const a of actors) {
        if (kindOf(a.name) !== 'service') continue;
        for (const i of (a.data as ServiceHostData)?.inputs ?? [])
          tps.set(inputKey(i.queue, i.partition), { topic: i.queue, partition: i.partition });
      }
      this.kafkaEnds.request([...tps.values()], nowMs);
    }
    this.lags.clear();
    // A service and the reader of each of its partitions report the same partition: probed once.
    const probed = new Map<string, InputLag>();
    for (const a of actors) this.lags.set(a.name, this.inputLags(a, actors, nowMs, probed));
    this.lagsAtMs = nowMs;
  }

  /** History of one actor, or null when it is unknown. */
  history(actor: string, step: 'second' | 'minute', samplesMax?: number): ActorHistory | null {
    const t = this.tracks.get(actor);
    if (!t) return null;
    const ring = step === 'second' ? t.seconds : t.minutes;
    const dt = ring.column(COL_DT, samplesMax);
    const perS = (col: number) =>
      ring.column(col, samplesMax).map((v, i) => (dt[i] > 0 ? (v * 1000) / dt[i] : 0));
    return {
      actor,
      step,
      timeMs: ring.column(COL_TIME, samplesMax),
      intervalMs: dt,
      eventsInPerSecond: perS(COL_IN),
      eventsOutPerSecond: perS(COL_OUT),
      lagRecords: ring.column(COL_LAG_RECORDS, samplesMax),
      lagMs: ring.column(COL_LAG_MS, samplesMax),
    };
  }

  private status(a: ActorInfo, nowMs: number): ActorStatus {
    const t = this.tracks.get(a.name);
    const { state, heartbeatMs, ...counters } = a.counters;
    const reader = kindOf(a.name) === 'reader';
    const ringSab = reader ? a.shared[READER_SHARED.ring] : undefined;
    return {
      name: a.name,
      kind: kindOf(a.name),
      group: a.group,
      state,
      restarts: a.restarts,
      startedAt: new Date(a.startedMs).toISOString(),
      heartbeatAgeMs: heartbeatMs > 0 ? Math.max(0, nowMs - heartbeatMs) : -1,
      lastError: a.lastError,
      outage: a.counters.downSinceMs > 0 ? a.outage : null,
      counters,
      rates: {
        eventsIn: t ? rates(t.seconds, COL_IN, 60) : { perSecond1s: 0, perSecond1m: 0 },
        eventsOut: t ? rates(t.seconds, COL_OUT, 60) : { perSecond1s: 0, perSecond1m: 0 },
      },
      inputs: this.lags.get(a.name) ?? [],
      ring: ringSab ? ringOccupancy(ringSab) : null,
    };
  }

  private track(a: ActorInfo): Track {
    let t = this.tracks.get(a.name);
    if (!t) {
      t = {
        startedMs: 0,
        last: null,
        seconds: new SampleRing(this.options.secondSamplesMax, COLUMNS),
        minutes: new SampleRing(this.options.minuteSamplesMax, COLUMNS),
        minuteAcc: { in: 0, out: 0, dt: 0, lagRecords: 0, lagMs: 0, n: 0, startMs: 0 },
      };
      this.tracks.set(a.name, t);
    }
    return t;
  }

  /** Lag of the inputs an actor stands for: a service's all, a reader's one, a sink's one. */
  private inputLags(
    a: ActorInfo,
    all: ActorInfo[],
    nowMs: number,
    probed: Map<string, InputLag>,
  ): InputLag[] {
    const kind = kindOf(a.name);
    if (kind === 'service') {
      const d = a.data as ServiceHostData;
      const handled = a.shared[HOST_SHARED.positions];
      if (!handled || !Array.isArray(d?.inputs)) return [];
      const pos = new Float64Array(handled);
      return d.inputs.map((input, i) => {
        const reader = all.find(
          (x) => x.name === `reader:${inputKey(input.queue, input.partition)}>${d.service}`,
        );
        return this.lagOf(input.queue, input.partition, input.dir, pos[i], nowMs, probed, reader);
      });
    }
    if (kind === 'reader') {
      const d = a.data as QueueReaderData;
      const service = a.name.slice(a.name.indexOf('>') + 1);
      const host = all.find((x) => x.name === `service:${service}`);
      const hd = host?.data as ServiceHostData | undefined;
      const handled = host?.shared[HOST_SHARED.positions];
      const i =
        hd?.inputs.findIndex((x) => x.queue === d.queue && x.partition === d.partition) ?? -1;
      const h = handled && i >= 0 ? new Float64Array(handled)[i] : d.from - 1;
      return [this.lagOf(d.queue, d.partition, d.dir, h, nowMs, probed, a)];
    }
    const sinkPosition = a.name.startsWith('sink:') ? a.shared[SINK_SHARED.position] : undefined;
    if (sinkPosition) {
      // Sinks ship journal queues only (refused on a kafka bus), so the end is the journal's.
      const d = a.data as SinkData;
      const next = new Float64Array(sinkPosition)[0];
      return [this.lagOf(d.queue, d.partition, d.dir, next - 1, nowMs, probed)];
    }
    return [];
  }

  private lagOf(
    queue: string,
    partition: number,
    dir: string,
    handledIndex: number,
    nowMs: number,
    probed: Map<string, InputLag>,
    reader?: ActorInfo,
  ): InputLag {
    const memo = `${inputKey(queue, partition)}@${handledIndex}@${reader?.name ?? ''}`;
    const known = probed.get(memo);
    if (known) return { ...known };
    const lag = this.probeLag(queue, partition, dir, handledIndex, nowMs, reader);
    probed.set(memo, lag);
    return { ...lag };
  }

  private probeLag(
    queue: string,
    partition: number,
    dir: string,
    handledIndex: number,
    nowMs: number,
    reader?: ActorInfo,
  ): InputLag {
    // Not known yet (a service from its launch until it found its LAST_WRITTEN positions):
    // reported as no lag rather than the whole history (a false alarm after every restart).
    if (Number.isNaN(handledIndex))
      return { queue, partition, endIndex: 0, handledIndex: -1, lagRecords: 0, lagMs: 0 };
    if (this.kafkaEnds) return this.kafkaLagOf(queue, partition, handledIndex, nowMs, reader);
    const key = inputKey(queue, partition);
    let p = this.probes.get(key);
    if (!p) this.probes.set(key, (p = { dir, end: null, at: null }));
    let endIndex = 0;
    let lagMs = 0;
    try {
      p.end ??= Tailer.open({ dir, from: 'end' });
      p.end.moveToEnd();
      endIndex = p.end.index;
      if (endIndex > handledIndex + 1) {
        p.at ??= Tailer.open({ dir });
        if (p.at.moveToIndex(handledIndex + 1)) {
          const rec = p.at.next();
          if (rec) {
            this.view.wrap(rec.bytes, 0, rec.bytes.length);
            lagMs = Math.max(0, nowMs - this.view.eventTimeMs);
          }
        }
      }
    } catch {
      // A partition not created yet, or being rolled: report what is known and retry next time.
      p.end?.close();
      p.at?.close();
      p.end = p.at = null;
    }
    return {
      queue,
      partition,
      endIndex,
      handledIndex,
      lagRecords: Math.max(0, endIndex - handledIndex - 1),
      lagMs,
    };
  }

  /** lagOf on a kafka bus (see the module comment); 0 until the first end offsets arrive. */
  private kafkaLagOf(
    queue: string,
    partition: number,
    handledIndex: number,
    nowMs: number,
    reader?: ActorInfo,
  ): InputLag {
    const e = this.kafkaEnds!.end(queue, partition);
    if (!e) return { queue, partition, endIndex: 0, handledIndex, lagRecords: 0, lagMs: 0 };
    const sab = reader?.shared[READER_SHARED.position];
    const [lastGiven, caughtUpAt] = sab ? new Float64Array(sab) : [NaN, NaN];
    // Everything the reader gave is handled and it found nothing more before `caughtUpAt`: the
    // offsets below it are handled records and markers.
    const allGivenHandled = !Number.isNaN(lastGiven) && handledIndex >= lastGiven;
    const firstUnhandled =
      allGivenHandled && caughtUpAt > handledIndex ? caughtUpAt : handledIndex + 1;
    const lagRecords = Math.max(0, e.end - firstUnhandled);
    this.kafkaEnds!.prune(queue, partition, firstUnhandled);
    return {
      queue,
      partition,
      endIndex: e.end,
      handledIndex,
      lagRecords,
      lagMs: lagRecords > 0 ? Math.max(0, nowMs - e.firstSeenAboveMs(firstUnhandled)) : 0,
    };
  }
}

/** Actor kind from its name's prefix. */
export function kindOf(name: string): ActorKind {
  const prefix = name.slice(0, name.indexOf(':'));
  return prefix === 'pump' || prefix === 'reader' || prefix === 'service' || prefix === 'timer'
    ? prefix
    : 'other';
}

function rates(ring: SampleRing, col: number, windowSamples: number): Rates {
  const v = ring.column(col, windowSamples);
  const dt = ring.column(COL_DT, windowSamples);
  if (v.length === 0) return { perSecond1s: 0, perSecond1m: 0 };
  const last = v.length - 1;
  const sum = v.reduce((a, b) => a + b, 0);
  const dtSum = dt.reduce((a, b) => a + b, 0);
  return {
    perSecond1s: dt[last] > 0 ? round1((v[last] * 1000) / dt[last]) : 0,
    perSecond1m: dtSum > 0 ? round1((sum * 1000) / dtSum) : 0,
  };
}

const round1 = (x: number) => Math.round(x * 10) / 10;
