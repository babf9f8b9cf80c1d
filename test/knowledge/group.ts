import type { FastifyInstance } from 'fastify'
import artifactsService from '../../src/artifacts/service.js'
import type { Env } from '../../src/config.js'
import knowledgeRoutes from '../../src/knowledge/index.js'
import knowledgeService from '../../src/knowledge/service.js'
import providersService from '../../src/providers/service.js'
import retrievalService from '../../src/retrieval/service.js'
import secretsService from '../../src/secrets/service.js'
import { systemClock, type Clock } from '../../src/worker-loop.js'
import { buildGroupApp } from '../group-app.js'
import type { Teardown, TestDatabase } from '../helper.js'

/**
 * The knowledge group with what it stands on, wired as `buildApp` wires it: retrieval (search
 * by words and meaning, the embedding job; an org's embedding model may be one of its
 * providers', whose keys are sealed secrets) and the artifacts store (a document's bytes).
 * Runs, memory, the runtime and the chat platforms are left out.
 */
export async function buildKnowledgeApp(
  t: Teardown,
  options: { clock?: Clock; env?: Partial<Record<keyof Env, string>>; db?: TestDatabase } = {}
): Promise<FastifyInstance & { testDb: TestDatabase }> {
  const clock = options.clock ?? systemClock
  return buildGroupApp(t, {
    db: options.db,
    env: options.env,
    services: async (app, config) => {
      await app.register(secretsService, { config })
      await app.register(providersService, { config, secrets: app.secrets.internal })
      await app.register(retrievalService, { config, providers: app.providers.forRuns, clock })
      await app.register(artifactsService, { config })
      await app.register(knowledgeService, { config, store: app.artifacts.store, clock, retrieval: app.retrieval })
    },
    routes: [knowledgeRoutes]
  })
}
