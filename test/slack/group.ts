import type { FastifyInstance } from 'fastify'
import type { Env } from '../../src/config.js'
import integrationsRoutes from '../../src/integrations/index.js'
import runsRoutes from '../../src/runs/index.js'
import { forChatPlatforms } from '../../src/runs/ports/chat-platforms.js'
import type { RunThreadContext } from '../../src/runs/ports/thread-context.js'
import runsService from '../../src/runs/service.js'
import secretsRoutes from '../../src/secrets/index.js'
import secretsService from '../../src/secrets/service.js'
import slackRoutes from '../../src/slack/index.js'
import slackService from '../../src/slack/service.js'
import { systemClock, type Clock } from '../../src/worker-loop.js'
import { absentGroup, buildGroupApp } from '../group-app.js'
import type { Teardown, TestDatabase } from '../helper.js'

/**
 * The Slack group with what it stands on, wired as `buildApp` wires it: the secrets service
 * (the bot token and signing secret are internal secrets) and the runs service, which an
 * event addressed to the bot starts a run through (the chat-platform adapter): the run is
 * queued and announced, but no run runs here, the run worker is off
 * (RUN_WORKER_CONCURRENCY=0) and the ports only it calls are absent, as is the tool gateway
 * that decides approvals. Besides its own routes, those its tests read: the runs, the org's
 * integrations and its secrets (the credentials never listed). A test of replies to finished
 * runs or of approvals decided from Slack boots the whole app.
 */
export function buildSlackApp(
  t: Teardown,
  options: { clock?: Clock; env?: Partial<Record<keyof Env, string>>; db?: TestDatabase } = {}
): Promise<FastifyInstance & { testDb: TestDatabase }> {
  const clock = options.clock ?? systemClock
  return buildGroupApp(t, {
    db: options.db,
    env: { ...options.env, RUN_WORKER_CONCURRENCY: '0' },
    services: async (app, config) => {
      await app.register(secretsService, { config })
      const threadContext: RunThreadContext[] = []
      await app.register(runsService, {
        config,
        memory: absentGroup('memory', 'the Slack group app'),
        tools: null,
        artifacts: absentGroup('artifacts', 'the Slack group app'),
        knowledge: absentGroup('knowledge', 'the Slack group app'),
        skills: absentGroup('skills', 'the Slack group app'),
        followUps: [],
        secrets: app.secrets.forRuns,
        threadContext,
        clock
      })
      await app.register(slackService, {
        config,
        clock,
        runs: forChatPlatforms(app.runs, app.log.child({ component: 'slack' })),
        secrets: app.secrets,
        approvals: absentGroup('runtime', 'the Slack group app')
      })
      threadContext.push(app.slack.threadContext)
    },
    routes: [runsRoutes, secretsRoutes, integrationsRoutes, slackRoutes]
  })
}
