import { and, eq, sql } from 'drizzle-orm'
import { LRUCache } from 'lru-cache'
import { conflict } from '../../plugins/errors.js'
import { rowsOf, type Db, type Tx } from '../db/client.js'
import { newId } from '../db/ids.js'
import {
  contentHash,
  type BatchEntry,
  type BrowseItem,
  type CaptureDelivery,
  type MarkBatchDelivered,
  type MarkDelivered,
  type MemoryBackend,
  type PoolRef,
  type SearchHit
} from './backend.js'
import { isUniqueViolation } from '../db/faults.js'
import { readHistory, recordChanges } from './history-repo.js'
import { memoryItems, memoryPools, memoryWords } from './tables.js'
import { decodeCursor, keyset } from '../db/paging.js'
import { isoOf } from '../db/rows.js'
import { vocabulary } from '../retrieval/words.js'
import { RRF_K, type SearchMode } from '../retrieval/fusion.js'
import { memoryTextRanking } from '../retrieval/memory-text.js'
import { builtinModel } from '../retrieval/models.js'
import { searchPoolOnce, type PoolSearch, type Retrieval } from '../retrieval/search.js'

/** A retrieval of words only: the full-text ranking, as a pool built without vectors searches. */
function wordsOnly(db: Db): Retrieval {
  const fallback = builtinModel()
  const retrieval: Retrieval = {
    vectors: { available: false, reason: 'no retrieval module' },
    models: { fallback, forOrg: async () => fallback, forget: () => {}, providerModel: async () => null },
    defaultMode: 'fulltext',
    modeFor: () => 'fulltext',
    queryVector: async () => null,
    vectorRanking: async () => [],
    async searchMemory(pool, query, limit, options) {
      const rows = await memoryTextRanking(db, pool, query, limit, options.anyWord === true)
      return {
        items: rows.slice(0, limit).map((r, i) => {
          const score = Math.round(Number(r.score) * 10_000) / 10_000
          return {
            id: r.id,
            content: r.content,
            score,
            scores: { fulltext: score, semantic: null, fused: Math.round((1 / (RRF_K + i + 1)) * 1e6) / 1e6 },
            runId: r.source_run_id,
            rootRunId: r.root_run_id,
            createdAt: isoOf(r.created_at)
          }
        }),
        truncated: rows.length > limit,
        mode: 'fulltext'
      }
    },
    searchPool: (where, query, limit, options) => searchPoolOnce(db, retrieval, where, query, limit, options)
  }
  return retrieval
}

/** Thrown inside a delivery transaction to roll it back when the capture row moved on. */
class StaleDelivery extends Error {}

type SearchOutcome = { items: SearchHit[]; truncated: boolean; mode: SearchMode }

async function addVocabulary(exec: Db | Tx, pool: PoolRef, contents: string[]): Promise<void> {
  const words = vocabulary(...contents)
  if (words.length === 0) return
  await exec
    .insert(memoryWords)
    .values(words.map((word) => ({ poolId: pool.id, word })))
    .onConflictDoNothing()
}

/**
 * Facts in this database, searched through the retrieval module (src/retrieval/search.ts):
 * full text (each query word as a prefix and by its likely corrections from the pool's
 * vocabulary) fused with the nearest vectors of the pool, as the request's mode says.
 */
export function createPostgresPool(
  db: Db,
  opts: { searchCache?: number; retrieval?: Retrieval; wake?: () => void } = {}
): MemoryBackend {
  // without the retrieval module (a test's bare pool): words only
  const retrieval = opts.retrieval ?? wordsOnly(db)
  // recent results of this instance, keyed by the pool's generation (memoryPools.generation),
  // which every item change and every batch of stored vectors moves on
  const cache = (opts.searchCache ?? 0) > 0 ? new LRUCache<string, SearchOutcome>({ max: opts.searchCache! }) : null

  const searchesAs =
    (opts.searchCache ?? 0) > 0
      ? new LRUCache<string, { poolId: string; generation: number } & Pick<PoolSearch, 'found'>>({
          max: opts.searchCache!
        })
      : null
  const backend: MemoryBackend = {
    name: 'postgres',

    async search(pool, query, limit, options = {}) {
      const anyWord = options.anyWord === true
      const find = () =>
        retrieval.searchMemory(pool, query, limit, { anyWord, mode: options.mode, meaning: options.meaning })
      if (!cache) return find()
      const [[row], model] = await Promise.all([
        db.select({ generation: memoryPools.generation }).from(memoryPools).where(eq(memoryPools.id, pool.id)),
        retrieval.models.forOrg(pool.orgId)
      ])
      const key = JSON.stringify([
        pool.id,
        row?.generation ?? 0,
        query,
        limit,
        anyWord,
        retrieval.modeFor(options.mode),
        model.key,
        options.meaning ?? null
      ])
      const hit = cache.get(key)
      if (hit) return hit
      const outcome = await find()
      // a query that could not be embedded is not kept: the next one may be
      if (outcome.mode === retrieval.modeFor(options.mode)) cache.set(key, outcome)
      return outcome
    },

    async searchAs(where, query, limit, options = {}) {
      if (!searchesAs) return retrieval.searchPool(where, query, limit, { mode: options.mode })
      // the answer kept for this query of this person's pool stands while the pool is at its
      // generation: the one statement reads the generation and ranks only when it moved on
      const model = retrieval.vectors.available ? await retrieval.models.forOrg(where.orgId) : null
      const key = JSON.stringify([
        where.orgId,
        where.scope,
        where.ownerKey,
        query,
        limit,
        retrieval.modeFor(options.mode),
        model?.key ?? null,
        'as'
      ])
      const kept = searchesAs.get(key)
      const found = await retrieval.searchPool(where, query, limit, {
        mode: options.mode,
        unless: kept && { poolId: kept.poolId, generation: kept.generation, ids: kept.found.items.map((i) => i.id) }
      })
      if (found.unchanged && kept) return { ...found, found: kept.found }
      // a query that could not be embedded is not kept: the next one may be
      if (found.pool && found.found.mode === retrieval.modeFor(options.mode))
        searchesAs.set(key, { poolId: found.pool.id, generation: found.generation, found: found.found })
      return found
    },

    checkCursor(cursor) {
      decodeCursor(cursor)
    },

    async browse(pool, limit, rawCursor) {
      const list = keyset(memoryItems.id, 'desc', { limit, cursor: rawCursor })
      const inPool = and(eq(memoryItems.orgId, pool.orgId), eq(memoryItems.poolId, pool.id))
      const [rows, totals] = await Promise.all([
        db
          .select({
            id: memoryItems.id,
            content: memoryItems.content,
            background: memoryItems.background,
            sourceRunId: memoryItems.sourceRunId,
            createdAt: memoryItems.createdAt,
            updatedAt: memoryItems.updatedAt
          })
          .from(memoryItems)
          .where(and(inPool, list.after))
          .orderBy(list.orderBy)
          .limit(list.limit),
        db
          .select({ n: memoryPools.itemCount })
          .from(memoryPools)
          .where(and(eq(memoryPools.orgId, pool.orgId), eq(memoryPools.id, pool.id)))
      ])
      const page = list.page(rows)
      const items: BrowseItem[] = page.items.map((r) => ({
        ...r,
        createdAt: isoOf(r.createdAt),
        updatedAt: isoOf(r.updatedAt)
      }))
      return { items, total: Number(totals[0]?.n ?? 0), nextCursor: page.nextCursor }
    },

    async exists(pool, id) {
      const rows = await db
        .select({ id: memoryItems.id })
        .from(memoryItems)
        .where(and(eq(memoryItems.orgId, pool.orgId), eq(memoryItems.poolId, pool.id), eq(memoryItems.id, id)))
      return rows.length === 1
    },

    async add(pool, content, changedBy) {
      try {
        return await db.transaction(async (tx) => {
          const [row] = await tx
            .insert(memoryItems)
            .values({ id: newId(), orgId: pool.orgId, poolId: pool.id, content, contentHash: contentHash(content) })
            .returning({
              id: memoryItems.id,
              content: memoryItems.content,
              background: memoryItems.background,
              sourceRunId: memoryItems.sourceRunId,
              createdAt: memoryItems.createdAt,
              updatedAt: memoryItems.updatedAt
            })
          await tx
            .update(memoryPools)
            .set({ itemCount: sql`${memoryPools.itemCount} + 1`, generation: sql`${memoryPools.generation} + 1` })
            .where(eq(memoryPools.id, pool.id))
          await addVocabulary(tx, pool, [content])
          await recordChanges(tx, pool, changedBy, [{ itemId: row!.id, content, kind: 'created' }])
          return { ...row!, createdAt: isoOf(row!.createdAt), updatedAt: isoOf(row!.updatedAt) }
        })
      } catch (err) {
        if (isUniqueViolation(err)) throw conflict('the pool already holds this fact')
        throw err
      }
    },

    async update(pool, id, content, changedBy) {
      try {
        return await db.transaction(async (tx) => {
          const rows = await tx
            .update(memoryItems)
            .set({ content, contentHash: contentHash(content), updatedAt: new Date() })
            .where(and(eq(memoryItems.orgId, pool.orgId), eq(memoryItems.poolId, pool.id), eq(memoryItems.id, id)))
            .returning({ id: memoryItems.id })
          if (rows.length === 0) return false
          await tx
            .update(memoryPools)
            .set({ generation: sql`${memoryPools.generation} + 1` })
            .where(eq(memoryPools.id, pool.id))
          await addVocabulary(tx, pool, [content])
          await recordChanges(tx, pool, changedBy, [{ itemId: id, content, kind: 'updated' }])
          return true
        })
      } catch (err) {
        if (isUniqueViolation(err)) throw conflict('the pool already holds this fact')
        throw err
      }
    },

    async remove(pool, id, changedBy) {
      return db.transaction(async (tx) => {
        const rows = await tx
          .delete(memoryItems)
          .where(and(eq(memoryItems.orgId, pool.orgId), eq(memoryItems.poolId, pool.id), eq(memoryItems.id, id)))
          .returning({ id: memoryItems.id, content: memoryItems.content })
        await recordChanges(
          tx,
          pool,
          changedBy,
          rows.map((r) => ({ itemId: r.id, content: r.content, kind: 'deleted' as const }))
        )
        if (rows.length > 0) {
          await tx
            .update(memoryPools)
            .set({
              itemCount: sql`greatest(0, ${memoryPools.itemCount} - ${rows.length})`,
              generation: sql`${memoryPools.generation} + 1`
            })
            .where(eq(memoryPools.id, pool.id))
        }
        return rows.length
      })
    },

    history(pool, id) {
      return readHistory(db, pool, id)
    },

    async deliver(pool: PoolRef, capture: CaptureDelivery, markDelivered: MarkDelivered) {
      // The capture's `delivered` state and its facts commit together: exactly once.
      try {
        await db.transaction(async (tx) => {
          if (!(await markDelivered(tx))) throw new StaleDelivery()
          await writeFacts(tx, [{ pool, capture }])
        })
      } catch (err) {
        if (err instanceof StaleDelivery) return
        throw err
      }
    },

    async deliverBatch(entries: BatchEntry[], markDelivered: MarkBatchDelivered) {
      return db.transaction(async (tx) => {
        const owned = await markDelivered(tx)
        await writeFacts(
          tx,
          entries.filter((e) => owned.has(e.capture.captureId))
        )
        return owned
      })
    }
  }
  // a new or changed fact is embedded soon (it waits in the job's queue from the write's own statement)
  const wake = opts.wake ?? (() => {})
  return {
    ...backend,
    add: (...a) => backend.add(...a).finally(wake),
    update: (...a) => backend.update(...a).finally(wake),
    deliver: (...a) => backend.deliver(...a).finally(wake),
    deliverBatch: (...a) => backend.deliverBatch!(...a).finally(wake)
  }
}

/** rows per insert statement; each statement carries its rows as one JSON parameter */
const INSERT_CHUNK = 5000

type KeptFact = {
  id: string
  content: string
  pool_id: string
  org_id: string
  source_run_id: string | null
  capture_id: string
}

/**
 * Each delivered capture says how many of its facts were new to their pool and how many the
 * pool already held (merged, not stored twice).
 */
async function countAdded(tx: Tx, entries: BatchEntry[], kept: KeptFact[]): Promise<void> {
  const added = new Map<string, number>()
  for (const { capture } of entries) added.set(capture.captureId, 0)
  for (const row of kept) added.set(row.capture_id, (added.get(row.capture_id) ?? 0) + 1)
  const counts = [...added].map(([id, n]) => ({ id, n }))
  await tx.execute(sql`
    update memory_captures c set added_count = b.n, merged_count = greatest(0, c.item_count - b.n)
    from jsonb_to_recordset(${JSON.stringify(counts)}::jsonb) as b(id text, n int)
    where c.id = b.id`)
}

/**
 * Adds captured facts: a fact already in its pool (same normalized content) or an already
 * delivered (capture, index) is skipped; vocabulary, history and pool counts follow. The rows
 * go as one JSON parameter per statement (jsonb_to_recordset): a multi-row VALUES list with a
 * parameter per column costs far more to build and to parse than the insert itself.
 */
async function writeFacts(tx: Tx, entries: BatchEntry[]): Promise<void> {
  const values = entries.flatMap(({ pool, capture }) =>
    capture.facts.map((content, i) => ({
      id: newId(),
      org_id: pool.orgId,
      pool_id: pool.id,
      content,
      content_hash: contentHash(content),
      source_run_id: capture.runId,
      root_run_id: capture.rootRunId,
      capture_id: capture.captureId,
      fact_index: capture.indexes?.[i] ?? i
    }))
  )
  const kept: KeptFact[] = []
  for (let i = 0; i < values.length; i += INSERT_CHUNK) {
    kept.push(
      ...rowsOf<KeptFact>(
        await tx.execute(sql`
      insert into memory_items (id, org_id, pool_id, content, content_hash, source_run_id, root_run_id, capture_id, fact_index)
      select id, org_id, pool_id, content, content_hash, source_run_id, root_run_id, capture_id, fact_index
      from jsonb_to_recordset(${JSON.stringify(values.slice(i, i + INSERT_CHUNK))}::jsonb)
        as r(id text, org_id text, pool_id text, content text, content_hash text, source_run_id text, root_run_id text, capture_id text, fact_index int)
      on conflict do nothing
      returning id, content, pool_id, org_id, source_run_id, capture_id`)
      )
    )
  }
  await countAdded(tx, entries, kept)
  if (kept.length === 0) return
  const byPool = new Map<string, string[]>()
  for (const row of kept) byPool.set(row.pool_id, [...(byPool.get(row.pool_id) ?? []), row.content])
  const poolIds = [...byPool.keys()].sort()
  for (const poolId of poolIds) {
    const words = vocabulary(...byPool.get(poolId)!)
    for (let i = 0; i < words.length; i += INSERT_CHUNK) {
      await tx.execute(sql`
        insert into memory_words (pool_id, word)
        select ${poolId}, w from jsonb_array_elements_text(${JSON.stringify(words.slice(i, i + INSERT_CHUNK))}::jsonb) as w
        order by w
        on conflict do nothing`)
    }
  }
  for (let i = 0; i < kept.length; i += INSERT_CHUNK) {
    const history = kept.slice(i, i + INSERT_CHUNK).map((r) => ({
      id: newId(),
      org_id: r.org_id,
      pool_id: r.pool_id,
      item_id: r.id,
      content: r.content,
      changed_by: `run:${r.source_run_id}`
    }))
    await tx.execute(sql`
      insert into memory_item_history (id, org_id, pool_id, item_id, content, kind, changed_by)
      select id, org_id, pool_id, item_id, content, 'created', changed_by
      from jsonb_to_recordset(${JSON.stringify(history)}::jsonb)
        as r(id text, org_id text, pool_id text, item_id text, content text, changed_by text)`)
  }
  // counts last, in pool order: the row locks are held briefly and always taken in one order
  for (const poolId of poolIds) {
    await tx
      .update(memoryPools)
      .set({
        itemCount: sql`${memoryPools.itemCount} + ${byPool.get(poolId)!.length}`,
        generation: sql`${memoryPools.generation} + 1`
      })
      .where(eq(memoryPools.id, poolId))
  }
}
