import type { FastifyError, FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import { allowedMethods, MAX_PATH_LENGTH } from './router-refusals.js'
import { DATABASE_RETRY_AFTER_S, isDatabaseUnavailable, isDiskFull } from '../src/db/faults.js'

/**
 * A failure the client is meant to see: a status, the contract's identifier and a
 * sentence. Handlers throw these; the one error handler below turns them into bodies.
 */
export class ApiError extends Error {
  readonly statusCode: number
  readonly error: string
  readonly extra: Record<string, unknown> | undefined
  readonly headers: Record<string, string> | undefined

  constructor(
    statusCode: number,
    error: string,
    message: string,
    options: { extra?: Record<string, unknown>; headers?: Record<string, string> } = {}
  ) {
    super(message)
    this.name = 'ApiError'
    this.statusCode = statusCode
    this.error = error
    this.extra = options.extra
    this.headers = options.headers
  }
}

/*
 * The error catalogue: one factory per identifier the spec and the contract name, with its
 * status and its usual sentence. Handlers and hooks throw these; no other file spells an
 * identifier or builds an ApiError.
 */

// 400
export const badRequest = (message: string) => new ApiError(400, 'bad_request', message)
export const serverOwnedField = (field: string) =>
  new ApiError(400, 'server_owned_field', `${field} is set by the server and may not be sent`)
export const invalidIdempotencyKey = (maxLength: number) =>
  new ApiError(400, 'invalid_idempotency_key', `Idempotency-Key must be 1 to ${maxLength} characters`)
export const invalidLastEventId = () =>
  new ApiError(400, 'invalid_last_event_id', 'Last-Event-ID must be an event id (a non-negative integer)')
/**
 * A body whose content (not its JSON shape) is invalid: every problem, each with its path (and where in a file, if it
 * is one).
 */
export function validationFailed(
  details: Array<{ path: string; message: string; line?: number; column?: number }>
): ApiError {
  const first = details[0]
  return new ApiError(400, 'validation_failed', first ? `${first.path}: ${first.message}` : 'invalid request', {
    extra: { details }
  })
}
export const engineUnavailable = (message: string) => new ApiError(400, 'engine_unavailable', message)
// 401
export const unauthorized = (message = 'sign in or send an API key') => new ApiError(401, 'unauthorized', message)
export const invalidCredentials = () => new ApiError(401, 'invalid_credentials', 'wrong email or password')
// 403
export const forbiddenOrigin = (message: string) => new ApiError(403, 'forbidden_origin', message)
export const noOrganization = () =>
  new ApiError(403, 'no_organization', 'you belong to no organization; create one or ask to be added')
export const sessionRequired = () =>
  new ApiError(403, 'session_required', 'this route needs a signed-in session, not an API key')
export const userRequired = () => new ApiError(403, 'user_required', 'this route needs a signed-in user')
export const organizationAdminRequired = () =>
  new ApiError(403, 'organization_admin_required', 'this needs an organization owner or admin')
export const organizationOwnerRequired = () =>
  new ApiError(403, 'organization_owner_required', 'only an owner can grant, change or remove the owner role')
/** personal memory belongs to a signed-in user, so a caller without one is refused */
export const signInRequired = () => new ApiError(403, 'sign-in required', 'personal memory needs a signed-in user')
export const memoryDisabled = () => new ApiError(403, 'memory disabled', 'memory is disabled for this organization')
/** a person of the org who may not do this to this resource (someone else's) */
export const forbidden = (message: string) => new ApiError(403, 'forbidden', message)
// 404
export const notFound = (message = 'not found') => new ApiError(404, 'not_found', message)
export const notInPool = () => new ApiError(404, 'not found in this pool', 'no memory item with this id in this pool')
export const noDeadCapture = () =>
  new ApiError(
    404,
    'no dead capture for this run in your org',
    'there is no dead capture for this run in your organization'
  )
export const noOrphanCapture = () =>
  new ApiError(
    404,
    'no delivering orphan for this run in your org',
    'there is no orphaned delivery for this run in your organization'
  )
// 409
export const conflict = (message: string) => new ApiError(409, 'conflict', message)
export const threadBusy = () =>
  new ApiError(
    409,
    'thread_busy',
    'a run of this thread has not ended yet; wait for it, or send multitask "enqueue" or "interrupt"'
  )
/** A terminal of a thread whose workspace another instance holds (a run or a terminal there): refused, not queued. */
export const workspaceBusy = () =>
  new ApiError(
    409,
    'workspace_busy',
    "the thread's workspace is in use on another instance (a run or a terminal of this thread); try again when it has ended",
    {
      headers: { 'retry-after': '5' }
    }
  )
export const idempotencyKeyReused = () =>
  new ApiError(409, 'idempotency_key_reused', 'this Idempotency-Key was used with a different request')
export const idempotencyKeyInUse = () =>
  new ApiError(
    409,
    'idempotency_key_in_use',
    'a request with this Idempotency-Key is still in progress; retry shortly',
    { headers: { 'retry-after': '1' } }
  )
export const frontendReleaseMismatch = (client: string, release: string) =>
  new ApiError(
    409,
    'frontend_release_mismatch',
    `client release ${JSON.stringify(client)} is not compatible with ${release}; reload the app`,
    {
      extra: { release }
    }
  )
// 412, 413, 415, 416, 428: content and versions (If-Match, uploads, ranges)
export const preconditionFailed = (message: string) => new ApiError(412, 'precondition_failed', message)
export const payloadTooLarge = (limit: number) =>
  new ApiError(413, 'payload_too_large', `the content is larger than ${limit} bytes (UPLOAD_MAX_BYTES)`)
export const unsupportedMediaType = (message: string) => new ApiError(415, 'unsupported_media_type', message)
/** RFC 9110 15.5.16: a content coding the server does not decode; Accept-Encoding says which it takes */
export const unsupportedContentEncoding = (encoding: string) =>
  new ApiError(
    415,
    'unsupported_media_type',
    `Content-Encoding ${JSON.stringify(encoding.slice(0, 100))} is not accepted; send the body uncompressed`,
    {
      headers: { 'accept-encoding': 'identity' }
    }
  )
export const rangeNotSatisfiable = (size: number) =>
  new ApiError(416, 'range_not_satisfiable', `the range is outside the content (${size} bytes)`, {
    headers: { 'content-range': `bytes */${size}` }
  })
export const preconditionRequired = () =>
  new ApiError(428, 'precondition_required', 'this write needs If-Match with the current ETag')
// 414
// 429
export function rateLimited(seconds: number, what = 'requests'): ApiError {
  const wait = Math.max(1, Math.ceil(seconds))
  return new ApiError(429, 'rate_limited', `too many ${what}; try again in ${wait} s`, {
    headers: { 'retry-after': String(wait) }
  })
}
// 502: the memory service (MEMORY_BACKEND=http) failed us
export const upstreamFailed = (what: string) =>
  new ApiError(502, 'upstream_failed', `the memory service did not answer the ${what}`)
export const updateFailed = (message = 'the memory service did not accept the update') =>
  new ApiError(502, 'update failed', message)
// 502: GitHub, Slack or a model provider answered with an error; the message says which
export const integrationFailed = (message: string) => new ApiError(502, 'upstream_failed', message)
export const deleteFailed = () => new ApiError(502, 'delete failed', 'the memory service did not accept the delete')
// 503
export const notReady = (retryAfterSeconds: number) =>
  new ApiError(503, 'not_ready', 'the database does not answer', {
    headers: { 'retry-after': String(retryAfterSeconds) }
  })
/** Seconds a client is told to wait while the disk is full. */
export const STORAGE_RETRY_AFTER_S = 30
export const storageFull = (retryAfterSeconds: number) =>
  new ApiError(503, 'not_ready', 'the disk is full: uploads and artifacts cannot be stored', {
    headers: { 'retry-after': String(retryAfterSeconds) }
  })
/** A model that is configured but cannot be reached now (its retries spent, or its breaker open): which and why. */
export function modelUnavailable(message: string, retryAfterMs: number): ApiError {
  return new ApiError(503, 'model_unavailable', message, {
    headers: { 'retry-after': String(Math.max(1, Math.ceil(retryAfterMs / 1000))) }
  })
}
export const sandboxUnavailable = (reason: string) => new ApiError(503, 'sandbox_unavailable', reason)
export const desktopUnavailable = () =>
  new ApiError(503, 'desktop_unavailable', 'the desktop needs Xvfb and x11vnc on this server')
export const integrationNotConnected = (kind: string) =>
  new ApiError(
    503,
    'integration_not_connected',
    `this organization has not connected ${kind}; an admin connects it with PUT /api/integrations/${kind.toLowerCase()}`
  )
/** GitHub's (or another service's) rate limit: try again when it resets */
export const upstreamRateLimited = (service: string, retryAfterSeconds: number) =>
  new ApiError(
    503,
    'upstream_rate_limited',
    `${service}'s rate limit is used up; try again in ${retryAfterSeconds} s`,
    { headers: { 'retry-after': String(retryAfterSeconds) } }
  )
export const secretsUnavailable = () =>
  new ApiError(503, 'secrets_unavailable', 'secrets need SECRETS_KEY (32 random bytes in base64) on this server')

/** Identifiers for errors raised by Fastify and its plugins rather than by our handlers. */
const FRAMEWORK_CODES: Record<string, [number, string]> = {
  FST_ERR_CTP_INVALID_JSON_BODY: [400, 'invalid_json'],
  FST_ERR_CTP_EMPTY_JSON_BODY: [400, 'invalid_json'],
  FST_ERR_CTP_BODY_TOO_LARGE: [413, 'payload_too_large'],
  FST_ERR_CTP_INVALID_MEDIA_TYPE: [415, 'unsupported_media_type'],
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: [400, 'bad_request'],
  FST_ERR_CTP_INVALID_TYPE: [415, 'unsupported_media_type'],
  FST_ERR_CTP_INVALID_CHARSET: [415, 'unsupported_media_type']
}

const STATUS_IDENTIFIERS: Record<number, string> = {
  400: 'bad_request',
  401: 'unauthorized',
  403: 'forbidden',
  404: 'not_found',
  405: 'method_not_allowed',
  406: 'not_acceptable',
  408: 'request_timeout',
  409: 'conflict',
  412: 'precondition_failed',
  413: 'payload_too_large',
  414: 'uri_too_long',
  415: 'unsupported_media_type',
  416: 'range_not_satisfiable',
  429: 'rate_limited',
  431: 'headers_too_large',
  503: 'service_unavailable'
}

interface ErrorReply {
  status: number
  body: { error: string; message: string; [key: string]: unknown }
  headers?: Record<string, string> | undefined
}

export function describeError(err: FastifyError | ApiError | Error): ErrorReply {
  if (err instanceof ApiError) {
    return {
      status: err.statusCode,
      body: { error: err.error, message: err.message, ...err.extra },
      headers: err.headers
    }
  }
  if (isDatabaseUnavailable(err)) return databaseUnavailable()
  if (isDiskFull(err)) return insufficientStorage()
  const fe = err as FastifyError
  if (fe.validation) {
    const context = fe.validationContext ?? 'body'
    const details = fe.validation.map((v) => {
      const missing =
        v.keyword === 'required' ? `/${String((v.params as { missingProperty?: string }).missingProperty)}` : ''
      const extra =
        v.keyword === 'additionalProperties'
          ? `/${String((v.params as { additionalProperty?: string }).additionalProperty)}`
          : ''
      return { path: `/${context}${v.instancePath}${missing}${extra}`, message: v.message ?? 'invalid' }
    })
    const first = details[0]
    return {
      status: 400,
      body: {
        error: 'validation_failed',
        message: first ? `${first.path}: ${first.message}` : 'invalid request',
        details
      }
    }
  }
  const mapped = fe.code ? FRAMEWORK_CODES[fe.code] : undefined
  if (mapped) return { status: mapped[0], body: { error: mapped[1], message: fe.message } }
  // secure-json-parse rejects __proto__ / constructor.prototype keys with a SyntaxError
  if (err instanceof SyntaxError && (fe.statusCode === 400 || fe.statusCode === undefined)) {
    return { status: 400, body: { error: 'invalid_json', message: err.message } }
  }
  const status = typeof fe.statusCode === 'number' && fe.statusCode >= 400 && fe.statusCode < 600 ? fe.statusCode : 500
  if (status >= 500) {
    const identifier = status === 503 ? 'service_unavailable' : 'internal_error'
    return {
      status,
      body: { error: identifier, message: status === 503 ? 'service unavailable, try again' : 'internal error' }
    }
  }
  return { status, body: { error: STATUS_IDENTIFIERS[status] ?? 'bad_request', message: fe.message } }
}

/** The database unreachable or restarting is a 503 the client retries, never a 500. */
function databaseUnavailable(): ErrorReply {
  return {
    status: 503,
    body: { error: 'database_unavailable', message: 'the database is unavailable; retry shortly' },
    headers: { 'retry-after': String(DATABASE_RETRY_AFTER_S) }
  }
}

/**
 * A write that found the disk full (ENOSPC, EDQUOT): 507, and the connection closes after the
 * answer, since the rest of an upload's body was not read.
 */
function insufficientStorage(): ErrorReply {
  return {
    status: 507,
    body: { error: 'insufficient_storage', message: 'the server has no room to store this now; try again later' },
    headers: { 'retry-after': String(STORAGE_RETRY_AFTER_S), connection: 'close' }
  }
}

/** The one root error handler and 404 handler: every error is `{error, message}` JSON. */
export default fp(
  async function errorsPlugin(app: FastifyInstance) {
    app.setErrorHandler(function rootErrorHandler(err: FastifyError, request, reply) {
      const { status, body, headers } = describeError(err)
      if (status >= 500) request.log.error({ err }, 'request failed')
      else
        request.log.info(
          { err: { message: err.message, code: (err as FastifyError).code }, status },
          'request rejected'
        )
      if (headers) reply.headers(headers)
      return reply.code(status).type('application/json; charset=utf-8').send(body)
    })

    // a known path with another method is 405 with Allow; an over-long unknown one is 414
    app.setNotFoundHandler(function notFoundHandler(request, reply) {
      const path = request.url.split('?')[0]!
      if (path.length > MAX_PATH_LENGTH) {
        return reply
          .code(414)
          .send({ error: 'uri_too_long', message: `the path is longer than ${MAX_PATH_LENGTH} characters` })
      }
      const allow = allowedMethods(this, request.url)
      if (allow.length > 0) {
        return reply
          .code(405)
          .header('allow', allow.join(', '))
          .send({
            error: 'method_not_allowed',
            message: `${request.method} is not allowed here; allowed: ${allow.join(', ')}`
          })
      }
      return reply.code(404).send({ error: 'not_found', message: `no route for ${request.method} ${path}` })
    })
  },
  { name: 'errors', fastify: '5.x' }
)
