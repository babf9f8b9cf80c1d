import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import fp from 'fastify-plugin'
import type { Catalog } from '../system/features.js'
import { integrationFailed, notFound, validationFailed } from '../../plugins/errors.js'
import { errorResponses, IdParams } from '../../schemas/common.js'
import {
  CreateProviderBody,
  DefaultModel,
  ListProvidersQuery,
  ModelList,
  ProviderEnvelope,
  ProviderPage,
  SetDefaultModelBody,
  SetDefaultModelReply
} from '../../schemas/providers.js'
import { principalOf, realUserId } from '../auth/principal.js'
import { listProviders, providerToWire, setModelDefault } from './providers-repo.js'
import { builtinModel, EmbeddingFailed, setEmbeddingChoice } from '../retrieval/models.js'
import { EmbeddingModelInfo, SetEmbeddingModelBody } from '../../schemas/retrieval.js'

const PROVIDERS = ['providers']
const ADMIN = { scope: 'admin' } as const

/**
 * The org's OpenAI-compatible model providers (admin writes, org reads) and
 * `GET /api/models`, the models ready for the org (an API key may read it).
 */
export interface ProvidersRoutesOptions {
  /** the deployment's engines and models, listed before the org's providers' */
  catalogs: readonly Catalog[]
}

const providersRoutes: FastifyPluginAsyncTypebox<ProvidersRoutesOptions> = async (app, opts) => {
  app.post(
    '/providers',
    {
      config: { ...ADMIN, keyAccess: 'none' },
      schema: {
        operationId: 'createProvider',
        tags: PROVIDERS,
        summary:
          'Connect an OpenAI-compatible provider (admin): the key is sealed as a secret, the provider is checked once at once',
        description:
          'Connects a model provider with its base URL and key, seals the key as a secret and checks the provider once.',
        body: CreateProviderBody,
        response: { 201: ProviderEnvelope, ...errorResponses(503) }
      }
    },
    async (request, reply) => {
      const principal = principalOf(request)
      const row = await app.providers.create(principal.orgId, request.body, realUserId(principal))
      // the org's default model may now be this provider's (other instances: within 2 s)
      app.runs.engines.forgetDefaults(principal.orgId)
      return reply.code(201).send({ provider: providerToWire(row) })
    }
  )

  app.get(
    '/providers',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'listProviders',
        tags: PROVIDERS,
        summary: "The org's providers, oldest first (the order in which they offer a model id two of them share)",
        description:
          "Lists the organization's model providers, oldest first, with their models, readiness and the last check's error; keys are never returned.",
        querystring: ListProvidersQuery,
        response: { 200: ProviderPage, ...errorResponses() }
      }
    },
    async (request) => {
      const { orgId } = principalOf(request)
      const page = await listProviders(app.db, orgId, {
        limit: request.query.limit ?? 50,
        cursor: request.query.cursor
      })
      return { items: page.items.map(providerToWire), nextCursor: page.nextCursor }
    }
  )

  app.delete(
    '/providers/:id',
    {
      config: { ...ADMIN, keyAccess: 'none' },
      schema: {
        operationId: 'deleteProvider',
        tags: PROVIDERS,
        summary:
          'Remove a provider and its key (admin); runs naming its models afterwards are refused, queued ones fail',
        description:
          'Removes a provider and its sealed key; runs that name its models are refused from then on and queued ones fail.',
        params: IdParams,
        response: { 204: { type: 'null', description: 'deleted' }, ...errorResponses(404) }
      }
    },
    async (request, reply) => {
      const { orgId } = principalOf(request)
      if (!(await app.providers.remove(orgId, request.params.id)))
        throw notFound('no such provider in this organization')
      app.runs.engines.forgetDefaults(orgId)
      return reply.code(204).send(null)
    }
  )

  app.post(
    '/providers/:id/check',
    {
      config: { ...ADMIN, keyAccess: 'none' },
      schema: {
        operationId: 'checkProvider',
        tags: PROVIDERS,
        summary:
          "Probe the provider's /models with its key (admin): ready, or lastError saying whether the key or the URL is wrong",
        description: 'Asks the provider for its models with its key and records whether it is ready or why not.',
        params: IdParams,
        response: { 200: ProviderEnvelope, ...errorResponses(404) }
      }
    },
    async (request) => {
      const { orgId } = principalOf(request)
      const row = await app.providers.check(orgId, request.params.id)
      app.runs.engines.forgetDefaults(orgId)
      if (!row) throw notFound('no such provider in this organization')
      return { provider: providerToWire(row) }
    }
  )

  app.get(
    '/models',
    {
      config: { keyAccess: 'read' },
      schema: {
        operationId: 'listModels',
        tags: PROVIDERS,
        summary:
          "The models a run of this org may name: the deployment's (providerId null), then its ready providers' (an id already listed is not repeated)",
        description:
          "Lists the model ids a run of this organization may name: the deployment's, then those of the organization's ready providers.",
        response: { 200: ModelList, ...errorResponses() }
      }
    },
    async (request) => {
      const { orgId } = principalOf(request)
      const [catalogs, ready, fallback] = await Promise.all([
        Promise.all(opts.catalogs.map((catalog) => catalog())),
        app.providers.ready(orgId),
        app.runs.engines.defaultModel(orgId)
      ])
      const items: Array<{ id: string; engine: string; providerId: string | null; default: boolean }> = []
      const seen = new Set<string>()
      for (const model of catalogs.flatMap((c) => c.models)) {
        if (seen.has(model.id)) continue
        seen.add(model.id)
        items.push({ id: model.id, engine: model.engine, providerId: null, default: model.id === fallback.model })
      }
      // the same precedence a run's model resolves by (src/runs/engines/registry.ts)
      for (const provider of ready) {
        for (const id of provider.models) {
          if (seen.has(id)) continue
          seen.add(id)
          items.push({ id, engine: provider.kind, providerId: provider.id, default: id === fallback.model })
        }
      }
      return { items }
    }
  )

  app.get(
    '/models/default',
    {
      config: { keyAccess: 'read' },
      schema: {
        operationId: 'getDefaultModel',
        tags: PROVIDERS,
        summary:
          "The org's default model and where it comes from: an admin's choice, else the deployment's first model, else the org providers', else echo (only when no model is configured at all)",
        description:
          'Returns the model runs use when they name none, and whether an admin chose it or it was picked by the fallback order.',
        response: { 200: DefaultModel, ...errorResponses() }
      }
    },
    async (request) => {
      const { engine, model, source } = await app.runs.engines.defaultModel(principalOf(request).orgId)
      // configured, but none of its model ids is known yet: the engine is what runs will fail on
      return { model: model ?? engine.id, source }
    }
  )

  app.put(
    '/models/default',
    {
      config: { ...ADMIN, keyAccess: 'none' },
      schema: {
        operationId: 'setDefaultModel',
        tags: PROVIDERS,
        summary: "Choose the org's default model (admin): one GET /api/models lists; null forgets the choice",
        description: 'Sets the model runs use when they name none, or clears the choice with null; only admins may.',
        body: SetDefaultModelBody,
        response: { 200: SetDefaultModelReply, ...errorResponses() }
      }
    },
    async (request) => {
      const principal = principalOf(request)
      const { model } = request.body
      if (model !== null) {
        const offered = await app.runs.engines.resolve(undefined, model, principal.orgId)
        if ('error' in offered)
          throw validationFailed([{ path: '/body/model', message: `${offered.error}: choose one of GET /api/models` }])
      }
      await setModelDefault(app.db, principal.orgId, model, realUserId(principal))
      app.runs.engines.forgetDefaults(principal.orgId)
      return { model }
    }
  )

  /** The org's embedding model as the routes answer it; its dimensions once known. */
  async function embeddingModelOf(orgId: string) {
    const model = await app.retrieval.models.forOrg(orgId)
    return { model: model.model, source: model.source, dimensions: await app.retrieval.dimensionsOf(orgId, model) }
  }

  app.get(
    '/models/embedding',
    {
      config: { keyAccess: 'read' },
      schema: {
        operationId: 'getEmbeddingModel',
        tags: PROVIDERS,
        summary:
          "The org's embedding model: an admin's choice among its providers', else the deployment's, else the built-in offline one",
        description:
          'Returns the model memory facts, knowledge records and document chunks are embedded with for semantic search, where it comes from, and the size of its vectors.',
        response: { 200: EmbeddingModelInfo, ...errorResponses() }
      }
    },
    async (request) => embeddingModelOf(principalOf(request).orgId)
  )

  app.put(
    '/models/embedding',
    {
      config: { ...ADMIN, keyAccess: 'none' },
      schema: {
        operationId: 'setEmbeddingModel',
        tags: PROVIDERS,
        summary: "Choose the org's embedding model (admin); its texts are embedded again in the background",
        description:
          "Sets the model the org's texts and queries are embedded with (one of its ready providers' models, the deployment's, or the built-in one), tried once before it is kept; null forgets the choice. Every text is embedded again in the background, found by its words meanwhile.",
        body: SetEmbeddingModelBody,
        response: { 200: EmbeddingModelInfo, ...errorResponses(502) }
      }
    },
    async (request) => {
      const principal = principalOf(request)
      const { orgId } = principal
      const { model } = request.body
      const models = app.retrieval.models
      const before = await models.forOrg(orgId)
      const refuse = (message: string) => validationFailed([{ path: '/body/model', message }])
      let choice: { model: string; providerId: string | null; dimensions: number } | null = null
      if (model !== null) {
        const builtin = builtinModel()
        const candidate =
          model === builtin.model
            ? builtin
            : model === models.fallback.model
              ? models.fallback
              : await models.providerModel(orgId, model, null)
        if (!candidate)
          throw refuse(
            `no ready provider of this organization offers ${JSON.stringify(model)} over the OpenAI API, and it is not the deployment's or the built-in embedding model`
          )
        let dimensions: number
        try {
          dimensions = (await candidate.embed(['a test of the embedding model'], { timeoutMs: 15_000 }))[0]!.length
        } catch (err) {
          const reason = err instanceof EmbeddingFailed ? err.message : 'the embedding call failed'
          if (err instanceof EmbeddingFailed && err.status !== null && err.status >= 400 && err.status < 500)
            throw refuse(`${reason}: is it an embedding model?`)
          throw integrationFailed(`the embedding model could not be tried: ${reason}`)
        }
        const providerId = candidate.key.startsWith('provider:') ? candidate.key.split(':')[1]! : null
        choice = { model, providerId, dimensions }
      }
      await setEmbeddingChoice(app.db, orgId, choice, realUserId(principal))
      models.forget(orgId)
      const after = await models.forOrg(orgId)
      // a new model: every text of the org is embedded again (found by its words meanwhile)
      if (after.key !== before.key) await app.retrieval.reembed(orgId)
      return embeddingModelOf(orgId)
    }
  )
}

// started only where the services it uses are: a group app without them fails at boot, naming what is missing
export default fp(providersRoutes, {
  name: 'providers-routes',
  fastify: '5.x',
  dependencies: ['db', 'principal', 'providers', 'retrieval', 'runs'],
  encapsulate: true
})
