/**
 * The SQL a user writes in a topology (a `condition`, a key `expression`), read without a
 * database: which of its characters are code and which are inside a string literal, a quoted
 * identifier or a comment, by the lexical rules of each dialect. Load-time checks use it to
 * refuse what no embedding of the text can take (parentheses that do not balance, a literal or
 * comment left open) and what a dialect's trigger refuses (a subquery in a PostgreSQL row
 * trigger's WHEN), so `sluice check` reports them at their field without a database.
 *
 * Per dialect, outside of code:
 * - every dialect: `'...'` with `''` for a quote, `/* ... *\/` comments;
 * - PostgreSQL: `"..."` identifiers, `E'...'` with backslash escapes, `$tag$...$tag$` dollar
 *   quotes, `--` comments, nested block comments;
 * - SQLite: `"..."`, `` `...` `` and `[...]` identifiers, `--` comments;
 * - MariaDB (the triggers' sql_mode: no ANSI_QUOTES, backslash escapes on): `'...'` and `"..."`
 *   strings with backslash escapes, `` `...` `` identifiers, `-- ` (dashes then a blank or control
 *   character) and `#` comments; an executable comment's body (`/*! ... *\/`, `/*M! ... *\/`) is
 *   code, as the server runs it;
 * - Oracle: `"..."` identifiers, `q'[...]'` quotes (any delimiter; brackets pair), `--` comments.
 */

/** The dialects whose SQL text is read here (`mysql` is read as MariaDB). */
export type SqlTextDialect = 'sqlite' | 'postgres' | 'mariadb' | 'mysql' | 'oracle';

/** `sql` split into code and the rest (see sqlCode). */
export interface SqlCode {
  /**
   * `sql` with every character of a literal, quoted identifier or comment (delimiters included)
   * replaced by a space, line breaks kept: same length, so an index into it is one into `sql`.
   */
  code: string;
  /** A literal, quoted identifier or block comment not closed before the end: what and where. */
  unclosed?: { what: string; at: number };
}

/** Characters of an unquoted identifier (PostgreSQL and MariaDB allow `$` after the first). */
const IDENT_CHAR = /[A-Za-z0-9_$\u0080-\uffff]/;

/** Splits `sql` into code and the rest by `dialect`'s lexical rules (see the module comment). */
export function sqlCode(sql: string, dialect: SqlTextDialect): SqlCode {
  const maria = dialect === 'mariadb' || dialect === 'mysql';
  const out = sql.split('');
  const blank = (from: number, to: number) => {
    for (let j = from; j < to; j++) if (out[j] !== '\n' && out[j] !== '\r') out[j] = ' ';
  };
  let i = 0;
  while (i < sql.length) {
    const c = sql[i]!;
    const next = sql[i + 1];
    const prev = i > 0 ? sql[i - 1]! : '';
    let end: number | null = -1; // -1: not a literal, comment or quoted identifier here
    let what = '';
    if (c === '-' && next === '-' && (!maria || i + 2 >= sql.length || sql[i + 2]! <= ' ')) {
      end = lineEnd(sql, i);
    } else if (c === '#' && maria) {
      end = lineEnd(sql, i);
    } else if (c === '/' && next === '*') {
      if (maria && (sql[i + 2] === '!' || sql.startsWith('M!', i + 2))) {
        // Executable comment: the markers (and the version digits) go, the body is code.
        const close = sql.indexOf('*/', i + 2);
        let body = i + (sql[i + 2] === '!' ? 3 : 4);
        while (body < sql.length && /[0-9]/.test(sql[body]!)) body++;
        blank(i, body);
        if (close < 0) return { code: out.join(''), unclosed: { what: 'comment', at: i } };
        blank(close, close + 2);
        i = body;
        continue;
      }
      end = blockCommentEnd(sql, i, dialect === 'postgres');
      what = 'comment';
    } else if (c === "'" || (c === '"' && maria)) {
      const backslash =
        maria || (dialect === 'postgres' && /[eE]/.test(prev) && !identBefore(sql, i - 1));
      end = quotedEnd(sql, i, c, backslash);
      what = 'string literal';
    } else if (c === '"') {
      end = quotedEnd(sql, i, '"', false);
      what = 'quoted identifier';
    } else if (c === '`' && (maria || dialect === 'sqlite')) {
      end = quotedEnd(sql, i, '`', false);
      what = 'quoted identifier';
    } else if (c === '[' && dialect === 'sqlite') {
      const close = sql.indexOf(']', i + 1);
      end = close < 0 ? null : close + 1;
      what = 'quoted identifier';
    } else if (c === '$' && dialect === 'postgres' && !identBefore(sql, i)) {
      const tag = /^\$(?:[A-Za-z_\u0080-\uffff][A-Za-z0-9_\u0080-\uffff]*)?\$/.exec(sql.slice(i));
      if (tag !== null) {
        const close = sql.indexOf(tag[0], i + tag[0].length);
        end = close < 0 ? null : close + tag[0].length;
        what = 'dollar-quoted string';
      }
    } else if (dialect === 'oracle' && /[qQ]/.test(c) && next === "'" && !identBefore(sql, i)) {
      const open = sql[i + 2];
      if (open !== undefined && !/\s/.test(open)) {
        const close = { '[': ']', '{': '}', '<': '>', '(': ')' }[open] ?? open;
        const at = sql.indexOf(`${close}'`, i + 3);
        end = at < 0 ? null : at + 2;
        what = 'string literal';
      }
    }
    if (end === -1) {
      i++;
      continue;
    }
    if (end === null) {
      blank(i, sql.length);
      return { code: out.join(''), unclosed: { what, at: i } };
    }
    blank(i, end);
    i = end;
  }
  return { code: out.join('') };
}

/** Whether `sql[at - 1]` continues an unquoted identifier (so `sql[at]` is inside a word). */
function identBefore(sql: string, at: number): boolean {
  return at > 0 && IDENT_CHAR.test(sql[at - 1]!);
}

/** Index of the line break ending the line comment at `from` (or the text's end). */
function lineEnd(sql: string, from: number): number {
  const nl = sql.indexOf('\n', from);
  return nl < 0 ? sql.length : nl;
}

/** End (exclusive) of the block comment at `from`; null when it is not closed. */
function blockCommentEnd(sql: string, from: number, nested: boolean): number | null {
  let depth = 0;
  let i = from;
  while (i < sql.length) {
    if (sql.startsWith('/*', i) && (nested || depth === 0)) {
      depth++;
      i += 2;
    } else if (sql.startsWith('*/', i)) {
      depth--;
      i += 2;
      if (depth === 0) return i;
    } else i++;
  }
  return null;
}

/** End (exclusive) of the `q`-quoted text at `from` (doubled `q` escapes it); null if not closed. */
function quotedEnd(sql: string, from: number, q: string, backslash: boolean): number | null {
  let i = from + 1;
  while (i < sql.length) {
    const c = sql[i]!;
    if (backslash && c === '\\') i += 2;
    else if (c === q && sql[i + 1] === q) i += 2;
    else if (c === q) return i + 1;
    else i++;
  }
  return null;
}

/**
 * Why user-written SQL `sql` cannot be embedded as one expression, or null: a literal, quoted
 * identifier or block comment that is not closed, or parentheses that do not balance in its code
 * (every generated statement wraps the text in parentheses, so `NEW.a > 0) OR (true` would
 * otherwise change what the surrounding SQL means). Positions are 1-based characters of `sql`.
 */
export function sqlTextProblem(sql: string, dialect: SqlTextDialect): string | null {
  const { code, unclosed } = sqlCode(sql, dialect);
  if (unclosed !== undefined)
    return `the ${unclosed.what} at character ${unclosed.at + 1} is not closed`;
  const open: number[] = [];
  for (let i = 0; i < code.length; i++) {
    if (code[i] === '(') open.push(i);
    else if (code[i] === ')' && open.pop() === undefined)
      return `parentheses do not balance: the ")" at character ${i + 1} closes no "(" (outside of string literals, quoted identifiers and comments)`;
  }
  if (open.length > 0)
    return `parentheses do not balance: the "(" at character ${open[0]! + 1} is not closed${open.length > 1 ? ` (nor ${open.length - 1} more)` : ''} (outside of string literals, quoted identifiers and comments)`;
  return null;
}

/**
 * 0-based index of the first subquery of PostgreSQL SQL `sql`, or -1. Every subquery of an
 * expression is a parenthesized SELECT (PostgreSQL's select_with_parens: `(SELECT ...`,
 * `(VALUES ...`, `(TABLE ...` or `(WITH ...`, behind any number of `(`): after `IN`, `EXISTS`,
 * `ANY`/`ALL`, `ARRAY` or alone as a scalar subquery.
 */
export function pgSubqueryAt(sql: string): number {
  const m = /\(\s*(?:select|values|table|with)(?![A-Za-z0-9_$\u0080-\uffff])/i.exec(
    sqlCode(sql, 'postgres').code,
  );
  return m === null ? -1 : m.index;
}
