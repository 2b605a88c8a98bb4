/**
 * What the start of a topology waits for before its first actor starts: a Kafka broker that
 * does not answer yet, so a topic the actors need cannot be created (actors/kafka-capture.ts).
 * No actor exists yet to report it as its outage, so the start keeps it here while it lasts and
 * the operations layer reports it (ops/health.ts: not ready, degraded, naming it and since when).
 */

/** One wait of the start, as GET /health reports it. */
export interface StartWait {
  /**
   * What does not answer, named as the actor that needs it names its outage: `Kafka
   * 127.0.0.1:9092 topic ledger (target of sink "ship")`.
   */
  what: string;
  /** What the start waits to do: `create topic ledger`. */
  action: string;
  /** The last failed attempt's message. */
  error: string;
  /** Start of the wait, ms since the epoch. */
  sinceMs: number;
}

/** The waits of one start under way; empty once every actor is launched. */
export class StartWaits {
  private readonly waits = new Map<string, StartWait>();

  /** Records a failed attempt on `what`; the wait's sinceMs stays that of its first attempt. */
  failed(what: string, action: string, error: string): void {
    const known = this.waits.get(what);
    this.waits.set(what, { what, action, error, sinceMs: known?.sinceMs ?? Date.now() });
  }

  /** The wait on `what` is over (done, or given up with an error of its own). */
  over(what: string): void {
    this.waits.delete(what);
  }

  /** Every wait under way, oldest first. */
  list(): StartWait[] {
    return [...this.waits.values()].sort((a, b) => a.sinceMs - b.sinceMs);
  }
}
