import type { FastifyInstance } from 'fastify'
import type { Env } from '../../src/config.js'
import { buildGroupApp } from '../group-app.js'
import type { Teardown, TestDatabase } from '../helper.js'
import { probeRoutes } from './probes.js'

/**
 * The auth group alone: every group app has the auth routes (sign-up, sessions, organizations,
 * members, keys) inside its /api scope, so this one adds no service, only the probe routes
 * (test/auth/probes.ts) that show what the principal made of a request. A test that reads
 * another group's routes (GET /api/config, /api/runs) keeps the whole app.
 */
export function buildAuthApp(
  t: Teardown,
  options: { env?: Partial<Record<keyof Env, string>>; db?: TestDatabase } = {}
): Promise<FastifyInstance & { testDb: TestDatabase }> {
  return buildGroupApp(t, {
    db: options.db,
    env: options.env,
    routes: [probeRoutes]
  })
}
