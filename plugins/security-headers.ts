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
 * every time; @fastify/helmet redoes it on each request.
 */
export function helmetHeaders(options: HelmetOptions): Record<string, string> {
  const headers = new Map<string, string>()
  const res = {
    setHeader(name: string, value: string | number | readonly string[]) {
      headers.set(name.toLowerCase(), Array.isArray(value) ? value.join(', ') : String(value))
    },
    removeHeader(name: string) {
      headers.delete(name.toLowerCase())
    }
  }
  let failure: unknown
  helmet(options)({} as IncomingMessage, res as unknown as ServerResponse, (err?: unknown) => {
    failure = err
  })
  if (failure) throw failure
  return Object.fromEntries(headers)
}

const HSTS = 'strict-transport-security'

/**
 * What everything outside /api carries (/docs is an HTML page): helmet's full set, with the same deny-all CSP that
 * /docs replaces with its own.
 */
const PAGE_HEADERS: Readonly<Record<string, string>> = Object.freeze(
  helmetHeaders({
    contentSecurityPolicy: {
      useDefaults: false,
      directives: { defaultSrc: ["'none'"], frameAncestors: ["'none'"], baseUri: ["'none'"] }
    }
  })
)

/**
 * What an /api answer carries: the set OWASP's REST Security Cheat Sheet names for API
 * responses, less X-Frame-Options, which browsers ignore when the CSP has
 * `frame-ancestors` (CSP Level 2, in every browser since IE). JSON is never rendered, so
 * helmet's document headers (X-XSS-Protection, X-DNS-Prefetch-Control,
 * Origin-Agent-Cluster, Referrer-Policy and the rest) protect nothing there, and every
 * header costs every client and this server on every call (about 1.3 µs, see the
 * foundation bench). `no-store` keeps tenant data out of browser and proxy caches; a
 * route that streams or may be cached sets its own Cache-Control (SSE: no-cache). The
 * CSP and HSTS values are helmet's, as on the pages.
 */
const API_HEADERS: Readonly<Record<string, string>> = Object.freeze({
  'cache-control': 'no-store',
  'content-security-policy': PAGE_HEADERS['content-security-policy']!,
  'x-content-type-options': 'nosniff',
  [HSTS]: PAGE_HEADERS[HSTS]!
})

/** The same set without Strict-Transport-Security, which RFC 6797 (7.2) forbids on plain http. */
function withoutHsts(headers: Readonly<Record<string, string>>): Readonly<Record<string, string>> {
  const { [HSTS]: _hsts, ...rest } = headers
  return Object.freeze(rest)
}

const PAGE_PLAIN = withoutHsts(PAGE_HEADERS)

/** `/api` itself or anything under it (the release headers' scope too). */
export function isApiPath(url: string): boolean {
  return url.startsWith('/api') && (url.length === 4 || url[4] === '/' || url[4] === '?')
}

export interface SecurityHeadersOptions {
  /** more fixed headers for /api answers (the release headers) */
  apiHeaders?: Readonly<Record<string, string>>
}

/**
 * Every answer's fixed headers in one hook: the security headers, the extra /api ones (the
 * release headers), and the request id (`x-request-id`, the one Fastify took from the
 * request or made) for tracing. Registered first, so refusals by later hooks carry them
 * too. Strict-Transport-Security goes only over https: TLS to this process, or to a proxy
 * that says so in X-Forwarded-Proto when TRUST_PROXY trusts it.
 */
export default fp(
  async function securityHeaders(app: FastifyInstance, opts: SecurityHeadersOptions) {
    const headersFor = fixedHeaders(opts.apiHeaders)
    // a callback hook, not an async one: it runs on every request, and a promise per hook
    // per request is measurable on the cheapest routes (bench/foundation.ts)
    app.addHook('onRequest', function setResponseHeaders(request, reply, done) {
      reply.headers(headersFor(request.url, request.protocol === 'https'))
      reply.header('x-request-id', request.id)
      done()
    })
  },
  { name: 'security-headers', fastify: '5.x' }
)

/**
 * The fixed headers of an answer to `url`, as the hook sets them; also for the answers
 * written where no hook runs (plugins/router-refusals.ts).
 */
export function fixedHeaders(
  apiHeaders: Readonly<Record<string, string>> = {}
): (url: string, secure: boolean) => Readonly<Record<string, string>> {
  const api = Object.freeze({ ...API_HEADERS, ...apiHeaders })
  const apiPlain = withoutHsts(api)
  return (url, secure) => (isApiPath(url) ? (secure ? api : apiPlain) : secure ? PAGE_HEADERS : PAGE_PLAIN)
}
