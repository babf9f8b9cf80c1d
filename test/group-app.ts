import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import cookie from '@fastify/cookie'
import rateLimit from '@fastify/rate-limit'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import Fastify, { type FastifyInstance, type FastifyPluginAsync } from 'fastify'
import dbPlugin from '../plugins/db.js'
import errorsPlugin, { rateLimited } from '../plugins/errors.js'
import eventBusPlugin from '../plugins/event-bus.js'
import releasePlugin, { releaseHeaders } from '../plugins/release.js'
import { clientErrorHandler, frameworkErrors, MAX_PARAM_LENGTH, requestIdOf } from '../plugins/router-refusals.js'
import { compilersFactory } from '../plugins/schema-compilers.js'
import securityHeaders, { fixedHeaders } from '../plugins/security-headers.js'
import shutdownRefusals from '../plugins/shutdown.js'
import ssePlugin from '../plugins/sse.js'
import { ErrorBody } from '../schemas/common.js'
import { registerApiScope } from '../src/api-scope.js'
import { seedDevOrg } from '../src/auth/dev-org.js'
import { testConfig, type Config, type Env } from '../src/config.js'
import { recordRoutes } from '../src/route-table.js'
import { createTestDatabase, type Teardown, type TestDatabase } from './helper.js'

/**
 * One route group on a throwaway database, with what every group stands on: the error
 * catalogue, security and release headers, shutdown refusals, the database, the event bus,
 * event streams, cookies and rate limits, and the /api scope's request guards, principal
 * (org scope, key access) and idempotency, plus the auth routes (sign-up, keys) that tests
 * make their identities through. Only the group's own modules are loaded, so a test file of
 * one group starts in a fraction of the whole app's time; a group needing a service it
 * was not given stops the boot naming it (the services' fastify-plugin `dependencies`).
 * The whole app's construction is `buildApp` (src/app.ts); the /api scope is the same call
 * (`registerApiScope`), and `app.routeTable` records the group's routes as the whole app's does.
 */
export interface GroupAppOptions {
  /** the group's services, registered after the shared plugins (each with its options) */
  services?: (app: FastifyInstance, config: Config) => Promise<void>
  /** the group's route plugins, inside /api */
  routes: FastifyPluginAsync[]
  env?: Partial<Record<keyof Env, string>> | undefined
  /** a database shared with another app (two instances), else a throwaway one */
  db?: TestDatabase | undefined
}

export async function buildGroupApp(
  t: Teardown,
  options: GroupAppOptions
): Promise<FastifyInstance & { testDb: TestDatabase }> {
  const db = options.db ?? (await createTestDatabase(t))
  // a data directory of its own unless the test reads the files in one it gave
  let dataDir = options.env?.DATA_DIR
  if (dataDir === undefined) {
    const own = mkdtempSync(join(tmpdir(), 'cairn-test-data-'))
    t.teardown(() => rmSync(own, { recursive: true, force: true }))
    dataDir = own
  }
  const config = testConfig({ ...(db.url ? { DATABASE_URL: db.url } : {}), ...options.env, DATA_DIR: dataDir })
  if (config.ALLOW_DEV_ORG) await seedDevOrg(db.database.db)
  const fixedHeadersFor = fixedHeaders(releaseHeaders(config.release))
  const app = Fastify({
    logger: { level: config.LOG_LEVEL },
    requestIdHeader: false,
    genReqId: requestIdOf,
    routerOptions: { maxParamLength: MAX_PARAM_LENGTH },
    frameworkErrors: frameworkErrors(fixedHeadersFor),
    clientErrorHandler: clientErrorHandler(fixedHeadersFor),
    bodyLimit: config.BODY_LIMIT,
    onProtoPoisoning: 'error',
    onConstructorPoisoning: 'error',
    return503OnClosing: false,
    forceCloseConnections: 'idle',
    schemaController: { compilersFactory: compilersFactory as never }
  }).withTypeProvider<TypeBoxTypeProvider>()
  t.teardown(() => app.close())
  app.addSchema(ErrorBody)
  recordRoutes(app as unknown as FastifyInstance)
  await app.register(errorsPlugin)
  await app.register(securityHeaders, { apiHeaders: releaseHeaders(config.release) })
  await app.register(shutdownRefusals, { graceMs: config.SHUTDOWN_GRACE_MS })
  await app.register(releasePlugin, { release: config.release, isDevBuild: config.isDevBuild })
  await app.register(dbPlugin, { database: db.database, closeOnShutdown: false, maintenanceEveryMs: 0 })
  await app.register(eventBusPlugin)
  await app.register(ssePlugin, {
    heartbeatMs: config.SSE_HEARTBEAT_MS,
    maxBufferBytes: config.SSE_MAX_BUFFER_BYTES,
    stallMs: config.SSE_STALL_MS
  })
  await app.register(cookie, { hook: false })
  await app.register(rateLimit, {
    global: false,
    errorResponseBuilder: (_request, context) => rateLimited(context.ttl / 1000)
  })
  const plain = app as unknown as FastifyInstance
  await options.services?.(plain, config)
  await registerApiScope(plain, config, async (scope) => {
    for (const routes of options.routes) await scope.register(routes)
  })
  await app.ready()
  return Object.assign(plain, { testDb: db })
}

/**
 * A port of a group an app does not boot, for a service that takes it as an option but that
 * the group's tests never reach through it: any call fails, naming the group.
 */
export const absentGroup = (group: string, app = 'this group app') =>
  new Proxy(
    {},
    {
      get: (_target, name) => () => {
        throw new Error(`${group}.${String(name)}: ${app} has no ${group} group`)
      }
    }
  ) as never
