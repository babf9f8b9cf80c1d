import cookie from '@fastify/cookie'
import cors from '@fastify/cors'
import rateLimit from '@fastify/rate-limit'
import websocket from '@fastify/websocket'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import Fastify, { LogController, type FastifyInstance, type FastifyPluginAsync } from 'fastify'
import dbPlugin from '../plugins/db.js'
import shutdownRefusals from '../plugins/shutdown.js'
import eventBusPlugin from '../plugins/event-bus.js'
import ssePlugin from '../plugins/sse.js'
import errorsPlugin, { rateLimited } from '../plugins/errors.js'
import { compilersFactory } from '../plugins/schema-compilers.js'
import openapiPlugin from '../plugins/openapi.js'
import hubPlugin from '../plugins/hub.js'
import releasePlugin, { releaseHeaders } from '../plugins/release.js'
import securityHeaders, { fixedHeaders } from '../plugins/security-headers.js'
import { websocketOptions } from '../plugins/websocket.js'
import { clientErrorHandler, frameworkErrors, MAX_PARAM_LENGTH, requestIdOf } from '../plugins/router-refusals.js'
import { ErrorBody } from '../schemas/common.js'
import { seedDevOrg } from './auth/dev-org.js'
import { registerApiScope } from './api-scope.js'
import type { Config } from './config.js'
import { recordRoutes } from './route-table.js'
import { openDatabase, type Database } from './db/client.js'
import { serializeError } from './db/faults.js'
import { migrateDatabase } from './db/migrate.js'
import artifacts from './artifacts/index.js'
import type { BlobStore } from './artifacts/blob-store.js'
import artifactsService from './artifacts/service.js'
import knowledge from './knowledge/index.js'
import type { Extractor } from './knowledge/document-worker.js'
import knowledgeService from './knowledge/service.js'
import runs from './runs/index.js'
import { createRunEventSink } from './runs/events.js'
import type { RunEventSink, RunMemory } from './runs/ports/memory.js'
import { forRuntime } from './runs/ports/runtime.js'
import runsService from './runs/service.js'
import automations from './automations/index.js'
import { systemClock, type Clock } from './worker-loop.js'
import automationsService from './automations/service.js'
import { forAutomations } from './runs/ports/automations.js'
import secrets from './secrets/index.js'
import integrations from './integrations/index.js'
import platform from './platform/index.js'
import providers from './providers/index.js'
import providersService from './providers/service.js'
import { registerSelf } from './providers/self-reach.js'
import github from './github/index.js'
import githubService from './github/service.js'
import slack from './slack/index.js'
import slackService from './slack/service.js'
import type { RunThreadContext } from './runs/ports/thread-context.js'
import { forChatPlatforms } from './runs/ports/chat-platforms.js'
import secretsService from './secrets/service.js'
import mcpService from './mcp/service.js'
import mcpRoutes from './mcp/index.js'
import skills from './skills/index.js'
import skillsService from './skills/service.js'
import tasks from './tasks/index.js'
import tasksService from './tasks/service.js'
import runtimeRoutes from './runtime/index.js'
import runtimeService, { type RuntimeWiring } from './runtime/service.js'
import memoryService from './memory/service.js'
import retrievalService from './retrieval/service.js'
import memory from './memory/index.js'
import system from './system/index.js'
import { describeDatabase } from './startup.js'
import telemetry from './telemetry/index.js'
import { observedMcp, observedMemory, observedToolGateway } from './telemetry/ports.js'
import { activeIds, startTracing } from './telemetry/tracing.js'
import type { Features } from './system/features.js'

export type { RouteRecord } from './route-table.js'

export interface BuildOptions {
  config: Config
  /** an open, migrated database owned by the caller; otherwise one is opened from config */
  database?: Database
  /** extra route groups registered inside the /api scope, after the domains (tests and benchmarks) */
  apiPlugins?: FastifyPluginAsync[]
  /** replacements for the ports the domains offer each other (tests) */
  ports?: Ports
  /** the time automations are scheduled by and failed documents back off by (tests move it instead of waiting) */
  clock?: Clock
  /** where log lines go instead of stdout (tests read them) */
  logStream?: { write(line: string): void }
}

/** What one domain offers another, replaceable by tests (recorders, fakes). */
export interface Ports {
  /** where a run's events are stored from outside the runs group (memory.captured) */
  runEvents?: RunEventSink
  /** the Memory Hub side of runs (recall, capture) */
  runMemory?: RunMemory
  /** the agent runtime's ports (RunDirectory, RunEventWriter, MemoryTools) and sandbox provider */
  runtime?: RuntimeWiring
  /** where upload and artifact bytes live, instead of ARTIFACT_STORE's choice */
  blobStore?: BlobStore
  /** how knowledge documents become Markdown, instead of the extraction child process */
  knowledgeExtractor?: Extractor
}

/** pino-pretty, one line per fact: time, level, message, then the fields on the same line */
const PRETTY = {
  target: 'pino-pretty',
  options: { singleLine: true, translateTime: 'SYS:HH:MM:ss.l', ignore: 'pid,hostname' }
}

function prettyLogs(config: Config): boolean {
  if (config.LOG_FORMAT !== 'auto') return config.LOG_FORMAT === 'pretty'
  return config.NODE_ENV !== 'production' && process.stdout.isTTY === true
}

export async function buildApp({
  config,
  database,
  apiPlugins = [],
  ports = {},
  clock = systemClock,
  logStream
}: BuildOptions): Promise<FastifyInstance> {
  const fixedHeadersFor = fixedHeaders(releaseHeaders(config.release))
  // OpenTelemetry when an OTLP endpoint is configured: spans exported, log lines carrying the
  // active span's ids (off: nothing is registered; docs/observability.md)
  const tracing = await startTracing(config)
  const app = Fastify({
    logger: {
      level: config.LOG_LEVEL,
      ...(tracing ? { mixin: () => activeIds() ?? {} } : {}),
      redact: ['req.headers.authorization', 'req.headers.cookie', 'res.headers["set-cookie"]'],
      // failed queries are logged without their SQL and parameters
      serializers: { err: serializeError as never },
      // a test's stream, else pretty lines for a person, else JSON on stdout
      ...(logStream ? { stream: logStream } : prettyLogs(config) ? { transport: PRETTY } : {})
    },
    // one line per request, when it is answered (onResponse below), instead of two
    logController: new LogController({ disableRequestLogging: true }),
    // the client's x-request-id only when it is a sane tracing id
    requestIdHeader: false,
    genReqId: requestIdOf,
    // router-level refusals answer like every other error (plugins/router-refusals.ts)
    routerOptions: { maxParamLength: MAX_PARAM_LENGTH },
    frameworkErrors: frameworkErrors(fixedHeadersFor),
    clientErrorHandler: clientErrorHandler(fixedHeadersFor),
    // a request (headers and body) not received within this is 408; Node checks its open
    // requests every connectionsCheckingInterval, so that bounds how late the 408 comes
    requestTimeout: config.REQUEST_TIMEOUT_MS,
    http: {
      headersTimeout: Math.min(60_000, config.REQUEST_TIMEOUT_MS),
      connectionsCheckingInterval: Math.min(1000, config.REQUEST_TIMEOUT_MS)
    },
    // a hop count is valid at run time (proxy-addr) though Fastify's types omit it
    trustProxy: config.TRUST_PROXY as boolean | string[],
    bodyLimit: config.BODY_LIMIT,
    onProtoPoisoning: 'error',
    onConstructorPoisoning: 'error',
    // refused by plugins/shutdown.ts instead, in the contract's body and with our headers
    return503OnClosing: false,
    forceCloseConnections: 'idle',
    schemaController: { compilersFactory: compilersFactory as never }
  }).withTypeProvider<TypeBoxTypeProvider>()

  const owned = database === undefined
  let db: Database
  try {
    db =
      database ??
      (await openDatabase({ url: config.DATABASE_URL, dataDir: config.DATA_DIR, poolMax: config.DATABASE_POOL_MAX }))
  } catch (err) {
    await tracing?.stop()
    throw err
  }
  try {
    if (owned) {
      const migrations = await migrateDatabase(db, config.DATABASE_URL)
      app.log.info(`database: ${describeDatabase(config)}`)
      app.log.info(
        migrations.applied > 0
          ? `migrations: ${migrations.applied} applied, the schema is up to date (${migrations.total} in all)`
          : `migrations: the schema is up to date (${migrations.total} in all, none to apply)`
      )
    }
    if (config.ALLOW_DEV_ORG) await seedDevOrg(db.db)
  } catch (err) {
    if (owned) await db.close()
    await tracing?.stop()
    throw err
  }

  if (tracing) {
    // one span per request, named by its route; it is the parent of a run the request starts
    const { FastifyOtelInstrumentation } = await import('@fastify/otel')
    const otel = new FastifyOtelInstrumentation({
      instrumentHooks: false,
      instrumentHandler: false,
      requestHook: (span, request) => {
        if (request.routeOptions.url) span.updateName(`${request.method} ${request.routeOptions.url}`)
      }
    })
    await app.register(otel.plugin())
  }
  app.addSchema(ErrorBody)
  recordRoutes(app as unknown as FastifyInstance)
  // where this instance listens and its public URL: URLs an org types may never point there
  const forgetSelf = registerSelf(() => app.addresses().filter((a) => typeof a !== 'string'), config.PUBLIC_URL)
  app.addHook('onClose', async () => forgetSelf())
  if (['info', 'debug', 'trace'].includes(config.LOG_LEVEL)) {
    // one line per request, once answered: what was asked, how it ended, how long it took
    app.addHook('onResponse', async (request, reply) => {
      request.log.info(
        { method: request.method, url: request.url, status: reply.statusCode, ms: Math.round(reply.elapsedTime) },
        'request'
      )
    })
  }
  await app.register(errorsPlugin)
  // first, so every answer carries them, refusals by the hooks after it included
  await app.register(securityHeaders, { apiHeaders: releaseHeaders(config.release) })
  await app.register(shutdownRefusals, { graceMs: config.SHUTDOWN_GRACE_MS })
  await app.register(releasePlugin, { release: config.release, isDevBuild: config.isDevBuild })
  await app.register(dbPlugin, {
    database: db,
    closeOnShutdown: owned,
    maintenanceEveryMs: config.EMBEDDED_MAINTENANCE_SECONDS * 1000
  })
  await app.register(eventBusPlugin)
  // GET /metrics and the request durations; the tracing stops with the app
  await app.register(telemetry, { config, tracing })
  await app.register(ssePlugin, {
    heartbeatMs: config.SSE_HEARTBEAT_MS,
    maxBufferBytes: config.SSE_MAX_BUFFER_BYTES,
    stallMs: config.SSE_STALL_MS
  })
  // cookies are parsed only where they are read (the session lane of src/auth/principal.ts),
  // not by a hook on every request
  await app.register(cookie, { hook: false })
  // limits are applied by the routes that need them (sign-in, sign-up), not globally; a
  // route that sets `config.rateLimit` gets the API's 429 rate_limited with Retry-After
  await app.register(rateLimit, {
    global: false,
    errorResponseBuilder: (_request, context) => {
      return rateLimited(context.ttl / 1000)
    }
  })
  if (config.CORS_ORIGINS.length > 0) {
    await app.register(cors, { origin: config.CORS_ORIGINS, credentials: true, maxAge: 600 })
  }
  await app.register(openapiPlugin, { release: config.release })
  // the Memory Hub console, a page over the public API at /hub/
  await app.register(hubPlugin, { release: config.release })
  await app.register(websocket, websocketOptions(config.WS_MAX_MESSAGE_BYTES))

  // The domain services, each before the ones that use it; what one needs of another
  // arrives as a plugin option. First the ports that depend on the database alone: where a
  // run's events are stored and published from outside the runs group.
  const runEvents = ports.runEvents ?? createRunEventSink(app.db)
  // org secrets: sealing, re-sealing after a rotation; runs open the ones they name
  await app.register(secretsService, { config })
  // org model providers: their keys are internal secrets; runs reach them for models the deployment lacks
  await app.register(providersService, { config, secrets: app.secrets.internal })
  // retrieval: search by words and meaning for memory and knowledge, and the embedding job
  // (an org's embedding model may be one of its providers')
  await app.register(retrievalService, { config, providers: app.providers.forRuns, clock })
  // the Memory Hub: recall and capture for runs; a delivered capture becomes memory.captured
  await app.register(memoryService, { config, events: runEvents, retrieval: app.retrieval })
  // artifacts: the blob store and its sweeper; runs save files through app.artifacts.forRuns
  await app.register(artifactsService, { config, store: ports.blobStore })
  // knowledge: records, search, the document extraction worker (bytes in the artifacts store), drafts
  await app.register(knowledgeService, {
    config,
    store: app.artifacts.store,
    extract: ports.knowledgeExtractor,
    clock,
    retrieval: app.retrieval
  })
  // org MCP servers: their headers are internal secrets; runs call their tools through the gateway
  await app.register(mcpService, { config, secrets: app.secrets.internal, clock })
  await app.register(skillsService)
  await app.register(tasksService)
  // GitHub: the org's connection, conditional-request lists, skill import, and the repo
  // wiki job (its pages are knowledge records; runs do the job, see `jobs` below)
  await app.register(githubService, {
    config,
    records: app.knowledge.forWiki,
    skills: app.skills.forImport,
    secrets: app.secrets
  })
  // the ports runs go through are observed: spans and metrics at each (src/telemetry/ports.ts)
  const runMemory = observedMemory(ports.runMemory ?? app.memory.forRuns)
  // the agent runtime: sandboxes and the tool gateway, which asks the runs group about runs
  await app.register(runtimeService, {
    config,
    ...forRuntime({
      db: app.db,
      events: runEvents,
      memory: runMemory,
      artifacts: app.artifacts.forRuns,
      knowledge: app.knowledge.forRuns,
      skills: app.skills.forRuns
    }),
    archives: app.artifacts.forWorkspaces,
    mcp: observedMcp(app.mcp.forGateway),
    ...ports.runtime
  })
  // runs: engines, dispatch, the worker (offered the runtime's tools when there is a sandbox) and the sweeper
  // chat platforms register below, after the runs group: they add what a run's context needs then
  const threadContext: RunThreadContext[] = []
  await app.register(runsService, {
    config,
    memory: runMemory,
    // tools need somewhere to run
    tools: app.runtime.sandboxes !== null ? observedToolGateway(app.runtime.gateway, app.db) : null,
    artifacts: app.artifacts.forRuns,
    knowledge: app.knowledge.forRuns,
    skills: app.skills.forRuns,
    followUps: [app.skills.forFollowUps, app.tasks.forFollowUps],
    secrets: app.secrets.forRuns,
    providers: app.providers.forRuns,
    jobs: [app.github.forJobs],
    threadContext,
    mcpTools: (orgId, names) => app.mcp.unknownTool(orgId, names),
    clock
  })
  // automations: the scheduler, which starts runs of prompts, skills and playbooks
  await app.register(automationsService, {
    config,
    clock,
    runs: forAutomations(app.runs, app.log.child({ component: 'scheduler' })),
    targets: app.skills.forAutomations
  })
  // Slack: connecting, the signed event ingress that starts runs, the reply outbox, and tool
  // calls approved or denied from Slack (the gateway records those decisions)
  await app.register(slackService, {
    config,
    clock,
    runs: forChatPlatforms(app.runs, app.log.child({ component: 'slack' })),
    secrets: app.secrets,
    approvals: app.runtime.gateway
  })
  threadContext.push(app.slack.threadContext)

  // What GET /api/config tells clients, from what each service reports about itself; assembled
  // once, nothing writes to it afterwards
  const catalogs = [() => app.runs.engines.catalog()]
  const features: Features = {
    // the auth routes below sign people in with an email and a password
    auth: { google: false, emailPassword: true },
    sandbox: app.runtime.sandboxStatus,
    capabilities: {
      // an org connects them with PUT /api/integrations/github and /slack
      github: app.hasDecorator('github'),
      slack: app.hasDecorator('slack'),
      memory: app.memory.backend !== null,
      // vectors where the database has pgvector; otherwise search matches words only
      semanticSearch: app.retrieval.vectors.available,
      toolGateway: app.runtime.sandboxes !== null
    },
    artifactsFidelity: app.artifacts.fidelity,
    catalogs
  }

  // Every domain lives in this one encapsulated scope: its routes are org-scoped unless
  // they declare otherwise, because the principal hook sits here.
  await registerApiScope(app as unknown as FastifyInstance, config, async (scope) => {
    await scope.register(system, { release: config.release, allowDevOrg: config.ALLOW_DEV_ORG, features })
    await scope.register(runs)
    await scope.register(memory, { backendName: config.MEMORY_BACKEND })
    await scope.register(runtimeRoutes, { corsOrigins: config.CORS_ORIGINS })
    await scope.register(artifacts)
    await scope.register(knowledge)
    await scope.register(skills)
    await scope.register(tasks)
    await scope.register(secrets)
    await scope.register(automations)
    await scope.register(integrations)
    await scope.register(platform)
    await scope.register(providers, { catalogs })
    await scope.register(github)
    await scope.register(slack)
    await scope.register(mcpRoutes, { sessionIdleHours: config.MCP_SESSION_IDLE_HOURS })
    for (const plugin of apiPlugins) await scope.register(plugin)
  })

  return app as unknown as FastifyInstance
}
