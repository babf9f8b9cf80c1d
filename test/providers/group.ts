import type { FastifyInstance } from 'fastify'
import type { Env } from '../../src/config.js'
import providersRoutes from '../../src/providers/index.js'
import { registerSelf } from '../../src/providers/self-reach.js'
import providersService from '../../src/providers/service.js'
import retrievalService from '../../src/retrieval/service.js'
import runsService from '../../src/runs/service.js'
import secretsRoutes from '../../src/secrets/index.js'
import secretsService from '../../src/secrets/service.js'
import { systemClock } from '../../src/worker-loop.js'
import { absentGroup, buildGroupApp } from '../group-app.js'
import type { Teardown, TestDatabase } from '../helper.js'

/**
 * The providers group with what it stands on, wired as `buildApp` wires it: the secrets service
 * (a provider's key is an internal secret), retrieval (an org's embedding model may be one of
 * its providers') and the runs service, whose engines list the deployment's models, resolve an
 * org's default model and forget it when a provider changes. No run runs here: the run worker
 * is off (RUN_WORKER_CONCURRENCY=0) and the ports only it calls are absent; a test that runs
 * runs through a provider boots the whole app. Besides its own routes, the secrets routes (a
 * provider's key is never listed there).
 */
export function buildProvidersApp(
  t: Teardown,
  options: { env?: Partial<Record<keyof Env, string>>; db?: TestDatabase } = {}
): Promise<FastifyInstance & { testDb: TestDatabase }> {
  return buildGroupApp(t, {
    db: options.db,
    env: { ...options.env, RUN_WORKER_CONCURRENCY: '0' },
    services: async (app, config) => {
      // where this instance listens and its public URL: a provider may never point there
      const forgetSelf = registerSelf(() => app.addresses().filter((a) => typeof a !== 'string'), config.PUBLIC_URL)
      app.addHook('onClose', async () => forgetSelf())
      await app.register(secretsService, { config })
      await app.register(providersService, { config, secrets: app.secrets.internal })
      await app.register(retrievalService, { config, providers: app.providers.forRuns, clock: systemClock })
      await app.register(runsService, {
        config,
        memory: absentGroup('memory'),
        tools: null,
        artifacts: absentGroup('artifacts'),
        knowledge: absentGroup('knowledge'),
        skills: absentGroup('skills'),
        followUps: [],
        secrets: app.secrets.forRuns,
        providers: app.providers.forRuns
      })
    },
    routes: [
      secretsRoutes,
      async (scope) => {
        await scope.register(providersRoutes, { catalogs: [() => scope.runs.engines.catalog()] })
      }
    ]
  })
}
