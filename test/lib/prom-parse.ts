/**
 * A strict reader of the Prometheus text exposition format (version 0.0.4), for tests: every
 * line must be a `# HELP`, a `# TYPE` or a sample `name{label="value",...} value`; a sample's
 * family must have been typed before it. Throws naming the line number otherwise.
 */
export interface PromSample {
  name: string;
  labels: Record<string, string>;
  value: number;
}
export interface PromFamily {
  name: string;
  type: string;
  help: string;
  samples: PromSample[];
}

const NAME = '[a-zA-Z_:][a-zA-Z0-9_:]*';
const SAMPLE = new RegExp(`^(${NAME})(?:\\{(.*)\\})?\\s+(\\S+)(?:\\s+(-?\\d+))?$`);
const LABEL = /\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*(,|$)/y;

function parseValue(text: string, line: number): number {
  if (text === '+Inf') return Infinity;
  if (text === '-Inf') return -Infinity;
  if (text.toLowerCase() === 'nan') return NaN; // prom-client writes "Nan"; Prometheus parses any case
  const v = Number(text);
  if (!Number.isFinite(v)) throw new Error(`line ${line}: bad sample value "${text}"`);
  return v;
}

/** Parses an exposition; families by name. */
export function parseProm(text: string): Map<string, PromFamily> {
  const families = new Map<string, PromFamily>();
  const familyOf = (sample: string) => {
    for (const suffix of ['', '_bucket', '_sum', '_count', '_total']) {
      if (suffix && !sample.endsWith(suffix)) continue;
      const f = families.get(sample.slice(0, sample.length - suffix.length));
      if (f) return f;
    }
    return families.get(sample);
  };
  text.split('\n').forEach((raw, i) => {
    const line = i + 1;
    if (raw === '') return;
    const meta = /^# (HELP|TYPE) (\S+) ?(.*)$/.exec(raw);
    if (meta) {
      const [, kind, name, rest] = meta;
      const f = families.get(name) ?? { name, type: 'untyped', help: '', samples: [] };
      if (kind === 'HELP') f.help = rest;
      else if (['counter', 'gauge', 'histogram', 'summary', 'untyped'].includes(rest))
        f.type = rest;
      else throw new Error(`line ${line}: unknown TYPE "${rest}"`);
      families.set(name, f);
      return;
    }
    if (raw.startsWith('#')) return;
    const m = SAMPLE.exec(raw);
    if (!m) throw new Error(`line ${line}: not a sample: ${raw}`);
    const labels: Record<string, string> = {};
    if (m[2]) {
      LABEL.lastIndex = 0;
      let pos = 0;
      while (pos < m[2].length) {
        LABEL.lastIndex = pos;
        const l = LABEL.exec(m[2]);
        if (!l) throw new Error(`line ${line}: bad labels {${m[2]}}`);
        labels[l[1]] = l[2].replace(/\\(.)/g, (_s, c: string) => (c === 'n' ? '\n' : c));
        pos = LABEL.lastIndex;
      }
    }
    const f = familyOf(m[1]);
    if (!f) throw new Error(`line ${line}: sample ${m[1]} before its TYPE`);
    f.samples.push({ name: m[1], labels, value: parseValue(m[3], line) });
  });
  return families;
}

/** The one sample of `name` whose labels include `labels`; throws when none or several match. */
export function sampleOf(
  families: Map<string, PromFamily>,
  name: string,
  labels: Record<string, string> = {},
): PromSample {
  const all = [...families.values()]
    .flatMap((f) => f.samples)
    .filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
  if (all.length !== 1)
    throw new Error(`${all.length} samples of ${name}${JSON.stringify(labels)}`);
  return all[0];
}
