/**
 * A topology as GET /topology shows it: no secrets. Passwords inside connection URLs become
 * `***`, and every field whose name says it holds a secret (password, secret, token, credential,
 * apiKey) is replaced by `***` wherever it sits (database refs, service settings).
 */
import type { Topology } from '../engine/config/index.js';

const SECRET_FIELD = /pass(word)?|secret|token|credential|api[-_]?key/i;
/** What a redacted value reads as. */
export const REDACTED = '***';

/** `postgres://user:pw@host/db` -> `postgres://user:***@host/db`; other text unchanged. */
export function redactUrl(text: string): string {
  return text
    .replace(/^([a-z][a-z0-9+.-]*:\/\/[^:/?#@]*):([^@/?#]*)@/i, `$1:${REDACTED}@`)
    .replace(/([?&](?:password|pass|pwd)=)[^&#]*/gi, `$1${REDACTED}`);
}

function redactValue(value: unknown, key: string): unknown {
  if (typeof value === 'string') return SECRET_FIELD.test(key) ? REDACTED : redactUrl(value);
  if (Array.isArray(value)) return value.map((v) => redactValue(v, key));
  if (value !== null && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value))
      out[k] =
        SECRET_FIELD.test(k) && v !== null && typeof v !== 'object' ? REDACTED : redactValue(v, k);
    return out;
  }
  return value;
}

/** A deep copy of the topology with every secret replaced (see the module comment). */
export function redactTopology(topology: Topology): Record<string, unknown> {
  return redactValue(topology, '') as Record<string, unknown>;
}
