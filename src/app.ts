import { randomUUID } from 'node:crypto'
import cors from '@fastify/cors'
import sensible from '@fastify/sensible'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import Ajv from 'ajv'
import addFormats from 'ajv-formats'
import Fastify, { type FastifyContextConfig, type FastifyInstance, type FastifySchemaCompiler } from 'fastify'
import dbPlugin from '../plugins/db.js'
import errorsPlugin from '../plugins/errors.js'
import featuresPlugin from '../plugins/features.js'
import openapiPlugin from '../plugins/openapi.js'
import principalPlugin from '../plugins/principal.js'
import releasePlugin from '../plugins/release.js'
import { ErrorBody } from '../schemas/common.js'
import { seedDevOrg } from './auth/dev-org.js'
import type { Config } from './config.js'
import { openDatabase, type Database } from './db/client.js'
import { migrateDatabase } from './db/migrate.js'
import memoryHub from './memory/hub.js'
import memory from './memory/index.js'
import system from './system/index.js'

/** One registered route, as the route-walk tests and the API-key allowlist check see it. */
export interface RouteRecord {
  method: string
  url: string
  config: FastifyContextConfig
}

declare module 'fastify' {
  interface FastifyInstance {
    routeTable: readonly RouteRecord[]
  }
}

export interface BuildOptions {
  config: Config
  /** an open, migrated database owned by the caller; otherwise one is opened from config */
  database?: Database
}

/**
 * Request bodies are validated strictly (no type coercion, unknown fields rejected by
 * the schemas); query strings and params are strings on the wire, so they are coerced.
 */
function validatorFactory(externalSchemas: Record<string, unknown>): FastifySchemaCompiler<object> {
  const make = (coerceTypes: boolean | 'array') => {
    const ajv = new Ajv.default({ coerceTypes, useDefaults: true, removeAdditional: false, allErrors: false, strict: false })
    addFormats.default(ajv)
    for (const schema of Object.values(externalSchemas)) ajv.addSchema(schema as object)
    return ajv
  }
  const strict = make(false)
  const coercing = make('array')
  return ({ schema, httpPart }) => (httpPart === 'body' ? strict : coercing).compile(schema)
}

export async function buildApp({ config, database }: BuildOptions): Promise<FastifyInstance> {
  const app = Fastify({
    logger: {
      level: config.LOG_LEVEL,
      redact: ['req.headers.authorization', 'req.headers.cookie', 'res.headers["set-cookie"]']
    },
    requestIdHeader: 'x-request-id',
    genReqId: () => randomUUID(),
    // a hop count is valid at run time (proxy-addr) though Fastify's types omit it
    trustProxy: config.TRUST_PROXY as boolean | string[],
    bodyLimit: config.BODY_LIMIT,
    onProtoPoisoning: 'error',
    onConstructorPoisoning: 'error',
    return503OnClosing: true,
    forceCloseConnections: 'idle',
    schemaController: { compilersFactory: { buildValidator: validatorFactory as never } }
  }).withTypeProvider<TypeBoxTypeProvider>()

  const owned = database === undefined
  const db = database ?? (await openDatabase({ url: config.DATABASE_URL, dataDir: config.DATA_DIR, poolMax: config.DATABASE_POOL_MAX }))
  try {
    if (owned) await migrateDatabase(db, config.DATABASE_URL)
    if (config.ALLOW_DEV_ORG) await seedDevOrg(db.db)
  } catch (err) {
    if (owned) await db.close()
    throw err
  }

  app.addSchema(ErrorBody)
  const routes: RouteRecord[] = []
  app.decorate('routeTable', routes)
  app.addHook('onRoute', (route) => {
    const methods = Array.isArray(route.method) ? route.method : [route.method]
    for (const method of methods) routes.push({ method, url: route.url, config: route.config ?? {} })
  })
  await app.register(errorsPlugin)
  await app.register(releasePlugin, { release: config.release, isDevBuild: config.isDevBuild })
  app.addHook('onRequest', async (request, reply) => {
    reply.header('x-request-id', request.id)
  })
  await app.register(dbPlugin, { database: db, closeOnShutdown: owned })
  await app.register(featuresPlugin)
  await app.register(sensible)
  if (config.CORS_ORIGINS.length > 0) {
    await app.register(cors, { origin: config.CORS_ORIGINS, credentials: true, maxAge: 600 })
  }
  await app.register(openapiPlugin, { release: config.release })
  await app.register(memoryHub, { config })

  // Every domain lives in this one encapsulated scope: its routes are org-scoped unless
  // they declare otherwise, because the principal hook sits here.
  await app.register(async function api(scope) {
    await scope.register(principalPlugin, { allowDevOrg: config.ALLOW_DEV_ORG })
    await scope.register(system, { release: config.release, allowDevOrg: config.ALLOW_DEV_ORG })
    await scope.register(memory, { backendName: config.MEMORY_BACKEND })
  }, { prefix: '/api' })

  return app as unknown as FastifyInstance
}
