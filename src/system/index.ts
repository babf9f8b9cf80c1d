import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { Features } from './features.js'
import { notReady, STORAGE_RETRY_AFTER_S, storageFull } from '../../plugins/errors.js'
import { devOrgFor } from '../auth/principal.js'
import { DATABASE_RETRY_AFTER_S } from '../db/faults.js'
import { errorResponses } from '../../schemas/common.js'
import { ClientConfig, Health, HealthQuery } from '../../schemas/system.js'

export interface SystemOptions {
  release: string
  allowDevOrg: boolean
  /** what this instance can do, as the services reported it (GET /api/config) */
  features: Features
}

/** Health and client config: the two public, secret-free routes every client starts with. */
const system: FastifyPluginAsyncTypebox<SystemOptions> = async (app, opts) => {
  const health = { status: 'ok' } as const

  app.get(
    '/health',
    {
      config: { scope: 'public' },
      schema: {
        operationId: 'getHealth',
        tags: ['system'],
        summary: 'Liveness; with ?ready=1 also readiness (the database answers, the disk has room)',
        description:
          'Answers 200 while the process runs; with `ready=1` it also checks that the database answers and the disk has room, and answers 503 `not_ready` when either fails, so a load balancer can take the instance out.',
        querystring: HealthQuery,
        response: { 200: Health, ...errorResponses(503) }
      }
    },
    async (request) => {
      if (request.query.ready) {
        try {
          await app.database.ping()
        } catch (err) {
          request.log.warn({ err }, 'readiness check: database did not answer')
          // the ping is bounded (src/db/client.ts), so this comes within a second
          throw notReady(DATABASE_RETRY_AFTER_S)
        }
        // a full disk fails every upload: not ready until a write succeeds again
        if (!(await app.artifacts.store.hasRoom())) throw storageFull(STORAGE_RETRY_AFTER_S)
      }
      return health
    }
  )

  app.get(
    '/config',
    {
      config: { scope: 'public' },
      schema: {
        operationId: 'getConfig',
        tags: ['system'],
        summary: 'What this deployment offers the client',
        description:
          'Tells a client, without authentication, which release it talks to, how people sign in, which engines and models are ready, whether a sandbox can run tools, and which integrations this deployment offers.',
        response: { 200: ClientConfig, ...errorResponses() }
      }
    },
    async (request) => {
      const { features } = opts
      const catalogs = await Promise.all(features.catalogs.map((catalog) => catalog()))
      return {
        auth: features.auth,
        // for this caller: the dev org serves loopback callers only
        allowDevOrg: devOrgFor(request, opts.allowDevOrg),
        release: opts.release,
        engines: catalogs.flatMap((c) => c.engines),
        models: catalogs.flatMap((c) => c.models),
        sandbox: features.sandbox,
        capabilities: features.capabilities,
        artifacts: { fidelity: features.artifactsFidelity }
      }
    }
  )
}

export default system
