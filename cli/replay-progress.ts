/**
 * Replay progress bars for `sluice run`: one bar per actor whose counters say it is replaying
 * (replayed / replayTotal), with its rate and the time left. Drawn with the `cli-progress`
 * package on stderr, only when stderr is a terminal (cli-progress prints nothing otherwise).
 */
import cliProgress from 'cli-progress';
import type { CounterSnapshot } from '../engine/actor/index.js';

interface Bar {
  bar: cliProgress.SingleBar;
  lastValue: number;
  lastMs: number;
  rate: number;
}

/** Feeds actor counters into progress bars; call update() periodically, stop() at the end. */
export class ReplayProgress {
  private readonly multi = new cliProgress.MultiBar(
    {
      clearOnComplete: false,
      hideCursor: true,
      stream: process.stderr,
      format: ' replay {name} |{bar}| {percentage}% {value}/{total} events | {rate} events/s | {eta_formatted} left',
    },
    cliProgress.Presets.shades_classic,
  );
  private readonly bars = new Map<string, Bar>();

  /** Updates (or creates) the bar of every actor with a known replay total. */
  update(counters: Record<string, CounterSnapshot>): void {
    const now = Date.now();
    for (const [name, c] of Object.entries(counters)) {
      if (c.replayTotal <= 0) continue;
      let b = this.bars.get(name);
      if (!b) {
        b = { bar: this.multi.create(c.replayTotal, c.replayed, { name, rate: 0 }), lastValue: c.replayed, lastMs: now, rate: 0 };
        this.bars.set(name, b);
      }
      const dt = now - b.lastMs;
      if (dt >= 500) {
        b.rate = Math.round(((c.replayed - b.lastValue) * 1000) / dt);
        b.lastValue = c.replayed;
        b.lastMs = now;
      }
      b.bar.setTotal(c.replayTotal);
      b.bar.update(c.replayed, { name, rate: b.rate });
    }
  }

  /** Draws the final state and releases the terminal. */
  stop(): void {
    this.multi.stop();
  }
}
