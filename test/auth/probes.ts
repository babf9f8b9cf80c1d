import type { FastifyPluginAsync } from 'fastify'
import { realUserId } from '../../src/auth/principal.js'

/**
 * Probe routes for identity tests, registered inside /api through `apiPlugins` so the
 * principal, scope and guard hooks apply exactly as to a domain route.
 * `GET /api/projects` and `GET /api/tasks` stand in for allowlisted read routes not built yet.
 */
export const probeRoutes: FastifyPluginAsync = async (app) => {
  const whoami = async (request: { principal: unknown }) => ({ principal: request.principal, realUser: realUserId(request.principal as never) })
  app.get('/probe/whoami', { config: { scope: 'org' } }, whoami)
  app.get('/probe/user', { config: { scope: 'user' } }, whoami)
  app.get('/probe/admin', { config: { scope: 'admin' } }, whoami)
  app.post('/probe/echo', { config: { scope: 'org' } }, async (request) => ({ body: request.body as unknown }))
  app.get('/projects', { config: { scope: 'org' } }, whoami)
  // an allowlisted pattern that needs a real user: a key reaches it and is refused by scope
  app.get('/tasks', { config: { scope: 'user' } }, whoami)
}
