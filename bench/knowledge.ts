// Knowledge search at 100,000 chunks (real Postgres and PGlite) next to the health
// route in the same run, and ingestion of a 100-page text PDF from upload to `ready`.
import { buildApp } from '../src/app.js'
import { testConfig } from '../src/config.js'
import { textPdf } from '../test/knowledge/fixtures.js'
import { multipart } from '../test/artifacts/helpers.js'
import { benchPostgres, load, startServer, withDatabase, type Result } from './lib.js'

const CHUNKS = Number(process.env.BENCH_CHUNKS ?? 100_000)

function rows(title: string, results: Result[], baseline: Result): string {
  const out = [
    `### ${title}`,
    '',
    '| case | requests/s | p90 ms | p95 ms | p97.5 ms | p99 ms | ratio to health | non-2xx | errors |',
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |'
  ]
  for (const r of results)
    out.push(
      `| ${r.name} | ${r.rps} | ${r.p90} | ${r.p95} | ${r.p975} | ${r.p99} | ${(r.rps / baseline.rps).toFixed(2)} | ${r.non2xx} | ${r.errors} |`
    )
  return out.join('\n')
}

async function searchBench(label: string, env: Record<string, string>): Promise<string> {
  const server = await startServer('bench/knowledge-server.ts', {
    BENCH_CHUNKS: String(CHUNKS),
    KNOWLEDGE_WORKER: 'false',
    ...env
  })
  const connections = Number(process.env.BENCH_CONNECTIONS ?? 10)
  try {
    const base = server.url
    const results: Result[] = [
      await load({ url: `${base}/api/health`, name: 'GET /api/health (baseline)', connections })
    ]
    for (const [name, q] of [
      ['two common words', 'kubernetes invoice'],
      ['one common word (about 16% of chunks)', 'kubernetes'],
      ['a rare made-up word', 'bridor'],
      ['a phrase of two common words (about 1% of chunks)', '"billing team"'],
      ['a phrase in every chunk', '"team depends on"'],
      ['a word and an exclusion', 'kubernetes -invoice'],
      ['or', 'bridor or zonka'],
      ['a misspelled word (typo fallback)', 'kuberntes'],
      ['a ticket number', 'ticket 48213']
    ] as const) {
      results.push(
        await load({
          url: `${base}/api/knowledge/search?q=${encodeURIComponent(q)}`,
          name: `${name} (\`${q}\`)`,
          connections
        })
      )
    }
    return rows(`${label}: ${CHUNKS.toLocaleString('en')} chunks, ${connections} connections`, results, results[0]!)
  } finally {
    await server.stop()
  }
}

/** A 100-page text PDF from upload to `ready`, in-process, on the given database. */
async function ingestBench(label: string, databaseUrl: string | undefined): Promise<string> {
  const lines = (page: number) =>
    Array.from(
      { length: 40 },
      (_, i) => `Page ${page} line ${i}: the deploy pipeline runs the migration before the release.`
    )
  const pdf = await textPdf(Array.from({ length: 100 }, (_, p) => lines(p)))
  const app = await buildApp({
    config: testConfig({
      ...(databaseUrl ? { DATABASE_URL: databaseUrl } : { DATA_DIR: 'memory://' }),
      KNOWLEDGE_POLL_MS: '20'
    })
  })
  await app.ready()
  try {
    const times: number[] = []
    let chunkCount = 0
    for (let i = 0; i < 3; i++) {
      const started = performance.now()
      const body = multipart({ filename: `book-${i}.pdf`, type: 'application/pdf', bytes: pdf })
      const { document } = (
        await app.inject({
          method: 'POST',
          url: '/api/knowledge/documents',
          payload: body.payload,
          headers: body.headers
        })
      ).json()
      for (;;) {
        const d = (await app.inject({ method: 'GET', url: `/api/knowledge/documents/${document.id}` })).json().document
        if (d.state === 'ready') {
          chunkCount = d.chunkCount
          break
        }
        if (d.state === 'failed') throw new Error(`ingestion failed: ${d.lastError}`)
        await new Promise((r) => setTimeout(r, 10))
      }
      times.push(performance.now() - started)
    }
    return `| ${label} | ${(pdf.length / 1024).toFixed(0)} KB | ${chunkCount} | ${times.map((t) => (t / 1000).toFixed(2)).join(' s, ')} s |`
  } finally {
    await app.close()
  }
}

export async function benchKnowledge(): Promise<string> {
  const parts: string[] = []
  const only = process.env.BENCH_KNOWLEDGE_PARTS?.split(',') ?? ['postgres', 'pglite', 'ingest']
  // each database twice: as the service runs (results cached per org generation; the
  // benchmark repeats its queries, so these are cache hits) and with the cache off
  const caches = [
    ['result cache on', '1000'],
    ['result cache off', '0']
  ] as const
  for (const [cacheLabel, entries] of caches) {
    if (only.includes('postgres') && benchPostgres) {
      parts.push(
        await withDatabase(benchPostgres, (url) =>
          searchBench(`Real Postgres 15, ${cacheLabel}`, { DATABASE_URL: url, KNOWLEDGE_SEARCH_CACHE: entries })
        )
      )
    }
    if (only.includes('pglite'))
      parts.push(await searchBench(`PGlite (embedded), ${cacheLabel}`, { KNOWLEDGE_SEARCH_CACHE: entries }))
  }
  if (only.includes('ingest')) {
    const table = [
      '### Ingestion: a 100-page text PDF (4,000 lines), upload to `ready`, three times',
      '',
      '| database | size | chunks | seconds |',
      '| --- | ---: | ---: | ---: |'
    ]
    table.push(await ingestBench('PGlite', undefined))
    if (benchPostgres) table.push(await withDatabase(benchPostgres, (url) => ingestBench('Postgres', url)))
    parts.push(table.join('\n'))
  }
  return parts.join('\n\n')
}
