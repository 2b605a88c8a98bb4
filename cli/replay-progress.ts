/**
 * Replay progress bars for `sluice run`: one bar per actor whose counters say it is replaying
 * (replayed / replayTotal), with its rate and the time left. Drawn with the `cli-progress`
 * package on stderr, and only when stderr is a terminal (logs and pipes get nothing).
 */
import cliProgress from 'cli-progress';
import type { CounterSnapshot } from '../engine/actor/index.js';

/** Seconds of history the rate is measured over (the counters move in steps of 4096 events). */
const RATE_WINDOW_MS = 2000;

interface Bar {
  bar: cliProgress.SingleBar;
  samples: { ms: number; value: number }[];
}

function formatSeconds(s: number): string {
  if (!Number.isFinite(s) || s < 0) return '?';
  if (s < 60) return `${Math.ceil(s)} s`;
  return `${Math.floor(s / 60)} min ${Math.ceil(s % 60)} s`;
}

/** Feeds actor counters into progress bars; call update() periodically, stop() at the end. */
export class ReplayProgress {
  private readonly enabled = process.stderr.isTTY === true;
  private readonly multi: cliProgress.MultiBar | null = this.enabled
    ? new cliProgress.MultiBar(
        {
          clearOnComplete: false,
          hideCursor: true,
          stream: process.stderr,
          barsize: 20,
          format: ' replay {name} |{bar}| {percentage}% {value}/{total} | {rate}/s | {left} left',
        },
        cliProgress.Presets.shades_classic,
      )
    : null;
  private readonly bars = new Map<string, Bar>();
  private stopped = false;

  /** Updates (or creates) the bar of every actor with a known replay total. */
  update(counters: Record<string, CounterSnapshot>): void {
    if (!this.multi || this.stopped) return;
    const now = Date.now();
    for (const [name, c] of Object.entries(counters)) {
      if (c.replayTotal <= 0) continue;
      let b = this.bars.get(name);
      if (!b) {
        b = {
          bar: this.multi.create(c.replayTotal, c.replayed, { name, rate: '?', left: '?' }),
          samples: [],
        };
        this.bars.set(name, b);
      }
      b.samples.push({ ms: now, value: c.replayed });
      while (b.samples.length > 2 && now - b.samples[0].ms > RATE_WINDOW_MS) b.samples.shift();
      const first = b.samples[0];
      const rate = now > first.ms ? ((c.replayed - first.value) * 1000) / (now - first.ms) : 0;
      const done = c.replayed >= c.replayTotal;
      b.bar.setTotal(c.replayTotal);
      b.bar.update(c.replayed, {
        name,
        rate: rate > 0 ? Math.round(rate).toLocaleString('en-US') : '?',
        left: done ? '0 s' : rate > 0 ? formatSeconds((c.replayTotal - c.replayed) / rate) : '?',
      });
    }
  }

  /** Draws the final state and gives the terminal back (cursor shown). Idempotent. */
  stop(): void {
    if (this.stopped) return;
    this.stopped = true;
    this.multi?.stop();
  }
}
