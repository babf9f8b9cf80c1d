import type { FastifyInstance, FastifyPluginAsync } from 'fastify'
import type { BlobStore } from '../../src/artifacts/blob-store.js'
import type { Config, Env } from '../../src/config.js'
import memoryService from '../../src/memory/service.js'
import providersService from '../../src/providers/service.js'
import retrievalService from '../../src/retrieval/service.js'
import { createRunEventSink } from '../../src/runs/events.js'
import runsRoutes from '../../src/runs/index.js'
import type { RunEventSink, RunMemory } from '../../src/runs/ports/memory.js'
import runsService from '../../src/runs/service.js'
import type { RuntimeWiring } from '../../src/runtime/service.js'
import secretsService from '../../src/secrets/service.js'
import skillsService from '../../src/skills/service.js'
import tasksService from '../../src/tasks/service.js'
import { observedMcp, observedMemory, observedToolGateway } from '../../src/telemetry/ports.js'
import { systemClock, type Clock } from '../../src/worker-loop.js'
import { absentGroup, buildGroupApp } from '../group-app.js'
import type { Teardown, TestDatabase } from '../helper.js'

export interface RunsGroupOptions {
  env?: Partial<Record<keyof Env, string>>
  db?: TestDatabase
  /** where the sweeper measures retention from, and the MCP checker's time */
  clock?: Clock
  /** the Memory Hub side of runs, instead of the memory service's */
  runMemory?: RunMemory
  /** where a run's events go from outside the runs group (a recorder) */
  runEvents?: RunEventSink
  /** the artifacts service too (a run's attachments, the files it saves) */
  artifacts?: boolean
  /** where upload, artifact and workspace archive bytes go, instead of ARTIFACT_STORE's choice */
  blobStore?: BlobStore
  /** the knowledge service too, with artifacts (records a run proposes, knowledge search) */
  knowledge?: boolean
  /** the org's MCP servers (app.mcp): their tools offered to runs through the gateway */
  mcp?: boolean
  /**
   * the agent runtime (with the websocket plugin its terminals need), as `buildApp` wires it:
   * runs are offered tools where there is a sandbox; an object replaces its ports as
   * `buildApp`'s runtime port does
   */
  runtime?: boolean | RuntimeWiring
}

/**
 * What running a run stands on, registered as `buildApp` registers it: org secrets (a run's
 * named secrets; the providers' sealed keys), the org's model providers (models the deployment
 * lacks), retrieval and the Memory Hub (every run reads its org's memory switches and recalls),
 * the skills and tasks services (what a run proposes, what follows a finished one) and the
 * runs service with its worker; and the optional groups above, loaded only when asked for.
 * Without the runtime, runs are offered no tools, as with SANDBOX_PROVIDER=none (the echo
 * engine calls none anyway). A run reaches the artifacts and knowledge ports only when it
 * names an attachment, saves a file or proposes a record: without those groups these ports are
 * absent (a call fails, naming the group).
 */
export async function registerRunsServices(app: FastifyInstance, config: Config, options: RunsGroupOptions) {
  const clock = options.clock ?? systemClock
  const runEvents = options.runEvents ?? createRunEventSink(app.db)
  const withArtifacts = options.artifacts === true || options.knowledge === true || Boolean(options.runtime)
  if (options.runtime) {
    const [{ default: websocket }, { websocketOptions }] = await Promise.all([
      import('@fastify/websocket'),
      import('../../plugins/websocket.js')
    ])
    await app.register(websocket, websocketOptions(config.WS_MAX_MESSAGE_BYTES))
  }
  await app.register(secretsService, { config })
  await app.register(providersService, { config, secrets: app.secrets.internal })
  await app.register(retrievalService, { config, providers: app.providers.forRuns, clock })
  await app.register(memoryService, { config, events: runEvents, retrieval: app.retrieval })
  if (withArtifacts)
    await app.register((await import('../../src/artifacts/service.js')).default, { config, store: options.blobStore })
  if (options.knowledge) {
    await app.register((await import('../../src/knowledge/service.js')).default, {
      config,
      store: app.artifacts.store,
      clock,
      retrieval: app.retrieval
    })
  }
  if (options.mcp)
    await app.register((await import('../../src/mcp/service.js')).default, {
      config,
      secrets: app.secrets.internal,
      clock
    })
  await app.register(skillsService)
  await app.register(tasksService)
  const runMemory = observedMemory(options.runMemory ?? app.memory.forRuns)
  const artifacts = withArtifacts ? app.artifacts.forRuns : absentGroup('artifacts')
  const knowledge = options.knowledge ? app.knowledge.forRuns : absentGroup('knowledge')
  if (options.runtime) {
    const [{ forRuntime }, { default: runtimeService }] = await Promise.all([
      import('../../src/runs/ports/runtime.js'),
      import('../../src/runtime/service.js')
    ])
    await app.register(runtimeService, {
      config,
      ...forRuntime({
        db: app.db,
        events: runEvents,
        memory: runMemory,
        artifacts,
        knowledge,
        skills: app.skills.forRuns
      }),
      archives: app.artifacts.forWorkspaces,
      ...(options.mcp ? { mcp: observedMcp(app.mcp.forGateway) } : {}),
      ...(options.runtime === true ? {} : options.runtime)
    })
  }
  await app.register(runsService, {
    config,
    memory: runMemory,
    tools: options.runtime && app.runtime.sandboxes !== null ? observedToolGateway(app.runtime.gateway, app.db) : null,
    artifacts,
    knowledge,
    skills: app.skills.forRuns,
    followUps: [app.skills.forFollowUps, app.tasks.forFollowUps],
    secrets: app.secrets.forRuns,
    providers: app.providers.forRuns,
    ...(options.mcp ? { mcpTools: (orgId: string, names: string[]) => app.mcp.unknownTool(orgId, names) } : {}),
    clock
  })
}

/**
 * The runs group: runs, threads, their event streams and chat, on what running a run stands
 * on (above). Artifacts, knowledge, the runtime, MCP, automations and the chat platforms are
 * left out unless asked for; with the runtime come its routes (a run's approvals, tool
 * policies, terminals). `routes`: more route groups inside /api, after those.
 */
export function buildRunsApp(
  t: Teardown,
  options: RunsGroupOptions & { routes?: FastifyPluginAsync[] } = {}
): Promise<FastifyInstance & { testDb: TestDatabase }> {
  let corsOrigins: string[] = []
  return buildGroupApp(t, {
    db: options.db,
    env: options.env,
    services: async (app, config) => {
      corsOrigins = config.CORS_ORIGINS
      await registerRunsServices(app, config, options)
    },
    routes: [
      runsRoutes,
      ...(options.runtime
        ? [
            async (scope: FastifyInstance) => {
              const { default: runtimeRoutes } = await import('../../src/runtime/index.js')
              await scope.register(runtimeRoutes, { corsOrigins })
            }
          ]
        : []),
      ...(options.routes ?? [])
    ]
  })
}
