import type { FastifyPluginAsync } from 'fastify'
import { realUserId } from '../../src/auth/principal.js'

/**
 * Probe routes for identity tests, registered inside /api through `apiPlugins` so the
 * principal, scope and guard hooks apply exactly as to a domain route.
 * `GET /api/probe/key-org` and `GET /api/probe/key-user` are what a key may reach
 * (`PROBE_KEY_ROUTES`, given to the app as `extraKeyRoutes`): `withProbes` has both.
 */
export const probeRoutes: FastifyPluginAsync = async (app) => {
  const whoami = async (request: { principal: unknown }) => ({
    principal: request.principal,
    realUser: realUserId(request.principal as never)
  })
  app.get('/probe/whoami', { config: { scope: 'org' } }, whoami)
  app.get('/probe/user', { config: { scope: 'user' } }, whoami)
  app.get('/probe/admin', { config: { scope: 'admin' } }, whoami)
  app.post('/probe/echo', { config: { scope: 'org' } }, async (request) => ({ body: request.body as unknown }))
  app.get('/probe/key-org', { config: { scope: 'org' } }, whoami)
  // a key-reachable route that needs a real user: a key reaches it and is refused by scope
  app.get('/probe/key-user', { config: { scope: 'user' } }, whoami)
}

export const PROBE_KEY_ROUTES = ['GET /api/probe/key-org', 'GET /api/probe/key-user']

/** buildTestApp options: the probe routes, with the two a key may reach. */
export const withProbes = { apiPlugins: [probeRoutes], extraKeyRoutes: PROBE_KEY_ROUTES }
