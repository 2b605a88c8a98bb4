/**
 * Where a service or processor module that does not import has its syntax error: file,
 * line:column and the parser's message, for the problem reported at `services[i].module` or
 * `processors[i].module`.
 *
 * Node 20's import() of an ES module with a syntax error rejects with a SyntaxError that names
 * neither the file nor the position: its stack starts at the loader's compileSourceTextModule,
 * and the source line with its caret is printed only for an error that ends the process. Nothing
 * in-process parses module code without a flag (vm.SourceTextModule needs
 * --experimental-vm-modules; vm.Script parses a script, which rejects import and export). So the
 * file is parsed by a child `node --check FILE`, which exits 1 printing
 * ```
 * /abs/file.mjs:3              <- file and line
 *   return s +;                <- the source line
 *             ^                <- a caret under the column (tabs kept as tabs)
 *
 * SyntaxError: Unexpected token ';'
 * ```
 * A CommonJS file's SyntaxError carries the same lines at the top of its stack, read in-process.
 * When the module itself parses, the error is in a module it imports: its static relative
 * imports are checked the same way, breadth first, at most {@link MODULE_SYNTAX_LIMITS}.filesMax
 * files.
 */
import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** Bounds of the search for a syntax error. */
export const MODULE_SYNTAX_LIMITS = {
  /** Files checked at most (the module and the modules it imports), each one child process. */
  filesMax: 50,
  /** Longest run of one `node --check`, ms; a check that takes longer locates nothing. */
  checkTimeoutMs: 10_000,
} as const;

/** A syntax error's place: 1-based line and column (null when the parser gave none). */
export interface SyntaxErrorAt {
  file: string;
  line: number;
  col: number | null;
  /** The parser's message without its `SyntaxError: ` prefix. */
  message: string;
}

/**
 * Reads the location Node prints above a SyntaxError (`node --check` on stderr, a CommonJS
 * error's stack): `FILE:LINE`, the source line, the caret line, then `SyntaxError: message`.
 * @returns null when `text` does not start that way.
 */
export function syntaxErrorAtOf(text: string): SyntaxErrorAt | null {
  const lines = text.split('\n');
  const head = /^(.+):(\d+)$/.exec(lines[0] ?? '');
  if (!head) return null;
  const file = head[1]!.startsWith('file:') ? fileURLToPath(head[1]!) : head[1]!;
  const caret = /^([ \t]*)\^+\s*$/.exec(lines[2] ?? '');
  const error = lines.find((l) => l.startsWith('SyntaxError: '));
  if (error === undefined) return null;
  return {
    file,
    line: Number(head[2]),
    col: caret ? caret[1]!.length + 1 : null,
    message: error.slice('SyntaxError: '.length),
  };
}

/** `node --check file` in a child process: null when the file parses (or the check fails to run). */
export function checkModuleSyntax(file: string): Promise<SyntaxErrorAt | null> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ['--check', file],
      { timeout: MODULE_SYNTAX_LIMITS.checkTimeoutMs, encoding: 'utf8' },
      (err, _stdout, stderr) => resolve(err ? syntaxErrorAtOf(stderr) : null),
    );
  });
}

/**
 * The files a module imports by a relative or absolute path (static `import ... from`,
 * `export ... from`, `import '...'`, `import('...')` with a literal, `require('...')`) that
 * exist. Read from the text: a specifier inside a comment or string is checked too, which is
 * harmless (it parses or it is not a module's error).
 */
function importedFiles(file: string): string[] {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    return [];
  }
  const out: string[] = [];
  const specifier =
    /(?:\bfrom\s*|\bimport\s*\(?\s*|\brequire\s*\(\s*)(['"])((?:\.{1,2}\/|\/|file:)[^'"\n]*)\1/g;
  for (const m of text.matchAll(specifier)) {
    const spec = m[2]!;
    const target = spec.startsWith('file:')
      ? fileURLToPath(spec)
      : path.resolve(path.dirname(file), spec);
    if (existsSync(target) && !out.includes(target)) out.push(target);
  }
  return out;
}

/**
 * Finds the syntax error that made importing `module` fail with `err`: in `module` itself, or in
 * a module it imports (then `importedBy` names a file that imports it: the one the search came
 * from; for CommonJS, whose stack names the file, `module`).
 * @returns null when `err` is not a SyntaxError of parsing (a SyntaxError thrown while the module
 *   runs, JSON.parse's, is its own message) or when no checked file holds it.
 */
export async function locateSyntaxError(
  module: string,
  err: unknown,
): Promise<(SyntaxErrorAt & { importedBy: string | null }) | null> {
  if (!(err instanceof SyntaxError)) return null;
  const stack = err.stack ?? '';
  const inStack = syntaxErrorAtOf(stack);
  if (inStack) return { ...inStack, importedBy: inStack.file === module ? null : module };
  // Parsing failed in the module loader (its first frame); a SyntaxError thrown by running code
  // has the code's frame first.
  const firstFrame = stack.split('\n').find((l) => /^\s+at /.test(l)) ?? '';
  if (!firstFrame.includes('node:internal/modules/')) return null;
  const parentOf = new Map<string, string | null>([[module, null]]);
  const queue = [module];
  for (let checked = 0; queue.length > 0 && checked < MODULE_SYNTAX_LIMITS.filesMax; checked++) {
    const file = queue.shift()!;
    const at = await checkModuleSyntax(file);
    if (at) return { ...at, importedBy: parentOf.get(file) ?? null };
    for (const next of importedFiles(file)) {
      if (parentOf.has(next)) continue;
      parentOf.set(next, file);
      queue.push(next);
    }
  }
  return null;
}

/**
 * The problem text of a module whose import failed with a syntax error: `syntax error at
 * FILE:LINE:COL: message`, with `(imported by FILE)` when it is in a module that `module` imports.
 * @returns null when it is not a syntax error that could be located (the caller keeps the
 *   error's own message).
 */
export async function syntaxErrorText(module: string, err: unknown): Promise<string | null> {
  const at = await locateSyntaxError(module, err);
  if (at === null) return null;
  const where = `${at.file}:${at.line}${at.col === null ? '' : `:${at.col}`}`;
  const by = at.importedBy === null ? '' : ` (imported by ${at.importedBy})`;
  return `syntax error at ${where}${by}: ${at.message}`;
}
