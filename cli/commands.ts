/**
 * The `sluice` command line (loaded by the entry, sluice.ts, after it installed the signal
 * listeners).
 *   sluice check <topology.yaml> [--live]        validate a topology file and print its actors
 *   sluice install <topology.yaml>               install capture staging tables and triggers
 *   sluice uninstall <topology.yaml>             remove exactly what install created
 *   sluice run <topology.yaml>                   run it until SIGINT/SIGTERM, then drain, exit 0
 *   sluice append <topology.yaml> <queue>        append JSON lines from stdin as events
 *   sluice tail <topology.yaml> <queue>          print a queue's records as JSON lines (-a: all partitions)
 *   sluice dlq list|replay|purge <topology.yaml> <queue>   read, re-inject, remove dead letters
 *   sluice errors list|requeue|purge <topology.yaml> [ids...]   the capture error table
 *   sluice snapshot <topology.yaml> <source> <table>   initial load of a captured table (snapshot-command.ts)
 *   sluice status --http URL                     a running topology's actors (ops-commands.ts)
 *   sluice log-level --http URL [level]          show or change its log levels
 *   sluice pumps --http URL --source NAME [n]    show or change a capture source's pump count
 *   sluice stats --http URL                      its per-minute / hourly statistics
 *   sluice config export|import|history|restore  the capture section as JSON (ops-commands.ts)
 * Errors print one line (`sluice: ...`, commander's `error: ...` for usage, or the config
 * problems) and exit 2; SLUICE_DEBUG=1 adds the stack.
 */
import { Command, InvalidArgumentError } from 'commander';
import {
  loadTopology,
  checkEnvironment,
  environmentProblemsOf,
  readServiceModules,
  ConfigError,
  type ConfigProblem,
  type Topology,
} from '../engine/config/index.js';
import {
  startTopology,
  installCapture,
  uninstallCapture,
  checkCaptureLive,
  listCaptureErrors,
  requeueCaptureErrors,
  purgeCaptureErrors,
} from '../index.js';
import {
  planTopology,
  partitionDir,
  serviceModuleEntries,
  serviceModuleProblems,
  processorModuleProblems,
  serviceWarnings,
} from '../actors/index.js';
import { openQueueAppender } from '../engine/producer/index.js';
import { appendLines, KEY_ENCODINGS, type KeyEncoding } from './append.js';
import {
  listDeadLetters,
  purgeDeadLetters,
  replayDeadLetterQueue,
  actorBusOf,
  openQueueLogs,
  type PartitionTailer,
  type QueueLogs,
} from '../engine/service/index.js';
import {
  EnvelopeView,
  decodeChange,
  decodeJson,
  EVENT_TYPE_CHANGE,
  EVENT_TYPE_JSON,
  USER_EVENT_TYPE_MIN,
} from '../engine/codec/index.js';
import type { CounterSnapshot } from '../engine/actor/index.js';
import type { StopResult, Supervisor } from '../engine/supervisor/index.js';
import { heapProbe } from '../engine/actor/heap-probe.js';
import { liveCaptureProblems } from './live-check.js';
import { ReplayProgress } from './replay-progress.js';
import { onStopSignal } from './signals.js';
import { addOpsCommands, parseHttpAddress } from './ops-commands.js';
import { addBenchCommand } from './bench-command.js';
import { addSnapshotCommand } from './snapshot-command.js';
import {
  LOG_FORMATS,
  healthOf,
  packageVersion,
  type Health,
  type LogFormat,
  HTTP_NICE_DEFAULT,
} from '../ops/index.js';
import { healthChange } from './health-line.js';

const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? '' : 's'}`;

function intOption(name: string, min: number) {
  return (value: string): number => {
    const n = Number(value);
    // Digits only: Number() would also take "", " ", "0x5", "1e1" and "5.0".
    if (!/^-?\d+$/.test(value.trim()) || !Number.isSafeInteger(n) || n < min)
      throw new InvalidArgumentError(`${name} must be an integer >= ${min}, got "${value}"`);
    return n;
  };
}

function keyEncodingOption(value: string): KeyEncoding {
  if (!(KEY_ENCODINGS as readonly string[]).includes(value)) {
    throw new InvalidArgumentError(
      `--key-encoding must be one of ${KEY_ENCODINGS.join(', ')}, got "${value}"`,
    );
  }
  return value as KeyEncoding;
}

function queueOf(t: Topology, queue: string) {
  const q = t.queues.find((x) => x.name === queue);
  if (!q)
    throw new Error(
      `unknown queue "${queue}" in ${t.file} (known: ${t.queues.map((x) => x.name).join(', ')})`,
    );
  return q;
}

const program = new Command();
// Usage errors (unknown option, bad option value, missing argument) are bad input like the rest:
// commander's one-line message, a pointer to the help, exit 2. --help exits 0. Set before the
// commands are added, which inherit it.
program
  .name('sluice')
  .description('Sluice stream-processing engine')
  .version(packageVersion(), '-V, --version', 'print the version')
  .showHelpAfterError('(sluice help <command> shows its usage)')
  .exitOverride((err) => process.exit(err.exitCode === 0 ? 0 : 2));

program
  .command('check')
  .argument('<topology>', 'topology YAML file')
  .option(
    '--live',
    'also check the capture section against the live databases (tables, columns, keys)',
  )
  .description('validate a topology file and its service modules, and print the actors it starts')
  .action(async (file: string, opts: { live?: boolean }) => {
    // Every problem at once, in file order: the YAML's, the environment's (files it names) and
    // the service modules' (imported), each at its field's line:col.
    const problems: ConfigProblem[] = [];
    const located = (err: unknown): void => {
      if (!(err instanceof ConfigError)) throw err;
      problems.push(...err.problems);
    };
    let loaded: Topology | null = null;
    try {
      loaded = loadTopology(file);
    } catch (err) {
      located(err);
      // The files it names are checked too, so they are not reported only once the rest is fixed.
      problems.push(...environmentProblemsOf(file));
    }
    if (loaded) {
      try {
        checkEnvironment(loaded);
      } catch (err) {
        located(err);
      }
    }
    const entries = loaded ? serviceModuleEntries(loaded) : readServiceModules(file);
    problems.push(...(await serviceModuleProblems(file, entries)));
    if (loaded) problems.push(...(await processorModuleProblems(loaded)));
    // Against the live databases only once the file itself is right (no repeats of its problems).
    if (opts.live && loaded && problems.length === 0) {
      problems.push(...(await liveCaptureProblems(loaded)));
    }
    if (problems.length > 0) {
      throw new ConfigError(problems.sort((a, b) => a.line - b.line || a.col - b.col));
    }
    const t = loaded!;
    const plan = planTopology(t);
    for (const w of await serviceWarnings(t)) console.error(w);
    console.log(
      `${file}: ok (${plural(t.queues.length, 'queue')}, ${plural(t.services.length, 'service')}, ${plural(t.capture.length, 'capture source')}${t.processors.length > 0 ? `, ${plural(t.processors.length, 'processor')}` : ''})`,
    );
    if (opts.live) {
      const tables = t.capture.reduce((n, c) => n + c.tables.length, 0);
      console.log(`  live: ${plural(tables, 'captured table')} found with their columns and keys`);
    }
    for (const g of plan.groups) console.log(`  stage ${g.stage}  ${g.name}`);
    for (const s of t.services) {
      for (const input of s.inputs) {
        const q = queueOf(t, input);
        for (let p = 0; p < q.partitions; p++)
          console.log(`           reader:${input}/${p}>${s.name}`);
      }
    }
    for (const p of t.processors) {
      const state = p.stateTopic !== undefined ? `, state ${p.stateTopic}` : '';
      const pool =
        p.pool !== undefined
          ? `, pool of ${plural(p.pool.threads, 'thread')} (batches of ${p.pool.batchSize}, ${p.pool.batchesInFlightMax} in flight)`
          : '';
      console.log(
        `           processor:${p.name}: ${p.pattern} ${p.inputs.join(', ')} -> ${p.outputs.join(', ') || 'nothing'}${state}${pool} on the ${t.bus.kind} bus`,
      );
    }
    if (opts.live) {
      const drift = await checkCaptureLive(t);
      for (const line of drift) console.error(`warning: ${line}`);
      if (drift.length === 0 && t.capture.length > 0)
        console.log(`capture: every captured table matches its installed triggers`);
    }
  });

program
  .command('install')
  .argument('<topology>', 'topology YAML file')
  .description(
    "install every capture source's staging table, error table and triggers (idempotent)",
  )
  .action(async (file: string) => {
    const t = loadTopology(file);
    await installCapture(t);
    for (const c of t.capture)
      console.log(
        `installed capture "${c.name}": ${c.tables.map((x) => `${x.table} (${x.operations.join(', ')}) -> ${x.target}`).join('; ')}`,
      );
    if (t.capture.length === 0) console.log(`${file} has no capture sources`);
  });

program
  .command('uninstall')
  .argument('<topology>', 'topology YAML file')
  .option(
    '--keep-staging',
    'drop only the triggers and their functions; keep staging and error tables',
    false,
  )
  .option('--force', 'drop staging and error tables even when they still hold changes', false)
  .description(
    'remove what install created (triggers, functions, staging and error tables, the capture schema it made), nothing else',
  )
  .action(async (file: string, opts: { keepStaging: boolean; force: boolean }) => {
    const t = loadTopology(file);
    await uninstallCapture(t, opts);
    for (const c of t.capture)
      console.log(
        `uninstalled capture "${c.name}"${opts.keepStaging ? ' (staging and error tables kept)' : ''}`,
      );
    if (t.capture.length === 0) console.log(`${file} has no capture sources`);
  });

program
  .command('run')
  .argument('<topology>', 'topology YAML file')
  .option(
    '--status-ms <ms>',
    'print counters that changed every <ms> milliseconds (0: never)',
    intOption('--status-ms', 0),
    5000,
  )
  .option(
    '--http <[host:]port>',
    'serve the operations API and dashboard (host default 127.0.0.1)',
    parseHttpAddress,
  )
  .option(
    '--http-nice <steps>',
    `run the API's thread this many priority steps (nice, 0-19) below the actors (default ${HTTP_NICE_DEFAULT})`,
    (v: string) => {
      const n = Number(v);
      if (!/^\d+$/.test(v) || n > 19)
        throw new InvalidArgumentError(`--http-nice must be an integer 0-19, got "${v}"`);
      return n;
    },
  )
  .option(
    '--users <users.json>',
    'require a user token for the API (sluice user add writes the file)',
  )
  .option(
    '--log-format <format>',
    `log lines: ${LOG_FORMATS.join(' or ')} (json: pino JSON lines on stdout)`,
    (v: string) => {
      if (!(LOG_FORMATS as readonly string[]).includes(v))
        throw new InvalidArgumentError(
          `--log-format must be ${LOG_FORMATS.join(' or ')}, got "${v}"`,
        );
      return v as LogFormat;
    },
    'text',
  )
  .description('run a topology until SIGINT/SIGTERM, then drain, flush, fsync and exit 0')
  .action(
    async (
      file: string,
      opts: {
        statusMs: number;
        http?: { host: string; port: number };
        httpNice?: number;
        users?: string;
        logFormat: LogFormat;
      },
    ) => {
      if (opts.users && !opts.http) throw new InvalidArgumentError('--users needs --http');
      if (opts.httpNice !== undefined && !opts.http)
        throw new InvalidArgumentError('--http-nice needs --http');
      const t = loadTopology(file);
      const progress = new ReplayProgress();
      let ticker: NodeJS.Timeout | null = null;
      let supervisor: Supervisor | null = null;
      let timer: NodeJS.Timeout | null = null;
      let healthTimer: NodeJS.Timeout | null = null;
      let stopping = false;
      let runningNow: { stop(): Promise<StopResult> } | null = null;
      // Registered before the start, so Ctrl-C during a long replay drains too (and restores the
      // terminal the progress bars drew on); a signal that came even earlier is delivered now.
      const stop = async (signal: string) => {
        if (stopping) return;
        stopping = true;
        if (ticker) clearInterval(ticker);
        if (timer) clearInterval(timer);
        if (healthTimer) clearInterval(healthTimer);
        progress.stop();
        console.error(`sluice: ${signal}: draining`);
        if (!supervisor) process.exit(0);
        const result = runningNow ? await runningNow.stop() : await supervisor.stop();
        printCounters(result.counters, {});
        process.exit(result.terminated.length > 0 ? 1 : 0);
      };
      onStopSignal((signal) => void stop(signal));
      if (stopping) return;
      // Debug only (SLUICE_DEBUG_HEAP_DIR): the main thread's memory samples and heap snapshots.
      const mainProbe = heapProbe('main');
      if (mainProbe) setInterval(mainProbe, 1000).unref();
      const running = await startTopology(t, {
        http: opts.http
          ? {
              ...opts.http,
              usersFile: opts.users,
              ...(opts.httpNice !== undefined ? { nice: opts.httpNice } : {}),
            }
          : undefined,
        logFormat: opts.logFormat,
        onSupervisor: (sup) => {
          supervisor = sup;
          ticker = setInterval(() => progress.update(sup.counters()), 200);
        },
      });
      runningNow = running;
      if (stopping) return; // a signal came during the start; stop() is draining
      if (ticker) clearInterval(ticker);
      progress.update(running.supervisor.counters());
      progress.stop();
      const health = healthOf(running.supervisor);
      console.error(
        `sluice: ${t.name} is up (${plural(running.plan.groups.length, 'actor group')})${health.ready ? '' : `, not ready yet: ${health.reasons.join('; ')}`}; Ctrl-C drains and stops`,
      );
      // Readiness changes after the start (a source down for a while, an actor failing and
      // restarting) are printed as they happen, once each.
      let shown: Health = health;
      healthTimer = setInterval(() => {
        const now = healthOf(running.supervisor);
        const line = healthChange(shown, now);
        if (line !== null) console.error(`sluice: ${line}`);
        shown = now;
      }, 1000);
      healthTimer.unref();
      let last: Record<string, CounterSnapshot> = {};
      if (opts.statusMs > 0) {
        timer = setInterval(() => {
          const now = running.supervisor.counters();
          printCounters(now, last);
          last = now;
        }, opts.statusMs);
      }
      // startTopology's log already printed the reason; exit with the failure code.
      running.supervisor.done.catch(() => process.exit(2));
    },
  );

program
  .command('append')
  .argument('<topology>', 'topology YAML file')
  .argument('<queue>', 'queue name (one no service or capture source of the topology writes)')
  .option('-k, --key-field <field>', 'field of each JSON object used as the event key', 'key')
  .option(
    '--key-encoding <encoding>',
    'string: the key field must be a JSON string; json: the key is its canonical JSON text',
    keyEncodingOption,
    'string',
  )
  .option(
    '--raw-type <type>',
    'append each line as is (bytes, not UTF-8 or JSON) as an event of this user type (>= 100)',
    intOption('--raw-type', USER_EVENT_TYPE_MIN),
  )
  .option('--key <key>', 'with --raw-type: the key of every line', '')
  .option(
    '-p, --partition <n>',
    'partition (default: hash of the key)',
    intOption('--partition', 0),
  )
  .option(
    '--broker-wait-s <s>',
    'kafka: longest wait, seconds, for a broker that does not answer the first lookup or acknowledge a flush, then stop (default: wait until it answers; 0: do not wait)',
    intOption('--broker-wait-s', 0),
  )
  .description('append JSON objects, one per line of stdin, as JSON events (type 2)')
  .action(
    async (
      file: string,
      queue: string,
      opts: {
        keyField: string;
        keyEncoding: KeyEncoding;
        rawType?: number;
        key: string;
        partition?: number;
        brokerWaitS?: number;
      },
    ) => {
      const t = loadTopology(file);
      const appended = await appendLines(t, queue, process.stdin, opts);
      console.error(`sluice: appended ${plural(appended, 'event')} to ${queue}`);
    },
  );

program
  .command('tail')
  .argument('<topology>', 'topology YAML file')
  .argument('<queue>', 'queue name')
  .option('-p, --partition <n>', 'partition', intOption('--partition', 0), 0)
  .option('-n, --lines <n>', 'records to print', intOption('--lines', 0), 10)
  .option('--from-start', 'print the first records instead of the last', false)
  .option('-f, --follow', 'keep printing records as they are appended (Ctrl-C stops)', false)
  .option(
    '-a, --all-partitions',
    'every partition, merged by event time, each line with its partition',
    false,
  )
  .description('print records of a queue partition as JSON lines (the last 10 by default)')
  .action(
    async (
      file: string,
      queue: string,
      opts: {
        partition: number;
        lines: number;
        fromStart: boolean;
        follow: boolean;
        allPartitions: boolean;
      },
      cmd: Command,
    ) => {
      const t = loadTopology(file);
      const q = queueOf(t, queue);
      if (opts.allPartitions) {
        if (cmd.getOptionValueSource('partition') === 'cli')
          throw new InvalidArgumentError('--partition and --all-partitions exclude each other');
        await tailAllPartitions(t, queue, q.partitions, opts);
        return;
      }
      if (opts.partition >= q.partitions)
        throw new Error(
          `queue "${queue}" has partitions 0..${q.partitions - 1}, --partition ${opts.partition}`,
        );
      // Only one partition is shown: say so when the user did not pick it.
      if (q.partitions > 1 && cmd.getOptionValueSource('partition') !== 'cli') {
        console.error(
          `sluice: queue "${queue}" has ${q.partitions} partitions; showing partition 0 (-p <n> for another)`,
        );
      }
      const logs = openQueueLogs(actorBusOf(t));
      const tailer = openTailer(t, logs, queue, opts.partition);
      const view = new EnvelopeView();
      const print = (rec: { index: number; bytes: Uint8Array }) =>
        console.log(JSON.stringify(tailRecord(view, rec)));
      for (const rec of firstOrLast(tailer, opts)) print(rec);
      if (!opts.follow) {
        tailer.close();
        logs.close();
        return;
      }
      onStopSignal(() => process.exit(0));
      await follow(logs, `queue "${queue}" partition ${opts.partition}`, () => {
        for (let rec = tailer.next(); rec; rec = tailer.next()) print(rec);
      });
    },
  );

/** How often `tail -f` reads again: after a pass that found the end, and while a broker is down. */
const FOLLOW_POLL_MS = 100;
const FOLLOW_BROKER_WAIT_MS = 1000;

/**
 * `tail -f`'s loop: runs `pass` (read every tailer to its end, print) every FOLLOW_POLL_MS until
 * the process is stopped. On a kafka bus a broker that cannot be read is waited out: one stderr
 * line names `where` and the error when it goes away, one when it answers again, and the
 * tailers go on from the records already printed (a failed read leaves a tailer's position).
 * @throws the pass's error on the journal bus (a damaged journal is not waited for).
 */
async function follow(logs: QueueLogs, where: string, pass: () => void): Promise<never> {
  let downSinceMs = 0;
  for (;;) {
    try {
      pass();
      if (downSinceMs > 0) {
        const s = ((Date.now() - downSinceMs) / 1000).toFixed(1);
        console.error(`sluice: ${where}: the broker answers again after ${s} s; following`);
        downSinceMs = 0;
      }
    } catch (e) {
      if (logs.kind !== 'kafka') throw e;
      if (downSinceMs === 0) {
        downSinceMs = Date.now();
        console.error(
          `sluice: ${where}: the broker cannot be read (${(e as Error).message}); ` +
            'waiting for it (Ctrl-C stops)',
        );
      }
      await new Promise((r) => setTimeout(r, FOLLOW_BROKER_WAIT_MS));
    }
    await new Promise((r) => setTimeout(r, FOLLOW_POLL_MS));
  }
}

/**
 * A tailer over one partition of `queue` on the topology's bus (journal files, or the Kafka
 * topic read_committed).
 * @throws Error naming the topic and the topology file when a Kafka topic cannot be read.
 */
function openTailer(t: Topology, logs: QueueLogs, queue: string, partition: number) {
  const tailer = logs.tailer({ queue, partition, dir: partitionDir(t, queue, partition) });
  if (logs.kind === 'kafka') {
    try {
      tailer.moveToEnd();
    } catch (e) {
      logs.close();
      throw new Error(
        `queue "${queue}" partition ${partition}: Kafka topic "${queue}" cannot be read (${t.file}: bus kind kafka): ${(e as Error).message}`,
      );
    }
  }
  return tailer;
}

/**
 * The first (`fromStart`) or last `lines` records of a partition, oldest first, copied (a
 * tailer's bytes are valid until its next call); the tailer is left where `follow` continues:
 * at the end (what is appended from now on, not the records after the first N). The last N are
 * found by stepping back from the end, since offsets need not be contiguous (Kafka transaction
 * markers).
 */
function firstOrLast(
  tailer: PartitionTailer,
  opts: { lines: number; fromStart: boolean; follow: boolean },
): { index: number; bytes: Uint8Array }[] {
  const out: { index: number; bytes: Uint8Array }[] = [];
  if (opts.fromStart) {
    tailer.moveToIndex(0);
    for (let i = 0; i < opts.lines; i++) {
      const rec = tailer.next();
      if (!rec) break;
      out.push({ index: rec.index, bytes: new Uint8Array(rec.bytes) });
    }
    if (opts.follow) tailer.moveToEnd();
    return out;
  }
  tailer.moveToEnd();
  const end = tailer.index;
  let back = 0;
  while (back < opts.lines && tailer.previous()) back++;
  for (; back > 0; back--) {
    const rec = tailer.next();
    if (!rec) break;
    out.push({ index: rec.index, bytes: new Uint8Array(rec.bytes) });
  }
  if (tailer.index !== end) tailer.moveToIndex(end);
  return out;
}

/** One record of a partition, decoded for printing. */
interface TailLine {
  partition: number;
  index: number;
  eventTimeMs: number;
  text: string;
}

/**
 * The value of a record that is not a Sluice envelope (a capture record with format json, a value
 * another producer wrote to a Kafka topic): its JSON when it is JSON text, else its text when it
 * is UTF-8, else `<N bytes>`.
 */
function foreignValue(bytes: Uint8Array): unknown {
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    return `<${bytes.length} bytes>`;
  }
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return text;
  }
}

/** Wraps `view` over `bytes`; false when they are not a Sluice envelope. */
function wrapsEnvelope(view: EnvelopeView, bytes: Uint8Array): boolean {
  try {
    view.wrap(bytes, 0, bytes.length);
    return true;
  } catch {
    return false;
  }
}

/**
 * A record as `sluice tail` prints it: index, type, key, event time, cause, decoded value. A
 * record that is not a Sluice envelope prints type, key and cause null, event time 0 and
 * {@link foreignValue}.
 */
function tailRecord(view: EnvelopeView, rec: { index: number; bytes: Uint8Array }) {
  if (!wrapsEnvelope(view, rec.bytes))
    return {
      index: rec.index,
      type: null,
      key: null,
      eventTimeMs: 0,
      cause: undefined,
      value: foreignValue(rec.bytes),
    };
  const value =
    view.type === EVENT_TYPE_CHANGE
      ? decodeChange(view.payload)
      : view.type === EVENT_TYPE_JSON
        ? decodeJson(view.payload)
        : `<${view.payload.length} bytes>`;
  const cause = view.hasCause
    ? { queue: view.causeQueue, partition: view.causePartition, index: view.causeIndex }
    : undefined;
  return {
    index: rec.index,
    type: view.type,
    key: view.key,
    eventTimeMs: view.eventTimeMs,
    cause,
    value,
  };
}

/** A record of a merged tail: tailRecord with its partition first. */
function tailLine(
  view: EnvelopeView,
  rec: { index: number; bytes: Uint8Array },
  partition: number,
): TailLine {
  const r = tailRecord(view, rec);
  return {
    partition,
    index: rec.index,
    eventTimeMs: r.eventTimeMs,
    text: JSON.stringify({ partition, ...r }),
  };
}

/** Event time, then partition, then index: the order of a merged tail. */
const byTime = (a: TailLine, b: TailLine) =>
  a.eventTimeMs - b.eventTimeMs || a.partition - b.partition || a.index - b.index;

/**
 * `sluice tail --all-partitions`: the last (or, --from-start, first) `lines` records over every
 * partition, merged by event time; with --follow, each poll's new records in event-time order.
 * Event times of different partitions are the writers' clocks: the merge orders by them, it does
 * not claim they are the append order.
 */
async function tailAllPartitions(
  t: Topology,
  queue: string,
  partitions: number,
  opts: { lines: number; fromStart: boolean; follow: boolean },
): Promise<void> {
  const view = new EnvelopeView();
  const logs = openQueueLogs(actorBusOf(t));
  const tailers: PartitionTailer[] = [];
  for (let p = 0; p < partitions; p++) tailers.push(openTailer(t, logs, queue, p));
  const picked: TailLine[] = [];
  for (const [p, tailer] of tailers.entries()) {
    for (const rec of firstOrLast(tailer, opts)) picked.push(tailLine(view, rec, p));
  }
  picked.sort(byTime);
  const shown = opts.fromStart
    ? picked.slice(0, opts.lines)
    : picked.slice(Math.max(0, picked.length - opts.lines));
  for (const l of shown) console.log(l.text);
  if (!opts.follow) {
    for (const tailer of tailers) tailer.close();
    logs.close();
    return;
  }
  onStopSignal(() => process.exit(0));
  await follow(logs, `queue "${queue}" (all ${tailers.length} partitions)`, () => {
    const batch: TailLine[] = [];
    try {
      for (const [p, tailer] of tailers.entries())
        for (let rec = tailer.next(); rec; rec = tailer.next()) batch.push(tailLine(view, rec, p));
    } finally {
      // What was read before a failed read is printed: those tailers have moved past it.
      for (const l of batch.sort(byTime)) console.log(l.text);
    }
  });
}

const dlq = program
  .command('dlq')
  .description('dead letters: events a service handler kept failing on');
dlq
  .command('list')
  .argument('<topology>', 'topology YAML file')
  .argument('<queue>', "a service's dead-letter queue (default name <service>.dlq)")
  .description('print the dead letters as JSON lines: position, attempts, error, the event')
  .action((file: string, queue: string) => {
    const view = new EnvelopeView();
    for (const d of listDeadLetters(loadTopology(file), queue)) {
      // A dead letter without its event (over a record limit) prints value null; one whose
      // event is not a Sluice envelope (another producer's value) prints it as tail does.
      const envelope = d.bytes.length > 0 && wrapsEnvelope(view, d.bytes);
      const value =
        d.bytes.length === 0
          ? null
          : !envelope
            ? foreignValue(d.bytes)
            : view.type === EVENT_TYPE_CHANGE
              ? decodeChange(view.payload)
              : view.type === EVENT_TYPE_JSON
                ? decodeJson(view.payload)
                : `<${view.payload.length} bytes>`;
      const { dlqIndex, service, queue: q, partition, index, key, attempts, error, failedAtMs } = d;
      const line = {
        dlqIndex,
        service,
        queue: q,
        partition,
        index,
        key,
        attempts,
        error,
        failedAtMs,
        value,
      };
      console.log(JSON.stringify(line));
    }
  });
dlq
  .command('replay')
  .argument('<topology>', 'topology YAML file')
  .argument('<queue>', "a service's dead-letter queue")
  .option('--to <queue>', 'append to this queue (partition by key) instead of the source queue')
  .option('-i, --index <n...>', 'only these dead-letter indexes (default: all)')
  .description('append the dead-lettered events again (the dead letters stay until purge)')
  .action((file: string, queue: string, opts: { to?: string; index?: string[] }) => {
    const indexes = opts.index?.map((v) => intOption('--index', 0)(v));
    const done = replayDeadLetterQueue(loadTopology(file), queue, { to: opts.to, indexes });
    for (const r of done) console.log(JSON.stringify(r));
    console.error(`sluice: replayed ${plural(done.length, 'dead letter')} from ${queue}`);
  });
dlq
  .command('purge')
  .argument('<topology>', 'topology YAML file')
  .argument('<queue>', "a service's dead-letter queue")
  .description('remove every dead letter of the queue (with the topology stopped)')
  .action((file: string, queue: string) => {
    const n = purgeDeadLetters(loadTopology(file), queue);
    console.error(`sluice: purged ${plural(n, 'dead letter')} from ${queue}`);
  });

const errors = program
  .command('errors')
  .description(
    'the capture error table: changes the target refused, parked after their last retry',
  );

/** Ids or --all for a command that changes the error table: never everything by accident. */
function selection(
  ids: string[],
  opts: { all?: boolean; source?: string; olderThanMs?: number },
  verb: string,
) {
  if (ids.length === 0 && !opts.all && opts.olderThanMs === undefined) {
    throw new Error(
      `errors ${verb}: name staging ids, or --all${verb === 'purge' ? ', or --older-than-ms <ms>' : ''}`,
    );
  }
  for (const id of ids)
    if (!/^[0-9]+$/.test(id))
      throw new Error(`errors ${verb}: staging id must be a decimal integer, got "${id}"`);
  return {
    ...(ids.length > 0 ? { ids } : {}),
    ...(opts.source !== undefined ? { source: opts.source } : {}),
    ...(opts.olderThanMs !== undefined ? { parkedBeforeMs: Date.now() - opts.olderThanMs } : {}),
  };
}

errors
  .command('list')
  .argument('<topology>', 'topology YAML file')
  .option('-s, --source <name>', 'capture source (default: all)')
  .option('-n, --lines <n>', 'parked changes to print per source', intOption('--lines', 1), 100)
  .option('--json', 'one JSON object per parked change, images included', false)
  .description('print parked changes, lowest staging id first')
  .action(async (file: string, opts: { source?: string; lines: number; json: boolean }) => {
    const t = loadTopology(file);
    for (const { source, parked, total } of await listCaptureErrors(
      t,
      opts.source !== undefined ? { source: opts.source } : {},
      opts.lines,
    )) {
      if (!opts.json) console.log(`${source}: ${plural(total, 'parked change')}`);
      for (const p of parked) {
        if (opts.json) console.log(JSON.stringify({ source, ...p }));
        else
          console.log(
            `  ${p.stagingId}  ${p.table} ${p.op} key=${p.key} attempts=${p.attempts} parked=${new Date(p.parkedTimeMs).toISOString()}  ${p.error}`,
          );
      }
    }
  });

errors
  .command('requeue')
  .argument('<topology>', 'topology YAML file')
  .argument('[ids...]', 'staging ids to requeue')
  .option('-s, --source <name>', 'capture source (default: all)')
  .option('--all', 'every parked change', false)
  .description('move parked changes back into staging, under their own ids, to be shipped again')
  .action(async (file: string, ids: string[], opts: { source?: string; all: boolean }) => {
    const n = await requeueCaptureErrors(loadTopology(file), selection(ids, opts, 'requeue'));
    console.log(`requeued ${plural(n, 'change')}`);
  });

errors
  .command('purge')
  .argument('<topology>', 'topology YAML file')
  .argument('[ids...]', 'staging ids to delete')
  .option('-s, --source <name>', 'capture source (default: all)')
  .option('--all', 'every parked change', false)
  .option(
    '--older-than-ms <ms>',
    'only changes parked longer ago than this',
    intOption('--older-than-ms', 0),
  )
  .description('delete parked changes for good (their keys flow again)')
  .action(
    async (
      file: string,
      ids: string[],
      opts: { source?: string; all: boolean; olderThanMs?: number },
    ) => {
      const n = await purgeCaptureErrors(loadTopology(file), selection(ids, opts, 'purge'));
      console.log(`purged ${plural(n, 'change')}`);
    },
  );

addSnapshotCommand(program);
addOpsCommands(program, intOption);
addBenchCommand(program, intOption);

function printCounters(
  counters: Record<string, CounterSnapshot>,
  previous: Record<string, CounterSnapshot>,
): void {
  for (const [name, c] of Object.entries(counters)) {
    const p = previous[name];
    if (
      p &&
      p.state === c.state &&
      p.eventsIn === c.eventsIn &&
      p.eventsOut === c.eventsOut &&
      p.replayed === c.replayed &&
      p.errors === c.errors &&
      p.downSinceMs === c.downSinceMs
    )
      continue;
    const down = c.downSinceMs ? ` DOWN since ${new Date(c.downSinceMs).toISOString()}` : '';
    console.error(
      `  ${name.padEnd(48)} ${c.state.padEnd(8)} in=${c.eventsIn} out=${c.eventsOut}${c.replayed ? ` replayed=${c.replayed}` : ''}${c.errors ? ` errors=${c.errors}` : ''}${down}`,
    );
  }
}

program.parseAsync().catch((e: unknown) => {
  if (e instanceof ConfigError) console.error(e.message);
  else
    console.error(
      `sluice: ${process.env.SLUICE_DEBUG ? ((e as Error).stack ?? e) : ((e as Error).message ?? e)}`,
    );
  process.exit(2);
});
