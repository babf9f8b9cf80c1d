import type { FastifyInstance } from 'fastify'
import type { Env } from '../../src/config.js'
import githubRoutes from '../../src/github/index.js'
import githubService from '../../src/github/service.js'
import runsService from '../../src/runs/service.js'
import integrationsRoutes from '../../src/integrations/index.js'
import secretsRoutes from '../../src/secrets/index.js'
import secretsService from '../../src/secrets/service.js'
import skillsRoutes from '../../src/skills/index.js'
import skillsService from '../../src/skills/service.js'
import { absentGroup, buildGroupApp } from '../group-app.js'
import type { Teardown, TestDatabase } from '../helper.js'

/**
 * The GitHub group with what it stands on, wired as `buildApp` wires it: the secrets service
 * (the token is an internal secret), the skills service (skill import) and the runs service
 * (the skills routes and a wiki build start runs): runs are queued, none runs here, the run
 * worker is off (RUN_WORKER_CONCURRENCY=0) and the ports only it calls are absent. Besides
 * its own routes, those its tests read: the org's integrations, its secrets (the token never
 * listed) and its skills (imported ones). The wiki's pages are knowledge records written by
 * runs, so test/github/wiki.test.ts boots the whole app.
 */
export function buildGitHubApp(
  t: Teardown,
  options: { env?: Partial<Record<keyof Env, string>>; db?: TestDatabase } = {}
): Promise<FastifyInstance & { testDb: TestDatabase }> {
  return buildGroupApp(t, {
    db: options.db,
    env: { ...options.env, RUN_WORKER_CONCURRENCY: '0' },
    services: async (app, config) => {
      await app.register(secretsService, { config })
      await app.register(skillsService)
      await app.register(githubService, {
        config,
        records: absentGroup('knowledge', 'the GitHub group app'),
        skills: app.skills.forImport,
        secrets: app.secrets
      })
      await app.register(runsService, {
        config,
        memory: absentGroup('memory', 'the GitHub group app'),
        tools: null,
        artifacts: absentGroup('artifacts', 'the GitHub group app'),
        knowledge: absentGroup('knowledge', 'the GitHub group app'),
        skills: app.skills.forRuns,
        followUps: [app.skills.forFollowUps],
        secrets: app.secrets.forRuns,
        jobs: [app.github.forJobs]
      })
    },
    routes: [skillsRoutes, secretsRoutes, integrationsRoutes, githubRoutes]
  })
}
