import { isAlias, isMap, isPair, isScalar, isSeq } from 'yaml';
import type { Document, LineCounter, Node } from 'yaml';

/** One step of a field path: a map key or a sequence index. */
export type Segment = string | number;

const IDENTIFIER = /^[A-Za-z_$][A-Za-z0-9_$]*$/;

/** Longest map key a path shows whole, characters; a longer one is cut (its length named). */
const KEY_SHOWN_MAX = 100;

/**
 * `['services', 1, 'inputs', 0]` -> `services[1].inputs[0]`; `[]` -> `(root)`. A key over
 * KEY_SHOWN_MAX characters is shown cut, `["abc"... (200300 characters)]`, so a problem line stays
 * one readable line whatever the file holds.
 */
export function formatPath(path: readonly Segment[]): string {
  if (path.length === 0) return '(root)';
  let out = '';
  for (const s of path) {
    if (typeof s === 'number') out += `[${s}]`;
    else if (s.length > KEY_SHOWN_MAX)
      out += `[${JSON.stringify(s.slice(0, KEY_SHOWN_MAX))}... (${s.length} characters)]`;
    else if (IDENTIFIER.test(s)) out += out === '' ? s : `.${s}`;
    else out += `[${JSON.stringify(s)}]`;
  }
  return out;
}

function keyText(key: unknown): string | undefined {
  if (isScalar(key)) return String(key.value);
  return undefined;
}

/**
 * Maps field paths of a parsed YAML document to 1-based line/column positions of their nodes,
 * and source offsets back to field paths.
 */
export class SourceMap {
  constructor(
    private readonly doc: Document,
    private readonly lines: LineCounter,
  ) {}

  /**
   * Position of the node at `path` (its key when `at` is 'key'). A path that goes past what the
   * document holds resolves to the deepest node that exists on it (e.g. the map a missing field
   * belongs in).
   */
  position(path: readonly Segment[], at: 'value' | 'key' = 'value'): { line: number; col: number } {
    let node: unknown = this.doc.contents;
    let offset = rangeStart(node) ?? 0;
    for (let i = 0; i < path.length; i++) {
      if (isAlias(node)) node = node.resolve(this.doc);
      const segment = path[i]!;
      let next: unknown;
      if (isMap(node)) {
        const pair = node.items.find((p) => keyText(p.key) === String(segment));
        if (pair === undefined) break;
        if (i === path.length - 1 && at === 'key') {
          next = pair.key;
        } else {
          next = pair.value;
          // `key:` with no value: point at the key.
          if (next === null || rangeStart(next) === undefined) {
            offset = rangeStart(pair.key) ?? offset;
            break;
          }
        }
      } else if (isSeq(node) && typeof segment === 'number') {
        next = node.items[segment];
        if (next === undefined) break;
      } else {
        break;
      }
      node = next;
      offset = rangeStart(node) ?? offset;
    }
    return this.lines.linePos(offset);
  }

  /** Field path of the innermost node whose source range contains `offset`. */
  pathAt(offset: number): Segment[] {
    const path: Segment[] = [];
    let node: unknown = this.doc.contents;
    for (;;) {
      if (isMap(node)) {
        const pair = node.items.find((p) => contains(p.key, offset) || contains(p.value, offset));
        if (pair === undefined || !isPair(pair)) break;
        const key = keyText(pair.key);
        if (key === undefined) break;
        path.push(key);
        if (contains(pair.key, offset)) break;
        node = pair.value;
      } else if (isSeq(node)) {
        const index = node.items.findIndex((item) => contains(item, offset));
        if (index < 0) break;
        path.push(index);
        node = node.items[index];
      } else {
        break;
      }
    }
    return path;
  }

  /** 1-based position of a source offset. */
  linePos(offset: number): { line: number; col: number } {
    return this.lines.linePos(offset);
  }
}

function rangeStart(node: unknown): number | undefined {
  const range = (node as Node | null)?.range;
  return Array.isArray(range) ? range[0] : undefined;
}

function contains(node: unknown, offset: number): boolean {
  const range = (node as Node | null)?.range;
  return Array.isArray(range) && range[0] <= offset && offset < Math.max(range[2], range[0] + 1);
}
