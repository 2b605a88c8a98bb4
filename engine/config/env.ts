import { parse, visit } from 'yaml';
import type { Document, Scalar } from 'yaml';

/** Environment variables as `process.env` holds them. */
export type Environment = Readonly<Record<string, string | undefined>>;

/** A substitution problem at a source offset. */
export interface EnvProblem {
  offset: number;
  message: string;
}

const VARIABLE_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/**
 * Substitutes environment variables in every string value (not in keys) of `doc`, in place:
 *
 * - `${VAR}`: the value of VAR (may be empty); an unset VAR is a problem.
 * - `${VAR:-default}`: the value of VAR, or `default` when VAR is unset or empty (as in sh).
 *   The default runs to the first `}` and is not itself substituted.
 * - `$${`: a literal `${`. A `$` not followed by `{` is left alone.
 *
 * An unquoted (plain) scalar is re-read as YAML after substitution, so `pumps: ${PUMPS:-2}` is the
 * number 2, as `pumps: 2` would be; quoted scalars stay strings. Returns the problems found (the
 * node keeps its original text where a reference could not be substituted).
 */
export function substituteEnv(doc: Document, env: Environment): EnvProblem[] {
  const problems: EnvProblem[] = [];
  visit(doc, {
    Scalar(key, node: Scalar) {
      if (key === 'key' || typeof node.value !== 'string' || !node.value.includes('$')) return;
      const text = node.value;
      const messages: string[] = [];
      const expanded = expand(text, env, messages);
      const offset = node.range?.[0] ?? 0;
      for (const message of messages) problems.push({ offset, message });
      if (messages.length > 0 || expanded === text) return;
      node.value = node.type === 'PLAIN' ? retype(expanded) : expanded;
    },
  });
  return problems;
}

function expand(text: string, env: Environment, problems: string[]): string {
  let out = '';
  let i = 0;
  while (i < text.length) {
    const dollar = text.indexOf('$', i);
    if (dollar < 0) {
      out += text.slice(i);
      break;
    }
    out += text.slice(i, dollar);
    if (text.startsWith('$${', dollar)) {
      out += '${';
      i = dollar + 3;
      continue;
    }
    if (!text.startsWith('${', dollar)) {
      out += '$';
      i = dollar + 1;
      continue;
    }
    const end = text.indexOf('}', dollar + 2);
    if (end < 0) {
      problems.push(
        `unterminated "\${" in ${JSON.stringify(text)} (write "$\${" for a literal "\${")`,
      );
      return text;
    }
    const body = text.slice(dollar + 2, end);
    const separator = body.indexOf(':-');
    const name = separator < 0 ? body : body.slice(0, separator);
    const fallback = separator < 0 ? undefined : body.slice(separator + 2);
    i = end + 1;
    if (!VARIABLE_NAME.test(name)) {
      problems.push(
        `bad environment variable reference "\${${body}}": the name must match ${VARIABLE_NAME.source}`,
      );
      continue;
    }
    const value = env[name];
    if (fallback !== undefined) {
      out += value === undefined || value === '' ? fallback : value;
    } else if (value === undefined) {
      problems.push(
        `environment variable ${name} is not set (give a default with \${${name}:-default})`,
      );
    } else {
      out += value;
    }
  }
  return out;
}

/** A plain scalar's substituted text as YAML would read it: number or boolean, else the text. */
function retype(text: string): string | number | boolean {
  try {
    const value: unknown = parse(text);
    return typeof value === 'number' || typeof value === 'boolean' ? value : text;
  } catch {
    return text;
  }
}
