import type { FastifyInstance } from 'fastify'
import type { Env } from '../../src/config.js'
import memoryRoutes from '../../src/memory/index.js'
import memoryService from '../../src/memory/service.js'
import providersService from '../../src/providers/service.js'
import retrievalService from '../../src/retrieval/service.js'
import { createRunEventSink } from '../../src/runs/events.js'
import secretsService from '../../src/secrets/service.js'
import { systemClock, type Clock } from '../../src/worker-loop.js'
import { buildGroupApp } from '../group-app.js'
import type { Teardown, TestDatabase } from '../helper.js'

/**
 * The Memory Hub group with what it stands on, wired as `buildApp` wires it: retrieval (search
 * by words and meaning, the embedding job; an org's embedding model may be one of its
 * providers', whose keys are sealed secrets) and the run event sink a delivered capture writes
 * to. Runs, the runtime, knowledge and the chat platforms are left out.
 */
export async function buildMemoryApp(
  t: Teardown,
  options: { clock?: Clock; env?: Partial<Record<keyof Env, string>>; db?: TestDatabase } = {}
): Promise<FastifyInstance & { testDb: TestDatabase }> {
  const clock = options.clock ?? systemClock
  let backendName: 'postgres' | 'http' | 'off' = 'postgres'
  return buildGroupApp(t, {
    db: options.db,
    env: options.env,
    services: async (app, config) => {
      backendName = config.MEMORY_BACKEND
      await app.register(secretsService, { config })
      await app.register(providersService, { config, secrets: app.secrets.internal })
      await app.register(retrievalService, { config, providers: app.providers.forRuns, clock })
      await app.register(memoryService, { config, events: createRunEventSink(app.db), retrieval: app.retrieval })
    },
    routes: [
      async (scope) => {
        await scope.register(memoryRoutes, { backendName })
      }
    ]
  })
}
