// Retrieval quality: recall@5 of full-text, semantic and hybrid Memory Hub search with the
// built-in offline embedder, on the committed paraphrase set (bench/data/paraphrases.json: 50
// facts, 24 questions, 8 of which share no word with their fact). In-process, on the
// embedded database; `npm run bench -- retrieval-quality`.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { buildApp } from '../src/app.js'
import { testConfig } from '../src/config.js'
import { wordsOf } from '../src/retrieval/words.js'

interface Set {
  facts: string[]
  questions: Array<{ q: string; fact: number }>
}

const MODES = ['fulltext', 'semantic', 'hybrid'] as const

export async function benchRetrievalQuality(): Promise<string> {
  const set = JSON.parse(readFileSync(new URL('./data/paraphrases.json', import.meta.url), 'utf8')) as Set
  const dir = mkdtempSync(join(tmpdir(), 'cairn-bench-quality-'))
  const app = await buildApp({
    config: testConfig({
      DATA_DIR: dir,
      EMBEDDING_WORKER: 'false',
      ...(process.env.EMBEDDING_MIN_SIMILARITY
        ? { EMBEDDING_MIN_SIMILARITY: process.env.EMBEDDING_MIN_SIMILARITY }
        : {})
    })
  })
  try {
    await app.ready()
    const ids: string[] = []
    for (const content of set.facts) {
      const res = await app.inject({ method: 'POST', url: '/api/memory/items', payload: { scope: 'org', content } })
      if (res.statusCode !== 201) throw new Error(`adding a fact: ${res.statusCode} ${res.body}`)
      ids.push(res.json().item.id)
    }
    while ((await app.retrieval.worker!.runOnce()) > 0);
    const rows: string[] = []
    const recall: Record<string, { all: number; disjoint: number; shared: number }> = {}
    const disjoint = (q: string, fact: string) => {
      const words = new Set(wordsOf(fact))
      return !wordsOf(q).some((w) => w.length > 2 && words.has(w))
    }
    for (const mode of MODES) {
      const r = { all: 0, disjoint: 0, shared: 0 }
      for (const { q, fact } of set.questions) {
        const res = await app.inject({
          url: `/api/memory/search?limit=5&mode=${mode}&q=${encodeURIComponent(q)}`
        })
        const found = (res.json().items as Array<{ id: string }>).map((i) => i.id).includes(ids[fact]!)
        if (found) {
          r.all++
          if (disjoint(q, set.facts[fact]!)) r.disjoint++
          else r.shared++
        }
      }
      recall[mode] = r
    }
    const n = set.questions.length
    const nDisjoint = set.questions.filter(({ q, fact }) => disjoint(q, set.facts[fact]!)).length
    rows.push(
      `### Retrieval quality: recall@5 on ${set.facts.length} facts, ${n} questions (${nDisjoint} share no word with their fact)`,
      '',
      '| mode | recall@5 | questions sharing no word | questions sharing a word | ratio to full text |',
      '| --- | ---: | ---: | ---: | ---: |'
    )
    for (const mode of MODES) {
      const r = recall[mode]!
      rows.push(
        `| ${mode} | ${(r.all / n).toFixed(2)} | ${r.disjoint}/${nDisjoint} | ${r.shared}/${n - nDisjoint} | ${(r.all / Math.max(1, recall.fulltext!.all)).toFixed(2)} |`
      )
    }
    return rows.join('\n')
  } finally {
    await app.close()
    rmSync(dir, { recursive: true, force: true })
  }
}
