import { DrizzleQueryError } from 'drizzle-orm/errors'

/**
 * Database faults as the rest of the service sees them (contract 1.3): which failures
 * mean "the database is unreachable or restarting" (a 503 and a retry, not a bug), and
 * how any error is logged without the SQL, parameters or row values a failed query
 * carries (drizzle's DrizzleQueryError message is "Failed query: <sql> params: <values>";
 * postgres.js errors carry `query`, `parameters`, and a `detail` that quotes values).
 */

/** Seconds a client is told to wait (Retry-After) while the database is unavailable. */
export const DATABASE_RETRY_AFTER_S = 2

const CONNECTION_CODES = new Set([
  'ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN',
  // postgres.js
  'CONNECTION_CLOSED', 'CONNECTION_ENDED', 'CONNECTION_DESTROYED', 'CONNECT_TIMEOUT'
])
/** SQLSTATEs of a server going away or not accepting yet (57P01 admin_shutdown, 57P02 crash_shutdown, 57P03 cannot_connect_now, 53300 too_many_connections) */
const UNAVAILABLE_STATES = new Set(['57P01', '57P02', '57P03', '53300'])

/** The error itself, or the driver error a wrapper (DrizzleQueryError, …) keeps as `cause`. */
function* causes(err: unknown): Generator<Record<string, unknown>> {
  let current = err
  for (let depth = 0; depth < 5 && current !== null && typeof current === 'object'; depth++) {
    yield current as Record<string, unknown>
    current = (current as { cause?: unknown }).cause
  }
}

/** True when `err` (or what it wraps) says the database cannot be reached right now. */
export function isDatabaseUnavailable(err: unknown): boolean {
  for (const e of causes(err)) {
    const code = e.code
    if (typeof code !== 'string') continue
    if (CONNECTION_CODES.has(code) || UNAVAILABLE_STATES.has(code) || code.startsWith('08')) return true
  }
  return false
}

/** Fields of driver errors that quote SQL, parameters or stored values. */
const SECRET_FIELDS = new Set(['query', 'params', 'parameters', 'args', 'types', 'detail', 'where', 'internal_query', 'internal_position', 'cause'])

/**
 * The logger's `err` serializer, in place of pino's standard one (which also folds every
 * cause's message into the message): type, message, stack, the error's own fields, and
 * its cause serialized the same way. A failed query (DrizzleQueryError) is logged as
 * "database query failed" with its driver error as cause (code, severity, routine,
 * constraint…); fields that quote SQL, parameters or values are left out at every level.
 */
export function serializeError(err: unknown, depth = 0): unknown {
  if (err === null || typeof err !== 'object') return err
  const e = err as Error & Record<string, unknown>
  const failedQuery = e instanceof DrizzleQueryError
  const out: Record<string, unknown> = {
    type: e.constructor?.name ?? 'Error',
    message: failedQuery ? 'database query failed' : String(e.message ?? ''),
    stack: failedQuery ? withoutMessage(e.stack) : e.stack
  }
  for (const key in e) {
    if (SECRET_FIELDS.has(key) || key in out) continue
    const value = e[key]
    if (typeof value !== 'function') out[key] = value
  }
  if (e.cause !== undefined && depth < 4) out.cause = serializeError(e.cause, depth + 1)
  return out
}

/** The stack's frames under a fixed first line (the original repeats the message, SQL and all). */
function withoutMessage(stack: unknown): string | undefined {
  if (typeof stack !== 'string') return undefined
  const at = stack.indexOf('\n    at ')
  return at === -1 ? undefined : `Error: database query failed${stack.slice(at)}`
}

/** The Postgres error code of a failure, whether drizzle wrapped the driver's error or not. */
export function sqlStateOf(err: unknown): string | undefined {
  for (let e = err as { code?: unknown; cause?: unknown } | undefined, i = 0; e && i < 5; e = e.cause as typeof e, i++) {
    if (typeof e.code === 'string' && /^[0-9A-Z]{5}$/.test(e.code)) return e.code
  }
  return undefined
}

/** A unique violation (23505): a name or key that is taken. */
export const isUniqueViolation = (err: unknown): boolean => sqlStateOf(err) === '23505'

/** A foreign key violation: a row still referred to (23503, or 23001 under ON DELETE RESTRICT), or a reference to nothing. */
export const isForeignKeyViolation = (err: unknown): boolean => ['23503', '23001'].includes(sqlStateOf(err) ?? '')

/** A delete a foreign key refuses (a row still refers to it) answers `in_use` instead of throwing. */
export async function inUseWhenReferenced<T>(deleting: Promise<T>): Promise<T | 'in_use'> {
  try {
    return await deleting
  } catch (err) {
    if (isForeignKeyViolation(err)) return 'in_use'
    throw err
  }
}
