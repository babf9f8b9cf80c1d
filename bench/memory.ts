// Memory Hub search and browse on a large pool (real Postgres and PGlite), next to the
// health route in the same run, and capture delivery throughput with the postgres backend.
import { sql } from 'drizzle-orm'
import postgres from 'postgres'
import { DEV_ORG } from '../src/auth/dev-org.js'
import { testConfig } from '../src/config.js'
import { buildApp } from '../src/app.js'
import { openDatabase } from '../src/db/client.js'
import { migrateDatabase } from '../src/db/migrate.js'
import { encodeCursor } from '../src/db/paging.js'
import { benchPostgres, load, startServer, type Result } from './lib.js'

const FACTS = Number(process.env.BENCH_FACTS ?? 100_000)
const PG = benchPostgres ?? 'postgres://postgres@127.0.0.1:5432/postgres'

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

async function freshDatabase(name: string): Promise<string> {
  const admin = postgres(PG, { max: 1, onnotice: () => {} })
  await admin.unsafe(`drop database if exists "${name}" with (force)`)
  await admin.unsafe(`create database "${name}"`)
  await admin.end()
  const url = new URL(PG)
  url.pathname = `/${name}`
  return url.toString()
}

async function dropDatabase(name: string) {
  const admin = postgres(PG, { max: 1, onnotice: () => {} })
  await admin.unsafe(`drop database if exists "${name}" with (force)`)
  await admin.end()
}

async function searchBench(label: string, env: Record<string, string>): Promise<string> {
  const server = await startServer('bench/memory-server.ts', {
    BENCH_FACTS: String(FACTS),
    MEMORY_CAPTURE_WORKER: 'false',
    ...env
  })
  const connections = Number(process.env.BENCH_CONNECTIONS ?? 4)
  try {
    const base = server.url
    const results: Result[] = []
    results.push(await load({ url: `${base}/api/health`, name: 'GET /api/health (baseline)', connections }))
    for (const [name, q] of [
      ['search two words, 22 facts match', 'kubernetes deploy'],
      ['search one common word, 2% of facts match', 'kubernetes'],
      ['search a misspelled common word', 'kuberntes'],
      ['search a misspelled rare word', 'zonkle'],
      ['search a short prefix', 'terraf'],
      ['search a ticket number', 'ticket 48213']
    ] as const) {
      results.push(
        await load({
          url: `${base}/api/memory/search?q=${encodeURIComponent(q)}`,
          name: `${name} (\`${q}\`)`,
          connections
        })
      )
    }
    results.push(await load({ url: `${base}/api/memory/browse`, name: 'browse first page (50)', connections }))
    // the page after fact 50,000 (memory-server's ids are '0190' and 12 hex digits)
    const deep = encodeCursor(`0190${(50_000).toString(16).padStart(12, '0')}`)
    results.push(
      await load({
        url: `${base}/api/memory/browse?limit=50&cursor=${deep}`,
        name: 'browse deep page (cursor)',
        connections
      })
    )
    return rows(`${label}: ${FACTS.toLocaleString('en')} facts, ${connections} connections`, results, results[0]!)
  } finally {
    await server.stop()
  }
}

async function captureBench(): Promise<string> {
  const name = 'cairn_bench_capture'
  const url = await freshDatabase(name)
  const captures = Number(process.env.BENCH_CAPTURES ?? 20_000)
  const database = await openDatabase({ url, poolMax: 20 })
  try {
    await migrateDatabase(database, url)
    const app = await buildApp({
      config: testConfig({
        DATABASE_URL: url,
        MEMORY_CAPTURE_WORKER: 'false',
        MEMORY_CAPTURE_BATCH: '500',
        MEMORY_CAPTURE_CONCURRENCY: '16'
      }),
      database
    })
    await app.ready()
    await app.db.execute(sql`
      insert into memory_captures (id, org_id, run_id, root_run_id, state, max_attempts, item_count, facts)
      select '0190' || lpad(to_hex(g), 12, '0'), ${DEV_ORG.id}, 'run-' || g, 'run-' || g, 'pending', 8, 2,
             jsonb_build_array('Remember fact ' || g || ' about deploys', 'Remember note ' || g || ' about billing')
      from generate_series(1, ${captures}) g`)
    const started = performance.now()
    let claimed = 0
    for (;;) {
      const n = await app.memory.worker!.runOnce()
      if (n === 0) break
      claimed += n
    }
    const seconds = (performance.now() - started) / 1000
    const delivered = await app.db.execute(
      sql`select count(*)::int as n from memory_captures where state = 'delivered'`
    )
    const items = await app.db.execute(sql`select count(*)::int as n from memory_items`)
    await app.close()
    const d = (delivered as unknown as Array<{ n: number }>)[0]!.n
    const i = (items as unknown as Array<{ n: number }>)[0]!.n
    return [
      '### Capture delivery, postgres backend (real Postgres)',
      '',
      '| captures | facts kept | claimed | delivered | seconds | captures/s |',
      '| ---: | ---: | ---: | ---: | ---: | ---: |',
      `| ${captures} | ${i} | ${claimed} | ${d} | ${seconds.toFixed(2)} | ${Math.round(d / seconds)} |`
    ].join('\n')
  } finally {
    await database.close()
    await dropDatabase(name)
  }
}

export async function benchMemory(): Promise<string> {
  const parts: string[] = []
  const only = process.env.BENCH_MEMORY_PARTS?.split(',') ?? [
    'postgres',
    'postgres-uncached',
    'pglite',
    'pglite-uncached',
    'capture'
  ]
  // the same queries again and again: with the cache (the default) every search after the
  // first is a hit, so each database is measured without it too, the cost of a new query
  const uncached = { MEMORY_SEARCH_CACHE: '0' }
  for (const [part, label, env] of [
    ['postgres', 'Real Postgres 15, search cache on (every search a hit)', {}],
    ['postgres-uncached', 'Real Postgres 15, search cache off (MEMORY_SEARCH_CACHE=0)', uncached]
  ] as const) {
    if (!only.includes(part)) continue
    const name = 'cairn_bench_memory'
    const url = await freshDatabase(name)
    try {
      parts.push(await searchBench(label, { DATABASE_URL: url, ...env }))
    } finally {
      await dropDatabase(name)
    }
  }
  if (only.includes('pglite'))
    parts.push(await searchBench('PGlite (embedded), search cache on (every search a hit)', {}))
  if (only.includes('pglite-uncached'))
    parts.push(await searchBench('PGlite (embedded), search cache off (MEMORY_SEARCH_CACHE=0)', uncached))
  if (only.includes('capture')) parts.push(await captureBench())
  return parts.join('\n\n')
}
