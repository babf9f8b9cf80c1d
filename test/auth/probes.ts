import type { FastifyPluginAsync } from 'fastify'
import { realUserId } from '../../src/auth/principal.js'

/**
 * Probe routes for identity tests, registered inside /api through `apiPlugins` so the
 * principal, scope and guard hooks apply exactly as to a domain route.
 * `GET /api/probe/key-org` and `GET /api/probe/key-user` are what a key may reach (they
 * declare `keyAccess: 'read'`); the others declare `none`.
 */
export const probeRoutes: FastifyPluginAsync = async (app) => {
  const whoami = async (request: { principal: unknown }) => ({
    principal: request.principal,
    realUser: realUserId(request.principal as never)
  })
  app.get('/probe/whoami', { config: { scope: 'org', keyAccess: 'none' } }, whoami)
  app.get('/probe/user', { config: { scope: 'user', keyAccess: 'none' } }, whoami)
  app.get('/probe/admin', { config: { scope: 'admin', keyAccess: 'none' } }, whoami)
  app.post('/probe/echo', { config: { scope: 'org', keyAccess: 'none' } }, async (request) => ({
    body: request.body as unknown
  }))
  app.get('/probe/key-org', { config: { scope: 'org', keyAccess: 'read' } }, whoami)
  // a key-reachable route that needs a real user: a key reaches it and is refused by scope
  app.get('/probe/key-user', { config: { scope: 'user', keyAccess: 'read' } }, whoami)
}

/** buildTestApp options: the probe routes. */
export const withProbes = { apiPlugins: [probeRoutes] }
