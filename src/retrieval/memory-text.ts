import { sql, type SQL } from 'drizzle-orm'
import { rowsOf, type Db, type Tx } from '../db/client.js'
import type { PoolRef } from '../memory/backend.js'
import { wordsOf } from './words.js'

// The full-text side of Memory Hub search (the postgres backend): prefix matches, typo
// corrections from the pool's vocabulary, ranked by ts_rank_cd and word similarity.

export const MAX_QUERY = 500
export const MAX_WORDS = 8
/** the most words a recall's any-word search takes (a prompt's most significant, in order) */
export const MAX_RECALL_WORDS = 16
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
export async function rankMemoryText(
  db: Db | Tx,
  pool: PoolRef,
  q: string,
  tokens: string[],
  joiner: '&' | '|',
  limit: number,
  correct = true
) {
  const result = await db.execute(sql`
    with ${memoryTextCtes('r', pool.orgId, sql`${pool.id}`, q, tokens, joiner, limit, correct)}
    select * from r`)
  return rowsOf<MemoryTextRow>(result)
}

/**
 * rankMemoryText's statement as CTEs, its names prefixed (`name_`), the last of them `name`
 * (id, content, source_run_id, root_run_id, created_at, score; best first), for a statement
 * that folds the ranking in with other reads. `poolId` may be an expression (a pool looked up
 * by the same statement); a null one finds nothing.
 */
export function memoryTextCtes(
  name: string,
  orgId: string,
  poolId: SQL,
  q: string,
  tokens: string[],
  joiner: '&' | '|',
  limit: number,
  correct = true
): SQL {
  const n = (cte: string) => sql.raw(`${name}_${cte}`)
  const words = sql.join(
    tokens.map((w) => sql`${w}`),
    sql`, `
  )
  const matches = Math.max(RANKED_MATCHES, limit) + 1
  const corrections = correct
    ? sql`coalesce((
        select string_agg(' | ' || w.word, '' order by w.word)
        from (select word from memory_words
              where pool_id = ${poolId} and length(t.token) >= 3 and t.token ~ '[[:alpha:]]'
                -- a word the pool already knows is taken as spelled
                and not exists (select 1 from memory_words known where known.pool_id = ${poolId} and known.word = t.token)
                and word % t.token and word <> t.token
              order by similarity(word, t.token) desc, word
              limit 3) as w), '')`
    : sql`''`
  return sql`
    ${n('tokens')} as (
      select token, ord from unnest(array[${words}]::text[]) with ordinality as t(token, ord)),
    ${n('groups')} as (
      select t.ord, '(' || t.token || ':*' || ${corrections} || ')' as grp
      from ${n('tokens')} t),
    ${n('query')} as materialized (
      select to_tsquery('english', string_agg(grp, ${` ${joiner} `} order by ord)) as query from ${n('groups')}),
    ${n('common')} as materialized (
      select (select count(*)
              from (select search_vector from memory_items
                    where org_id = ${orgId} and pool_id = ${poolId}
                    order by id desc limit ${PROBE}) p, ${n('query')} query
              where p.search_vector @@ query.query)
             >= ${PROBE} * sqrt(${matches / INDEX_ROW_COST}::float8 / greatest(1, (select item_count from memory_pools where id = ${poolId}))) as yes),
    ${n('walked')} as (
      select w.* from (
        select id, content, source_run_id, root_run_id, created_at, search_vector
        from memory_items
        where org_id = ${orgId} and pool_id = ${poolId}
        order by id desc
        limit ${WALK_LIMIT}) w, ${n('query')} query
      where (select yes from ${n('common')}) and w.search_vector @@ query.query
      limit ${matches}),
    ${n('indexed')} as (
      select m.id, m.content, m.source_run_id, m.root_run_id, m.created_at, m.search_vector
      from memory_items m, ${n('query')} query
      where not (select yes from ${n('common')})
        and m.org_id = ${orgId} and m.pool_id = ${poolId} and m.search_vector @@ query.query
      -- collate "C": sort the matches, never walk the id index for them (same order for ids)
      order by m.id collate "C" desc
      limit ${matches}),
    ${n('candidates')} as (
      select m.id, m.content, m.source_run_id, m.root_run_id, m.created_at, ts_rank_cd(m.search_vector, query.query) as rank
      from (select * from ${n('walked')} union all select * from ${n('indexed')}) m, ${n('query')} query
      order by rank desc, id desc
      limit ${limit + 1}),
    ${sql.raw(name)} as (
      select id, content, source_run_id, root_run_id, created_at,
             (rank + word_similarity(${q}, content))::float8 as score
      from ${n('candidates')}
      order by score desc, id desc
      limit ${limit + 1})`
}

/** A fact as the full-text side ranks it. */
export interface MemoryTextRow {
  id: string
  content: string
  source_run_id: string | null
  root_run_id: string | null
  created_at: string | Date
  score: number
}

/**
 * The full-text ranking of a query (at most `limit + 1` facts, best first): every word, or
 * any word when nothing has them all; a recall's words (`anyWord`) match any of them, as
 * spelled. Empty when the query has no word.
 */
export async function memoryTextRanking(
  db: Db | Tx,
  pool: PoolRef,
  query: string,
  limit: number,
  anyWord: boolean
): Promise<MemoryTextRow[]> {
  const q = query.slice(0, MAX_QUERY)
  const tokens = [...new Set(wordsOf(q))].slice(0, anyWord ? MAX_RECALL_WORDS : MAX_WORDS)
  if (tokens.length === 0) return []
  let rows = anyWord
    ? await rankMemoryText(db, pool, q, tokens, '|', limit, false)
    : await rankMemoryText(db, pool, q, tokens, '&', limit)
  // nothing has every word (a long, chatty query): any word will do
  if (rows.length === 0 && tokens.length > 1 && !anyWord) rows = await rankMemoryText(db, pool, q, tokens, '|', limit)
  return rows
}

/**
 * memoryTextRanking of a person's query as CTEs of one statement, the last of them `name`:
 * every word, and, when nothing has them all, any word (that side is read only then). Null
 * when the query has no word.
 */
export function memoryTextRankingCtes(
  name: string,
  orgId: string,
  poolId: SQL,
  query: string,
  limit: number
): SQL | null {
  const q = query.slice(0, MAX_QUERY)
  const tokens = [...new Set(wordsOf(q))].slice(0, MAX_WORDS)
  if (tokens.length === 0) return null
  const all = memoryTextCtes(`${name}_all`, orgId, poolId, q, tokens, '&', limit)
  if (tokens.length === 1) return sql`${all}, ${sql.raw(name)} as (select * from ${sql.raw(`${name}_all`)})`
  // nothing has every word (a long, chatty query): any word will do
  const any = memoryTextCtes(`${name}_any`, orgId, poolId, q, tokens, '|', limit)
  return sql`${all}, ${any},
    ${sql.raw(name)} as (
      select * from ${sql.raw(`${name}_all`)}
      union all
      select * from ${sql.raw(`${name}_any`)} where not exists (select 1 from ${sql.raw(`${name}_all`)}))`
}
