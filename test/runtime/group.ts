import websocket from '@fastify/websocket'
import type { FastifyInstance } from 'fastify'
import { websocketOptions } from '../../plugins/websocket.js'
import artifactsService from '../../src/artifacts/service.js'
import type { Env } from '../../src/config.js'
import { createRunEventSink } from '../../src/runs/events.js'
import { forRuntime } from '../../src/runs/ports/runtime.js'
import runtimeRoutes from '../../src/runtime/index.js'
import runtimeService, { type RuntimeWiring } from '../../src/runtime/service.js'
import { absentGroup, buildGroupApp } from '../group-app.js'
import type { Teardown, TestDatabase } from '../helper.js'

/**
 * The agent runtime group: sandboxes, the tool gateway and its approvals and policies,
 * terminals and desktops (so the websocket plugin, with the whole app's options), on the
 * artifacts service (where thread workspaces are archived). The tests give the run directory
 * and the event writer (`runtime`, as `buildApp`'s runtime port); memory, knowledge and skills
 * tools are absent unless given (a call names the missing group), and no MCP servers are
 * offered. Runs calling tools are booted by test/runs/group.ts (the runs group with the runtime).
 */
export function buildRuntimeApp(
  t: Teardown,
  options: { env?: Partial<Record<keyof Env, string>>; db?: TestDatabase; runtime?: RuntimeWiring } = {}
): Promise<FastifyInstance & { testDb: TestDatabase }> {
  let corsOrigins: string[] = []
  return buildGroupApp(t, {
    db: options.db,
    env: options.env,
    services: async (app, config) => {
      corsOrigins = config.CORS_ORIGINS
      await app.register(websocket, websocketOptions(config.WS_MAX_MESSAGE_BYTES))
      await app.register(artifactsService, { config })
      await app.register(runtimeService, {
        config,
        ...forRuntime({
          db: app.db,
          events: createRunEventSink(app.db),
          memory: absentGroup('memory'),
          artifacts: app.artifacts.forRuns,
          knowledge: absentGroup('knowledge'),
          skills: absentGroup('skills')
        }),
        archives: app.artifacts.forWorkspaces,
        ...options.runtime
      })
    },
    routes: [
      async (scope) => {
        await scope.register(runtimeRoutes, { corsOrigins })
      }
    ]
  })
}
