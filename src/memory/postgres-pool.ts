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
import { keyset } from '../db/paging.js'
import { isoOf } from '../db/rows.js'
import { vocabulary, wordsOf } from '../db/words.js'

/** Thrown inside a delivery transaction to roll it back when the capture row moved on. */
class StaleDelivery extends Error {}

type SearchOutcome = { items: SearchHit[]; truncated: boolean }

const MAX_QUERY = 500
const MAX_WORDS = 8
/** the most words a recall's any-word search takes (a prompt's most significant, in order) */
const MAX_RECALL_WORDS = 16
/**
 * Search ranks this many matches, the newest ones, or a page's worth when the page is larger.
 * A broad query (a common word in thousands of facts) then costs about what a narrow one
 * does instead of reading and ranking every match. A common word's search walks about
 * RANKED_MATCHES / share facts newest first, the most of its cost: at 100 a word in 2% of
 * 100,000 facts read 5,000 rows, 4–5 ms of WebAssembly on the embedded database; at 50 it
 * reads 2,500. Fifty is still 2.5 default pages to choose from, and a common word's matches
 * rank nearly alike (one occurrence each), so its best are the newest anyway.
 */
export const RANKED_MATCHES = 50
// (one more match than this is read, so that a full page can still say `truncated`)
/**
 * The newest facts of the pool that are checked first, to tell a common query from a rare
 * one. Near the threshold either way costs about the same, so a small sample decides well
 * enough; far from it (a word in 10% of facts, or in 0.1%) even a small sample is clear.
 */
const PROBE = 250
/** the most facts a common query walks, newest first, looking for its matches */
const WALK_LIMIT = 25_000
/**
 * A match found through the GIN index costs about as much as this many facts read walking
 * newest first. Walking for n matches reads n / share facts, the index share × pool size,
 * so walking is cheaper for a share of at least sqrt(n / INDEX_ROW_COST / pool size).
 * Measured at 100,000 facts, each path timed alone at shares from 0.13% to 2.7%: the walk
 * wins from about 1.1–1.5% for 51 matches and 2.1–2.2% for 101, on Postgres 15 and on the
 * embedded database alike, which puts this at 2 to 4. (It was 11.4: a misspelled rare
 * word's three corrections then walked 7,000 facts for what the index found faster.)
 */
const INDEX_ROW_COST = 3

/** `kube deploy` → `kube:* & deploy:*`: only letters and digits reach to_tsquery. */
export function prefixQuery(q: string): string {
  return [...new Set(wordsOf(q))]
    .slice(0, 16)
    .map((w) => `${w}:*`)
    .join(' & ')
}

async function addVocabulary(exec: Db | Tx, pool: PoolRef, contents: string[]): Promise<void> {
  const words = vocabulary(...contents)
  if (words.length === 0) return
  await exec
    .insert(memoryWords)
    .values(words.map((word) => ({ poolId: pool.id, word })))
    .onConflictDoNothing()
}

/**
 * Facts in this database. Each query word is matched as a prefix and, through pg_trgm
 * similarity against the pool's vocabulary, by its likely corrections; the newest
 * RANKED_MATCHES full-text matches (more when the page is larger) are ranked by ts_rank_cd
 * together with pg_trgm word similarity to the query.
 */
export function createPostgresPool(db: Db, opts: { searchCache?: number } = {}): MemoryBackend {
  // recent results of this instance, keyed by the pool's generation (memoryPools.generation)
  const cache = (opts.searchCache ?? 0) > 0 ? new LRUCache<string, SearchOutcome>({ max: opts.searchCache! }) : null

  /**
   * One round trip: each query word becomes `(word:* | up to three vocabulary words it may be
   * a misspelling of)`; the groups are joined with `joiner`. The newest n matches (n = the
   * larger of RANKED_MATCHES and the page, plus one) are found one of two ways, whichever
   * reads fewer rows: a common query (its share of the pool's newest PROBE facts is at least
   * sqrt(n / INDEX_ROW_COST / pool size), where walking beats the index) walks the pool
   * newest first until it has them; any other goes through the GIN index and sorts its
   * matches by id. They are ranked by ts_rank_cd; the best `limit + 1` (a page, and one to
   * tell it is truncated) are put in order together with pg_trgm word similarity to the
   * query, costly enough (about 20 µs a fact in WebAssembly) to be kept to the page.
   */
  async function ranked(pool: PoolRef, q: string, tokens: string[], joiner: '&' | '|', limit: number, correct = true) {
    const words = sql.join(
      tokens.map((w) => sql`${w}`),
      sql`, `
    )
    const matches = Math.max(RANKED_MATCHES, limit) + 1
    const corrections = correct
      ? sql`coalesce((
          select string_agg(' | ' || w.word, '' order by w.word)
          from (select word from memory_words
                where pool_id = ${pool.id} and length(t.token) >= 3 and t.token ~ '[[:alpha:]]'
                  -- a word the pool already knows is taken as spelled
                  and not exists (select 1 from memory_words known where known.pool_id = ${pool.id} and known.word = t.token)
                  and word % t.token and word <> t.token
                order by similarity(word, t.token) desc, word
                limit 3) as w), '')`
      : sql`''`
    const result = await db.execute(sql`
      with tokens as (
        select token, ord from unnest(array[${words}]::text[]) with ordinality as t(token, ord)),
      groups as (
        select t.ord, '(' || t.token || ':*' || ${corrections} || ')' as grp
        from tokens t),
      query as materialized (
        select to_tsquery('english', string_agg(grp, ${` ${joiner} `} order by ord)) as query from groups),
      common as materialized (
        select (select count(*)
                from (select search_vector from memory_items
                      where org_id = ${pool.orgId} and pool_id = ${pool.id}
                      order by id desc limit ${PROBE}) p, query
                where p.search_vector @@ query.query)
               >= ${PROBE} * sqrt(${matches / INDEX_ROW_COST}::float8 / greatest(1, (select item_count from memory_pools where id = ${pool.id}))) as yes),
      walked as (
        select n.* from (
          select id, content, source_run_id, root_run_id, created_at, search_vector
          from memory_items
          where org_id = ${pool.orgId} and pool_id = ${pool.id}
          order by id desc
          limit ${WALK_LIMIT}) n, query
        where (select yes from common) and n.search_vector @@ query.query
        limit ${matches}),
      indexed as (
        select m.id, m.content, m.source_run_id, m.root_run_id, m.created_at, m.search_vector
        from memory_items m, query
        where not (select yes from common)
          and m.org_id = ${pool.orgId} and m.pool_id = ${pool.id} and m.search_vector @@ query.query
        -- collate "C": sort the matches, never walk the id index for them (same order for ids)
        order by m.id collate "C" desc
        limit ${matches}),
      candidates as (
        select m.id, m.content, m.source_run_id, m.root_run_id, m.created_at, ts_rank_cd(m.search_vector, query.query) as rank
        from (select * from walked union all select * from indexed) m, query
        order by rank desc, id desc
        limit ${limit + 1})
      select id, content, source_run_id, root_run_id, created_at,
             (rank + word_similarity(${q}, content))::float8 as score
      from candidates
      order by score desc, id desc
      limit ${limit + 1}`)
    return rowsOf<{
      id: string
      content: string
      source_run_id: string | null
      root_run_id: string | null
      created_at: string | Date
      score: number
    }>(result)
  }

  async function searchPool(
    pool: PoolRef,
    q: string,
    tokens: string[],
    limit: number,
    anyWord: boolean
  ): Promise<SearchOutcome> {
    // a recall's words (a prompt's significant ones) match any of them, as spelled
    let rows = anyWord ? await ranked(pool, q, tokens, '|', limit, false) : await ranked(pool, q, tokens, '&', limit)
    // nothing has every word (a long, chatty query): any word will do
    if (rows.length === 0 && tokens.length > 1 && !anyWord) rows = await ranked(pool, q, tokens, '|', limit)
    const items: SearchHit[] = rows.slice(0, limit).map((r) => ({
      id: r.id,
      content: r.content,
      score: Math.round(Number(r.score) * 10_000) / 10_000,
      runId: r.source_run_id,
      rootRunId: r.root_run_id,
      createdAt: isoOf(r.created_at)
    }))
    return { items, truncated: rows.length > limit }
  }

  return {
    name: 'postgres',

    async search(pool, query, limit, options = {}) {
      const anyWord = options.anyWord === true
      const q = query.slice(0, MAX_QUERY)
      const tokens = [...new Set(wordsOf(q))].slice(0, anyWord ? MAX_RECALL_WORDS : MAX_WORDS)
      if (tokens.length === 0) return { items: [], truncated: false }
      if (!cache) return searchPool(pool, q, tokens, limit, anyWord)
      const [row] = await db
        .select({ generation: memoryPools.generation })
        .from(memoryPools)
        .where(eq(memoryPools.id, pool.id))
      const key = JSON.stringify([pool.id, row?.generation ?? 0, q, limit, anyWord])
      const hit = cache.get(key)
      if (hit) return hit
      const outcome = await searchPool(pool, q, tokens, limit, anyWord)
      cache.set(key, outcome)
      return outcome
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
