/**
 * `sluice snapshot <topology> <source> <table>`: requests the initial load of a captured table
 * (engine/cdc/initial-load.ts) and follows it until every pump is done, with a progress bar
 * (cli-progress, on stderr when it is a terminal) and the rate; otherwise one line per second.
 * The load is run by the topology's pumps: a running `sluice run` picks the request up within
 * CDC_DEFAULTS.loadRefreshMs, or the next one started.
 */
import cliProgress from 'cli-progress';
import type { Command } from 'commander';
import { loadTopology } from '../engine/config/index.js';
import {
  isMissingTable,
  readLoadProgress,
  requestLoad,
  type LoadProgress,
} from '../engine/cdc/index.js';
import { captureStepError, openCaptureSource } from '../capture-steps.js';

/** Rows covered by the slowest pump (each pump reads every row and ships those of its keys). */
function covered(rows: LoadProgress[]): number {
  return rows.length === 0
    ? 0
    : Math.min(...rows.map((r) => (r.done ? r.total : Math.min(r.scanned, r.total))));
}

/**
 * The final count of a load over every pump: rows delivered as read events and rows skipped,
 * with why, e.g. `1998 rows delivered as read events, 2 skipped (1 refused by the target: ...)`.
 */
function summary(rows: LoadProgress[]): string {
  const delivered = rows.reduce((a, r) => a + r.emitted, 0);
  const held = rows.reduce((a, r) => a + r.skippedHeld, 0);
  const refused = rows.reduce((a, r) => a + r.skippedRefused, 0);
  const why = [
    ...(refused > 0
      ? [
          `${refused} refused by the target (larger than recordBytesMax): not delivered and not parked; raise recordBytesMax and run sluice snapshot again`,
        ]
      : []),
    ...(held > 0
      ? [
          `${held} of a key held by a refused change (waiting for a retry or parked): that change carries the row when it is delivered`,
        ]
      : []),
  ];
  const rowsWord = delivered === 1 ? 'row' : 'rows';
  return `${delivered} ${rowsWord} delivered as read events, ${held + refused} skipped${why.length > 0 ? ` (${why.join('; ')})` : ''}`;
}

/** Adds the `snapshot` command to `program`. */
export function addSnapshotCommand(program: Command): void {
  program
    .command('snapshot')
    .argument('<topology>', 'topology YAML file')
    .argument('<source>', 'capture source name')
    .argument('<table>', 'captured table')
    .option('--no-wait', 'request the load and return; do not follow it')
    .description(
      'deliver the existing rows of a captured table as read events, in key chunks, in order with its live changes (run by the pumps of sluice run)',
    )
    .action(async (file: string, sourceName: string, table: string, opts: { wait: boolean }) => {
      const t = loadTopology(file);
      const i = t.capture.findIndex((c) => c.name === sourceName);
      const source = t.capture[i];
      if (!source)
        throw new Error(
          `unknown capture source "${sourceName}" in ${file} (known: ${t.capture.map((c) => c.name).join(', ') || 'none'})`,
        );
      // Every database failure is located at the source (or the table) in the topology file.
      let doing = 'snapshot (requesting the initial load)';
      const located = (err: unknown) =>
        captureStepError(t, i, err, doing, {
          table,
          hint: isMissingTable(err)
            ? `capture is not installed (or installed by a version without initial loads): run sluice install ${file}`
            : undefined,
        });
      const staging = await openCaptureSource(t, i);
      try {
        const total = await requestLoad(staging, table).catch((err: unknown) => {
          throw located(err);
        });
        doing = 'snapshot (reading the load progress)';
        console.log(
          `snapshot of "${table}" requested: ${total} rows, ${source.pumps} pump${source.pumps === 1 ? '' : 's'}`,
        );
        if (!opts.wait) return;
        const started = Date.now();
        const tty = process.stderr.isTTY === true;
        const bar = tty
          ? new cliProgress.SingleBar(
              {
                stream: process.stderr,
                hideCursor: true,
                barsize: 30,
                format: ` snapshot ${table} |{bar}| {percentage}% {value}/{total} rows | {rate} rows/s | {events} read events`,
              },
              cliProgress.Presets.shades_classic,
            )
          : null;
        bar?.start(Math.max(total, 1), 0, { rate: '?', events: 0 });
        let lastPrint = 0;
        let hinted = false;
        for (;;) {
          const rows = (
            await readLoadProgress(staging).catch((err: unknown) => {
              bar?.stop();
              throw located(err);
            })
          ).filter((r) => r.table === table);
          const value = covered(rows);
          const events = rows.reduce((a, r) => a + r.emitted, 0);
          const seconds = (Date.now() - started) / 1000;
          const rate = seconds > 0 ? Math.round(value / seconds) : 0;
          const done = rows.length > 0 && rows.every((r) => r.done);
          bar?.update(done ? Math.max(total, 1) : value, { rate, events });
          if (!tty && (Date.now() - lastPrint >= 1000 || done)) {
            lastPrint = Date.now();
            console.error(
              `  ${table}: ${value}/${total} rows (${total > 0 ? Math.floor((100 * value) / total) : 100}%), ${rate} rows/s, ${events} read events`,
            );
          }
          if (done) {
            bar?.stop();
            console.log(
              `snapshot of "${table}" done: ${summary(rows)}, in ${seconds.toFixed(1)} s (${rate} rows/s)`,
            );
            return;
          }
          if (!hinted && value === 0 && seconds > 5) {
            hinted = true;
            const line = `sluice: no pump has started the load yet; it runs in the pumps of: sluice run ${file}`;
            if (bar) bar.stop();
            console.error(line);
            bar?.start(Math.max(total, 1), value, { rate, events });
          }
          await new Promise((r) => setTimeout(r, 250));
        }
      } finally {
        await staging.close();
      }
    });
}
