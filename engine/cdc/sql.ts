/**
 * SQL text helpers shared by the dialect modules: identifier and literal quoting, and the
 * resolution of a CaptureTable against the introspected columns of its table.
 */
import { conditionFor, type CaptureTable } from './config.js';

/** One column of a captured table, as introspected. */
export interface ColumnInfo {
  /** Column name, exact case. */
  name: string;
  /**
   * Type used to choose the text rendering. PostgreSQL: base type name from pg_type (`numeric`,
   * `timestamptz`, ...; domains resolved to their base type); SQLite: declared type, upper case.
   */
  type: string;
  /** 1-based position in the primary key, 0 when not part of it. */
  pkPosition: number;
  /**
   * PostgreSQL: pg_attribute.attnum, the column's number in its table, which RENAME COLUMN keeps
   * (the capture function's dynamic path finds key columns by it). Absent on other databases.
   */
  attnum?: number;
}

/** A key strategy resolved against the table (see KeyStrategy). */
export type ResolvedKey =
  | { kind: 'columns'; columns: ColumnInfo[] }
  | { kind: 'none' }
  | { kind: 'fixed'; value: string }
  | { kind: 'transactionId' }
  | { kind: 'expression'; sql: string };

/** A captured table with its columns and key resolved. */
export interface ResolvedTable {
  config: CaptureTable;
  /** Captured columns in image order. */
  columns: ColumnInfo[];
  /** Key columns in key order; empty for a key strategy that is not columns. */
  key: ColumnInfo[];
  /** The key strategy. */
  keyStrategy: ResolvedKey;
}

/**
 * A row a key text expression is over: a trigger's NEW or OLD image, or ROW, the alias of the row
 * in the probe of an expression key (userSqlProbes), so the database's messages name the row as
 * the user wrote it (`ROW.amout`).
 */
export type KeyRow = 'NEW' | 'OLD' | 'ROW';

/** What a dialect supplies to build key text expressions. */
export interface KeyDialect {
  /** JSON text (string literal or `null`) of column `c` of `row`. */
  json(row: KeyRow, c: ColumnInfo): string;
  /** JSON text (string literal or `null`) of an SQL expression's text value. */
  jsonOfText(sql: string): string;
  /** SQL text of the current transaction id; null when the dialect has none. */
  txid: string | null;
}

/**
 * SQL expression of the staging key text (a JSON array text) of `row` under t's key strategy.
 * Every `ROW.` (as a word, case-insensitive, also inside string literals) of an expression key is
 * replaced by `NEW.` or `OLD.` (or written `ROW.`, upper case, for the probe).
 */
export function keyTextExpr(t: ResolvedTable, row: KeyRow, d: KeyDialect): string {
  const k = t.keyStrategy;
  switch (k.kind) {
    case 'columns':
      return jsonArrayExpr(k.columns, (c) => d.json(row, c));
    case 'none':
      return `'[]'`;
    case 'fixed':
      return quoteLiteral(JSON.stringify([k.value]));
    case 'transactionId':
      if (d.txid === null)
        throw new Error(
          `capture table "${t.config.table}": key: transactionId is not supported on this database`,
        );
      return `'[' || ${d.jsonOfText(d.txid)} || ']'`;
    case 'expression':
      return `'[' || ${d.jsonOfText(userSqlParens(k.sql.replace(/\bROW\./gi, `${row}.`)))} || ']'`;
  }
}

/**
 * `(sql` + line break + `)`: SQL a user wrote (a condition, a key expression) as one
 * parenthesized expression, the way every probe and generated trigger embeds it. The line break
 * ends a trailing `-- comment` of the text before the closing parenthesis (the parentheses of the
 * text itself balance: refused at load otherwise, see sqlTextProblem).
 */
export function userSqlParens(sql: string): string {
  return `(${sql}\n)`;
}

/** `"name"` with embedded double quotes doubled (SQL standard; PostgreSQL and SQLite). */
export function quoteIdent(name: string): string {
  if (name.includes('\u0000'))
    throw new Error(`identifier must not contain NUL, name=${JSON.stringify(name)}`);
  return `"${name.replaceAll('"', '""')}"`;
}

/** `'text'` with embedded single quotes doubled (standard_conforming_strings on PostgreSQL). */
export function quoteLiteral(text: string): string {
  if (text.includes('\u0000'))
    throw new Error(`SQL literal must not contain NUL, text=${JSON.stringify(text)}`);
  return `'${text.replaceAll("'", "''")}'`;
}

/** A field of a captured table (`tables[k].<field>`), dot-separated below the table. */
export type CaptureTableField =
  | 'table'
  | 'columns'
  | 'key'
  | 'key.columns'
  | 'key.expression'
  | 'initialLoad'
  | 'condition'
  | 'condition.insert'
  | 'condition.update'
  | 'condition.delete';

/** The field of `t`'s condition of `op`: `condition` (one for every operation) or `condition.<op>`. */
export function conditionField(
  t: CaptureTable,
  op: 'insert' | 'update' | 'delete',
): CaptureTableField {
  return typeof t.condition === 'string' ? 'condition' : `condition.${op}`;
}

/**
 * Where a refusal of `op`'s trigger DDL of `t` points: the field of the one user-written SQL text
 * the trigger embeds (its condition of `op`; with `withKey`, also an expression key), or `table`
 * when it embeds none or both.
 */
export function triggerUserSqlField(
  t: ResolvedTable,
  op: 'insert' | 'update' | 'delete',
  withKey: boolean,
): CaptureTableField {
  const condition = t.config.condition === undefined ? undefined : conditionFor(t.config, op);
  const key = withKey && t.keyStrategy.kind === 'expression';
  if (condition !== undefined && !key) return conditionField(t.config, op);
  if (condition === undefined && key) return 'key.expression';
  return 'table';
}

/** One statement of a table's trigger DDL, with the user-written SQL in it. */
export interface TriggerStatement {
  sql: string;
  /**
   * The field of the one user-written SQL text the statement embeds (triggerUserSqlField), or
   * `table` when it embeds none or both: where a refusal of the text points.
   */
  field: CaptureTableField;
  /** Where that text is in `sql` (0-based, end exclusive), when the dialect needs it. */
  span?: [number, number];
}

/** A statement that resolves a table's user-written SQL (probe), with the field it comes from. */
export interface UserSqlProbe {
  field: CaptureTableField;
  /** What the field is, for messages: `condition (update)`, `key expression`. */
  what: string;
  sql: string;
  /** The rows the text names (`NEW`, `OLD`, `ROW`), for the hint of a bare column name. */
  rows: readonly string[];
  /** Whether a bare column name is the row's where the trigger runs the text (else ambiguous here). */
  bareNames: boolean;
  /**
   * The search_path the text runs with in the trigger, when it is not the install session's
   * (PostgreSQL's capture function: `pg_catalog, pg_temp`): the probe must run with it too.
   */
  searchPath?: string;
}

/** How a dialect's triggers embed a captured table's user-written SQL, for userSqlProbes. */
export interface UserSqlScope {
  /** The captured table as the probes' FROM names it (schema-qualified where a searchPath is). */
  table: string;
  /** An alias (NEW, OLD, ROW, USER_SQL_BARE_ALIAS) as the dialect writes it. */
  alias(name: string): string;
  /** The key text over the row aliased ROW (the dialect's keyTextExpr over ROW). */
  keyRow: string;
  /**
   * Whether `op`'s condition runs where a bare column name is the row's (PostgreSQL's statement
   * triggers: a WHERE over the transition table). Default: never.
   */
  bareNames?(op: 'insert' | 'update' | 'delete'): boolean;
  /** The search_path `op`'s condition ('key': the key expression) runs with (UserSqlProbe). */
  searchPath?(of: 'insert' | 'update' | 'delete' | 'key'): string | undefined;
}

/**
 * Alias of the probes' second copy of the table beside a lone image: a trigger resolves no bare
 * column name (SQLite and MariaDB refuse it, PostgreSQL's WHEN finds it in both NEW and OLD), so
 * the probe makes it ambiguous instead of the image's.
 */
export const USER_SQL_BARE_ALIAS = 'sluice_bare_name';

/**
 * The SQL a user wrote for captured table `t` (each row operation's `condition`, an expression
 * `key`), each as a SELECT over the table that the database parses and resolves (syntax, column
 * names, types) but that reads no row (`WHERE 1 = 0 AND ...`), in the scope the trigger gives it
 * (`scope`): a condition over the images its operation has (the table aliased NEW / OLD; every
 * `NEW.` / `OLD.` of it written upper case, so it matches the alias where aliases are
 * case-sensitive), the key text over the row aliased ROW as the user wrote it (so a refusal names
 * `ROW.<column>`, not the NEW the trigger puts in its place); beside a lone row a second copy
 * (USER_SQL_BARE_ALIAS), so a bare column name is refused as the trigger refuses it, unless the
 * trigger resolves it (`scope.bareNames`). Install runs them before it creates any trigger, so a
 * wrong one is refused at its field (`condition.update`, `key.expression`) instead of in the
 * trigger DDL, or (SQLite, MariaDB, a PostgreSQL statement trigger, which resolve names only when
 * the trigger runs) in the application's writes.
 */
export function userSqlProbes(t: ResolvedTable, scope: UserSqlScope): UserSqlProbe[] {
  const out: UserSqlProbe[] = [];
  const from = (rows: readonly string[], bareNames: boolean) =>
    [...rows, ...(rows.length === 1 && !bareNames ? [USER_SQL_BARE_ALIAS] : [])]
      .map((row) => `${scope.table} AS ${scope.alias(row)}`)
      .join(' CROSS JOIN ');
  const c = t.config.condition;
  const images = { insert: ['NEW'], update: ['NEW', 'OLD'], delete: ['OLD'] } as const;
  for (const op of ['insert', 'update', 'delete'] as const) {
    if (c === undefined || !t.config.operations.includes(op)) continue;
    const sql = typeof c === 'string' ? c : c[op];
    if (sql === undefined) continue;
    const text = sql.replace(/(new|old)(\s*\.)/gi, (_, row: string, dot: string) => {
      return `${row.toUpperCase()}${dot}`;
    });
    const bareNames = scope.bareNames?.(op) ?? false;
    out.push({
      field: conditionField(t.config, op),
      what: `condition (${op})`,
      sql: `SELECT 1 FROM ${from(images[op], bareNames)} WHERE 1 = 0 AND ${userSqlParens(text)}`,
      rows: images[op],
      bareNames,
      searchPath: scope.searchPath?.(op),
    });
  }
  if (t.keyStrategy.kind === 'expression')
    out.push({
      field: 'key.expression',
      what: 'key expression',
      sql: `SELECT ${scope.keyRow} FROM ${from(['ROW'], false)} WHERE 1 = 0`,
      rows: ['ROW'],
      bareNames: false,
      searchPath: scope.searchPath?.('key'),
    });
  return out;
}

/**
 * Runs every one of userSqlProbes' statements with `run` (which must leave the connection usable
 * after a refusal: PostgreSQL inside a transaction runs each in a savepoint, and with the probe's
 * searchPath), in order.
 * @returns a CaptureTableError per probe the database refuses, at its field, naming the table,
 *   the field and the database's message (with a hint when it finds a bare column name
 *   ambiguous); empty when it accepts them all.
 */
export async function userSqlRefusals(
  t: ResolvedTable,
  probes: readonly UserSqlProbe[],
  run: (probe: UserSqlProbe) => unknown,
): Promise<CaptureTableError[]> {
  const out: CaptureTableError[] = [];
  for (const p of probes) {
    try {
      await run(p);
    } catch (err) {
      const message = (err as Error).message;
      const hint =
        !p.bareNames && /\bambiguous\b/i.test(message)
          ? ` (the trigger resolves no bare column name: write ${p.rows.map((r) => `${r}.<column>`).join(' or ')})`
          : '';
      out.push(
        new CaptureTableError(
          `capture table "${t.config.table}": ${p.what}: the database refuses it: ${message}${hint}`,
          t.config.table,
          p.field,
        ),
      );
    }
  }
  return out;
}

/**
 * Runs userSqlRefusals. @throws its refusals (throwAll): every probe the database refuses, each
 * at its field.
 */
export async function checkUserSql(
  t: ResolvedTable,
  probes: readonly UserSqlProbe[],
  run: (probe: UserSqlProbe) => unknown,
): Promise<void> {
  throwAll(await userSqlRefusals(t, probes, run));
}

/** Throws nothing for no error, the error itself for one, a CaptureTableErrors for several. */
export function throwAll(errors: readonly CaptureTableError[]): void {
  if (errors.length === 1) throw errors[0];
  if (errors.length > 1) throw new CaptureTableErrors(errors);
}

/**
 * A captured table's config does not match the database: the table, a listed column or its key
 * is missing. `field` and `index` name the topology field at fault (`tables[].table`,
 * `tables[].columns[index]`, `tables[].key[index]`, or `tables[].key` with no index), so callers
 * can point at it in the topology file.
 */
export class CaptureTableError extends Error {
  override readonly name = 'CaptureTableError';
  /** @param table the configured table name; @param field, index the field at fault. */
  constructor(
    message: string,
    readonly table: string,
    readonly field: CaptureTableField,
    readonly index?: number,
  ) {
    super(message);
  }
}

/**
 * Several CaptureTableErrors found together (every refused probe of the user-written SQL of the
 * tables install checks), each at its own field. It is itself a CaptureTableError at the first
 * one's table and field, with every message on its own line, so a caller that places one still
 * points at a field at fault; captureTableErrors() lists them to place each.
 */
export class CaptureTableErrors extends CaptureTableError {
  /** @param errors two or more, in the order found. */
  constructor(readonly errors: readonly CaptureTableError[]) {
    super(
      errors.map((e) => e.message).join('\n'),
      errors[0]!.table,
      errors[0]!.field,
      errors[0]!.index,
    );
  }
}

/**
 * The CaptureTableErrors `err` stands for: its list for a CaptureTableErrors, itself for a
 * CaptureTableError, none for any other error.
 */
export function captureTableErrors(err: unknown): readonly CaptureTableError[] {
  if (err instanceof CaptureTableErrors) return err.errors;
  return err instanceof CaptureTableError ? [err] : [];
}

/**
 * Resolves `columns` (default: all, in table order) and `key` (default: the primary key) of one
 * captured table. Throws `CaptureTableError` naming the table and the missing column, or the
 * missing key.
 */
export function resolveTable(config: CaptureTable, tableColumns: ColumnInfo[]): ResolvedTable {
  const where = `capture table "${config.table}"`;
  if (tableColumns.length === 0)
    throw new CaptureTableError(
      `${where}: table not found (no columns introspected)`,
      config.table,
      'table',
    );
  const byName = new Map(tableColumns.map((c) => [c.name, c]));
  const pick = (names: string[], field: 'columns' | 'key' | 'key.columns'): ColumnInfo[] =>
    names.map((n, i) => {
      const c = byName.get(n);
      if (c === undefined) {
        throw new CaptureTableError(
          `${where}: ${field}: column "${n}" not found (columns: ${tableColumns.map((x) => x.name).join(', ')})`,
          config.table,
          field,
          i,
        );
      }
      return c;
    });
  const columns = config.columns ? pick(config.columns, 'columns') : [...tableColumns];
  const spec = config.key ?? 'primaryKey';
  let keyStrategy: ResolvedKey;
  if (spec === 'primaryKey') {
    const key = tableColumns
      .filter((c) => c.pkPosition > 0)
      .sort((a, b) => a.pkPosition - b.pkPosition);
    if (key.length === 0)
      throw new CaptureTableError(
        `${where}: key: table has no primary key; give a key strategy in "key" (columns, none, fixed, transactionId, expression)`,
        config.table,
        'key',
      );
    keyStrategy = { kind: 'columns', columns: key };
  } else if (Array.isArray(spec)) keyStrategy = { kind: 'columns', columns: pick(spec, 'key') };
  else if (spec === 'none' || spec === 'transactionId') keyStrategy = { kind: spec };
  else if ('columns' in spec)
    keyStrategy = { kind: 'columns', columns: pick(spec.columns, 'key.columns') };
  else if ('fixed' in spec) keyStrategy = { kind: 'fixed', value: spec.fixed };
  else keyStrategy = { kind: 'expression', sql: spec.expression };
  return {
    config,
    columns,
    key: keyStrategy.kind === 'columns' ? keyStrategy.columns : [],
    keyStrategy,
  };
}

/**
 * `'{' || '"c1":' || <json c1> || ',"c2":' || ... || '}'`: a JSON object text expression with one
 * member per column, in column order. `jsonValue(col)` must yield a JSON string literal or `null`
 * text, never SQL NULL.
 */
export function jsonObjectExpr(
  columns: ColumnInfo[],
  jsonValue: (c: ColumnInfo) => string,
): string {
  const parts = columns.map(
    (c, i) =>
      `${quoteLiteral((i === 0 ? '{' : ',') + JSON.stringify(c.name) + ':')} || ${jsonValue(c)}`,
  );
  return `${parts.join(' || ')} || '}'`;
}

/** `'[' || <json k1> || ',' || ... || ']'`: the key's JSON array text expression. */
export function jsonArrayExpr(columns: ColumnInfo[], jsonValue: (c: ColumnInfo) => string): string {
  return `'[' || ${columns.map(jsonValue).join(` || ',' || `)} || ']'`;
}

/**
 * Column names a generated trigger or function body puts in its images: the `'{"name":'` and
 * `',"name":'` literals of jsonObjectExpr (SQL quotes doubled, names JSON-encoded), first image
 * only, in order.
 */
export function imageColumnsOf(body: string): string[] {
  const out: string[] = [];
  for (const m of body.matchAll(/'([{,])("(?:[^"\\]|\\.)*"):'/g)) {
    if (m[1] === '{' && out.length > 0) break;
    out.push(JSON.parse(m[2]!.replaceAll("''", "'")) as string);
  }
  return out;
}
