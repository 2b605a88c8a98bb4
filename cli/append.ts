/**
 * `sluice append`: records from stdin, one per line, into a queue through openQueueAppender.
 *
 * Lines are split on bytes ("\n", a "\r" before it dropped), not decoded first, so nothing is
 * changed on the way: a line that is not UTF-8 is refused (unless the lines are declared binary
 * with --raw-type), a line longer than the queue's record limit is refused as soon as it passes
 * the limit (it is never held whole in memory), a JSON value nested deeper than JSON_DEPTH_MAX
 * is refused before it is parsed, and a key must be a JSON string (or --key-encoding json).
 * The first bad line stops the command; every line before it is appended, flushed and fsynced,
 * and the message says how many.
 *
 * On a kafka bus a broker that is away is waited out (like `sluice tail -f`), both at the first
 * line (the lookup of the topic's partition count that opens the appender: nothing is appended
 * yet) and at a flush that fails: one stderr line when the wait starts, one when the broker
 * answers again, then the rest of stdin follows. The resend is exactly once: the appender keeps only the records the
 * broker did not acknowledge and resends them with the same idempotent producer and sequence
 * numbers, so the broker drops the copy of any that were written before the failure. Any other
 * failed flush (a refusal, a call that timed out while the send may still be in flight, a full
 * disk) stops the command saying what is durable and what may or may not be there.
 */
import { firstInvalidUtf8 } from '../engine/codec/index.js';
import {
  BrokerAwayError,
  JSON_DEPTH_MAX,
  openQueueAppender,
  RecordInputError,
} from '../engine/producer/index.js';
import { isBrokerAwaySend } from '../engine/service/index.js';
import type { QueueAppender } from '../engine/producer/index.js';
import type { Topology } from '../engine/config/index.js';

/** How the key of a JSON line is taken from its key field. */
export type KeyEncoding = 'string' | 'json';
/** Allowed values of --key-encoding. */
export const KEY_ENCODINGS: readonly KeyEncoding[] = ['string', 'json'];

/** Options of the append command. */
export interface AppendOptions {
  /** Field of each JSON object holding the key. */
  keyField: string;
  /** `string`: the field must be a JSON string; `json`: the key is the field's canonical JSON text. */
  keyEncoding: KeyEncoding;
  /** Append each line as is, as an event of this user type (>= 100), instead of parsing JSON. */
  rawType?: number;
  /** The key of every raw line (with rawType). */
  key: string;
  partition?: number;
  /**
   * Longest wait for a broker that is away at the first lookup or at a flush, seconds; absent:
   * wait until it answers (Ctrl-C stops), as `sluice tail -f`; 0: do not wait.
   */
  brokerWaitS?: number;
}

/**
 * Bounds of the append command. The pause between two tries (a lookup or a resend) to a broker
 * that is away doubles from brokerBackoffInitialMs to brokerBackoffMaxMs; one try itself takes
 * up to the client's retries while the broker does not answer (a lookup about 5 s, a resend
 * about 25 s), so a --broker-wait-s bound is kept to within that.
 */
export const APPEND_DEFAULTS = {
  brokerBackoffInitialMs: 250,
  brokerBackoffMaxMs: 5000,
} as const;

/** A bad stdin line: its 1-based number and what is wrong. */
export class AppendInputError extends Error {
  override readonly name = 'AppendInputError';
}

/** Records appended between flushes: bounds what a crash of this process could lose. */
const FLUSH_EVERY_RECORDS = 1000;

/**
 * Appends stdin's lines to `queue`; returns the count appended. A broker that is away at the
 * first line or at a flush is waited out (see the module comment), up to `opts.brokerWaitS`
 * seconds when given; `log` gets the two stderr lines of a wait.
 * @throws AppendInputError `stdin line N: <problem>; M events before it were appended` for the
 *   first bad line (the M records before it are durable); Error if the queue cannot be opened
 *   (a missing topic, a broker away for longer than brokerWaitS at the first line: the message
 *   says how long was waited and that nothing was appended), or when a flush fails for good (a
 *   refusal, a broker away for longer than brokerWaitS, a full disk), saying how many events
 *   (stdin lines up to which) are durable and that the ones after may or may not be.
 */
export async function appendLines(
  t: Topology,
  queue: string,
  input: AsyncIterable<Buffer | string>,
  opts: AppendOptions,
  log: (line: string) => void = (l) => console.error(l),
): Promise<number> {
  const appender = openQueueAppender(t, queue);
  let appended = 0;
  let line = 0;
  /** Events made durable by the last flush that succeeded, and the stdin line of the last one. */
  let durable = 0;
  let durableLine = 0;
  let lastLine = 0;
  /**
   * Runs a flush or close; a broker that is away is waited out (the flush is run again, which
   * resends only what it did not acknowledge); any other failure, or a wait over brokerWaitS, is
   * rethrown saying how much of stdin is durable and what may or may not be.
   */
  const flushing = async (what: () => void): Promise<void> => {
    await waitingOut(queue, opts.brokerWaitS, log, what, isBrokerAwaySend, {
      waiting: (e) =>
        `append to queue "${queue}": the broker does not acknowledge (${e.message}); ` +
        `${durableSoFar()}, waiting for it to resend the ${appended - durable} after them`,
      failed: (e) => notDurable(e),
    });
    durable = appended;
    durableLine = lastLine;
  };
  /** Opens the appender's connection at the first line; a broker that is away is waited out. */
  let connected = false;
  const connecting = async (): Promise<void> => {
    await waitingOut(
      queue,
      opts.brokerWaitS,
      log,
      () => appender.connect(),
      (e) => e instanceof BrokerAwayError,
      {
        waiting: (e) => `${e.message}; nothing is appended yet, waiting for them`,
        failed: (e, waitedMs) =>
          waitedMs === null
            ? e
            : new Error(
                `${e.message}; waited ${(waitedMs / 1000).toFixed(1)} s (--broker-wait-s ` +
                  `${opts.brokerWaitS}) for the broker to answer the lookup of topic "${queue}" ` +
                  'before the first event; nothing was appended',
                { cause: e },
              ),
      },
    );
    connected = true;
  };
  const durableSoFar = () =>
    `${durable} event${durable === 1 ? '' : 's'} (stdin lines up to ${durableLine}) ` +
    `${durable === 1 ? 'is' : 'are'} durable in queue "${queue}"`;
  /** Set once a flush failed for good: what it kept is dropped, not flushed again. */
  let flushFailed = false;
  const notDurable = (e: unknown): Error => {
    flushFailed = true;
    const open = appended - durable;
    return new Error(
      `${(e as Error).message}; ${durableSoFar()}, the ${open} after ` +
        `${durable === 1 ? 'it' : 'them'} ${open === 1 ? 'was' : 'were'} ` +
        `not acknowledged and may or may not be there (append from line ${durableLine + 1} ` +
        'again to have them all; some may then be there twice)',
      { cause: e },
    );
  };
  const fail = (problem: string): never => {
    throw new AppendInputError(
      `stdin line ${line}: ${problem}; ${appended} event${appended === 1 ? '' : 's'} before it ${appended === 1 ? 'was' : 'were'} appended`,
    );
  };
  try {
    for await (const item of splitLines(input, appender.recordBytesMax)) {
      if (!connected) await connecting();
      line++;
      if ('tooLongBytes' in item) {
        fail(
          `the line is longer than ${appender.recordBytesMax} bytes, the record limit of queue "${queue}"`,
        );
      }
      const problem = appendLine(appender, (item as { bytes: Buffer }).bytes, opts);
      if (problem === 'skipped') continue;
      if (problem !== null) fail(problem);
      appended++;
      lastLine = line;
      if (appended % FLUSH_EVERY_RECORDS === 0) await flushing(() => appender.flush());
    }
  } catch (e) {
    // What was appended before a bad line is still flushed; a failed flush is reported too.
    if (!flushFailed) {
      try {
        await flushing(() => appender.flush());
      } catch (f) {
        appender.close({ flush: false });
        throw new Error(`${(e as Error).message}; then: ${(f as Error).message}`, { cause: f });
      }
    }
    appender.close({ flush: !flushFailed });
    throw e;
  }
  try {
    await flushing(() => appender.flush()); // flushes and fsyncs what was appended
  } catch (e) {
    appender.close({ flush: false });
    throw e;
  }
  appender.close();
  return appended;
}

/**
 * Runs `what` (a blocking bus call) until it succeeds; a failure that `away` says is the broker
 * being away is waited out with backoff (APPEND_DEFAULTS, 250 ms doubling to 5 s) for up to
 * `waitS` seconds from the first failure (absent: until it answers; 0: not at all). `log` gets
 * `sluice: <say.waiting(e)> (<bound>)` when the wait starts and `sluice: append to queue
 * "<queue>": the broker answers again after <s> s; appending` when it answers.
 * @throws say.failed(e, waitedMs) for the last failure: waitedMs null when it was not waited
 *   for (not away, or waitS 0), else the ms waited when the bound ran out.
 */
async function waitingOut(
  queue: string,
  waitS: number | undefined,
  log: (line: string) => void,
  what: () => void,
  away: (e: unknown) => boolean,
  say: {
    waiting: (e: Error) => string;
    failed: (e: Error, waitedMs: number | null) => Error;
  },
): Promise<void> {
  let downSinceMs = 0;
  let backoffMs: number = APPEND_DEFAULTS.brokerBackoffInitialMs;
  for (;;) {
    try {
      what();
      break;
    } catch (e) {
      const waitedMs = downSinceMs === 0 ? 0 : Date.now() - downSinceMs;
      if (!away(e) || waitS === 0) throw say.failed(e as Error, null);
      if (waitedMs >= (waitS ?? Infinity) * 1000) throw say.failed(e as Error, waitedMs);
      if (downSinceMs === 0) {
        downSinceMs = Date.now();
        log(
          `sluice: ${say.waiting(e as Error)} ` +
            `(${waitS === undefined ? 'Ctrl-C stops' : `at most ${waitS} s`})`,
        );
      }
      await new Promise((r) => setTimeout(r, backoffMs));
      backoffMs = Math.min(2 * backoffMs, APPEND_DEFAULTS.brokerBackoffMaxMs);
    }
  }
  if (downSinceMs > 0) {
    const s = ((Date.now() - downSinceMs) / 1000).toFixed(1);
    log(`sluice: append to queue "${queue}": the broker answers again after ${s} s; appending`);
  }
}

/** Appends one line; null when appended, 'skipped' for a blank line, else the problem. */
function appendLine(
  appender: QueueAppender,
  bytes: Buffer,
  opts: AppendOptions,
): string | null | 'skipped' {
  const options = { partition: opts.partition };
  if (opts.rawType !== undefined) {
    if (bytes.length === 0) return 'skipped';
    return caught(() => appender.appendBytes(opts.rawType!, opts.key, bytes, options));
  }
  const bad = firstInvalidUtf8(bytes);
  if (bad >= 0) {
    return (
      `byte ${bad + 1} (0x${bytes[bad]!.toString(16).padStart(2, '0')}) is not UTF-8; ` +
      'declare the lines binary with --raw-type <type> to append them as they are'
    );
  }
  const text = bytes.toString('utf8');
  if (text.trim() === '') return 'skipped';
  if (jsonTextDepth(text) > JSON_DEPTH_MAX)
    return `the JSON value is nested more than ${JSON_DEPTH_MAX} levels deep`;
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (e) {
    return `not JSON (${(e as Error).message})`;
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value))
    return 'expected a JSON object';
  const field = opts.keyField;
  const raw = (value as Record<string, unknown>)[field];
  if (raw === undefined) return `no "${field}" field for the key`;
  let key: string;
  if (opts.keyEncoding === 'json') {
    key = canonicalJson(raw);
  } else if (typeof raw === 'string') {
    key = raw;
  } else {
    const what =
      raw === null
        ? 'null'
        : Array.isArray(raw)
          ? 'an array'
          : typeof raw === 'object'
            ? 'an object'
            : `a ${typeof raw} (${JSON.stringify(raw)})`;
    return `the key field "${field}" is ${what}; a key is a JSON string (--key-encoding json keys by the field's JSON text)`;
  }
  return caught(() => appender.appendJson(key, value, options));
}

function caught(append: () => unknown): string | null {
  try {
    append();
    return null;
  } catch (e) {
    if (e instanceof RecordInputError) return e.message;
    throw e;
  }
}

/**
 * JSON text with object keys sorted at every level, so equal values have equal text and so
 * equal keys (`{"b":1,"a":2}` and `{"a":2,"b":1}`), and distinct values distinct keys.
 */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  const entries = Object.keys(value)
    .sort()
    .map((k) => `${JSON.stringify(k)}:${canonicalJson((value as Record<string, unknown>)[k])}`);
  return `{${entries.join(',')}}`;
}

/** Deepest nesting of `[` and `{` in JSON text, outside strings; one pass, no recursion. */
export function jsonTextDepth(text: string): number {
  let depth = 0;
  let deepest = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c)
        i++; // backslash: skip the escaped character
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) {
      inString = true;
    } else if (c === 0x5b || c === 0x7b) {
      if (++depth > deepest) deepest = depth;
    } else if (c === 0x5d || c === 0x7d) {
      depth--;
    }
  }
  return deepest;
}

/**
 * Lines of a byte stream, split at "\n" with a "\r" before it dropped; the last line need not
 * end with "\n". A line longer than `lineBytesMax` ends the stream with `{ tooLongBytes }` as
 * soon as that many bytes have come without a newline, so it is never held whole.
 */
export async function* splitLines(
  input: AsyncIterable<Buffer | string>,
  lineBytesMax: number,
): AsyncGenerator<{ bytes: Buffer } | { tooLongBytes: number }> {
  let parts: Buffer[] = [];
  let partsBytes = 0;
  const take = (tail: Buffer): Buffer => {
    const whole = parts.length === 0 ? tail : Buffer.concat([...parts, tail]);
    parts = [];
    partsBytes = 0;
    return whole.length > 0 && whole[whole.length - 1] === 0x0d
      ? whole.subarray(0, whole.length - 1)
      : whole;
  };
  for await (const item of input) {
    const chunk = typeof item === 'string' ? Buffer.from(item, 'utf8') : item;
    let from = 0;
    for (let nl = chunk.indexOf(0x0a, from); nl >= 0; nl = chunk.indexOf(0x0a, from)) {
      const tail = chunk.subarray(from, nl);
      // +1: a "\r" before the newline is not part of the line.
      if (partsBytes + tail.length > lineBytesMax + 1) {
        yield { tooLongBytes: partsBytes + tail.length };
        return;
      }
      yield { bytes: take(tail) };
      from = nl + 1;
    }
    const rest = chunk.subarray(from);
    if (rest.length > 0) {
      // Copied: the stream may reuse its chunk buffers.
      parts.push(Buffer.from(rest));
      partsBytes += rest.length;
      if (partsBytes > lineBytesMax + 1) {
        yield { tooLongBytes: partsBytes };
        return;
      }
    }
  }
  if (partsBytes > 0) yield { bytes: take(Buffer.alloc(0)) };
}
