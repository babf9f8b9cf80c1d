import { sql, type SQL } from 'drizzle-orm'
import type { FastifyBaseLogger } from 'fastify'
import { LRUCache } from 'lru-cache'
import { rowsOf, type Db } from '../db/client.js'
import { boolOf, isoOf, jsonOf } from '../db/rows.js'
import type { PoolRef } from '../memory/backend.js'
import { fuse, type Scores, type SearchMode } from './fusion.js'
import { memoryTextRanking, memoryTextRankingCtes, type MemoryTextRow } from './memory-text.js'
import type { EmbeddingModel, EmbeddingModels } from './models.js'
import type { EmbeddingKind, EmbeddingState } from './tables.js'
import type { PoolScope } from '../memory/pools.js'
import { nearest, nearestSql, type VectorHit, type VectorSupport } from './vectors.js'

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
  /**
   * A person's search of the pool they name, in ONE statement: the org's memory switch, the
   * pool, its facts ranked as `mode` says, and their vectors' states. With `unless`, the
   * ranking is left out when the pool is still at that generation (a cached answer stands).
   */
  searchPool(
    where: { orgId: string; scope: PoolScope; ownerKey: string },
    query: string,
    limit: number,
    options: {
      mode?: SearchMode | undefined
      /** the pool's generation of a kept answer, and its items (whose vector states are read) */
      unless?: { poolId: string; generation: number; ids: readonly string[] } | undefined
    }
  ): Promise<PoolSearch>
}

/** What searchPool found: the org's switch, the pool (null: none yet, or memory off), and the answer. */
export interface PoolSearch {
  orgOn: boolean
  pool: PoolRef | null
  generation: number
  /** the pool was still at `unless`'s generation: nothing was ranked */
  unchanged: boolean
  found: { items: MemoryFound[]; truncated: boolean; mode: SearchMode }
  /** each candidate's vector state (null: no vectors here) */
  states: Map<string, { state: EmbeddingState; error: string | null }> | null
}

export interface RetrievalOptions {
  db: Db
  log: FastifyBaseLogger
  vectors: VectorSupport
  models: EmbeddingModels
  queryTimeoutMs: number
}

/**
 * Whether a query's vector has a direction to rank by. A query none of whose words the model
 * knows (a misspelled word, for the built-in model) has the zero vector: its cosine distance to
 * every vector is NaN, which the vector side never lets through, so that side found nothing
 * after reading every vector of the pool (10 ms of a 16 ms search among 10,000 facts). Left out,
 * the search answers the same, its mode included.
 */
export const pointsSomewhere = (vector: readonly number[]) => vector.some((x) => x !== 0)

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
        qv && pointsSomewhere(qv.vector) ? vectorRanking(pool.orgId, pool.id, ['memory'], qv, depth + 1) : []
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
      const { items, truncated } = fuseMemory(text, near, extra, limit, mode)
      return { items, truncated, mode }
    },
    vectorRanking,
    searchPool: (where, query, limit, options) =>
      searchPoolOnce(db, { vectors: o.vectors, models: o.models, modeFor, queryVector }, where, query, limit, options)
  }
}

/** A pool's facts found by words and by meaning, fused by reciprocal rank: the page and whether more were found. */
function fuseMemory(
  text: readonly MemoryTextRow[],
  near: readonly VectorHit[],
  extra: readonly MemoryTextRow[],
  limit: number,
  mode: SearchMode
): { items: MemoryFound[]; truncated: boolean } {
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
  return { items, truncated: fused.length > limit }
}

/**
 * Retrieval's searchPool: the org's switch and the pool are CTEs of the statement that ranks
 * (the ranking reads the pool through them, and finds nothing when memory is off or the pool
 * is missing), so a search is one round trip. The query's vector, when the mode wants one,
 * is had before (its own cache keeps a query asked again).
 */
export async function searchPoolOnce(
  db: Db,
  r: Pick<Retrieval, 'vectors' | 'models' | 'modeFor' | 'queryVector'>,
  where: { orgId: string; scope: PoolScope; ownerKey: string },
  query: string,
  limit: number,
  options: {
    mode?: SearchMode | undefined
    unless?: { poolId: string; generation: number; ids: readonly string[] } | undefined
  }
): Promise<PoolSearch> {
  const { orgId } = where
  let mode = r.modeFor(options.mode)
  const depth = Math.max(limit, FUSION_DEPTH)
  const qv = mode === 'fulltext' ? null : await r.queryVector(orgId, query)
  if (!qv) mode = 'fulltext'
  const model = r.vectors.available ? (qv?.model ?? (await r.models.forOrg(orgId))) : null
  const poolId = sql`(select id from searched)`
  const text = mode === 'semantic' ? null : memoryTextRankingCtes('txt', orgId, poolId, query, depth)
  const near =
    qv && pointsSomewhere(qv.vector)
      ? nearestSql(
          { orgId, poolId, kinds: ['memory'], modelKey: qv.model.key, dimensions: qv.vector.length },
          qv.vector,
          depth + 1,
          qv.model.minSimilarity
        )
      : null
  const unless = options.unless
  const textRows = text
    ? sql`txt`
    : sql`(select null::text as id, null::text as content, null::text as source_run_id, null::text as root_run_id,
                  null::timestamptz as created_at, null::float8 as score where false)`
  const nearRows = near
    ? sql`near`
    : sql`(select null::text as kind, null::text as id, null::float8 as distance where false)`
  const rows = rowsOf<{
    org_on: unknown
    id: string | null
    scope: PoolScope | null
    owner_key: string | null
    generation: number | string | null
    searched: unknown
    text: unknown
    near: unknown
    extra: unknown
    states: unknown
  }>(
    await db.execute(sql`
    with ms as (select coalesce((select enabled from memory_settings where org_id = ${orgId}), true) as org_on),
    pool as (
      select p.id, p.scope, p.owner_key, p.generation from memory_pools p, ms
      where ms.org_on and p.org_id = ${orgId} and p.owner_key = ${where.ownerKey} and p.scope = ${where.scope}),
    searched as (
      select id from pool
      ${unless ? sql`where not (pool.id = ${unless.poolId} and pool.generation = ${unless.generation})` : sql``})
    ${text ? sql`, ${text}` : sql``}
    ${near ? sql`, near as (${near})` : sql``}
    select ms.org_on, pool.id, pool.scope, pool.owner_key, pool.generation,
           exists (select 1 from searched) as searched,
           (select coalesce(json_agg(t order by t.score desc, t.id desc), '[]'::json) from ${textRows} t) as text,
           (select coalesce(json_agg(json_build_object('kind', v.kind, 'id', v.id, 'distance', v.distance) order by v.distance, v.id), '[]'::json)
              from ${nearRows} v) as near,
           (select coalesce(json_agg(x), '[]'::json) from (
              select id, content, source_run_id, root_run_id, created_at, 0::float8 as score from memory_items
              where org_id = ${orgId} and pool_id = (select id from searched)
                and id in (select id from ${nearRows} v) and id not in (select id from ${textRows} t)) x) as extra,
           ${
             model
               ? sql`(select coalesce(json_agg(json_build_object('id', e.item_id, 'state', e.state, 'model', e.model, 'error', e.last_error)), '[]'::json)
              from embeddings e
              where e.org_id = ${orgId} and e.kind = 'memory'
                and e.item_id in (select id from ${textRows} t union select id from ${nearRows} v
                                  union select jsonb_array_elements_text(${JSON.stringify(unless?.ids ?? [])}::jsonb)))`
               : sql`null::json`
           } as states
    from ms left join pool on true`)
  )
  const row = rows[0]!
  const pool: PoolRef | null = row.id
    ? { id: row.id, orgId, scope: row.scope ?? where.scope, ownerKey: row.owner_key ?? '' }
    : null
  const textFound = jsonOf<MemoryTextRow[]>(row.text)
  const nearFound = jsonOf<Array<{ kind: EmbeddingKind; id: string; distance: number }>>(row.near).map(
    (h): VectorHit => ({ kind: h.kind, id: h.id, similarity: Math.round((1 - Number(h.distance)) * 10_000) / 10_000 })
  )
  const { items, truncated } = fuseMemory(textFound, nearFound, jsonOf<MemoryTextRow[]>(row.extra), limit, mode)
  let states: PoolSearch['states'] = null
  if (model) {
    states = new Map()
    for (const s of jsonOf<Array<{ id: string; state: EmbeddingState; model: string | null; error: string | null }>>(
      row.states
    ) ?? []) {
      // a vector of another model does not count: it is being made again
      const state = s.state === 'ready' && s.model !== model.key ? 'pending' : s.state
      states.set(s.id, { state, error: state === 'failed' ? s.error : null })
    }
  }
  return {
    orgOn: boolOf(row.org_on),
    pool,
    generation: Number(row.generation ?? 0),
    unchanged: pool !== null && !boolOf(row.searched),
    found: { items, truncated, mode },
    states
  }
}
