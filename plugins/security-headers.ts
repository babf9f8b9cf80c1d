import type { IncomingMessage, ServerResponse } from 'node:http'
import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import * as helmetModule from 'helmet'
import type { HelmetOptions } from 'helmet'

type HelmetMiddleware = (req: IncomingMessage, res: ServerResponse, next: (err?: unknown) => void) => void
// helmet ships ESM and CJS builds whose typings disagree on the default export under
// ts-node (tap); the namespace's `default` is the function in both
const helmet = (helmetModule as unknown as { default: (options: HelmetOptions) => HelmetMiddleware }).default

/**
 * The headers helmet would set, computed once. Our policy is static (no nonces), so
 * helmet's per-request work (parsing CSP directives, eleven middlewares) is the same
 * every time; @fastify/helmet redoes it on each request, which cost about a tenth of the
 * throughput of a trivial route in `npm run bench -- foundation`.
 */
export function helmetHeaders(options: HelmetOptions): Record<string, string> {
  const headers: Record<string, string> = {}
  const res = {
    setHeader(name: string, value: string | number | readonly string[]) {
      headers[name.toLowerCase()] = Array.isArray(value) ? value.join(', ') : String(value)
    },
    removeHeader(name: string) {
      delete headers[name.toLowerCase()]
    }
  }
  let failure: unknown
  helmet(options)({} as IncomingMessage, res as unknown as ServerResponse, (err?: unknown) => {
    failure = err
  })
  if (failure) throw failure
  return Object.freeze(headers) as Record<string, string>
}

/**
 * Security headers on every answer, and the request id (`x-request-id`, the one Fastify
 * took from the request or made) for tracing, in one hook. The API serves JSON only, so
 * its CSP allows nothing; /docs replaces it with its own (swagger-ui's staticCSP, see
 * plugins/openapi.ts).
 */
export default fp(async function securityHeaders(app: FastifyInstance) {
  const headers = helmetHeaders({
    contentSecurityPolicy: { useDefaults: false, directives: { defaultSrc: ["'none'"], frameAncestors: ["'none'"], baseUri: ["'none'"] } }
  })
  // a callback hook, not an async one: it runs on every request, and a promise per hook
  // per request is measurable on the cheapest routes (bench/foundation.ts)
  app.addHook('onRequest', function setResponseHeaders(request, reply, done) {
    reply.headers(headers)
    reply.header('x-request-id', request.id)
    done()
  })
}, { name: 'security-headers', fastify: '5.x' })
