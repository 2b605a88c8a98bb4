/**
 * The capture configuration as JSON, after MOVEX CDC's configuration import/export and history:
 *  - export: the topology file's `capture` section as written (no defaults filled in), whole or
 *    only the sources of one captured schema, as `{ "capture": [...] }` (`"schema"` added);
 *  - import: a JSON file of that shape replaces the capture section (with `"schema"`: only that
 *    schema's sources). It is validated exactly as the YAML is: the topology file with the new
 *    section goes through the same loader, and each problem under `capture` is reported at its
 *    line:col in the JSON file with the same path (`capture[0].tables[1].target: ...`);
 *  - apply: install (regenerate staging tables and triggers from the new section; a missing
 *    table or column is a problem at its field in the JSON file), drop the triggers of tables
 *    no longer captured (their staging rows stay), then the topology file is
 *    rewritten (atomically, comments elsewhere kept) and a history entry is appended;
 *  - history: `<dataDir>/ops/config-history.jsonl`, one JSON line per applied version (version,
 *    time, user, action, diff, the whole capture section after it); version 0 is the section as
 *    it was before the first change. Restore re-applies an earlier version as a new one.
 * A running topology's pumps keep the configuration they started with until they restart; the
 * triggers (what is staged) change at once.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseDocument, isMap } from 'yaml';
import {
  ConfigError,
  parseTopology,
  problemAt,
  type ConfigProblem,
  type Topology,
} from '../engine/config/index.js';
import {
  captureTableErrors,
  openStaging,
  parseMariaDbUrl,
  parseOracleUrl,
} from '../engine/cdc/index.js';

/** A capture section as JSON: source objects as written in the topology file. */
export type CaptureSection = Record<string, unknown>[];

/** What export writes and import reads. */
export interface CaptureExport {
  /** Present when only one captured schema's sources are in `capture`. */
  schema?: string;
  capture: CaptureSection;
}

/** One changed field between two versions. */
export interface ConfigDiffEntry {
  /** Field path, e.g. `capture[0].tables[1].target`. */
  path: string;
  /** Absent (undefined, shown as null) when the field was added. */
  before: unknown;
  after: unknown;
}

/** One applied version of the capture section. */
export interface ConfigVersion {
  version: number;
  time: string;
  user: string;
  action: 'initial' | 'import' | 'restore';
  /** For a restore: the version restored. */
  restoredFrom?: number;
  diff: ConfigDiffEntry[];
  capture: CaptureSection;
}

/** Largest JSON file import reads, bytes (the topology file's own limit is larger). */
export const CAPTURE_IMPORT_BYTES_MAX = 16 * 1024 * 1024;

/** The captured schema of a source as written: PostgreSQL database.schema (default public), MariaDB the URL's database, Oracle database.schema (default the URL's user, upper case), SQLite main. */
export function schemaOfSource(source: Record<string, unknown>): string {
  const db = (source.database ?? {}) as Record<string, unknown>;
  if (db.dialect === 'postgres') return typeof db.schema === 'string' ? db.schema : 'public';
  if (db.dialect === 'mariadb' || db.dialect === 'mysql') {
    const u = typeof db.url === 'string' ? parseMariaDbUrl(db.url) : null;
    return u && typeof u !== 'string' ? u.database : '';
  }
  if (db.dialect === 'oracle') {
    if (typeof db.schema === 'string') return db.schema.toUpperCase();
    const u = typeof db.url === 'string' ? parseOracleUrl(db.url) : null;
    return u && typeof u !== 'string' ? u.user.toUpperCase() : '';
  }
  return 'main';
}

/** The capture section of a topology file as written. @throws ConfigError when unreadable. */
function readSection(topologyFile: string): { text: string; section: CaptureSection } {
  const text = fs.readFileSync(topologyFile, 'utf8');
  const doc = parseDocument(text);
  const capture = (doc.toJS() as { capture?: unknown } | null)?.capture;
  return { text, section: Array.isArray(capture) ? (capture as CaptureSection) : [] };
}

/** Exports the capture section of `topologyFile` (one schema's sources when `schema` is given). */
export function exportCapture(topologyFile: string, schema?: string): CaptureExport {
  const { section } = readSection(topologyFile);
  if (schema === undefined) return { capture: section };
  return { schema, capture: section.filter((s) => schemaOfSource(s) === schema) };
}

/** Field paths whose values differ between `a` and `b` (arrays by index, objects by key). */
export function diffValues(a: unknown, b: unknown, at = ''): ConfigDiffEntry[] {
  const isObj = (v: unknown): v is Record<string, unknown> =>
    typeof v === 'object' && v !== null && !Array.isArray(v);
  if (Array.isArray(a) && Array.isArray(b)) {
    const out: ConfigDiffEntry[] = [];
    for (let i = 0; i < Math.max(a.length, b.length); i++)
      out.push(...diffValues(a[i], b[i], `${at}[${i}]`));
    return out;
  }
  if (isObj(a) && isObj(b)) {
    const keys = [...new Set([...Object.keys(a), ...Object.keys(b)])];
    return keys.flatMap((k) => diffValues(a[k], b[k], at === '' ? k : `${at}.${k}`));
  }
  if (JSON.stringify(a) === JSON.stringify(b)) return [];
  return [{ path: at, before: a ?? null, after: b ?? null }];
}

/** `capture[0].tables[1]["a b"]` -> ['capture', 0, 'tables', 1, 'a b']. */
function pathSegments(p: string): Array<string | number> {
  const out: Array<string | number> = [];
  const re = /([A-Za-z_][\w-]*)|\[(\d+)\]|\[("(?:[^"\\]|\\.)*")\]/g;
  for (let m = re.exec(p); m; m = re.exec(p)) {
    out.push(
      m[1] !== undefined ? m[1] : m[2] !== undefined ? Number(m[2]) : (JSON.parse(m[3]!) as string),
    );
  }
  return out;
}

/** line:col of a JSON.parse error's "position N" in `text`. */
function jsonErrorAt(file: string, text: string, err: Error): ConfigProblem {
  const pos = Number(/position (\d+)/.exec(err.message)?.[1] ?? -1);
  if (pos < 0)
    return { file, line: 0, col: 0, path: '(root)', message: `not JSON: ${err.message}` };
  const before = text.slice(0, pos).split('\n');
  return {
    file,
    line: before.length,
    col: before[before.length - 1]!.length + 1,
    path: '(root)',
    message: `not JSON: ${err.message}`,
  };
}

/** A validated import, ready to apply. */
export interface PlannedImport {
  /** The new topology file text. */
  text: string;
  /** The topology it loads to. */
  topology: Topology;
  /** The whole new capture section, and the one it replaces. */
  capture: CaptureSection;
  before: CaptureSection;
  /** Index of the first imported source in `capture` (the JSON file's capture[0]). */
  offset: number;
}

/**
 * Validates a capture import against the topology file (see the module comment).
 * @throws ConfigError with every problem: under `capture` at the JSON file's line:col and path,
 *   others (a service reading a target no longer written, say) at the topology file's.
 */
export function planImport(topologyFile: string, jsonFile: string): PlannedImport {
  let text: string;
  try {
    if (fs.statSync(jsonFile).size > CAPTURE_IMPORT_BYTES_MAX)
      throw new Error(`larger than ${CAPTURE_IMPORT_BYTES_MAX} bytes`);
    text = fs.readFileSync(jsonFile, 'utf8');
  } catch (err) {
    throw new ConfigError([
      {
        file: jsonFile,
        line: 0,
        col: 0,
        path: '(root)',
        message: `cannot read: ${(err as Error).message}`,
      },
    ]);
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new ConfigError([jsonErrorAt(jsonFile, text, err as Error)]);
  }
  const doc = value as Partial<CaptureExport> | null;
  if (
    typeof doc !== 'object' ||
    doc === null ||
    Array.isArray(doc) ||
    !Array.isArray(doc.capture)
  ) {
    throw new ConfigError([
      problemAt(
        jsonFile,
        [],
        'must be an object {"capture": [...]} (as sluice config export writes)',
      ),
    ]);
  }
  const extra = Object.keys(doc).filter((k) => k !== 'capture' && k !== 'schema');
  if (extra.length > 0)
    throw new ConfigError([
      problemAt(jsonFile, [extra[0]!], `unknown field "${extra[0]}" (allowed: capture, schema)`),
    ]);
  if (doc.schema !== undefined && typeof doc.schema !== 'string')
    throw new ConfigError([problemAt(jsonFile, ['schema'], 'must be a string')]);
  const { text: yamlText, section: before } = readSection(topologyFile);
  const kept =
    doc.schema === undefined ? [] : before.filter((s) => schemaOfSource(s) !== doc.schema);
  const capture = [...kept, ...(doc.capture as CaptureSection)];
  const yamlDoc = parseDocument(yamlText);
  if (!isMap(yamlDoc.contents))
    throw new ConfigError([problemAt(topologyFile, [], 'the topology file is not a mapping')]);
  if (capture.length === 0) yamlDoc.delete('capture');
  else yamlDoc.set('capture', yamlDoc.createNode(capture, { flow: false }));
  const newText = String(yamlDoc);
  try {
    const topology = parseTopology(newText, topologyFile);
    return { text: newText, topology, capture, before, offset: kept.length };
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    throw new ConfigError(err.problems.map((p) => relocate(p, jsonFile, kept.length)));
  }
}

/** A problem under `capture[i]` (i >= offset) moved to the JSON file; others stay where they are. */
function relocate(p: ConfigProblem, jsonFile: string, offset: number): ConfigProblem {
  const segments = pathSegments(p.path);
  if (segments[0] !== 'capture' || typeof segments[1] !== 'number' || segments[1] < offset)
    return p;
  segments[1] -= offset;
  return problemAt(jsonFile, segments, p.message);
}

/** The history file of a topology. */
export function historyFile(dataDir: string): string {
  return path.join(dataDir, 'ops', 'config-history.jsonl');
}

/** Every applied version, oldest first ([] before the first change). */
export function configHistory(dataDir: string): ConfigVersion[] {
  const file = historyFile(dataDir);
  if (!fs.existsSync(file)) return [];
  const out: ConfigVersion[] = [];
  for (const line of fs.readFileSync(file, 'utf8').split('\n')) {
    if (!line.trim()) continue;
    try {
      out.push(JSON.parse(line) as ConfigVersion);
    } catch {
      // A torn last line after a crash: the versions before it are whole.
    }
  }
  return out;
}

function appendHistory(dataDir: string, v: ConfigVersion): void {
  const file = historyFile(dataDir);
  fs.mkdirSync(path.dirname(file), { recursive: true });
  const fd = fs.openSync(file, 'a');
  try {
    fs.writeSync(fd, `${JSON.stringify(v)}\n`);
    fs.fdatasyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

/**
 * Applies a planned import: installs every capture source of the new section (staging and
 * error tables, triggers regenerated), rewrites the topology file (temp file + rename), appends
 * the history. @returns the new version. @throws ConfigError at the JSON file's field of a
 * captured table, column or key that install did not find (nothing is changed then);
 * Error when a database cannot be reached.
 */
export async function applyImport(
  topologyFile: string,
  jsonFile: string,
  plan: PlannedImport,
  who: { user: string; action: 'import' | 'restore'; restoredFrom?: number },
): Promise<ConfigVersion> {
  for (const [i, source] of plan.topology.capture.entries()) {
    const staging = await openStaging(source);
    try {
      await staging.install();
    } catch (err) {
      // Each at its own field (several: every refused probe of the user-written SQL).
      const errors = captureTableErrors(err);
      if (errors.length === 0) throw err;
      const problems = errors.map((e) => {
        const k = source.tables.findIndex((t) => t.table === e.table);
        const field = [...e.field.split('.'), ...(e.index === undefined ? [] : [e.index])];
        const message = `capture source "${source.name}": ${e.message}`;
        return i >= plan.offset
          ? problemAt(jsonFile, ['capture', i - plan.offset, 'tables', k, ...field], message)
          : problemAt(topologyFile, ['capture', i, 'tables', k, ...field], message);
      });
      throw new ConfigError(problems);
    } finally {
      await staging.close();
    }
  }
  // Tables (or whole sources) the new section no longer captures: their triggers go (their
  // staging and error tables stay, with whatever they still hold).
  const old = parseTopology(readSection(topologyFile).text, topologyFile);
  for (const s of old.capture) {
    const now = plan.topology.capture.find((c) => c.name === s.name);
    const removed = s.tables.filter((t) => !now?.tables.some((n) => n.table === t.table));
    if (removed.length === 0) continue;
    const staging = await openStaging({ ...s, tables: removed });
    try {
      await staging.uninstall({ dropStaging: false });
    } finally {
      await staging.close();
    }
  }
  const tmp = `${topologyFile}.sluice-import-${process.pid}`;
  fs.writeFileSync(tmp, plan.text);
  fs.renameSync(tmp, topologyFile);
  const dataDir = plan.topology.dataDir;
  const history = configHistory(dataDir);
  if (history.length === 0) {
    appendHistory(dataDir, {
      version: 0,
      time: new Date().toISOString(),
      user: who.user,
      action: 'initial',
      diff: [],
      capture: plan.before,
    });
  }
  const last = history.length === 0 ? 0 : history[history.length - 1]!.version;
  const version: ConfigVersion = {
    version: last + 1,
    time: new Date().toISOString(),
    user: who.user,
    action: who.action,
    ...(who.restoredFrom !== undefined ? { restoredFrom: who.restoredFrom } : {}),
    diff: diffValues(plan.before, plan.capture, 'capture'),
    capture: plan.capture,
  };
  appendHistory(dataDir, version);
  return version;
}

/** Validates and applies the JSON file `jsonFile` (see {@link planImport}, {@link applyImport}). */
export async function importCapture(
  topologyFile: string,
  jsonFile: string,
  user: string,
): Promise<ConfigVersion> {
  return applyImport(topologyFile, jsonFile, planImport(topologyFile, jsonFile), {
    user,
    action: 'import',
  });
}

/**
 * Re-applies version `version` of the history as a new version.
 * @throws Error naming the versions there are when `version` is not one of them.
 */
export async function restoreCapture(
  topology: Topology,
  version: number,
  user: string,
): Promise<ConfigVersion> {
  const history = configHistory(topology.dataDir);
  const v = history.find((h) => h.version === version);
  if (!v) {
    throw new Error(
      `no capture configuration version ${version} in ${historyFile(topology.dataDir)} ` +
        `(versions: ${history.map((h) => h.version).join(', ') || 'none yet'})`,
    );
  }
  const file = path.join(os.tmpdir(), `sluice-restore-${process.pid}-${Date.now()}.json`);
  fs.writeFileSync(file, JSON.stringify({ capture: v.capture }, null, 2));
  try {
    const plan = planImport(topology.file, file);
    return await applyImport(topology.file, file, plan, {
      user,
      action: 'restore',
      restoredFrom: version,
    });
  } finally {
    fs.rmSync(file, { force: true });
  }
}
