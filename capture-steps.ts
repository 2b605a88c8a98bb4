/**
 * Capture commands' steps located in the topology file (install, uninstall, snapshot): opening a
 * source and turning a step's failure into a ConfigError at the field at fault. Used by index.ts
 * and cli/snapshot-command.ts; not part of the package's documented surface.
 */
import { ConfigError, problemAt, type Topology } from './engine/config/index.js';
import { captureTableErrors, openStaging, type StagingClient } from './engine/cdc/index.js';

/**
 * Opens capture source `i`'s staging client.
 * @throws ConfigError at the field that names the database (`capture[i].database.url` for
 *   PostgreSQL, `.file` for SQLite) with the source's name and the driver's reason, e.g.
 *   `topology.yaml:7:36: capture[0].database.url: capture source "shop-db": cannot connect to
 *   postgres://app:***@db:5432/shop: connect ECONNREFUSED 10.0.0.5:5432`.
 */
export async function openCaptureSource(topology: Topology, i: number): Promise<StagingClient> {
  const source = topology.capture[i]!;
  try {
    return await openStaging(source);
  } catch (err) {
    const db = source.database as { dialect: string; url?: string; file?: string };
    const field = db.url !== undefined ? 'url' : db.file !== undefined ? 'file' : 'dialect';
    const target = db.url !== undefined ? redactUrl(db.url) : (db.file ?? db.dialect);
    const verb = db.url !== undefined ? 'connect to' : 'open';
    const reason = (err as Error).message;
    const message = `capture source "${source.name}": cannot ${verb} ${target}: ${reason}`;
    const problem = problemAt(topology.file, ['capture', i, 'database', field], message);
    throw new ConfigError([problem], { cause: err });
  }
}

/** Options of {@link captureStepError}. */
export interface CaptureStepErrorOptions {
  /** The captured table the step worked on, when it was one (sluice snapshot). */
  table?: string;
  /** Capture sources the command already acted on before this one failed (not undone). */
  done?: readonly string[];
  /** What was done to each of `done`, e.g. `installed`. */
  doneVerb?: string;
  /** Said after the driver's message: what to do (e.g. run sluice install). */
  hint?: string;
}

/**
 * The error of step `doing` (e.g. `install`, `uninstall (dropping its triggers of "ledger")`) on
 * capture source `i` of `topology`, located in the topology file as one ConfigError (the error
 * kept as its cause), so the command line prints `file:line:col: path: message`:
 * - a ConfigError (openCaptureSource's `capture[i].database.url` / `.file`) is kept;
 * - a CaptureTableError of one of the source's tables is put at that table's field
 *   (`capture[i].tables[k].table`, `.columns[n]`, `.key`, `.condition.update`, ...) as
 *   `capture source "<name>": <its message>`; one naming a table the source does not capture
 *   at `capture[i].tables`; each of a CaptureTableErrors so, one problem each;
 * - any other error (the driver's) at `capture[i].tables[k].table` when `options.table` is one of
 *   the source's tables, else at `capture[i].name`, as `capture source "<name>": [table "<t>": ]
 *   <doing> failed: <the driver's message>[; <hint>]`.
 * Sources in `options.done` are named after it (`capture "a" was installed before this
 * failure`): a command over several sources hides nothing it did.
 */
export function captureStepError(
  topology: Topology,
  i: number,
  err: unknown,
  doing: string,
  options: CaptureStepErrorOptions = {},
): ConfigError {
  const source = topology.capture[i]!;
  const done = options.done ?? [];
  const after =
    done.length === 0
      ? ''
      : ` (capture ${done.map((n) => `"${n}"`).join(', ')} ${done.length === 1 ? 'was' : 'were'} ${options.doneVerb ?? 'done'} before this failure)`;
  if (err instanceof ConfigError) {
    if (after === '') return err;
    return new ConfigError(
      err.problems.map((p) => ({ ...p, message: p.message + after })),
      { cause: err.cause ?? err },
    );
  }
  const errors = captureTableErrors(err);
  if (errors.length > 0) {
    // Each at its own field (several: every refused probe of the tables' user-written SQL).
    const problems = errors.map((e) => {
      const k = source.tables.findIndex((t) => t.table === e.table);
      const field = [...e.field.split('.'), ...(e.index === undefined ? [] : [e.index])];
      const at = k < 0 ? ['capture', i, 'tables'] : ['capture', i, 'tables', k, ...field];
      const message = `capture source "${source.name}": ${e.message}${after}`;
      return problemAt(topology.file, at, message);
    });
    return new ConfigError(problems, { cause: err });
  }
  const k =
    options.table === undefined ? -1 : source.tables.findIndex((t) => t.table === options.table);
  const at = k < 0 ? ['capture', i, 'name'] : ['capture', i, 'tables', k, 'table'];
  const table = k < 0 ? '' : `table "${options.table}": `;
  const reason = (err as Error)?.message ?? String(err);
  const hint = options.hint === undefined ? '' : `; ${options.hint}`;
  const message = `capture source "${source.name}": ${table}${doing} failed: ${reason}${hint}`;
  return new ConfigError([problemAt(topology.file, at, message + after)], { cause: err });
}

/** A connection URL with its password replaced by `***` (for messages and logs). */
function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password === '') return url;
    u.password = '***';
    return u.toString();
  } catch {
    return '(unparsable URL)';
  }
}
