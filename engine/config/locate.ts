/**
 * Positions, in the topology file, problems found after loading: by checks of the environment
 * (files a topology names) or by steps that open its databases (install). The loaded Topology
 * keeps no positions, so the file is parsed again.
 */
import { existsSync, readFileSync } from 'node:fs';
import { LineCounter, parseDocument } from 'yaml';
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
export function problemAt(file: string, fieldPath: readonly Segment[], message: string): ConfigProblem {
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
 * "file:" URIs are not checked). `sluice check` runs it after loadTopology.
 *
 * @throws ConfigError listing each missing file at its `capture[i].database.file`.
 */
export function checkEnvironment(topology: Topology): void {
  const problems: ConfigProblem[] = [];
  topology.capture.forEach((source, i) => {
    const db = source.database;
    if (db.dialect !== 'sqlite' || db.file === ':memory:' || db.file.startsWith('file:')) return;
    if (!existsSync(db.file)) {
      problems.push(problemAt(topology.file, ['capture', i, 'database', 'file'], `SQLite database file not found: ${db.file} (create the database first; capture does not create it)`));
    }
  });
  if (problems.length > 0) throw new ConfigError(problems);
}
