import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import { API_COMPAT } from '../src/config.js'
import { ApiError } from './errors.js'

const MUTATING = new Set(['POST', 'PUT', 'PATCH', 'DELETE'])

export interface ReleaseOptions {
  release: string
  isDevBuild: boolean
}

function isApiPath(url: string): boolean {
  return url.startsWith('/api') && (url.length === 4 || url[4] === '/' || url[4] === '?')
}

/**
 * Spec section 9 / contract 1.1: every /api response carries the release headers, and a
 * mutating request from an incompatible client release is refused before any other work.
 * Registered first, as an onRequest hook at the root, so 404s and errors carry them too.
 */
export default fp(async function releasePlugin(app: FastifyInstance, opts: ReleaseOptions) {
  const { release, isDevBuild } = opts
  // a callback hook, not an async one: it runs on every request, and a promise per hook
  // per request is measurable on the cheapest routes (bench/foundation.ts)
  app.addHook('onRequest', function releaseHeaders(request, reply, done) {
    if (!isApiPath(request.url)) return done()
    reply.header('x-service-release-fingerprint', release)
    reply.header('x-service-api-compat', API_COMPAT)
    if (isDevBuild || !MUTATING.has(request.method)) return done()
    const client = request.headers['x-service-client-release']
    if (client === undefined || client === release) return done()
    done(new ApiError(409, 'frontend_release_mismatch', `client release ${JSON.stringify(String(client))} is not compatible with ${release}; reload the app`, {
      extra: { release }
    }))
  })
}, { name: 'release', fastify: '5.x', dependencies: ['errors'] })
