import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import { sql } from 'drizzle-orm'
import type { Config } from '../config.js'
import { rowsOf, type Db } from '../db/client.js'
import type { OrgProviders } from '../runs/ports/providers.js'
import type { Clock } from '../worker-loop.js'
import { createEmbeddingWorker, type EmbeddingWorker } from './embedding-worker.js'
import { createEmbeddingModels, type EmbeddingModel } from './models.js'
import { createRetrieval, type Retrieval } from './search.js'
import type { EmbeddingKind, EmbeddingState } from './tables.js'
import { vectorSupport } from './vectors.js'

/** The retrieval module as `app.retrieval`: search by words and meaning, and the embedding job. */
export interface RetrievalService extends Retrieval {
  /** the embedding job of this instance (null where vectors are missing) */
  readonly worker: EmbeddingWorker | null
  /** the embedding state of items, as the Hub shows it: ready only for the org's current model */
  states(
    orgId: string,
    kind: EmbeddingKind,
    ids: readonly string[]
  ): Promise<Map<string, { state: EmbeddingState; error: string | null }>>
  /**
   * Embeds again: every text of the org (its model changed), or one item (`POST
   * /api/memory/item/:id/embed`). False when the item has no embedding row in the org.
   */
  reembed(orgId: string, item?: { kind: EmbeddingKind; id: string; poolId: string }): Promise<boolean>
  /** the size of a model's vectors: known for the built-in and a chosen one, else read from a stored vector */
  dimensionsOf(orgId: string, model: EmbeddingModel): Promise<number | null>
}

declare module 'fastify' {
  interface FastifyInstance {
    retrieval: RetrievalService
  }
}

/**
 * The variables the retrieval service reads (the deployment's OpenAI endpoint and key when no
 * embedding one is set): a read of another is a type error.
 */
export type RetrievalConfig = Pick<
  Config,
  | 'EMBEDDING_MODEL'
  | 'EMBEDDING_BASE_URL'
  | 'EMBEDDING_API_KEY'
  | 'OPENAI_BASE_URL'
  | 'OPENAI_API_KEY'
  | 'EMBEDDING_MIN_SIMILARITY'
  | 'EMBEDDING_QUERY_TIMEOUT_MS'
  | 'EMBEDDING_BATCH'
  | 'EMBEDDING_MAX_ATTEMPTS'
  | 'EMBEDDING_LEASE_MS'
  | 'EMBEDDING_POLL_MS'
  | 'EMBEDDING_BACKOFF_MS'
  | 'EMBEDDING_BACKOFF_MAX_MS'
  | 'EMBEDDING_TIMEOUT_MS'
  | 'EMBEDDING_WORKER'
>

export interface RetrievalServiceOptions {
  config: RetrievalConfig
  providers: OrgProviders
  clock: Clock
}

/** The embedding states of items, in one query. */
async function statesOf(db: Db, retrieval: Retrieval, orgId: string, kind: EmbeddingKind, ids: readonly string[]) {
  const out = new Map<string, { state: EmbeddingState; error: string | null }>()
  if (ids.length === 0 || !retrieval.vectors.available) return out
  const model = await retrieval.models.forOrg(orgId)
  const rows = rowsOf<{ item_id: string; state: EmbeddingState; model: string | null; last_error: string | null }>(
    await db.execute(sql`
    select item_id, state, model, last_error from embeddings
    where org_id = ${orgId} and kind = ${kind}
      -- an array, not a semi-join: the lookup stays on the primary key whatever the table's statistics say
      and item_id = any(array(select jsonb_array_elements_text(${JSON.stringify(ids)}::jsonb)))`)
  )
  for (const r of rows) {
    // a vector of another model does not count: it is being made again
    const state = r.state === 'ready' && r.model !== model.key ? 'pending' : r.state
    out.set(r.item_id, { state, error: state === 'failed' ? r.last_error : null })
  }
  return out
}

export default fp(
  async function retrievalService(app: FastifyInstance, opts: RetrievalServiceOptions) {
    const { config } = opts
    const vectors = await vectorSupport(app.db)
    if (!vectors.available) app.log.warn(`semantic search is off: ${vectors.reason}`)
    const models = createEmbeddingModels({
      db: app.db,
      providers: opts.providers,
      deployment: {
        model: config.EMBEDDING_MODEL,
        baseUrl: config.EMBEDDING_BASE_URL ?? config.OPENAI_BASE_URL,
        apiKey: config.EMBEDDING_API_KEY ?? config.OPENAI_API_KEY
      },
      minSimilarity: config.EMBEDDING_MIN_SIMILARITY
    })
    if (config.EMBEDDING_MODEL && !(config.EMBEDDING_BASE_URL ?? config.OPENAI_BASE_URL))
      app.log.warn('EMBEDDING_MODEL is set without EMBEDDING_BASE_URL or OPENAI_BASE_URL: the built-in embedder serves')
    const retrieval = createRetrieval({
      db: app.db,
      log: app.log.child({ component: 'retrieval' }),
      vectors,
      models,
      queryTimeoutMs: config.EMBEDDING_QUERY_TIMEOUT_MS
    })
    const worker = vectors.available
      ? createEmbeddingWorker({
          db: app.db,
          log: app.log.child({ component: 'embedding-worker' }),
          models,
          batch: config.EMBEDDING_BATCH,
          maxAttempts: config.EMBEDDING_MAX_ATTEMPTS,
          leaseMs: config.EMBEDDING_LEASE_MS,
          pollMs: config.EMBEDDING_POLL_MS,
          backoffMs: config.EMBEDDING_BACKOFF_MS,
          backoffMaxMs: config.EMBEDDING_BACKOFF_MAX_MS,
          timeoutMs: config.EMBEDDING_TIMEOUT_MS,
          clock: opts.clock
        })
      : null
    const service: RetrievalService = {
      ...retrieval,
      worker,
      states: (orgId, kind, ids) => statesOf(app.db, retrieval, orgId, kind, ids),
      async reembed(orgId, item) {
        models.forget(orgId)
        const rows = rowsOf(
          await app.db.execute(sql`
          update embeddings
          set state = 'pending', attempts = 0, last_error = null, next_attempt_at = now(),
              lease_owner = null, lease_expires_at = null, updated_at = now()
          where org_id = ${orgId}
            ${item ? sql`and kind = ${item.kind} and item_id = ${item.id} and pool_id = ${item.poolId}` : sql``}
          returning item_id`)
        )
        worker?.wake()
        return rows.length > 0
      },
      async dimensionsOf(orgId, model) {
        if (model.dimensions !== null) return model.dimensions
        const [row] = rowsOf<{ dimensions: number }>(
          await app.db.execute(sql`
          select dimensions from embeddings
          where org_id = ${orgId} and model = ${model.key} and dimensions is not null limit 1`)
        )
        return row?.dimensions ?? null
      }
    }
    app.decorate('retrieval', service)
    app.addHook('onReady', async () => {
      if (!config.EMBEDDING_WORKER || !worker) return
      // the built-in embedder's table loads synchronously (a few hundred ms): at start, not in
      // the middle of serving requests at the first embedding
      if (models.fallback.source === 'builtin') await models.fallback.embed(['warm up'], { timeoutMs: 0 })
      worker.start()
    })
    app.addHook('preClose', async () => {
      await app.shutdown.drain('the embedding worker', async (ms) => {
        await worker?.stop(ms)
      })
    })
  },
  { name: 'retrieval', fastify: '5.x', dependencies: ['db', 'shutdown-refusals'] }
)
