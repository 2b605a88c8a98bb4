import { BusError } from '../types.js';

/** kafkajs error types meaning "this member lost its partitions to a rebalance". */
const REBALANCE_TYPES = new Set([
  'REBALANCE_IN_PROGRESS',
  'ILLEGAL_GENERATION',
  'UNKNOWN_MEMBER_ID',
  'FENCED_INSTANCE_ID',
]);
/** kafkajs error types meaning "a newer producer with this transactionalId exists". */
const FENCED_TYPES = new Set([
  'INVALID_PRODUCER_EPOCH',
  'PRODUCER_FENCED',
  'TRANSACTIONAL_ID_AUTHORIZATION_FAILED',
]);

/** The kafkajs protocol error type (e.g. 'UNKNOWN_TOPIC_OR_PARTITION'), also inside retry wrappers. */
export function kafkaErrorType(e: unknown): string | undefined {
  for (let cur: unknown = e, depth = 0; cur && depth < 5; depth++) {
    const c = cur as { type?: unknown; originalError?: unknown; cause?: unknown };
    if (typeof c.type === 'string') return c.type;
    cur = c.originalError ?? c.cause;
  }
  return undefined;
}

/** Wraps a kafkajs failure as a BusError with the matching code; `what` names the operation. */
export function toBusError(e: unknown, what: string): BusError {
  if (e instanceof BusError) return e;
  const type = kafkaErrorType(e);
  const msg = `${what}: ${(e as Error)?.message ?? String(e)}${type ? ` (${type})` : ''}`;
  if (type && REBALANCE_TYPES.has(type)) return new BusError('not-assigned', msg, { cause: e });
  if (type && FENCED_TYPES.has(type)) return new BusError('fenced', msg, { cause: e });
  if (type === 'UNKNOWN_TOPIC_OR_PARTITION')
    return new BusError('unknown-topic', msg, { cause: e });
  return new BusError('backend', msg, { cause: e });
}
