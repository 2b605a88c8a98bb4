/**
 * Limits of a topology file the schema cannot state (TOPOLOGY_SIZE_LIMITS): the file's size and
 * text encoding, the nesting depth of its lists and maps, the byte length of every path once
 * resolved against the file's directory, and the size of each service's settings. Checked before
 * anything uses the values, so a value that would fail deep inside at run time (ENAMETOOLONG from
 * mkdir, a stack overflow in the parser, a worker that cannot be posted its settings) is refused
 * by `sluice check` naming its field.
 */
import path from 'node:path';
import { isMap, isPair, isSeq } from 'yaml';
import type { Document } from 'yaml';
import type { Report } from './checks.js';
import type { Segment } from './source-map.js';
import { TOPOLOGY_DEFAULTS, TOPOLOGY_SIZE_LIMITS } from './topology.js';

const S = TOPOLOGY_SIZE_LIMITS;

/** The message for a document nested too deep. */
export const TOO_DEEP_MESSAGE = `lists and maps are nested more than ${S.nestingDepthMax} levels deep (the limit)`;

/** A structural problem of the parsed document: its field path, source offset and message. */
export interface StructureProblem {
  path: Segment[];
  offset: number;
  message: string;
}

/**
 * Walks the parsed document without recursion (so a hostile depth cannot overflow the stack
 * here) and returns the first list or map nested more than nestingDepthMax levels deep, or the
 * first map key that is itself a list or map (YAML allows `? [a, b]: v`; JavaScript objects
 * would turn it into the string "a,b" with a warning), or null.
 */
export function findStructureProblem(doc: Document): StructureProblem | null {
  const stack: Array<{ node: unknown; depth: number; path: Segment[] }> = [
    { node: doc.contents, depth: 0, path: [] },
  ];
  while (stack.length > 0) {
    const { node, depth, path: at } = stack.pop()!;
    if (!isMap(node) && !isSeq(node)) continue;
    if (depth >= S.nestingDepthMax)
      return { path: at, offset: node.range?.[0] ?? 0, message: TOO_DEEP_MESSAGE };
    for (const item of node.items as unknown[]) {
      if (isPair(item) && (isMap(item.key) || isSeq(item.key))) {
        return {
          path: at,
          offset: item.key.range?.[0] ?? 0,
          message: 'a map key must be a plain value, not a list or map',
        };
      }
    }
    node.items.forEach((item: unknown, i: number) => {
      if (isPair(item)) {
        const key = item.key as { value?: unknown } | null;
        const segment =
          key !== null && typeof key === 'object' && 'value' in key ? String(key.value) : '?';
        stack.push({ node: item.value, depth: depth + 1, path: [...at, segment] });
      } else {
        stack.push({ node: item, depth: depth + 1, path: [...at, i] });
      }
    });
  }
  return null;
}

type Raw = Record<string, unknown>;
const isRecord = (v: unknown): v is Raw => typeof v === 'object' && v !== null && !Array.isArray(v);
const list = (v: unknown): unknown[] => (Array.isArray(v) ? v : []);

/**
 * Why the path `p` (relative to `baseDir`) cannot be used, or undefined: its resolved form is
 * longer than `bytesMax` UTF-8 bytes, or one of its components longer than NAME_MAX.
 */
function pathProblem(p: string, baseDir: string, bytesMax: number): string | undefined {
  const resolved = path.resolve(baseDir, p);
  const bytes = Buffer.byteLength(resolved);
  if (bytes > bytesMax) {
    return `resolves to a path of ${bytes} bytes (${resolved.slice(0, 60)}...); the limit is ${bytesMax}`;
  }
  for (const part of resolved.split(path.sep)) {
    const partBytes = Buffer.byteLength(part);
    if (partBytes > S.pathComponentBytesMax) {
      return (
        `has a path component of ${partBytes} bytes ("${part.slice(0, 40)}..."); ` +
        `the limit is ${S.pathComponentBytesMax} (NAME_MAX)`
      );
    }
  }
  return undefined;
}

/**
 * Bytes a dataDir leaves for what lives under it: `queues/<queue>/<partition>/<20 digits>.seg`
 * (and the lock and index files beside them), so that no file of a valid topology hits PATH_MAX.
 */
const DATA_DIR_SUFFIX_BYTES = '/queues/'.length + S.queueNameLengthMax + '/0000/'.length + 24 + 16;

/**
 * Checks the limits of TOPOLOGY_SIZE_LIMITS that depend on resolution or on free-form values,
 * on the raw document (shapes the schema refused are skipped): dataDir (or the default one made
 * from the name), service modules and SQLite files resolved against `baseDir`; settings as JSON.
 */
export function checkResolvedLimits(doc: unknown, baseDir: string, report: Report): void {
  const root = isRecord(doc) ? doc : {};
  const dataDirBytesMax = S.pathBytesMax - DATA_DIR_SUFFIX_BYTES;
  if (typeof root.dataDir === 'string' && root.dataDir.length > 0) {
    const problem = pathProblem(root.dataDir, baseDir, dataDirBytesMax);
    if (problem !== undefined) report(['dataDir'], problem);
  } else if (
    typeof root.name === 'string' &&
    root.name.length <= S.topologyNameLengthMax &&
    root.dataDir === undefined
  ) {
    const problem = pathProblem(
      path.join(TOPOLOGY_DEFAULTS.dataDirPrefix, root.name),
      baseDir,
      dataDirBytesMax,
    );
    if (problem !== undefined)
      report(['name'], `the default dataDir (./data/<name>) ${problem}; set dataDir`);
  }
  // Services and processors alike: a module path and settings posted to a worker.
  for (const section of ['services', 'processors'] as const)
    list(root[section]).forEach((s, i) => {
      if (!isRecord(s)) return;
      if (typeof s.module === 'string' && s.module.length > 0) {
        // The compiled twin of a .ts module (dist/...) is a few bytes longer: keep room for it.
        const problem = pathProblem(s.module, baseDir, S.pathBytesMax - 16);
        if (problem !== undefined) report([section, i, 'module'], problem);
      }
      if (isRecord(s.settings)) {
        let bytes: number;
        try {
          bytes = Buffer.byteLength(JSON.stringify(s.settings));
        } catch (e) {
          report([section, i, 'settings'], `cannot be written as JSON: ${(e as Error).message}`);
          return;
        }
        if (bytes > S.settingsBytesMax) {
          report(
            [section, i, 'settings'],
            `is ${bytes} bytes as JSON; the limit is ${S.settingsBytesMax}`,
          );
        }
      }
    });
  list(root.capture).forEach((c, i) => {
    if (!isRecord(c) || !isRecord(c.database) || c.database.dialect !== 'sqlite') return;
    const file = c.database.file;
    if (
      typeof file !== 'string' ||
      file.length === 0 ||
      file === ':memory:' ||
      file.startsWith('file:')
    )
      return;
    const problem = pathProblem(file, baseDir, S.pathBytesMax);
    if (problem !== undefined) report(['capture', i, 'database', 'file'], problem);
  });
}
