/**
 * Reciprocal rank fusion: an item's fused score is the sum, over the rankings that list it,
 * of 1 / (k + rank) (rank from 1). It needs no comparable scores between full text and
 * vectors, only their orders; k = 60 as in Cormack, Clarke and Büttcher (2009).
 */
export const RRF_K = 60

export const SEARCH_MODES = ['hybrid', 'semantic', 'fulltext'] as const
export type SearchMode = (typeof SEARCH_MODES)[number]

/** Each side's score of one result; a side that did not find it is null. */
export interface Scores {
  fulltext: number | null
  semantic: number | null
  fused: number
}

export interface Ranked<T> {
  item: T
  scores: Scores
}

/**
 * Fuses a full-text ranking and a vector ranking (each best first, `key` naming an item in
 * both) into one list, best first; ties keep the full-text order, then the vector order.
 * Scores are rounded to 4 decimals, as the routes answer them.
 */
export function fuse<T>(
  fulltext: ReadonlyArray<{ item: T; score: number }>,
  semantic: ReadonlyArray<{ item: T; score: number }>,
  key: (item: T) => string
): Array<Ranked<T>> {
  const out = new Map<string, Ranked<T> & { order: number }>()
  let order = 0
  const add = (list: ReadonlyArray<{ item: T; score: number }>, side: 'fulltext' | 'semantic') => {
    list.forEach(({ item, score }, i) => {
      const k = key(item)
      let entry = out.get(k)
      if (!entry) {
        entry = { item, scores: { fulltext: null, semantic: null, fused: 0 }, order: order++ }
        out.set(k, entry)
      }
      entry.scores[side] = round(score)
      entry.scores.fused += 1 / (RRF_K + i + 1)
    })
  }
  add(fulltext, 'fulltext')
  add(semantic, 'semantic')
  return [...out.values()]
    .sort((a, b) => b.scores.fused - a.scores.fused || a.order - b.order)
    .map(({ item, scores }) => ({ item, scores: { ...scores, fused: Math.round(scores.fused * 1e6) / 1e6 } }))
}

const round = (x: number) => Math.round(x * 10_000) / 10_000
