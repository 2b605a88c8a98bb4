/**
 * End offsets of a kafka bus's queue partitions for the sampler's consumer lag (issue 11): the
 * journal sampler reads partition ends from the segment files, which a kafka bus does not have.
 *
 * One kafka bus client (engine/bus createKafkaBus: one admin client) on the main thread; at most
 * one ListOffsets round (one request per topic, kafkajs admin.fetchTopicOffsets, read_committed:
 * the end is the last stable offset) in flight, and a new one only when the last answer is at
 * least `intervalMs` old, so a hammered GET /actors does not reach the broker more often than
 * the sampler does. The sampler is synchronous: {@link KafkaEnds.end} answers from the latest
 * round, at most one interval (plus a round trip) old.
 *
 * Failures (broker down, topic not created yet) are reported, never thrown: one warn line when
 * the rounds start failing, one info line when they work again; ends already known are kept
 * meanwhile and `end()` says how old they are.
 *
 * Age of the oldest unhandled record: the journal sampler reads that record's event time. Here
 * reading a record would take a consumer (a consumer group join and fetches of up to a MiB per
 * partition every second), so the age is taken from when this client first saw the partition's
 * end pass the record's offset: the time since the record became readable on the broker, to
 * within one interval, and since the sampler started for a backlog older than that.
 */
import type { TopicPartition } from '../engine/bus/types.js';
import type { BusBackend } from '../engine/bus/index.js';
import { kafkaOptionsOf, type KafkaConnectionData } from '../actors/kafka-capture.js';

/** One partition's latest known end. */
export interface KafkaEnd {
  /** Last stable offset: the offset after the last committed record (or its commit marker). */
  end: number;
  /** When this end was read, ms since the epoch. */
  atMs: number;
  /**
   * When an offset was first seen readable: the earliest time the end was seen above `offset`
   * (ms since the epoch; the time of the first round that saw it when it was already there).
   */
  firstSeenAboveMs(offset: number): number;
}

interface Track {
  end: number;
  atMs: number;
  /** Rises of the end, oldest first: [end seen, first time seen]; pruned to what may be unhandled. */
  rises: Array<[number, number]>;
}

/** Most rises kept per partition (a backlog that grows for longer keeps its oldest rise). */
const RISES_MAX = 4096;

/** Latest end offsets of a kafka bus's partitions; see the module comment. */
export class KafkaEnds {
  private bus: BusBackend | null = null;
  private readonly tracks = new Map<string, Track>();
  private inFlight: Promise<void> | null = null;
  private lastRoundMs = 0;
  private failing: string | null = null;
  private closed = false;

  /**
   * @param connection the topology's kafka bus connection (actors/kafka-capture.ts).
   * @param intervalMs least time between two rounds, ms (the sampler's interval).
   * @param log one line per change between failing and working rounds.
   */
  constructor(
    private readonly connection: KafkaConnectionData,
    private readonly intervalMs: number,
    private readonly log: (level: 'warn' | 'info', line: string) => void,
  ) {}

  /**
   * Starts a round for `tps` unless one is in flight or the last began less than intervalMs ago.
   * Never throws; the answer lands in {@link end} when it comes.
   */
  request(tps: TopicPartition[], nowMs = Date.now()): void {
    if (this.closed || this.inFlight || tps.length === 0) return;
    if (nowMs - this.lastRoundMs < this.intervalMs) return;
    this.lastRoundMs = nowMs;
    this.inFlight = this.round(tps).finally(() => (this.inFlight = null));
  }

  /** Waits for the round in flight, if any (tests, close). */
  async settled(): Promise<void> {
    await this.inFlight;
  }

  private async round(tps: TopicPartition[]): Promise<void> {
    try {
      if (!this.bus) {
        const { createKafkaBus } = await import('../engine/bus/index.js');
        this.bus = createKafkaBus(kafkaOptionsOf(this.connection));
      }
      const ends = await this.bus.offsets(tps);
      const atMs = Date.now();
      tps.forEach((tp, i) => {
        const k = key(tp.topic, tp.partition);
        const end = ends[i]!.end;
        let t = this.tracks.get(k);
        if (!t) this.tracks.set(k, (t = { end, atMs, rises: [[end, atMs]] }));
        if (end > t.end) {
          t.rises.push([end, atMs]);
          if (t.rises.length > RISES_MAX) t.rises.splice(1, 1);
        }
        t.end = end;
        t.atMs = atMs;
      });
      if (this.failing !== null) {
        this.log('info', `ops: kafka end offsets are read again (${this.where()})`);
        this.failing = null;
      }
    } catch (err) {
      const msg = (err as Error).message;
      if (this.failing === null)
        this.log(
          'warn',
          `ops: cannot read the kafka end offsets for consumer lag (${this.where()}): ${msg}; the lag shown is from the last answer, retried every ${this.intervalMs} ms`,
        );
      this.failing = msg;
    }
  }

  private where(): string {
    return `brokers ${this.connection.brokers.join(',')}`;
  }

  /** The latest failure's message, or null while the rounds work. */
  get error(): string | null {
    return this.failing;
  }

  /** The latest known end of `topic`/`partition`, or null before the first answer for it. */
  end(topic: string, partition: number): KafkaEnd | null {
    const t = this.tracks.get(key(topic, partition));
    if (!t) return null;
    return {
      end: t.end,
      atMs: t.atMs,
      firstSeenAboveMs(offset: number): number {
        for (const [end, ms] of t.rises) if (end > offset) return ms;
        return t.atMs;
      },
    };
  }

  /** Forgets what is known about offsets below `firstUnhandled` of a partition (all handled). */
  prune(topic: string, partition: number, firstUnhandled: number): void {
    const t = this.tracks.get(key(topic, partition));
    if (!t) return;
    // Rises at or below it are past (the offset only grows); the newest is kept as the end.
    while (t.rises.length > 1 && t.rises[0]![0] <= firstUnhandled) t.rises.shift();
  }

  /** Closes the client after the round in flight. Idempotent. */
  async close(): Promise<void> {
    this.closed = true;
    await this.inFlight?.catch(() => undefined);
    const bus = this.bus;
    this.bus = null;
    await bus?.close().catch(() => undefined);
  }
}

const key = (topic: string, partition: number) => `${topic}\u0000${partition}`;
