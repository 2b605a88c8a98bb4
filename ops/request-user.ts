/**
 * Who made a request of the operations API, for the audit log: the authenticated user (set by
 * the server's auth hook), else the self-declared `x-sluice-user` header when the server has no
 * users, else `anonymous`.
 */
import type { FastifyRequest } from 'fastify';

/** Authenticated user names of requests (set by the auth hook). */
const requestUsers = new WeakMap<FastifyRequest, string>();

/** Records the authenticated user of `req` (the auth hook calls it). */
export function setRequestUser(req: FastifyRequest, user: string): void {
  requestUsers.set(req, user);
}

/** The user of `req` for the audit log (see the module comment). */
export function userOf(req: FastifyRequest): string {
  const authenticated = requestUsers.get(req);
  if (authenticated !== undefined) return authenticated;
  const h = req.headers['x-sluice-user'];
  const name = Array.isArray(h) ? h[0] : h;
  return name && /^[\w.@-]{1,64}$/.test(name) ? name : 'anonymous';
}
