import type { FastifyInstance } from 'fastify'
import artifactsRoutes from '../../src/artifacts/index.js'
import artifactsService from '../../src/artifacts/service.js'
import type { Env } from '../../src/config.js'
import { buildGroupApp } from '../group-app.js'
import type { Teardown, TestDatabase } from '../helper.js'

/** The artifacts group alone: its blob store and sweeper, uploads, artifacts, versions and proposals. */
export function buildArtifactsApp(
  t: Teardown,
  options: { env?: Partial<Record<keyof Env, string>>; db?: TestDatabase } = {}
): Promise<FastifyInstance & { testDb: TestDatabase }> {
  return buildGroupApp(t, {
    db: options.db,
    env: options.env,
    services: async (app, config) => {
      await app.register(artifactsService, { config })
    },
    routes: [artifactsRoutes]
  })
}
