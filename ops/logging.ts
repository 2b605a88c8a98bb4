/**
 * Structured logs through pino: one logger per running topology, with the topology's name on
 * every line; the supervisor's lines, and the actors' (ActorContext.log, ServiceContext.log)
 * with the actor's name. Two formats over the same logger:
 *  - `json`: pino's JSON lines on stdout (one object per line: level, time, topology, actor, msg);
 *  - `text`: `sluice: [actor] msg key=value` on stderr, the format `sluice run` always printed
 *    (no level: a line is there because its level was enabled).
 * Levels change while running: the global level, and per actor (the actor filters in its own
 * thread through a shared cell, so a line below its level costs no message).
 */
import { Writable } from 'node:stream';
import type { DestinationStream, Logger } from 'pino';
import { LOG_LEVELS, logLevelName, type LogLevelName } from '../engine/actor/index.js';
import type { ActorLogEvent, Supervisor } from '../engine/supervisor/index.js';

import { type LogFormat } from './formats.js';

/** Options of {@link createLogger}. */
export interface LoggerOptions {
  format: LogFormat;
  topology: string;
  /** Initial global level. Default info. */
  level?: LogLevelName;
  /** Where lines go; default stdout (json) or stderr (text). */
  destination?: NodeJS.WritableStream;
  /** Text format only: receives each line without the `sluice: ` prefix and newline instead. */
  lineSink?: (line: string) => void;
}

/**
 * Checks a level name. @throws Error naming the allowed names.
 */
export function parseLogLevel(value: unknown, where: string): LogLevelName {
  if (typeof value === 'string' && Object.hasOwn(LOG_LEVELS, value)) return value as LogLevelName;
  throw new Error(
    `${where}: log level must be one of ${Object.keys(LOG_LEVELS).join(', ')}, got ${JSON.stringify(value)}`,
  );
}

/** pino's level name for ours (silent is pino's too). */
const pinoLevel = (level: LogLevelName): string => level;

/** Formats one pino JSON line as the text format. */
function textLine(json: string): string {
  let o: Record<string, unknown>;
  try {
    o = JSON.parse(json) as Record<string, unknown>;
  } catch {
    return json;
  }
  const { level, time, topology, actor, msg, pid, hostname, ...rest } = o;
  void time;
  void topology;
  void pid;
  void hostname;
  void level;
  const extra = Object.entries(rest)
    .map(([k, v]) => ` ${k}=${typeof v === 'string' ? v : JSON.stringify(v)}`)
    .join('');
  return `${actor ? `[${String(actor)}] ` : ''}${String(msg ?? '')}${extra}`;
}

/**
 * Creates the topology's logger. Async because pino is loaded on first use: a CLI command that
 * logs nothing (append, tail, check) does not pay for it at start.
 */
export async function createLogger(options: LoggerOptions): Promise<Logger> {
  const { default: pino } = await import('pino');
  const level = pinoLevel(options.level ?? 'info');
  const base = { topology: options.topology };
  if (options.format === 'json') {
    const dest = options.destination ?? pino.destination({ dest: 1, sync: true });
    return pino({ level, base, messageKey: 'msg' }, dest as DestinationStream);
  }
  const out = options.destination ?? process.stderr;
  const sink = options.lineSink ?? ((line: string) => out.write(`sluice: ${line}\n`));
  const text = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const line of chunk.toString('utf8').split('\n')) if (line) sink(textLine(line));
      done();
    },
  });
  return pino({ level, base, messageKey: 'msg' }, text);
}

/**
 * Writes a supervisor's log lines and its actors' lines through `logger`. Actor lines are
 * written at their own level whatever the global one (the actor already filtered them).
 * @returns a function that detaches the listeners.
 */
export function attachSupervisorLogs(supervisor: Supervisor, logger: Logger): () => void {
  const children = new Map<string, Logger>();
  const onLog = (line: string) => logger.info(line);
  const onActorLog = (e: ActorLogEvent) => {
    let child = children.get(e.actor);
    if (!child)
      children.set(e.actor, (child = logger.child({ actor: e.actor }, { level: 'trace' })));
    const name = logLevelName(e.level);
    const method = (
      Object.hasOwn(LOG_LEVELS, name) && name !== 'silent' ? name : 'info'
    ) as Exclude<LogLevelName, 'silent'>;
    child[method](e.fields ?? {}, e.msg);
  };
  supervisor.on('log', onLog);
  supervisor.on('actorLog', onActorLog);
  return () => {
    supervisor.off('log', onLog);
    supervisor.off('actorLog', onActorLog);
  };
}
