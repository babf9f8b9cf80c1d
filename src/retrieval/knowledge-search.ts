import { sql, type SQL } from 'drizzle-orm'
import { LRUCache } from 'lru-cache'
import { rowsOf, type Db } from '../db/client.js'
import { isVocabularyWord, wordsOf } from './words.js'
import type { KnowledgeFinding } from '../runs/ports/knowledge.js'
import { currentGeneration } from '../knowledge/generation.js'
import { fuse, type Scores, type SearchMode } from './fusion.js'
import { FUSION_DEPTH, pointsSomewhere, type Retrieval } from './search.js'

/**
 * Knowledge search: records and document chunks in one ranked list. `q` is read by
 * Postgres's `websearch_to_tsquery` (quotes are phrases, `or`, `-word` excludes), so
 * every hit honours them. A query that finds nothing is tried once more with each plain
 * word the org never wrote replaced by its nearest word of the org's vocabulary
 * (pg_trgm), so a misspelled word still finds its record.
 */

/** A hit is what the runs group's port promises its engines, with each ranking's score. */
export type KnowledgeHit = KnowledgeFinding & { scores: Scores }

export interface SearchOutcome {
  items: KnowledgeHit[]
  truncated: boolean
  /** how it was ranked: the mode asked for, or `fulltext` where vectors were missing */
  mode: SearchMode
}

export interface SearchInput {
  q: string
  tag?: string | undefined
  limit: number
  mode?: SearchMode | undefined
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

/**
 * The phrases and exclusions of a web search query (`"…"`, `-word`) as a query of their own:
 * a hit found by meaning honours them too. Null when the query has none.
 */
export function constraintsOf(q: string): string | null {
  const kept = [...q.matchAll(/"[^"]*"?|\S+/g)].map((m) => m[0]).filter((t) => t.startsWith('"') || /^-\S/.test(t))
  return kept.length > 0 ? kept.join(' ') : null
}

/** The first words of a text, HTML-escaped: the snippet of a hit found by meaning only (no word to mark). */
function plainSnippet(text: string): string {
  const cut = text.length > 240 ? `${text.slice(0, 240).replace(/\s+\S*$/, '')}…` : text
  return cut.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!)
}

interface VectorOnlyRow {
  kind: 'record' | 'chunk'
  id: string
  record_id: string | null
  document_id: string | null
  title: string
  text: string
}

export async function searchKnowledge(
  db: Db,
  retrieval: Retrieval,
  orgId: string,
  input: SearchInput
): Promise<SearchOutcome> {
  let mode = retrieval.modeFor(input.mode)
  const depth = Math.max(input.limit, FUSION_DEPTH)
  const qv = mode === 'fulltext' ? null : await retrieval.queryVector(orgId, input.q)
  if (!qv) mode = 'fulltext'
  const textSide = async () => {
    if (mode === 'semantic') return []
    let rows = await ranked(db, orgId, input.q, input.tag, depth)
    if (rows.length === 0) {
      const fixes = await corrections(db, orgId, input.q)
      if (fixes.size > 0) rows = await ranked(db, orgId, rewritePlainWords(input.q, fixes), input.tag, depth)
    }
    return rows
  }
  const vectorSide = async () => {
    // no word of the query known to the model: nothing to rank by meaning (pointsSomewhere)
    if (!qv || !pointsSomewhere(qv.vector)) return []
    const narrow: SQL[] = []
    // documents have no tags: a tag narrows the search to records
    if (input.tag !== undefined)
      narrow.push(sql`and kind = 'record' and item_id in (
        select id from knowledge_records where org_id = ${orgId} and tags @> array[${input.tag}]::text[])`)
    const constraints = constraintsOf(input.q)
    if (constraints !== null)
      narrow.push(sql`and item_id in (
        select id from knowledge_records, websearch_to_tsquery('english', ${constraints}) c
        where org_id = ${orgId} and search_vector @@ c
        union all
        select id from knowledge_chunks, websearch_to_tsquery('english', ${constraints}) c
        where org_id = ${orgId} and search_vector @@ c)`)
    return retrieval.vectorRanking(orgId, '', ['record', 'chunk'], qv, depth + 1, sql.join(narrow, sql` `))
  }
  const [text, near] = await Promise.all([textSide(), vectorSide()])
  const known = new Set(text.map((r) => r.id))
  const missing = near.filter((h) => !known.has(h.id))
  const extra =
    missing.length === 0
      ? []
      : rowsOf<VectorOnlyRow>(
          await db.execute(sql`
          select 'record' as kind, r.id, r.id as record_id, null::text as document_id, r.title, left(r.body, 400) as text
          from knowledge_records r
          where r.org_id = ${orgId}
            and r.id in (select jsonb_array_elements_text(${JSON.stringify(missing.filter((h) => h.kind === 'record').map((h) => h.id))}::jsonb))
          union all
          select 'chunk', c.id, null, c.document_id,
                 d.name || case when c.heading <> '' then ' > ' || c.heading else '' end, left(c.text, 400)
          from knowledge_chunks c join knowledge_documents d on d.id = c.document_id
          where c.org_id = ${orgId}
            and c.id in (select jsonb_array_elements_text(${JSON.stringify(missing.filter((h) => h.kind === 'chunk').map((h) => h.id))}::jsonb))`)
        )
  const hits = new Map<string, Omit<KnowledgeHit, 'score' | 'scores'>>()
  for (const r of text)
    hits.set(r.id, {
      kind: r.kind,
      id: r.id,
      recordId: r.record_id,
      documentId: r.document_id,
      title: r.title,
      snippet: snippetHtml(r.headline ?? '')
    })
  for (const r of extra)
    hits.set(r.id, {
      kind: r.kind,
      id: r.id,
      recordId: r.record_id,
      documentId: r.document_id,
      title: r.title,
      snippet: plainSnippet(r.text === '' ? r.title : r.text)
    })
  const fused = fuse(
    text.map((r) => ({ item: r.id, score: Number(r.score) })),
    near.filter((h) => hits.has(h.id)).map((h) => ({ item: h.id, score: h.similarity })),
    (id) => id
  )
  const items = fused.slice(0, input.limit).map(({ item, scores }): KnowledgeHit => ({
    ...hits.get(item)!,
    score: mode === 'hybrid' ? scores.fused : mode === 'semantic' ? scores.semantic! : scores.fulltext!,
    scores
  }))
  return { items, truncated: fused.length > input.limit, mode }
}

export type Search = (orgId: string, input: SearchInput) => Promise<SearchOutcome>

/**
 * Search with a cache of recent results per instance (`entries` of them; 0: none), keyed
 * by the org's knowledge generation: a write to the org's records or chunks moves the
 * generation on in its own transaction, so a cached result is served only while nothing
 * it was computed from has changed, whichever instance made the change.
 */
export function cachedSearch(db: Db, retrieval: Retrieval, entries: number): Search {
  if (entries <= 0) return (orgId, input) => searchKnowledge(db, retrieval, orgId, input)
  const cache = new LRUCache<string, SearchOutcome>({ max: entries })
  return async (orgId, input) => {
    const [generation, model] = await Promise.all([currentGeneration(db, orgId), retrieval.models.forOrg(orgId)])
    const mode = retrieval.modeFor(input.mode)
    const key = JSON.stringify([orgId, generation, input.q, input.tag ?? null, input.limit, mode, model.key])
    const hit = cache.get(key)
    if (hit) return hit
    const outcome = await searchKnowledge(db, retrieval, orgId, input)
    // a query that could not be embedded is not kept: the next one may be
    if (outcome.mode === mode) cache.set(key, outcome)
    return outcome
  }
}
