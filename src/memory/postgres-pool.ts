import { and, count, desc, eq, lt, sql } from 'drizzle-orm'
import { conflict } from '../../plugins/errors.js'
import { rowsOf, type Db } from '../db/client.js'
import { newId } from '../db/ids.js'
import { contentHash, type BrowseItem, type CaptureDelivery, type MarkDelivered, type MemoryBackend, type PoolRef, type SearchHit } from './backend.js'
import { isUniqueViolation, readHistory, recordChanges } from './history.js'
import { memoryItems } from './tables.js'

/** Thrown inside a delivery transaction to roll it back when the capture row moved on. */
class StaleDelivery extends Error {}

const MAX_QUERY = 500
const MAX_WORDS = 16

/** `kube deploy` → `kube:* & deploy:*`: only letters and digits reach to_tsquery. */
export function prefixQuery(q: string): string {
  const words = q.toLowerCase().match(/[\p{L}\p{N}]+/gu) ?? []
  return words.slice(0, MAX_WORDS).map((w) => `${w}:*`).join(' & ')
}

/**
 * Facts in this database. Search ranks Postgres full-text matches (prefix terms, English
 * stemming) together with pg_trgm word similarity, so a misspelled word or a short prefix
 * still finds its fact; both are served by GIN indexes.
 */
export function createPostgresPool(db: Db): MemoryBackend {
  return {
    name: 'postgres',

    async search(pool, query, limit) {
      const q = query.slice(0, MAX_QUERY)
      const pfx = prefixQuery(q)
      const ftsMatch = pfx ? sql`search_vector @@ to_tsquery('english', ${pfx})` : sql`false`
      const ftsRank = pfx ? sql`ts_rank_cd(search_vector, to_tsquery('english', ${pfx}))` : sql`0`
      const result = await db.execute(sql`
        select id, content, source_run_id, root_run_id, created_at,
               (${ftsRank} + word_similarity(${q}, content))::float8 as score
        from memory_items
        where org_id = ${pool.orgId} and pool_id = ${pool.id}
          and (${ftsMatch} or ${q} <% content)
        order by score desc, id desc
        limit ${limit + 1}`)
      const rows = rowsOf<{ id: string; content: string; source_run_id: string | null; root_run_id: string | null; created_at: string | Date; score: number }>(result)
      const items: SearchHit[] = rows.slice(0, limit).map((r) => ({
        id: r.id,
        content: r.content,
        score: Math.round(Number(r.score) * 10_000) / 10_000,
        runId: r.source_run_id,
        rootRunId: r.root_run_id,
        createdAt: new Date(r.created_at).toISOString()
      }))
      return { items, truncated: rows.length > limit }
    },

    async browse(pool, limit, cursor) {
      const inPool = and(eq(memoryItems.orgId, pool.orgId), eq(memoryItems.poolId, pool.id))
      const [rows, totals] = await Promise.all([
        db.select({
          id: memoryItems.id,
          content: memoryItems.content,
          background: memoryItems.background,
          sourceRunId: memoryItems.sourceRunId,
          createdAt: memoryItems.createdAt,
          updatedAt: memoryItems.updatedAt
        }).from(memoryItems)
          .where(cursor ? and(inPool, lt(memoryItems.id, cursor)) : inPool)
          .orderBy(desc(memoryItems.id))
          .limit(limit + 1),
        db.select({ n: count() }).from(memoryItems).where(inPool)
      ])
      const items: BrowseItem[] = rows.slice(0, limit).map((r) => ({
        ...r,
        createdAt: r.createdAt.toISOString(),
        updatedAt: r.updatedAt.toISOString()
      }))
      return { items, total: Number(totals[0]?.n ?? 0), nextCursor: rows.length > limit ? items[items.length - 1]!.id : null }
    },

    async exists(pool, id) {
      const rows = await db.select({ id: memoryItems.id }).from(memoryItems)
        .where(and(eq(memoryItems.orgId, pool.orgId), eq(memoryItems.poolId, pool.id), eq(memoryItems.id, id)))
      return rows.length === 1
    },

    async update(pool, id, content, changedBy) {
      try {
        return await db.transaction(async (tx) => {
          const rows = await tx.update(memoryItems)
            .set({ content, contentHash: contentHash(content), updatedAt: new Date() })
            .where(and(eq(memoryItems.orgId, pool.orgId), eq(memoryItems.poolId, pool.id), eq(memoryItems.id, id)))
            .returning({ id: memoryItems.id })
          if (rows.length === 0) return false
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
        const rows = await tx.delete(memoryItems)
          .where(and(eq(memoryItems.orgId, pool.orgId), eq(memoryItems.poolId, pool.id), eq(memoryItems.id, id)))
          .returning({ id: memoryItems.id, content: memoryItems.content })
        await recordChanges(tx, pool, changedBy, rows.map((r) => ({ itemId: r.id, content: r.content, kind: 'deleted' as const })))
        return rows.length
      })
    },

    history(pool, id) {
      return readHistory(db, pool, id)
    },

    async deliver(pool: PoolRef, capture: CaptureDelivery, markDelivered: MarkDelivered) {
      // The facts and the capture's `delivered` state commit together: exactly once.
      try {
        await db.transaction(async (tx) => {
          if (capture.facts.length > 0) {
            const kept = await tx.insert(memoryItems).values(capture.facts.map((content, index) => ({
              id: newId(),
              orgId: pool.orgId,
              poolId: pool.id,
              content,
              contentHash: contentHash(content),
              sourceRunId: capture.runId,
              rootRunId: capture.rootRunId,
              captureId: capture.captureId,
              factIndex: index
            }))).onConflictDoNothing().returning({ id: memoryItems.id, content: memoryItems.content })
            await recordChanges(tx, pool, `run:${capture.runId}`, kept.map((r) => ({ itemId: r.id, content: r.content, kind: 'created' as const })))
          }
          if (!(await markDelivered(tx))) throw new StaleDelivery()
        })
      } catch (err) {
        if (err instanceof StaleDelivery) return
        throw err
      }
    }
  }
}
