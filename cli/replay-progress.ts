/**
 * Replay progress for `sluice run`, for every actor whose counters say it is replaying
 * (replayed / replayTotal), with its rate and the time left. On a terminal: one bar per actor,
 * drawn with the `cli-progress` package on stderr. Otherwise (logs, pipes, systemd): plain
 * lines on stderr, one when an actor's replay is first seen, one every LINE_EVERY_MS while it
 * lasts and one when it is done, so a log shows why a restart takes a while.
 */
import cliProgress from 'cli-progress';
import type { CounterSnapshot } from '../engine/actor/index.js';

/** Seconds of history the rate is measured over (the counters move in steps of 4096 events). */
const RATE_WINDOW_MS = 2000;
/** Without a terminal: ms between two progress lines of one actor's replay. */
const LINE_EVERY_MS = 5000;

interface Bar {
  /** Null without a terminal (plain lines instead). */
  bar: cliProgress.SingleBar | null;
  samples: { ms: number; value: number }[];
  /** Plain lines: when the last one was printed, and whether "done" was. */
  lineMs: number;
  done: boolean;
}

function formatSeconds(s: number): string {
  if (!Number.isFinite(s) || s < 0) return '?';
  if (s < 60) return `${Math.ceil(s)} s`;
  return `${Math.floor(s / 60)} min ${Math.ceil(s % 60)} s`;
}

/** Feeds actor counters into progress bars or lines; call update() periodically, stop() at the end. */
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

  /** Updates (or creates) the bar, or prints the line, of every actor with a known replay total. */
  update(counters: Record<string, CounterSnapshot>): void {
    if (this.stopped) return;
    const now = Date.now();
    for (const [name, c] of Object.entries(counters)) {
      if (c.replayTotal <= 0) continue;
      let b = this.bars.get(name);
      if (!b) {
        b = {
          bar: this.multi
            ? this.multi.create(c.replayTotal, c.replayed, { name, rate: '?', left: '?' })
            : null,
          samples: [],
          lineMs: 0,
          done: false,
        };
        this.bars.set(name, b);
      }
      b.samples.push({ ms: now, value: c.replayed });
      while (b.samples.length > 2 && now - b.samples[0].ms > RATE_WINDOW_MS) b.samples.shift();
      const first = b.samples[0];
      const rate = now > first.ms ? ((c.replayed - first.value) * 1000) / (now - first.ms) : 0;
      const done = c.replayed >= c.replayTotal;
      const shownRate = rate > 0 ? Math.round(rate).toLocaleString('en-US') : '?';
      const left = done
        ? '0 s'
        : rate > 0
          ? formatSeconds((c.replayTotal - c.replayed) / rate)
          : '?';
      if (b.bar) {
        b.bar.setTotal(c.replayTotal);
        b.bar.update(c.replayed, { name, rate: shownRate, left });
      } else if (done) {
        if (!b.done) console.error(`sluice: replay ${name} done (${c.replayTotal} records)`);
        b.done = true;
      } else if (b.lineMs === 0 || now - b.lineMs >= LINE_EVERY_MS) {
        b.lineMs = now;
        console.error(
          `sluice: replay ${name}: ${c.replayed}/${c.replayTotal} records, ${shownRate}/s, ${left} left`,
        );
      }
    }
  }

  /** Draws the final state and gives the terminal back (cursor shown). Idempotent. */
  stop(): void {
    if (this.stopped) return;
    this.stopped = true;
    this.multi?.stop();
  }
}
