/**
 * One problem found in a topology file. `line` and `col` are 1-based (0 when the problem has no
 * position, e.g. an unreadable file); `path` names the field, e.g. `services[1].inputs[0]`, or
 * `(root)` for the document itself.
 */
export interface ConfigProblem {
  file: string;
  line: number;
  col: number;
  path: string;
  message: string;
}

/** `file:line:col: path: message`, or `file: message` when the problem has no position. */
export function formatProblem(p: ConfigProblem): string {
  const message = escapeControls(p.message);
  return p.line > 0
    ? `${p.file}:${p.line}:${p.col}: ${escapeControls(p.path)}: ${message}`
    : `${p.file}: ${message}`;
}

/** Control characters (a CR or NUL quoted from a value) as \uXXXX: a problem stays one line. */
function escapeControls(text: string): string {
  return text.replace(
    /[\u0000-\u001f\u007f]/g,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`,
  );
}

/**
 * Every problem found in one topology file. The message has one line per problem, in file order,
 * formatted `file:line:col: path: message` (editors and terminals link these), e.g.
 * `examples/bank/topology.yaml:14:7: services[1].inputs[0]: unknown queue "histry" (known: ...)`.
 */
export class ConfigError extends Error {
  override readonly name = 'ConfigError';
  /** The problems, sorted by line then column; never empty. */
  readonly problems: readonly ConfigProblem[];

  /**
   * @param options `cause`: the error behind a problem found by opening something (a database).
   * @throws Error if `problems` is empty (a ConfigError must say what is wrong).
   */
  constructor(problems: readonly ConfigProblem[], options?: ErrorOptions) {
    if (problems.length === 0)
      throw new Error('ConfigError needs at least one problem, problems.length=0');
    // A value quoted in a message may hold a CR or NUL: escaped, so each problem is one line.
    const clean = problems.map((p) => ({
      ...p,
      path: escapeControls(p.path),
      message: escapeControls(p.message),
    }));
    super(clean.map(formatProblem).join('\n'), options);
    this.problems = clean;
  }
}
