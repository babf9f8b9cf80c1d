import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import { conflict } from '../../plugins/errors.js'
import type { Config } from '../config.js'
import { newId } from '../db/ids.js'
import type { OrgProviders } from '../runs/ports/providers.js'
import type { InternalSecrets } from '../secrets/service.js'
import { guardUrl, providerFetcher, typedHttpUrl, type ProviderFetch } from './address-guard.js'
import { probeModels } from './probe.js'
import {
  apiKeySecretName,
  deleteProvider,
  getProvider,
  insertProvider,
  modelDefaultsOf,
  providerNamed,
  providerOffering,
  type ProviderRow,
  readyProviders,
  recordCheck
} from './providers-repo.js'

/** The providers group's instance-wide side, as `app.providers`. */
export interface ProvidersService {
  /** validates, stores the key as a secret, then checks it once: `POST /api/providers` */
  create(
    orgId: string,
    input: {
      name: string
      kind?: ProviderRow['kind'] | undefined
      baseUrl: string
      apiKey: string
      models?: string[] | undefined
    },
    createdBy: string | null
  ): Promise<ProviderRow>
  /** probes `/models` and records the outcome; null when the org has no such provider */
  check(orgId: string, id: string): Promise<ProviderRow | null>
  /** the row and its key; false when the org has no such provider */
  remove(orgId: string, id: string): Promise<boolean>
  /** the org's ready providers, oldest first */
  ready(orgId: string): Promise<ProviderRow[]>
  /** the runs group's port */
  forRuns: OrgProviders
}

declare module 'fastify' {
  interface FastifyInstance {
    providers: ProvidersService
  }
}

/** The variables the providers service reads: a read of another is a type error. */
export type ProvidersConfig = Pick<Config, 'PROVIDER_ALLOW_PRIVATE' | 'PROVIDER_CHECK_TIMEOUT_MS'>

export interface ProvidersServiceOptions {
  config: ProvidersConfig
  /** where API keys are sealed (the secrets group's internal secrets) */
  secrets: InternalSecrets
}

/**
 * A base URL as it is stored: parsed, http(s) only, no credentials, query or fragment,
 * without trailing slashes; or the 400 saying what is wrong with it.
 */
export function normalizeBaseUrl(raw: string): string {
  const url = typedHttpUrl(raw, { path: '/body/baseUrl', credentialsGo: 'send the key as apiKey', query: false })
  return `${url.origin}${url.pathname.replace(/\/+$/, '')}`
}

/** Provider connections: the SSRF guard, the key as a secret, the check, the runs port. */
export default fp(
  async function providersService(app: FastifyInstance, opts: ProvidersServiceOptions) {
    const { config, secrets } = opts
    const db = app.db
    const allowPrivate = config.PROVIDER_ALLOW_PRIVATE
    const fetcher = providerFetcher(allowPrivate)
    const fetch: ProviderFetch = fetcher.fetch
    const timeoutMs = config.PROVIDER_CHECK_TIMEOUT_MS

    /** 400 naming /body/baseUrl when the host resolves to an address providers may not reach. */
    const guard = (baseUrl: string) => guardUrl(baseUrl, allowPrivate, '/body/baseUrl', 'providers')

    async function check(orgId: string, row: ProviderRow): Promise<ProviderRow | null> {
      const key = await secrets.open(orgId, apiKeySecretName(row.id))
      const outcome =
        key === null
          ? {
              ok: false as const,
              error:
                "the provider's API key cannot be opened on this server (was SECRETS_KEY changed?); delete the provider and add it again"
            }
          : await probeModels(fetch, row.kind, row.baseUrl, key, timeoutMs)
      return recordCheck(
        db,
        orgId,
        row.id,
        outcome.ok ? { ok: true, models: row.modelsGiven ? null : outcome.models } : outcome
      )
    }

    const service: ProvidersService = {
      async create(orgId, input, createdBy) {
        const name = input.name.trim()
        const baseUrl = normalizeBaseUrl(input.baseUrl)
        await guard(baseUrl)
        if (await providerNamed(db, orgId, name))
          throw conflict(`this organization already has a provider named ${JSON.stringify(name)}`)
        const id = newId()
        // the key first: a provider row never exists without its key (a crash in between
        // leaves only a sealed value under a name no provider has)
        await secrets.put(orgId, apiKeySecretName(id), input.apiKey)
        const row = await insertProvider(db, orgId, {
          id,
          name,
          kind: input.kind ?? 'openai',
          baseUrl,
          models: input.models ?? [],
          modelsGiven: input.models !== undefined,
          createdBy
        }).catch(async (err: unknown) => {
          await secrets.remove(orgId, [apiKeySecretName(id)])
          throw err
        })
        if (!row) {
          await secrets.remove(orgId, [apiKeySecretName(id)])
          throw conflict(`this organization already has a provider named ${JSON.stringify(name)}`)
        }
        // checked once at once, so a provider that works is ready as soon as it is added
        return (await check(orgId, row)) ?? row
      },
      async check(orgId, id) {
        const row = await getProvider(db, orgId, id)
        return row ? check(orgId, row) : null
      },
      async remove(orgId, id) {
        if (!(await deleteProvider(db, orgId, id))) return false
        await secrets.remove(orgId, [apiKeySecretName(id)])
        return true
      },
      ready: (orgId) => readyProviders(db, orgId),
      forRuns: {
        defaults: (orgId, on) => modelDefaultsOf(on ?? db, orgId),
        async offering(orgId, model, on) {
          const row = await providerOffering(on ?? db, orgId, model)
          if (!row) return null
          return {
            id: row.id,
            name: row.name,
            kind: row.kind,
            baseUrl: row.baseUrl,
            models: row.models,
            apiKey: () => secrets.open(orgId, apiKeySecretName(row.id)),
            fetch
          }
        }
      }
    }
    app.decorate('providers', service)
    // after the runs worker drained (its preClose), no provider request is left to finish
    app.addHook('onClose', async () => {
      await app.shutdown.close("the model providers' connections", () => fetcher.close())
    })
  },
  { name: 'providers', fastify: '5.x', dependencies: ['db', 'secrets', 'shutdown-refusals'] }
)
