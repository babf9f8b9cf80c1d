import { eq, sql } from 'drizzle-orm'
import type OpenAI from 'openai'
import type { Db } from '../db/client.js'
import type { OrgProviders } from '../runs/ports/providers.js'
import { embedOffline, OFFLINE_DIMENSIONS, OFFLINE_MODEL } from './embedders/offline.js'
import { embeddingSettings } from './tables.js'

/**
 * Which embedding model an org's texts and queries are embedded with: the model an admin
 * chose among the org's providers' (`PUT /api/models/embedding`), else the deployment's
 * `EMBEDDING_MODEL`, else the built-in offline embedder. A vector is stored with its model's
 * key; search compares only vectors of the org's current key.
 */
export const EMBEDDING_SOURCES = ['org', 'deployment', 'builtin'] as const
export type EmbeddingSource = (typeof EMBEDDING_SOURCES)[number]

export interface EmbeddingModel {
  /** stored with each vector: `builtin:<name>`, `deployment:<name>` or `provider:<provider id>:<name>` */
  key: string
  /** the model's name, as `GET /api/models/embedding` shows it */
  model: string
  source: EmbeddingSource
  /** known once one text was embedded (the built-in's always) */
  dimensions: number | null
  /** the least cosine similarity a vector match needs to count */
  minSimilarity: number
  /** one vector per text, in order; throws EmbeddingFailed */
  embed(texts: string[], options: { timeoutMs: number; signal?: AbortSignal | undefined }): Promise<number[][]>
}

/** An embedding call failed; `message` is a sentence fit for `lastError` (status and the provider's words). */
export class EmbeddingFailed extends Error {
  override name = 'EmbeddingFailed'
  /** the provider's HTTP status, when it answered one */
  readonly status: number | null
  constructor(message: string, status: number | null = null) {
    super(message)
    this.status = status
  }
}

/**
 * Matches below this similarity are not hits. The built-in's was measured on the paraphrase set
 * of bench/retrieval-quality.ts: a question and its fact are 0.49 alike on average (a quarter
 * under 0.35); at 0.3 hybrid recall@5 was best while unrelated facts stayed out (mostly under 0.15).
 */
const BUILTIN_MIN_SIMILARITY = 0.3
const REMOTE_MIN_SIMILARITY = 0.3

export const builtinModel = (minSimilarity?: number): EmbeddingModel => ({
  key: `builtin:${OFFLINE_MODEL}`,
  model: OFFLINE_MODEL,
  source: 'builtin',
  dimensions: OFFLINE_DIMENSIONS,
  minSimilarity: minSimilarity ?? BUILTIN_MIN_SIMILARITY,
  async embed(texts) {
    return texts.map(embedOffline)
  }
})

/** A readable sentence for a failed call: the status and what the provider said, never a raw body. */
function failureOf(err: unknown, where: string, SDK: typeof OpenAI): EmbeddingFailed {
  if (err instanceof SDK.APIError) {
    const said = (err.error as { message?: unknown } | undefined)?.message
    const words = typeof said === 'string' && said !== '' ? said : err.message
    if (err instanceof SDK.APIConnectionTimeoutError) return new EmbeddingFailed(`${where} did not answer in time`)
    if (err instanceof SDK.APIConnectionError) return new EmbeddingFailed(`${where} could not be reached`)
    return new EmbeddingFailed(
      `${where} answered ${err.status ?? 'an error'}: ${words.slice(0, 300)}`,
      err.status ?? null
    )
  }
  if ((err as Error)?.name === 'AbortError') return new EmbeddingFailed(`the call to ${where} was stopped`)
  return new EmbeddingFailed(`${where} failed: ${String((err as Error)?.message ?? err).slice(0, 300)}`)
}

/** An OpenAI-compatible `/embeddings` endpoint, through the official SDK (its own retries off: the worker retries). */
export function remoteModel(o: {
  key: string
  model: string
  source: EmbeddingSource
  baseUrl: string
  apiKey: () => Promise<string | null> | string | null
  dimensions: number | null
  minSimilarity?: number | undefined
  fetch?: ((url: string, init: RequestInit) => Promise<Response>) | undefined
  /** named in failures: "the deployment's embedding endpoint", "provider X" */
  where: string
}): EmbeddingModel {
  return {
    key: o.key,
    model: o.model,
    source: o.source,
    dimensions: o.dimensions,
    minSimilarity: o.minSimilarity ?? REMOTE_MIN_SIMILARITY,
    async embed(texts, { timeoutMs, signal }) {
      const apiKey = await o.apiKey()
      // loaded at the first call: a process that embeds only offline never loads the SDK
      const { default: SDK } = await import('openai')
      const client = new SDK({
        baseURL: o.baseUrl,
        apiKey: apiKey || 'none',
        ...(apiKey ? {} : { defaultHeaders: { Authorization: null } }),
        organization: null,
        project: null,
        maxRetries: 0,
        timeout: timeoutMs,
        logLevel: 'off',
        ...(o.fetch ? { fetch: o.fetch as typeof fetch } : {})
      })
      let answer: OpenAI.CreateEmbeddingResponse
      try {
        answer = await client.embeddings.create(
          { model: o.model, input: texts, encoding_format: 'float' },
          signal ? { signal } : {}
        )
      } catch (err) {
        throw failureOf(err, o.where, SDK)
      }
      const vectors: number[][] = new Array<number[]>(texts.length)
      for (const [i, item] of (answer.data ?? []).entries()) {
        const at = typeof item.index === 'number' ? item.index : i
        if (Array.isArray(item.embedding) && at >= 0 && at < texts.length) vectors[at] = item.embedding
      }
      for (let i = 0; i < texts.length; i++) {
        const v = vectors[i]
        if (!v || v.length === 0 || v.some((x) => typeof x !== 'number' || !Number.isFinite(x)))
          throw new EmbeddingFailed(`${o.where} answered without a usable vector for every text`)
        if (v.length !== vectors[0]!.length) throw new EmbeddingFailed(`${o.where} answered vectors of mixed sizes`)
        if (v.length > 16_000) throw new EmbeddingFailed(`${o.where} answered vectors of more than 16,000 dimensions`)
      }
      return vectors
    }
  }
}

export interface ModelsOptions {
  db: Db
  providers: OrgProviders
  deployment: {
    model: string | undefined
    baseUrl: string | undefined
    apiKey: string | undefined
  }
  minSimilarity: number | undefined
}

export interface EmbeddingModels {
  /** the org's current model (a database read, kept a second so a burst of searches reads it once) */
  forOrg(orgId: string): Promise<EmbeddingModel>
  /** forgets what `forOrg` kept for the org (its admin just changed the model) */
  forget(orgId: string): void
  /** the deployment's model, or the built-in one: what an org without a choice gets */
  readonly fallback: EmbeddingModel
  /** a provider's model for an org, to try before it is chosen; null when no ready provider offers it */
  providerModel(orgId: string, model: string, dimensions: number | null): Promise<EmbeddingModel | null>
}

const KEEP_MS = 1000

export function createEmbeddingModels(o: ModelsOptions): EmbeddingModels {
  const { deployment } = o
  const fallback: EmbeddingModel =
    deployment.model && deployment.baseUrl
      ? remoteModel({
          key: `deployment:${deployment.model}`,
          model: deployment.model,
          source: 'deployment',
          baseUrl: deployment.baseUrl,
          apiKey: () => deployment.apiKey ?? null,
          dimensions: null,
          minSimilarity: o.minSimilarity,
          where: "the deployment's embedding endpoint"
        })
      : builtinModel(o.minSimilarity)
  const kept = new Map<string, { at: number; model: Promise<EmbeddingModel> }>()

  async function providerModel(orgId: string, model: string, dimensions: number | null) {
    const provider = await o.providers.offering(orgId, model)
    if (!provider || provider.kind !== 'openai') return null
    return remoteModel({
      key: `provider:${provider.id}:${model}`,
      model,
      source: 'org',
      baseUrl: provider.baseUrl,
      apiKey: provider.apiKey,
      dimensions,
      minSimilarity: o.minSimilarity,
      fetch: provider.fetch,
      where: `provider ${JSON.stringify(provider.name)}`
    })
  }

  async function read(orgId: string): Promise<EmbeddingModel> {
    const [chosen] = await o.db.select().from(embeddingSettings).where(eq(embeddingSettings.orgId, orgId))
    if (!chosen) return fallback
    if (chosen.providerId === null) {
      // the deployment's own model or the built-in one, chosen by name
      return chosen.model === fallback.model ? fallback : builtinModel(o.minSimilarity)
    }
    // a provider that went away or stopped offering it: the deployment's model serves meanwhile
    return (await providerModel(orgId, chosen.model, chosen.dimensions)) ?? fallback
  }

  return {
    fallback,
    providerModel,
    forOrg(orgId) {
      const now = Date.now()
      const hit = kept.get(orgId)
      if (hit && now - hit.at < KEEP_MS) return hit.model
      const model = read(orgId)
      model.catch(() => kept.delete(orgId))
      kept.set(orgId, { at: now, model })
      if (kept.size > 10_000) kept.delete(kept.keys().next().value!)
      return model
    },
    forget(orgId) {
      kept.delete(orgId)
    }
  }
}

/** Keeps (or, with null, forgets) an org's choice. */
export async function setEmbeddingChoice(
  db: Db,
  orgId: string,
  choice: { model: string; providerId: string | null; dimensions: number } | null,
  updatedBy: string | null
): Promise<void> {
  if (choice === null) {
    await db.delete(embeddingSettings).where(eq(embeddingSettings.orgId, orgId))
    return
  }
  await db
    .insert(embeddingSettings)
    .values({ orgId, ...choice, updatedBy })
    .onConflictDoUpdate({
      target: embeddingSettings.orgId,
      set: { ...choice, updatedBy, updatedAt: sql`now()` }
    })
}
