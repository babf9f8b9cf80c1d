import { DrizzleQueryError } from 'drizzle-orm/errors'

/**
 * Database faults as the rest of the service sees them: which failures
 * mean "the database is unreachable or restarting" (a 503 and a retry, not a bug), and
 * how any error is logged without the SQL, parameters or row values a failed query
 * carries (drizzle's DrizzleQueryError message is "Failed query: <sql> params: <values>";
 * postgres.js errors carry `query`, `parameters`, and a `detail` that quotes values).
 */

/** Seconds a client is told to wait (Retry-After) while the database is unavailable. */
export const DATABASE_RETRY_AFTER_S = 2

const CONNECTION_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
  // postgres.js
  'CONNECTION_CLOSED',
  'CONNECTION_ENDED',
  'CONNECTION_DESTROYED',
  'CONNECT_TIMEOUT'
])
/**
 * SQLSTATEs of a server going away or not accepting yet (57P01 admin_shutdown, 57P02 crash_shutdown, 57P03
 * cannot_connect_now, 53300 too_many_connections)
 */
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

/** Fields of driver errors that quote SQL, parameters or stored values, or name a server (host, port). */
const SECRET_FIELDS = new Set([
  'query',
  'params',
  'parameters',
  'args',
  'types',
  'detail',
  'where',
  'internal_query',
  'internal_position',
  'cause',
  'address',
  'port',
  'host',
  'hostname'
])

/**
 * `host:port`, `[v6]:port` and `a.b.c.d` as error messages of sockets write them (postgres.js: "write CONNECTION_CLOSED
 * 10.0.0.5:5432").
 */
const SERVER_ADDRESS = /(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][\w.-]*):\d{1,5}\b|\b\d{1,3}(\.\d{1,3}){3}\b/g

/**
 * A message without the server names and ports it quotes (the error's own `address`, `hostname`, and any host:port).
 */
function withoutServers(message: string, e: Record<string, unknown>): string {
  let out = message.replace(SERVER_ADDRESS, '(server)')
  for (const key of ['hostname', 'host', 'address']) {
    const value = e[key]
    if (typeof value === 'string' && value.length > 1) out = out.split(value).join('(server)')
  }
  if (typeof e.port === 'number' || typeof e.port === 'string')
    out = out.split(`(server):${String(e.port)}`).join('(server)')
  return out
}

/** Errno codes of a full disk (no space, or the user's quota used up). */
const DISK_FULL = new Set(['ENOSPC', 'EDQUOT'])

/** True when `err` (or what it wraps) is a write that found the disk full (ENOSPC, EDQUOT). */
export function isDiskFull(err: unknown): boolean {
  for (const e of causes(err)) if (typeof e.code === 'string' && DISK_FULL.has(e.code)) return true
  return false
}

/** postgres.js's own codes for a connection it lost or could not make */
const DRIVER_CODES = new Set(['CONNECTION_CLOSED', 'CONNECTION_ENDED', 'CONNECTION_DESTROYED', 'CONNECT_TIMEOUT'])

/**
 * Whether the failure came from the database driver (a failed query, a lost connection), not from a socket of something
 * else.
 */
function fromDatabase(err: unknown): boolean {
  for (const e of causes(err)) {
    if (e instanceof DrizzleQueryError) return true
    const code = e.code
    if (
      typeof code === 'string' &&
      (DRIVER_CODES.has(code) || UNAVAILABLE_STATES.has(code) || /^08[0-9A-Z]{3}$/.test(code))
    )
      return true
  }
  return false
}

/**
 * What failed, as a short sentence safe to store (`lastError`) and to show: never the SQL,
 * parameters or values of a failed query, nor a host, port or file path. A database that
 * went away is "the database was unavailable"; a query it refused is named by its SQLSTATE;
 * a failed system call by its code; any other error by its message, with server names and
 * ports taken out.
 */
export function failureSentence(err: unknown): string {
  if (fromDatabase(err) && isDatabaseUnavailable(err)) return 'the database was unavailable'
  if (isDiskFull(err)) return 'the disk is full'
  const state = sqlStateOf(err)
  if (state !== undefined && !/^E[A-Z]/.test(state)) return `a database query failed (SQLSTATE ${state})`
  for (const e of causes(err)) if (e instanceof DrizzleQueryError) return 'a database query failed'
  if (!(err instanceof Error)) return 'an unexpected error'
  const e = err as Error & Record<string, unknown>
  // a failed system call (fs, net) quotes its path or address: its code says enough
  if (typeof e.code === 'string' && typeof e.syscall === 'string')
    return `a system call failed (${e.syscall} ${e.code})`
  return withoutServers(err.message, e).slice(0, 500) || 'an unexpected error'
}

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
  const type = e.constructor?.name ?? 'Error'
  const message = failedQuery ? 'database query failed' : withoutServers(String(e.message ?? ''), e)
  const out: Record<string, unknown> = { type, message, stack: withoutMessage(e.stack, type, message) }
  for (const key in e) {
    if (SECRET_FIELDS.has(key) || key in out) continue
    const value = e[key]
    if (typeof value !== 'function') out[key] = value
  }
  if (e.cause !== undefined && depth < 4) out.cause = serializeError(e.cause, depth + 1)
  return out
}

/**
 * The stack's frames under the safe message (the original first line repeats the message: SQL, values, servers and
 * all).
 */
function withoutMessage(stack: unknown, type: string, message: string): string | undefined {
  if (typeof stack !== 'string') return undefined
  const at = stack.indexOf('\n    at ')
  return at === -1 ? undefined : `${type}: ${message}${stack.slice(at)}`
}

/** The Postgres error code of a failure, whether drizzle wrapped the driver's error or not. */
export function sqlStateOf(err: unknown): string | undefined {
  for (
    let e = err as { code?: unknown; cause?: unknown } | undefined, i = 0;
    e && i < 5;
    e = e.cause as typeof e, i++
  ) {
    if (typeof e.code === 'string' && /^[0-9A-Z]{5}$/.test(e.code)) return e.code
  }
  return undefined
}

/** A unique violation (23505): a name or key that is taken. */
export const isUniqueViolation = (err: unknown): boolean => sqlStateOf(err) === '23505'

/**
 * A foreign key violation: a row still referred to (23503, or 23001 under ON DELETE RESTRICT), or a reference to
 * nothing.
 */
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
