import type { FastifyInstance } from 'fastify'
import type { Env } from '../../src/config.js'
import platformRoutes from '../../src/platform/index.js'
import { buildGroupApp } from '../group-app.js'
import type { Teardown, TestDatabase } from '../helper.js'

/**
 * The platform group alone: the dashboard and fleet usage read the database (the rollup a
 * trigger on `runs` keeps), so they need no service. A test whose runs are inserted as rows
 * uses this; one that runs runs boots the whole app.
 */
export function buildPlatformApp(
  t: Teardown,
  options: { env?: Partial<Record<keyof Env, string>>; db?: TestDatabase } = {}
): Promise<FastifyInstance & { testDb: TestDatabase }> {
  return buildGroupApp(t, {
    db: options.db,
    env: options.env,
    routes: [platformRoutes]
  })
}
