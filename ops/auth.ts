/**
 * Named users of the operations API with hashed tokens and rights per topology.
 *
 * Users file (JSON, written by `sluice user add`):
 * ```
 * { "users": [ { "name": "alice", "tokenHash": "scrypt$16384$8$1$<salt b64>$<hash b64>",
 *                "rights": { "bank": "operate", "*": "read" } } ] }
 * ```
 * A token is `<name>.<secret>` (the secret: 32 random bytes, base64url), sent as
 * `Authorization: Bearer <token>`; only its scrypt hash (node:crypto, salted, compared in constant
 * time) is stored. Rights, each including the ones before it: `read` (every GET but the audit
 * log), `operate` (runtime changes: PUT /log-level), `admin` (the audit log too). A user's right
 * for a topology is `rights[<topology name>]`, else `rights["*"]`, else none.
 *
 * Rights per captured schema (optional `schemas`, `sluice user add --schema S`), for the routes
 * that concern capture sources: `"schemas": { "public": "operate", "bank/hr": "read" }`. A key is
 * a schema name (every topology) or `<topology>/<schema>` (that topology only; it wins). A
 * source's schema is ops/capture-config.ts schemaOfSource (PostgreSQL database.schema, default
 * public; MariaDB the URL's database; SQLite main). On a route about one source (its error table,
 * its pump count) or one schema (`GET /config/capture?schema=`, an import with `"schema"`) the
 * user's right there is the schema's, else the topology's; a route about the whole capture
 * configuration (export without a schema, import without one, history, restore) needs the right
 * on every captured schema. So a schema right can narrow a topology right (`"bank": "admin"`,
 * `"schemas": { "hr": "read" }`: no requeue in hr) or widen it (`"schemas": { "public":
 * "operate" }` alone: the error tables of public's sources, nothing else).
 *
 * Failed authentications (a token presented and refused; a request without one is only a 401)
 * are limited per remote address: after `failuresMax` within `windowMs` the address gets 429
 * until the window has passed. Tokens never reach a log line or the audit
 * log (only the user's name does).
 */
import crypto from 'node:crypto';
import fs from 'node:fs';

/** Rights, weakest first. */
export const RIGHTS = ['read', 'operate', 'admin'] as const;
/** One right. */
export type Right = (typeof RIGHTS)[number];

/** One user as stored. */
export interface StoredUser {
  name: string;
  tokenHash: string;
  /** Topology name (or `*`) -> right. */
  rights: Record<string, Right>;
  /** Captured schema (or `<topology>/<schema>`) -> right (see the module comment). */
  schemas?: Record<string, Right>;
}

/** scrypt cost parameters (N, r, p) and key length, bytes: OWASP's minimum for scrypt. */
const SCRYPT = { N: 16384, r: 8, p: 1, keyBytes: 32 } as const;
const NAME_PATTERN = /^[A-Za-z0-9_.@-]{1,64}$/;

/** Hashes a token for the users file. */
export function hashToken(token: string): string {
  const salt = crypto.randomBytes(16);
  const hash = crypto.scryptSync(token, salt, SCRYPT.keyBytes, {
    N: SCRYPT.N,
    r: SCRYPT.r,
    p: SCRYPT.p,
  });
  return `scrypt$${SCRYPT.N}$${SCRYPT.r}$${SCRYPT.p}$${salt.toString('base64')}$${hash.toString('base64')}`;
}

/** True when `token` hashes to `stored` (constant-time comparison). */
export function verifyToken(token: string, stored: string): boolean {
  const parts = stored.split('$');
  if (parts.length !== 6 || parts[0] !== 'scrypt') return false;
  const [N, r, p] = parts.slice(1, 4).map(Number);
  const salt = Buffer.from(parts[4], 'base64');
  const expected = Buffer.from(parts[5], 'base64');
  const actual = crypto.scryptSync(token, salt, expected.length, {
    N,
    r,
    p,
    maxmem: 256 * N * r + 1024 * 1024,
  });
  return actual.length === expected.length && crypto.timingSafeEqual(actual, expected);
}

/** Creates a new token for `name` (shown once; only its hash is kept). */
export function newToken(name: string): string {
  return `${name}.${crypto.randomBytes(32).toString('base64url')}`;
}

/**
 * Reads and checks a users file. @throws Error naming the file and the user index and field.
 */
export function loadUsers(file: string): StoredUser[] {
  let doc: unknown;
  try {
    doc = JSON.parse(fs.readFileSync(file, 'utf8'));
  } catch (err) {
    throw new Error(`users file ${file}: ${(err as Error).message}`);
  }
  const users = (doc as { users?: unknown })?.users;
  if (!Array.isArray(users)) throw new Error(`users file ${file}: expected {"users": [...]}`);
  const seen = new Set<string>();
  return users.map((u: Partial<StoredUser>, i): StoredUser => {
    const where = `users file ${file}: users[${i}]`;
    if (typeof u?.name !== 'string' || !NAME_PATTERN.test(u.name))
      throw new Error(`${where}.name must match ${NAME_PATTERN}`);
    if (seen.has(u.name)) throw new Error(`${where}.name: "${u.name}" is listed twice`);
    seen.add(u.name);
    if (typeof u.tokenHash !== 'string' || !u.tokenHash.startsWith('scrypt$'))
      throw new Error(`${where}.tokenHash must be a scrypt hash (sluice user add writes one)`);
    if (u.rights === null || typeof u.rights !== 'object')
      throw new Error(`${where}.rights must be an object of topology -> right`);
    for (const [t, r] of Object.entries(u.rights)) {
      if (!(RIGHTS as readonly string[]).includes(r))
        throw new Error(
          `${where}.rights.${t} must be one of ${RIGHTS.join(', ')}, got ${JSON.stringify(r)}`,
        );
    }
    if (u.schemas !== undefined) {
      if (u.schemas === null || typeof u.schemas !== 'object' || Array.isArray(u.schemas))
        throw new Error(`${where}.schemas must be an object of schema -> right`);
      for (const [k, r] of Object.entries(u.schemas)) {
        if (!(RIGHTS as readonly string[]).includes(r))
          throw new Error(
            `${where}.schemas.${k} must be one of ${RIGHTS.join(', ')}, got ${JSON.stringify(r)}`,
          );
      }
    }
    return {
      name: u.name,
      tokenHash: u.tokenHash,
      rights: u.rights as Record<string, Right>,
      ...(u.schemas !== undefined ? { schemas: u.schemas as Record<string, Right> } : {}),
    };
  });
}

/**
 * Adds (or replaces) a user in a users file, creating the file. @returns the new token.
 * With `schema`, `right` is the user's right on that captured schema (`schemas[schema]`, or
 * `schemas["<topology>/<schema>"]` when `topology` is not `*`) and the topology rights are kept.
 * @throws Error when the name, right or schema is invalid.
 */
export function addUser(
  file: string,
  name: string,
  right: Right,
  topology = '*',
  schema?: string,
): string {
  if (schema !== undefined && !/^[^/\s]{1,128}$/.test(schema))
    throw new Error(`schema must be a name without "/" or spaces, got "${schema}"`);
  if (!NAME_PATTERN.test(name))
    throw new Error(`user name must match ${NAME_PATTERN}, got "${name}"`);
  if (!(RIGHTS as readonly string[]).includes(right))
    throw new Error(`right must be one of ${RIGHTS.join(', ')}, got "${right}"`);
  const users = fs.existsSync(file) ? loadUsers(file) : [];
  const token = newToken(name);
  const old = users.find((u) => u.name === name);
  const schemaKey =
    schema === undefined ? null : topology === '*' ? schema : `${topology}/${schema}`;
  const schemas =
    schemaKey === null ? old?.schemas : { ...(old?.schemas ?? {}), [schemaKey]: right };
  const user: StoredUser = {
    name,
    tokenHash: hashToken(token),
    rights:
      schemaKey === null ? { ...(old?.rights ?? {}), [topology]: right } : (old?.rights ?? {}),
    ...(schemas !== undefined ? { schemas } : {}),
  };
  const next = users.filter((u) => u.name !== name).concat(user);
  fs.writeFileSync(file, `${JSON.stringify({ users: next }, null, 2)}\n`, { mode: 0o600 });
  return token;
}

/** Bounds of the failure limiter, with defaults. */
export interface AuthLimits {
  failuresMax: number;
  windowMs: number;
  /** Addresses tracked at most (oldest dropped first). */
  addressesMax: number;
}
/** Defaults of {@link AuthLimits}: 5 failures per minute per address. */
export const AUTH_LIMITS_DEFAULTS: AuthLimits = {
  failuresMax: 5,
  windowMs: 60_000,
  addressesMax: 10_000,
};

/** Outcome of {@link Authenticator.check}. */
export type AuthOutcome =
  | { ok: true; user: string; right: Right | null }
  | { ok: false; status: 401 | 403 | 429; error: string };

/** Checks requests against a users file (see the module comment). */
export class Authenticator {
  private readonly users: Map<string, StoredUser>;
  private readonly failures = new Map<string, number[]>();
  /** Verified tokens (by their SHA-256), so a polling dashboard costs one scrypt per minute. */
  private readonly verified = new Map<string, { user: string; atMs: number }>();

  constructor(
    users: StoredUser[],
    private readonly topology: string,
    private readonly limits: AuthLimits = AUTH_LIMITS_DEFAULTS,
  ) {
    this.users = new Map(users.map((u) => [u.name, u]));
  }

  /** The right `user` has on this topology, or null. */
  rightOf(user: string): Right | null {
    const u = this.users.get(user);
    return u ? (u.rights[this.topology] ?? u.rights['*'] ?? null) : null;
  }

  /**
   * The right `user` has on captured schema `schema` of this topology: `schemas["<topology>/
   * <schema>"]`, else `schemas[schema]`, else the topology right; null when none.
   */
  rightOnSchema(user: string, schema: string): Right | null {
    const u = this.users.get(user);
    if (!u) return null;
    return u.schemas?.[`${this.topology}/${schema}`] ?? u.schemas?.[schema] ?? this.rightOf(user);
  }

  /**
   * Whether authenticated `user` has `needed` on every schema of `schemas` (an empty list: on
   * the topology). @returns null when allowed, else the 403 to send.
   */
  authorize(
    user: string,
    needed: Right,
    schemas: string[],
  ): { ok: false; status: 403; error: string } | null {
    const enough = (r: Right | null) => r !== null && RIGHTS.indexOf(r) >= RIGHTS.indexOf(needed);
    if (schemas.length === 0) {
      const right = this.rightOf(user);
      if (enough(right)) return null;
      return {
        ok: false,
        status: 403,
        error: `user "${user}" has ${right ?? 'no'} right on topology "${this.topology}"; this needs ${needed}`,
      };
    }
    for (const schema of schemas) {
      const right = this.rightOnSchema(user, schema);
      if (enough(right)) continue;
      // Without a right of its own on the schema the topology right decided: say that one.
      const u = this.users.get(user);
      if (
        u?.schemas?.[`${this.topology}/${schema}`] === undefined &&
        u?.schemas?.[schema] === undefined
      )
        return this.authorize(user, needed, []);
      return {
        ok: false,
        status: 403,
        error: `user "${user}" has ${right ?? 'no'} right on schema "${schema}" of topology "${this.topology}"; this needs ${needed}`,
      };
    }
    return null;
  }

  /**
   * Authenticates `authorization` from `remote` and checks it has `needed` on the topology; with
   * `needed` null only authenticates (the caller authorizes per schema once it knows them).
   */
  check(authorization: string | undefined, remote: string, needed: Right | null): AuthOutcome {
    const nowMs = Date.now();
    const recent = (this.failures.get(remote) ?? []).filter(
      (t) => nowMs - t < this.limits.windowMs,
    );
    if (recent.length >= this.limits.failuresMax) {
      return {
        ok: false,
        status: 429,
        error: `too many failed authentications from ${remote}; retry in ${Math.ceil((this.limits.windowMs - (nowMs - recent[0])) / 1000)} s`,
      };
    }
    const required = {
      ok: false,
      status: 401,
      error: 'authentication required: Authorization: Bearer <token> (sluice user add makes one)',
    } as const;
    // No credentials is not a failed login: only presented, wrong ones count against the address.
    if (authorization === undefined || authorization === '') return required;
    const user = this.authenticate(authorization, nowMs);
    if (user === null) {
      recent.push(nowMs);
      this.failures.delete(remote);
      this.failures.set(remote, recent);
      if (this.failures.size > this.limits.addressesMax)
        this.failures.delete(this.failures.keys().next().value as string);
      // Presented and refused: said apart from no credentials (a typo of a token is not a
      // missing one), with what is left before the address is refused; the token is not echoed.
      const left = Math.max(0, this.limits.failuresMax - recent.length);
      return {
        ok: false,
        status: 401,
        error: `authentication failed: the token is not one of this topology's users (Authorization: Bearer <user>.<secret>, made by sluice user add); ${left} more failed attempts from ${remote} within ${this.limits.windowMs / 1000} s, then it is refused (429)`,
      };
    }
    const right = this.rightOf(user);
    if (needed === null) return { ok: true, user, right };
    const refused = this.authorize(user, needed, []);
    if (refused) return refused;
    return { ok: true, user, right: right! };
  }

  private authenticate(authorization: string | undefined, nowMs: number): string | null {
    const m = /^Bearer ([A-Za-z0-9_.@-]{1,64})\.([A-Za-z0-9_-]{16,128})$/.exec(authorization ?? '');
    if (!m) return null;
    const token = `${m[1]}.${m[2]}`;
    const digest = crypto.createHash('sha256').update(token).digest('base64');
    const hit = this.verified.get(digest);
    if (hit && nowMs - hit.atMs < 60_000 && this.users.has(hit.user)) return hit.user;
    const u = this.users.get(m[1]);
    if (!u || !verifyToken(token, u.tokenHash)) return null;
    if (this.verified.size > 1000) this.verified.clear();
    this.verified.set(digest, { user: u.name, atMs: nowMs });
    return u.name;
  }
}
