/**
 * SIGINT/SIGTERM for the `sluice` command line, installed by the entry (cli/sluice.ts) before
 * the rest of the CLI is even loaded, so a Ctrl-C in the first few hundred milliseconds is not
 * lost: for `run` a signal that comes before the command registers its stop handler waits for
 * it (and then drains and exits 0); for the other commands a signal with no handler exits 130 /
 * 143 at once, as the default disposition would.
 */

/** The two signals that stop the command line. */
export type StopSignal = 'SIGINT' | 'SIGTERM';

let handler: ((signal: StopSignal) => void) | null = null;
let pending: StopSignal | null = null;
let deferUntilHandler = false;
let installed = false;

/**
 * Installs the process's SIGINT and SIGTERM listeners (once). With `defer`, a signal that comes
 * before {@link onStopSignal} is kept and delivered to the handler when it registers; without,
 * such a signal exits the process with 128 + the signal number.
 */
export function installStopSignals(options: { defer: boolean }): void {
  deferUntilHandler = options.defer;
  if (installed) return;
  installed = true;
  const on = (signal: StopSignal) => {
    if (handler) handler(signal);
    else if (deferUntilHandler) pending ??= signal;
    else process.exit(signal === 'SIGINT' ? 130 : 143);
  };
  process.on('SIGINT', () => on('SIGINT'));
  process.on('SIGTERM', () => on('SIGTERM'));
  // Test hook (test/cli-drain.test.ts): Node catches SIGINT from its own start (to reset the
  // terminal, then it dies of the signal), so /proc cannot tell when these listeners exist.
  if (process.env[SIGNALS_READY_ENV] === '1') process.stderr.write(SIGNALS_READY_LINE);
}

/** Env variable that makes {@link installStopSignals} print {@link SIGNALS_READY_LINE} (tests). */
export const SIGNALS_READY_ENV = 'SLUICE_TEST_SIGNALS_READY';
/** The line printed to stderr once the listeners are installed, with SIGNALS_READY_ENV=1. */
export const SIGNALS_READY_LINE = 'sluice: stop signals installed\n';

/**
 * Registers the stop handler (replacing any earlier one). A signal that came before it (with
 * `defer`) is delivered now, synchronously.
 */
export function onStopSignal(h: (signal: StopSignal) => void): void {
  handler = h;
  if (pending) {
    const s = pending;
    pending = null;
    h(s);
  }
}
