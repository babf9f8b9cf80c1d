import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import { API_COMPAT } from '../src/config.js'
import { frontendReleaseMismatch } from './errors.js'
import { isApiPath } from './security-headers.js'

const MUTATING = new Set(['POST', 'PUT', 'PATCH', 'DELETE'])

export interface ReleaseOptions {
  release: string
  isDevBuild: boolean
}

/**
 * The release headers: every /api answer carries these. They are
 * static, so plugins/security-headers.ts sets them with the other fixed headers, in the
 * one hook that runs before everything else (404s and errors carry them too).
 */
export function releaseHeaders(release: string): Record<string, string> {
  return { 'x-service-release-fingerprint': release, 'x-service-api-compat': API_COMPAT }
}

/**
 * The release gate: a mutating /api request from an incompatible
 * client release is refused before any other work. A dev build accepts every client, so it
 * has no gate at all.
 */
export default fp(
  async function releasePlugin(app: FastifyInstance, opts: ReleaseOptions) {
    const { release, isDevBuild } = opts
    if (isDevBuild) return
    // a callback hook, not an async one: it runs on every request, and a promise per hook
    // per request is measurable on the cheapest routes (bench/foundation.ts)
    app.addHook('onRequest', function releaseGate(request, _reply, done) {
      if (!MUTATING.has(request.method) || !isApiPath(request.url)) return done()
      const client = request.headers['x-service-client-release']
      if (client === undefined || client === release) return done()
      done(frontendReleaseMismatch(String(client), release))
    })
  },
  { name: 'release', fastify: '5.x', dependencies: ['errors'] }
)
