/**
 * Positions, in the topology file, problems found after loading: by checks of the environment
 * (files a topology names) or by steps that open its databases (install). The loaded Topology
 * keeps no positions, so the file is parsed again.
 */
import { accessSync, constants, existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { LineCounter, parseDocument } from 'yaml';
import { substituteEnv } from './env.js';
import type { Environment } from './env.js';
import { ConfigError } from './errors.js';
import type { ConfigProblem } from './errors.js';
import { formatPath, SourceMap } from './source-map.js';
import type { Segment } from './source-map.js';
import type { Topology } from './topology.js';

/**
 * The problem `message` at the value of `fieldPath` (e.g. `['capture', 0, 'tables', 1, 'table']`)
 * in topology file `file`, as `file:line:col: path: message`. Without a position (line 0) when
 * the file cannot be read or parsed.
 */
export function problemAt(
  file: string,
  fieldPath: readonly Segment[],
  message: string,
): ConfigProblem {
  const path = formatPath(fieldPath);
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    return { file, line: 0, col: 0, path, message: `${path}: ${message}` };
  }
  const lineCounter = new LineCounter();
  const doc = parseDocument(text, { lineCounter, prettyErrors: false, uniqueKeys: true });
  if (doc.errors.length > 0) return { file, line: 0, col: 0, path, message: `${path}: ${message}` };
  const { line, col } = new SourceMap(doc, lineCounter).position(fieldPath);
  return { file, line, col, path, message };
}

/**
 * Checks what a loaded topology needs from its environment but the config checks do not look at:
 * every SQLite capture database file exists (capture opens it with fileMustExist; ":memory:" and
 * "file:" URIs are not checked), and a kafka bus's TLS and SASL files can be read. `sluice
 * check` runs it after loadTopology.
 *
 * @throws ConfigError listing each missing file at its `capture[i].database.file`, and each
 *   unreadable bus file at its `bus.tls.*File` / `bus.sasl.passwordFile`.
 */
export function checkEnvironment(topology: Topology): void {
  const problems = sqliteFileProblems(
    topology.file,
    topology.capture.map((c) => c.database),
  );
  problems.push(...busFileProblems(topology));
  if (problems.length > 0) throw new ConfigError(problems);
}

/**
 * A kafka bus's TLS and SASL files (bus.tls.caFile, certFile, keyFile, bus.sasl.passwordFile)
 * that cannot be read, each at its field, as the actors would fail on them at the start (the
 * contents are not read here and never shown).
 */
function busFileProblems(topology: Topology): ConfigProblem[] {
  const b = topology.bus;
  if (b.kind !== 'kafka') return [];
  const files: [Segment[], string | undefined][] = [
    [['bus', 'tls', 'caFile'], b.tls?.caFile],
    [['bus', 'tls', 'certFile'], b.tls?.certFile],
    [['bus', 'tls', 'keyFile'], b.tls?.keyFile],
    [['bus', 'sasl', 'passwordFile'], b.sasl?.passwordFile],
  ];
  const problems: ConfigProblem[] = [];
  for (const [at, f] of files) {
    if (f === undefined) continue;
    try {
      accessSync(f, constants.R_OK);
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code ?? String(e);
      problems.push(problemAt(topology.file, at, `cannot read ${f}: ${code}`));
    }
  }
  return problems;
}

/**
 * The problems of checkEnvironment for a topology file that does not load (other problems in
 * it), read leniently: every `capture[i].database` that is an SQLite entry with a string `file`
 * is checked, resolved against the file's directory after `${VAR}` substitution (`env`, default
 * process.env). Returns [] when the file cannot be read or parsed (its loading reports that).
 * `sluice check` uses it so that a missing database file is reported with the file's other
 * problems instead of after they are fixed.
 */
export function environmentProblemsOf(
  file: string,
  env: Environment = process.env,
): ConfigProblem[] {
  let data: unknown;
  try {
    const doc = parseDocument(readFileSync(file, 'utf8'), {
      prettyErrors: false,
      uniqueKeys: true,
    });
    if (doc.errors.length > 0) return [];
    substituteEnv(doc, env);
    data = doc.toJS({ maxAliasCount: 1000 });
  } catch {
    return [];
  }
  const capture = (data as { capture?: unknown } | null)?.capture;
  if (!Array.isArray(capture)) return [];
  const baseDir = path.dirname(path.resolve(file));
  const databases = capture.map((c: unknown) => {
    const db = (c as { database?: { dialect?: unknown; file?: unknown } } | null)?.database;
    if (db?.dialect !== 'sqlite' || typeof db.file !== 'string' || db.file.length === 0)
      return null;
    const f = db.file;
    return {
      dialect: 'sqlite' as const,
      file: f === ':memory:' || f.startsWith('file:') ? f : path.resolve(baseDir, f),
    };
  });
  return sqliteFileProblems(file, databases);
}

function sqliteFileProblems(
  file: string,
  databases: ReadonlyArray<{ dialect: string; file?: string } | null>,
): ConfigProblem[] {
  const problems: ConfigProblem[] = [];
  databases.forEach((db, i) => {
    if (db === null || db.dialect !== 'sqlite' || db.file === undefined) return;
    if (db.file === ':memory:' || db.file.startsWith('file:') || db.file.includes('\0')) return;
    if (!existsSync(db.file)) {
      problems.push(
        problemAt(
          file,
          ['capture', i, 'database', 'file'],
          `SQLite database file not found: ${db.file} (create the database first; capture does not create it)`,
        ),
      );
    }
  });
  return problems;
}
