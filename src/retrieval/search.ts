import { sql, type SQL } from 'drizzle-orm'
import type { FastifyBaseLogger } from 'fastify'
import { LRUCache } from 'lru-cache'
import { rowsOf, type Db } from '../db/client.js'
import { isoOf } from '../db/rows.js'
import type { PoolRef } from '../memory/backend.js'
import { fuse, type Scores, type SearchMode } from './fusion.js'
import { memoryTextRanking } from './memory-text.js'
import type { EmbeddingModel, EmbeddingModels } from './models.js'
import type { EmbeddingKind } from './tables.js'
import { nearest, type VectorHit, type VectorSupport } from './vectors.js'

/**
 * The one retrieval path of memory and knowledge: a full-text ranking and a vector ranking
 * (the query's embedding against the stored vectors of the org's current model, within one
 * pool), fused by reciprocal rank. `mode` picks one side or both; without vectors (no
 * pgvector, or the query could not be embedded in time) every mode ranks by words alone and
 * says so.
 */

/** Each side ranks this many candidates (or a page, when larger) for the fusion to choose from. */
export const FUSION_DEPTH = 20

/** A query longer than this is embedded from its start (a prompt of a recall, mostly). */
const QUERY_CHARS = 4000

export interface QueryVector {
  model: EmbeddingModel
  vector: number[]
}

export interface MemoryFound {
  id: string
  content: string
  score: number
  scores: Scores
  runId: string | null
  rootRunId: string | null
  createdAt: string
}

export interface Retrieval {
  readonly vectors: VectorSupport
  readonly models: EmbeddingModels
  /** the mode a request gets when it names none: hybrid where vectors exist */
  readonly defaultMode: SearchMode
  /** the mode a request gets: its own, except that without vectors everything is full text */
  modeFor(asked: SearchMode | undefined): SearchMode
  /** the query's vector in the org's current model; null (logged) when it cannot be had in time */
  queryVector(orgId: string, text: string): Promise<QueryVector | null>
  /** the vector ranking of a pool (or an org's knowledge: pool ''); `extra` narrows the rows */
  vectorRanking(
    orgId: string,
    poolId: string,
    kinds: readonly EmbeddingKind[],
    qv: QueryVector,
    depth: number,
    extra?: SQL
  ): Promise<VectorHit[]>
  /** a pool's facts for a query, ranked as `mode` says (the postgres backend's search) */
  searchMemory(
    pool: PoolRef,
    query: string,
    limit: number,
    options: { mode?: SearchMode | undefined; anyWord?: boolean | undefined; meaning?: string | undefined }
  ): Promise<{ items: MemoryFound[]; truncated: boolean; mode: SearchMode }>
}

export interface RetrievalOptions {
  db: Db
  log: FastifyBaseLogger
  vectors: VectorSupport
  models: EmbeddingModels
  queryTimeoutMs: number
}

export function createRetrieval(o: RetrievalOptions): Retrieval {
  const { db, log } = o
  const defaultMode: SearchMode = o.vectors.available ? 'hybrid' : 'fulltext'
  // a query asked again (a console's search as it is typed, a recall of the same prompt) is embedded once
  const vectorsOfQueries = new LRUCache<string, Promise<number[] | null>>({ max: 2000, ttl: 10 * 60_000 })

  async function queryVector(orgId: string, text: string): Promise<QueryVector | null> {
    if (!o.vectors.available) return null
    const model = await o.models.forOrg(orgId)
    const input = text.slice(0, QUERY_CHARS).trim()
    if (input === '') return null
    const key = `${model.key}\u0000${input}`
    let pending = vectorsOfQueries.get(key)
    if (!pending) {
      pending = model
        .embed([input], { timeoutMs: o.queryTimeoutMs })
        .then((vectors) => vectors[0] ?? null)
        .catch((err: unknown) => {
          vectorsOfQueries.delete(key)
          log.warn({ err, model: model.model }, 'a search query could not be embedded; it ranks by words alone')
          return null
        })
      vectorsOfQueries.set(key, pending)
    }
    const vector = await pending
    return vector ? { model, vector } : null
  }

  const modeFor = (asked: SearchMode | undefined): SearchMode =>
    !o.vectors.available ? 'fulltext' : (asked ?? defaultMode)

  /** The vector ranking of a pool (or an org's knowledge); `extra` narrows the rows (a tag, a phrase). */
  async function vectorRanking(
    orgId: string,
    poolId: string,
    kinds: readonly EmbeddingKind[],
    qv: QueryVector,
    depth: number,
    extra?: SQL
  ) {
    return nearest(
      db,
      { orgId, poolId, kinds, modelKey: qv.model.key, dimensions: qv.vector.length, ...(extra ? { extra } : {}) },
      qv.vector,
      depth,
      qv.model.minSimilarity
    )
  }

  return {
    vectors: o.vectors,
    models: o.models,
    defaultMode,
    modeFor,
    queryVector,
    async searchMemory(pool, query, limit, options) {
      let mode = modeFor(options.mode)
      const depth = Math.max(limit, FUSION_DEPTH)
      const qv = mode === 'fulltext' ? null : await queryVector(pool.orgId, options.meaning ?? query)
      if (!qv) mode = 'fulltext'
      const [text, near] = await Promise.all([
        mode === 'semantic' ? [] : memoryTextRanking(db, pool, query, depth, options.anyWord === true),
        qv ? vectorRanking(pool.orgId, pool.id, ['memory'], qv, depth + 1) : []
      ])
      // facts found by meaning only: their text and provenance, from this pool only
      const known = new Set(text.map((r) => r.id))
      const missing = near.filter((h) => !known.has(h.id)).map((h) => h.id)
      const extra =
        missing.length === 0
          ? []
          : rowsOf<(typeof text)[number]>(
              await db.execute(sql`
              select id, content, source_run_id, root_run_id, created_at, 0::float8 as score
              from memory_items
              where org_id = ${pool.orgId} and pool_id = ${pool.id}
                and id in (select jsonb_array_elements_text(${JSON.stringify(missing)}::jsonb))`)
            )
      const rows = new Map([...text, ...extra].map((r) => [r.id, r]))
      const fused = fuse(
        text.map((r) => ({ item: r.id, score: Number(r.score) })),
        near.filter((h) => rows.has(h.id)).map((h) => ({ item: h.id, score: h.similarity })),
        (id) => id
      )
      const items = fused.slice(0, limit).map(({ item, scores }): MemoryFound => {
        const r = rows.get(item)!
        return {
          id: r.id,
          content: r.content,
          score: mode === 'hybrid' ? scores.fused : mode === 'semantic' ? scores.semantic! : scores.fulltext!,
          scores,
          runId: r.source_run_id,
          rootRunId: r.root_run_id,
          createdAt: isoOf(r.created_at)
        }
      })
      return { items, truncated: fused.length > limit, mode }
    },
    vectorRanking
  }
}
