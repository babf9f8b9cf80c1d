import type { FastifyInstance } from 'fastify'
import idempotencyPlugin from '../plugins/idempotency/index.js'
import requestGuards from '../plugins/request-guards.js'
import principalPlugin from './auth/principal.js'
import auth from './auth/index.js'
import type { Config } from './config.js'

/**
 * The `/api` scope: the request guards, the principal (org scope, key access, the start refused
 * on a route that declares no key access), idempotency and the auth routes, then `groups`
 * registers the route groups inside it. `buildApp` and a test of one group
 * (`test/group-app.ts`) both call this, so a group's tests stand on exactly what production
 * wires around its routes.
 */
export async function registerApiScope(
  app: FastifyInstance,
  config: Config,
  groups: (scope: FastifyInstance) => Promise<void>
): Promise<void> {
  await app.register(
    async function api(scope) {
      await scope.register(requestGuards, { trustedOrigins: config.CORS_ORIGINS })
      await scope.register(principalPlugin, {
        allowDevOrg: config.ALLOW_DEV_ORG,
        secureCookie: config.COOKIE_SECURE,
        cacheTtlMs: config.IDENTITY_CACHE_MS
      })
      await scope.register(idempotencyPlugin)
      await scope.register(auth, {
        allowDevOrg: config.ALLOW_DEV_ORG,
        rateLimit: {
          perIp: config.AUTH_RATE_LIMIT_PER_IP,
          perAccount: config.AUTH_RATE_LIMIT_PER_ACCOUNT,
          windowMs: config.AUTH_RATE_LIMIT_WINDOW_MS
        }
      })
      await groups(scope)
    },
    { prefix: '/api' }
  )
}
