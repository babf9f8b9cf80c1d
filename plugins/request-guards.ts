import type { FastifyInstance, FastifyReply, FastifyRequest, HookHandlerDoneFunction } from 'fastify'
import fp from 'fastify-plugin'
import { forbiddenOrigin, serverOwnedField, unsupportedContentEncoding } from './errors.js'
import { asList } from './hook-list.js'

const MUTATING = new Set(['POST', 'PUT', 'PATCH', 'DELETE'])

/** Fields the server sets from the principal; a client that sends them is refused, never honoured. */
export const SERVER_OWNED_FIELDS = ['org_id', 'orgId', 'user_id', 'userId', 'origin'] as const

export interface RequestGuardOptions {
  /** CORS_ORIGINS: browser origins trusted besides the service's own */
  trustedOrigins: readonly string[]
}

/** The service's own origin as this request reached it (Host header; protocol from TRUST_PROXY rules). */
export function ownOrigin(request: FastifyRequest): string {
  return `${request.protocol}://${request.host}`
}

/** A Content-Encoding naming nothing but `identity` (any case; empty members ignored), i.e. a body sent as it is. */
function isIdentity(encoding: string): boolean {
  return encoding.split(',').every((coding) => {
    const c = coding.trim().toLowerCase()
    return c === '' || c === 'identity'
  })
}

/** Whether the request carries a body at all (RFC 9112 6.3: a length above 0, or chunked). */
function hasBody(request: FastifyRequest): boolean {
  const length = request.headers['content-length']
  return request.headers['transfer-encoding'] !== undefined || (length !== undefined && length.trim() !== '0')
}

/**
 * Three guards every /api route gets, whatever its plugin:
 *
 * 1. Origin check (CSRF). A browser sends cookies (and, with dev-org access,
 *    acts anonymously) on cross-site POSTs that SameSite=Lax does not stop for same-site
 *    subdomains, so every mutating request not authenticated by a bearer key must come
 *    from the service's own origin or a CORS_ORIGINS one: a foreign `Origin`, or no
 *    `Origin` with `Sec-Fetch-Site: cross-site`, is `403 forbidden_origin`. Requests
 *    without either header (curl, servers) pass: they carry no ambient browser cookie.
 * 2. Server-owned fields: `org_id`/`orgId`, `user_id`/`userId` or
 *    `origin` at the top level of a JSON body is `400 server_owned_field`, before any
 *    schema runs, on every route that takes a body, so no handler can be tricked into
 *    trusting one.
 * 3. Content-Encoding. No route decodes a compressed body, so a body whose
 *    `Content-Encoding` is anything but `identity` would be read as if it were plain (gzip
 *    bytes parsed as JSON, or stored as an upload's content): it is
 *    `415 unsupported_media_type` with `Accept-Encoding: identity` (RFC 9110 15.5.16),
 *    before any of it is read. It runs after authentication, as the other refusals of a
 *    body do.
 */
export default fp(
  async function requestGuards(app: FastifyInstance, opts: RequestGuardOptions) {
    const trusted = new Set(opts.trustedOrigins)

    // callback hooks: they run on every /api request and almost always pass
    app.addHook('onRequest', function originCheck(request, _reply, done) {
      if (!MUTATING.has(request.method) || request.headers.authorization !== undefined) return done()
      const origin = request.headers.origin
      if (origin === undefined) {
        done(
          request.headers['sec-fetch-site'] === 'cross-site'
            ? forbiddenOrigin('a cross-site request may not change anything here')
            : undefined
        )
        return
      }
      if (trusted.has(origin) || origin === ownOrigin(request)) return done()
      done(forbiddenOrigin(`origin ${JSON.stringify(origin.slice(0, 200))} may not change anything here`))
    })

    app.addHook('preParsing', function contentEncoding(request, _reply, payload, done) {
      const encoding = request.headers['content-encoding']
      if (encoding === undefined || isIdentity(encoding) || !hasBody(request)) return done(null, payload)
      done(unsupportedContentEncoding(encoding))
    })

    function serverOwnedFields(request: FastifyRequest, _reply: FastifyReply, done: HookHandlerDoneFunction) {
      const body = request.body
      if (body === null || typeof body !== 'object' || Array.isArray(body) || Buffer.isBuffer(body)) return done()
      for (const field of SERVER_OWNED_FIELDS) {
        if (Object.hasOwn(body, field)) {
          return done(serverOwnedField(field))
        }
      }
      done()
    }
    // Only routes that take a body carry the check (Fastify parses none for GET and HEAD), so
    // reads pay nothing for it. It goes first among the route's own preValidation hooks; the
    // scope has none.
    app.addHook('onRoute', (route) => {
      const methods = Array.isArray(route.method) ? route.method : [route.method]
      if (methods.every((m) => m === 'GET' || m === 'HEAD')) return
      route.preValidation = [serverOwnedFields, ...asList(route.preValidation)]
    })
  },
  { name: 'request-guards', fastify: '5.x', dependencies: ['errors'] }
)
