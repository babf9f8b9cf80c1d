import { sql, type SQL } from 'drizzle-orm'
import { LRUCache } from 'lru-cache'
import { rowsOf, type Db } from '../db/client.js'
import { isVocabularyWord, wordsOf } from '../db/words.js'
import type { KnowledgeFinding } from '../runs/ports/knowledge.js'
import { currentGeneration } from './generation.js'

/**
 * Contract 8's search: records and document chunks in one ranked list. `q` is read by
 * Postgres's `websearch_to_tsquery` (quotes are phrases, `or`, `-word` excludes), so
 * every hit honours them. A query that finds nothing is tried once more with each plain
 * word the org never wrote replaced by its nearest word of the org's vocabulary
 * (pg_trgm), so a misspelled word still finds its record.
 */

/** A hit is what the runs group's port promises its engines. */
export type KnowledgeHit = KnowledgeFinding

export interface SearchOutcome {
  items: KnowledgeHit[]
  truncated: boolean
}

/**
 * Each side (records, chunks) ranks at most this many of its matches, so a query for a
 * word in every chunk costs about what a rare one does. Which matches those are is up to
 * the index; past this many, the list is a sample of good hits, not the very best.
 */
export const RANKED_PER_SIDE = 100

/** Markers ts_headline puts around a match; removed from the text first, then turned into <mark> after escaping. */
const OPEN = '\u0002'
const CLOSE = '\u0003'
const HEADLINE = `StartSel=${OPEN}, StopSel=${CLOSE}, MaxWords=35, MinWords=15, ShortWord=3`

/**
 * ts_headline parses all the text it is given: a snippet is cut from the first this many
 * characters of a record's body (a chunk holds 2,000), so a megabyte record costs a search
 * what a page does.
 */
const HEADLINE_SOURCE_CHARS = 20_000

/**
 * The text a snippet is cut from, HTML-escaped in SQL before ts_headline reads it: the
 * parser then sees `&lt;script&gt;` as entities around a word, so a tag in a record
 * shows as text instead of being dropped as a tag, and the headline has nothing to escape.
 */
const escapedForHeadline = (text: SQL) => sql`replace(replace(replace(replace(replace(
  translate(left(${text}, ${HEADLINE_SOURCE_CHARS}), ${OPEN + CLOSE}, '  '), '&', '&amp;'), '<', '&lt;'), '>', '&gt;'), '"', '&quot;'), '''', '&#39;')`

/**
 * A headline of escaped text made HTML: the markers become <mark>, and a stray angle bracket (never expected) is
 * escaped.
 */
export function snippetHtml(headline: string): string {
  return headline
    .replace(/[<>]/g, (c) => (c === '<' ? '&lt;' : '&gt;'))
    .replaceAll(OPEN, '<mark>')
    .replaceAll(CLOSE, '</mark>')
}

/** A snippet as plain text (for a model or an MCP client): no <mark>, entities read back. */
export function snippetText(html: string): string {
  return html.replace(/<\/?mark>/g, '').replace(/&(lt|gt|quot|#39|amp);/g, (_, name: string) => ENTITIES[name]!)
}
const ENTITIES: Record<string, string> = { lt: '<', gt: '>', quot: '"', '#39': "'", amp: '&' }

/** The plain words of a web search query: outside quotes, not excluded, not `or`. */
export function plainWords(q: string): string[] {
  const out: string[] = []
  for (const m of q.matchAll(/"[^"]*"?|\S+/g)) {
    const token = m[0]
    if (token.startsWith('"') || token.startsWith('-') || token.toLowerCase() === 'or') continue
    out.push(...wordsOf(token).filter(isVocabularyWord))
  }
  return [...new Set(out)].slice(0, 16)
}

/** Replaces plain words of `q` (outside quotes, not excluded) by their corrections. */
export function rewritePlainWords(q: string, fixes: Map<string, string>): string {
  return q.replace(/"[^"]*"?|\S+/g, (token) => {
    if (token.startsWith('"') || token.startsWith('-') || token.toLowerCase() === 'or') return token
    return token.replace(/[\p{L}\p{N}]+/gu, (w) => fixes.get(w.toLowerCase()) ?? w)
  })
}

interface HitRow {
  kind: 'record' | 'chunk'
  id: string
  record_id: string | null
  document_id: string | null
  title: string
  score: number | string
  headline: string | null
}

async function ranked(db: Db, orgId: string, q: string, tag: string | undefined, limit: number): Promise<HitRow[]> {
  const tagged = tag !== undefined ? sql`and r.tags @> array[${tag}]::text[]` : sql``
  // documents have no tags: a tag narrows the search to records
  const chunks =
    tag !== undefined
      ? sql``
      : sql`union all (
        select 'chunk' as kind, c.id, ts_rank_cd(c.search_vector, q.query) as score
        from knowledge_chunks c, q
        where c.org_id = ${orgId} and c.search_vector @@ q.query
        limit ${RANKED_PER_SIDE})`
  // matches carry ids and scores only: the texts are read for the page, after the sort
  const result = await db.execute(sql`
    with q as materialized (select websearch_to_tsquery('english', ${q}) as query),
    matches as (
      (select 'record' as kind, r.id, ts_rank_cd(r.search_vector, q.query) as score
       from knowledge_records r, q
       where r.org_id = ${orgId} and r.search_vector @@ q.query ${tagged}
       limit ${RANKED_PER_SIDE})
      ${chunks}),
    best as (
      select kind, id, score, row_number() over (order by score desc, id) as n from matches
      order by score desc, id
      limit ${limit + 1}),
    page as (
      select b.n, b.kind, b.id, b.score, r.id as record_id, null::text as document_id, r.title, r.body as text
      from best b join knowledge_records r on r.id = b.id
      where b.kind = 'record'
      union all
      select b.n, b.kind, b.id, b.score, null, c.document_id,
             d.name || case when c.heading <> '' then ' > ' || c.heading else '' end, c.text
      from best b join knowledge_chunks c on c.id = b.id join knowledge_documents d on d.id = c.document_id
      where b.kind = 'chunk')
    select p.kind, p.id, p.record_id, p.document_id, p.title, p.score::float8 as score,
           -- snippets for the page only (ts_headline re-parses the text: the costly part)
           case when p.n <= ${limit} then ts_headline('english',
             ${escapedForHeadline(sql`case when p.text = '' then p.title else p.text end`)},
             q.query, ${HEADLINE}) end as headline
    from page p cross join q
    order by p.n`)
  return rowsOf<HitRow>(result)
}

/** The corrections of the plain words of `q` the org never wrote: its nearest vocabulary word each. */
async function corrections(db: Db, orgId: string, q: string): Promise<Map<string, string>> {
  const words = plainWords(q)
  if (words.length === 0) return new Map()
  const rows = rowsOf<{ token: string; fix: string | null }>(
    await db.execute(sql`
    select t.token, (
      select w.word from knowledge_words w
      where w.org_id = ${orgId} and w.word % t.token
      order by similarity(w.word, t.token) desc, w.word
      limit 1) as fix
    from jsonb_array_elements_text(${JSON.stringify(words)}::jsonb) as t(token)
    where not exists (select 1 from knowledge_words k where k.org_id = ${orgId} and k.word = t.token)`)
  )
  return new Map(rows.filter((r) => r.fix !== null).map((r) => [r.token, r.fix!]))
}

export async function searchKnowledge(
  db: Db,
  orgId: string,
  input: { q: string; tag?: string | undefined; limit: number }
): Promise<SearchOutcome> {
  let rows = await ranked(db, orgId, input.q, input.tag, input.limit)
  if (rows.length === 0) {
    const fixes = await corrections(db, orgId, input.q)
    if (fixes.size > 0) rows = await ranked(db, orgId, rewritePlainWords(input.q, fixes), input.tag, input.limit)
  }
  const items = rows.slice(0, input.limit).map((r): KnowledgeHit => ({
    kind: r.kind,
    id: r.id,
    recordId: r.record_id,
    documentId: r.document_id,
    title: r.title,
    snippet: snippetHtml(r.headline ?? ''),
    score: Math.round(Number(r.score) * 10_000) / 10_000
  }))
  return { items, truncated: rows.length > input.limit }
}

export type Search = (
  orgId: string,
  input: { q: string; tag?: string | undefined; limit: number }
) => Promise<SearchOutcome>

/**
 * Search with a cache of recent results per instance (`entries` of them; 0: none), keyed
 * by the org's knowledge generation: a write to the org's records or chunks moves the
 * generation on in its own transaction, so a cached result is served only while nothing
 * it was computed from has changed, whichever instance made the change.
 */
export function cachedSearch(db: Db, entries: number): Search {
  if (entries <= 0) return (orgId, input) => searchKnowledge(db, orgId, input)
  const cache = new LRUCache<string, SearchOutcome>({ max: entries })
  return async (orgId, input) => {
    const generation = await currentGeneration(db, orgId)
    const key = JSON.stringify([orgId, generation, input.q, input.tag ?? null, input.limit])
    const hit = cache.get(key)
    if (hit) return hit
    const outcome = await searchKnowledge(db, orgId, input)
    cache.set(key, outcome)
    return outcome
  }
}
