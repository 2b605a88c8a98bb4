import AjvModule from 'ajv';
import type { ErrorObject, ValidateFunction } from 'ajv';
import { TOPOLOGY_SCHEMA } from './schema.js';
import type { Segment } from './source-map.js';
import { closest } from './suggest.js';
import {
  PATH_PATTERN,
  QUEUE_NAME_PATTERN,
  SERVICE_NAME_PATTERN,
  STAGING_TABLE_PATTERN,
  BROKER_PATTERN,
  TOPOLOGY_NAME_PATTERN,
} from './topology.js';

/** A problem found by the schema, located by field path. */
export interface SchemaProblem {
  path: Segment[];
  /** Point at the key of the last path segment rather than at its value (unknown fields). */
  at: 'value' | 'key';
  message: string;
}

// ajv is CommonJS; under NodeNext its class is the default export's `default`.
const Ajv = AjvModule.default;
let compiled: ValidateFunction | undefined;

function validator(): ValidateFunction {
  compiled ??= new Ajv({ allErrors: true, verbose: true, discriminator: true }).compile(
    TOPOLOGY_SCHEMA,
  );
  return compiled;
}

const PATTERN_MEANINGS = new Map<string, string>([
  [TOPOLOGY_NAME_PATTERN, 'lowercase letters, digits and "-"'],
  [
    QUEUE_NAME_PATTERN,
    'a lowercase letter or digit, then lowercase letters, digits, ".", "_" or "-"',
  ],
  [
    SERVICE_NAME_PATTERN,
    'a lowercase letter or digit, then lowercase letters, digits, ".", "_" or "-"',
  ],
  [STAGING_TABLE_PATTERN, 'an SQL identifier: letters, digits and "_", not starting with a digit'],
  [BROKER_PATTERN, 'host:port with a port 1-65535 (an IPv6 host in brackets)'],
]);

/**
 * Validates `data` (the YAML document as plain data) against TOPOLOGY_SCHEMA and returns every
 * problem (ajv allErrors), each phrased for a person and located by field path.
 */
export function validateSchema(data: unknown): SchemaProblem[] {
  const validate = validator();
  if (validate(data)) return [];
  const problems: SchemaProblem[] = [];
  for (const error of validate.errors ?? []) {
    const problem = describe(error);
    if (problem !== undefined) problems.push(problem);
  }
  return problems;
}

function describe(e: ErrorObject): SchemaProblem | undefined {
  const path = pointerToPath(e.instancePath);
  const params = e.params as Record<string, unknown>;
  const schema = (e.parentSchema ?? {}) as Record<string, unknown>;
  switch (e.keyword) {
    case 'additionalProperties': {
      const field = String(params.additionalProperty);
      const known = Object.keys((schema.properties ?? {}) as object);
      const guess = closest(field, known);
      const hint = guess !== undefined ? `did you mean "${guess}"?` : `known: ${known.join(', ')}`;
      return {
        path: [...path, field],
        at: 'key',
        message: `unknown field ${show(field)} (${hint})`,
      };
    }
    case 'required':
      return {
        path: [...path, String(params.missingProperty)],
        at: 'value',
        message: 'missing required field',
      };
    case 'type':
      return {
        path,
        at: 'value',
        message: `must be ${typeName(String(params.type))}, got ${show(e.data)}`,
      };
    case 'enum': {
      const allowed = (params.allowedValues as unknown[]).map(String);
      const guess = typeof e.data === 'string' ? closest(e.data, allowed) : undefined;
      const hint = guess !== undefined ? ` (did you mean "${guess}"?)` : '';
      return {
        path,
        at: 'value',
        message: `must be one of ${allowed.join(', ')}, got ${show(e.data)}${hint}`,
      };
    }
    case 'discriminator': {
      const tag = String(params.tag);
      if (params.tagValue === undefined)
        return { path: [...path, tag], at: 'value', message: 'missing required field' };
      // A branch names its tag value with const, or several spellings with enum.
      const allowed = (
        (schema.oneOf ?? []) as Array<{
          properties: Record<string, { const?: string; enum?: string[] }>;
        }>
      ).flatMap((branch) => branch.properties[tag]!.enum ?? [branch.properties[tag]!.const!]);
      const value = params.tagValue;
      const guess = typeof value === 'string' ? closest(value, allowed) : undefined;
      const hint = guess !== undefined ? ` (did you mean "${guess}"?)` : '';
      return {
        path: [...path, tag],
        at: 'value',
        message: `must be one of ${allowed.join(', ')}, got ${show(value)}${hint}`,
      };
    }
    case 'minimum':
    case 'maximum':
      if (schema.minimum !== undefined && schema.maximum !== undefined) {
        return {
          path,
          at: 'value',
          message: `must be in [${String(schema.minimum)}, ${String(schema.maximum)}], got ${show(e.data)}`,
        };
      }
      return { path, at: 'value', message: `${e.message ?? 'out of range'}, got ${show(e.data)}` };
    case 'pattern': {
      const pattern = String(params.pattern);
      if (pattern === '\\S') return { path, at: 'value', message: 'must not be blank' };
      if (pattern === PATH_PATTERN)
        return { path, at: 'value', message: 'must not contain NUL characters' };
      const meaning = PATTERN_MEANINGS.get(pattern);
      // The broker's regex (its port range spelled out digit by digit) says less than its words.
      const what =
        meaning === undefined
          ? `/${pattern}/`
          : pattern === BROKER_PATTERN
            ? meaning
            : `${meaning} (/${pattern}/)`;
      return { path, at: 'value', message: `must be ${what}, got ${show(e.data)}` };
    }
    case 'minLength':
      return { path, at: 'value', message: 'must not be empty' };
    case 'maxLength':
      return {
        path,
        at: 'value',
        message: `must be at most ${String(params.limit)} characters long, got ${lengthOf(e.data)}`,
      };
    case 'maxItems':
      return {
        path,
        at: 'value',
        message: `must list at most ${String(params.limit)} items, got ${Array.isArray(e.data) ? e.data.length : '?'}`,
      };
    case 'minItems':
      return {
        path,
        at: 'value',
        message: `must list at least ${String(params.limit)} item${params.limit === 1 ? '' : 's'}`,
      };
    case 'uniqueItems': {
      const j = Number(params.j);
      const i = Number(params.i);
      const items = e.data as unknown[];
      return {
        path: [...path, Math.max(i, j)],
        at: 'value',
        message: `${show(items[Math.max(i, j)])} is listed twice`,
      };
    }
    case 'oneOf':
      return undefined; // the chosen branch's own errors (via the discriminator) say what is wrong
    default:
      return { path, at: 'value', message: e.message ?? `fails ${e.keyword}` };
  }
}

/** JSON pointer (`/services/1/inputs/0`) -> path segments; digit-only segments are indexes. */
function pointerToPath(pointer: string): Segment[] {
  if (pointer === '') return [];
  return pointer
    .slice(1)
    .split('/')
    .map((raw) => {
      const s = raw.replace(/~1/g, '/').replace(/~0/g, '~');
      return /^(0|[1-9][0-9]*)$/.test(s) ? Number(s) : s;
    });
}

function typeName(type: string): string {
  switch (type) {
    case 'integer':
      return 'an integer';
    case 'number':
      return 'a number';
    case 'string':
      return 'a string';
    case 'boolean':
      return 'true or false';
    case 'array':
      return 'a list';
    case 'object':
      return 'a map';
    default:
      return type;
  }
}

/** Longest string quoted whole in a message; longer ones are cut, with their length. */
const SHOWN_CHARS_MAX = 80;

/**
 * A value as it appears in a message: strings quoted (cut after SHOWN_CHARS_MAX characters, with
 * the full length, so a 200,000-character value gives a one-line message), collections by kind.
 */
export function show(value: unknown): string {
  if (value === null || value === undefined) return 'nothing';
  if (Array.isArray(value)) return 'a list';
  if (typeof value === 'object') return 'a map';
  if (typeof value === 'string') {
    if (value.length <= SHOWN_CHARS_MAX) return JSON.stringify(value);
    return `${JSON.stringify(value.slice(0, SHOWN_CHARS_MAX))}... (${value.length} characters)`;
  }
  return String(value);
}

function lengthOf(value: unknown): string {
  return typeof value === 'string' ? `${value.length}` : '?';
}
