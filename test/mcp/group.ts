import type { FastifyInstance } from 'fastify'
import knowledgeRoutes from '../../src/knowledge/index.js'
import mcpRoutes from '../../src/mcp/index.js'
import memoryRoutes from '../../src/memory/index.js'
import runtimeRoutes from '../../src/runtime/index.js'
import secretsRoutes from '../../src/secrets/index.js'
import skillsRoutes from '../../src/skills/index.js'
import { registerSelf } from '../../src/providers/self-reach.js'
import type { Clock } from '../../src/worker-loop.js'
import { buildGroupApp } from '../group-app.js'
import type { Teardown, TestDatabase } from '../helper.js'
import runsRoutes from '../../src/runs/index.js'
import { registerRunsServices, type RunsGroupOptions } from '../runs/group.js'

/**
 * The MCP group: the org's MCP servers (their sealed headers, the background checks, their
 * tools offered to runs through the tool gateway) and the /api/mcp endpoint, whose tools
 * search memory and knowledge, start runs and skill runs and decide tool calls. So it stands
 * on those groups, as `buildApp` wires them (test/runs/group.ts with knowledge, the runtime
 * and MCP), with their routes, which the tests compare the endpoint's answers with, and the
 * secrets routes (a run's secrets, redacted from what MCP tools answer). Left out: GitHub,
 * Slack, automations, the providers and platform routes, GET /api/config and /openapi.json.
 */
export function buildMcpApp(
  t: Teardown,
  options: Pick<RunsGroupOptions, 'env' | 'db'> & { clock?: Clock } = {}
): Promise<FastifyInstance & { testDb: TestDatabase }> {
  let backendName: 'postgres' | 'http' | 'off' = 'postgres'
  let corsOrigins: string[] = []
  let sessionIdleHours = 0
  return buildGroupApp(t, {
    db: options.db,
    env: options.env,
    services: async (app, config) => {
      backendName = config.MEMORY_BACKEND
      corsOrigins = config.CORS_ORIGINS
      sessionIdleHours = config.MCP_SESSION_IDLE_HOURS
      // as buildApp does: URLs an org types may never point at this instance's addresses or public URL
      const forgetSelf = registerSelf(() => app.addresses().filter((a) => typeof a !== 'string'), config.PUBLIC_URL)
      app.addHook('onClose', async () => forgetSelf())
      await registerRunsServices(app, config, {
        ...(options.clock ? { clock: options.clock } : {}),
        knowledge: true,
        mcp: true,
        runtime: true
      })
    },
    // in the order buildApp registers them
    routes: [
      runsRoutes,
      async (scope) => {
        await scope.register(memoryRoutes, { backendName })
        await scope.register(runtimeRoutes, { corsOrigins })
      },
      knowledgeRoutes,
      skillsRoutes,
      secretsRoutes,
      async (scope) => {
        await scope.register(mcpRoutes, { sessionIdleHours })
      }
    ]
  })
}
