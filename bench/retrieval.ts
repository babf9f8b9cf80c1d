// Search by meaning: hybrid Memory Hub search over 100,000 facts in pools of 10,000, next to
// full-text search of the same pool in the same run (PGlite and real Postgres); and the write
// path (adding a fact) with the embedding triggers and job, next to the same server without
// them. `npm run bench -- retrieval`; the quality figures are `retrieval-quality`.
import { randomUUID } from 'node:crypto'
import {
  benchPostgres,
  cpuPerRequest,
  interleaved,
  load,
  startServer,
  withDatabase,
  type Result,
  type Server
} from './lib.js'

const PG = benchPostgres ?? 'postgres://postgres@127.0.0.1:5432/postgres'
const connections = Number(process.env.BENCH_CONNECTIONS ?? 4)

function rows(title: string, results: Result[], baseline: Result, ratioTo: string): string {
  return [
    `### ${title}`,
    '',
    `| case | requests/s | p50 ms | p95 ms | p99 ms | ratio to ${ratioTo} (requests/s) | p95 ratio | non-2xx |`,
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
    ...results.map(
      (r) =>
        `| ${r.name} | ${r.rps} | ${r.p50} | ${r.p95} | ${r.p99} | ${(r.rps / baseline.rps).toFixed(2)} | ${(r.p95 / Math.max(0.01, baseline.p95)).toFixed(2)} | ${r.non2xx} |`
    )
  ].join('\n')
}

async function searchBench(label: string, env: Record<string, string>): Promise<string> {
  const server = await startServer(
    'bench/retrieval-server.ts',
    {
      MEMORY_SEARCH_CACHE: '0',
      KNOWLEDGE_SEARCH_CACHE: '0',
      EMBEDDING_WORKER: 'false',
      EMBEDDING_BATCH: '1000',
      ...env
    },
    900_000
  )
  try {
    const results: Result[] = []
    for (const [name, q, mode] of [
      ['full text (as before), words of the facts', 'billing release', 'fulltext'],
      ['hybrid, words of the facts', 'billing release', 'hybrid'],
      ['full text (as before), a paraphrase', 'who ships invoicing changes', 'fulltext'],
      ['hybrid, a paraphrase', 'who ships invoicing changes', 'hybrid'],
      ['semantic only, a paraphrase', 'who ships invoicing changes', 'semantic']
    ] as const) {
      results.push(
        await load({
          url: `${server.url}/api/memory/search?limit=10&mode=${mode}&q=${encodeURIComponent(q)}`,
          name: `${name} (\`${q}\`)`,
          connections
        })
      )
    }
    return rows(
      `${label}: 100,000 facts in pools of 10,000, ${connections} connections`,
      results,
      results[0]!,
      'full text'
    )
  } finally {
    await server.stop()
  }
}

const WRITE_CASES = [
  ['add a fact, before (no embedding triggers or job)', { BENCH_EMBED_TRIGGERS: 'off', EMBEDDING_WORKER: 'false' }],
  ['add a fact, with the embedding trigger (the job on another instance)', { EMBEDDING_WORKER: 'false' }],
  ['add a fact, with the embedding trigger and the job in the same process', { EMBEDDING_WORKER: 'true' }]
] as const

/**
 * The three write paths side by side, each on its own server and database (`envs`, one per case), measured
 * in turns (BENCH_ROUNDS, best round each), so that the machine's drift falls on all three alike.
 */
async function writeBench(label: string, envs: Array<Record<string, string>>): Promise<string> {
  const servers: Server[] = []
  try {
    for (const [i, [, extra]] of WRITE_CASES.entries())
      servers.push(
        await startServer(
          'bench/retrieval-server.ts',
          { BENCH_POOLS: '1', BENCH_POOL_FACTS: '1000', ...envs[i], ...extra },
          900_000
        )
      )
    const results = await interleaved(
      WRITE_CASES.map(([name], i) => ({
        url: `${servers[i]!.url}/api/memory/items`,
        method: 'POST' as const,
        headers: { 'content-type': 'application/json' },
        name,
        connections,
        setupRequest: (req: { body?: string }) => ({
          ...req,
          body: JSON.stringify({ scope: 'org', content: `A new fact about the deploy pipeline ${randomUUID()}` })
        })
      }))
    )
    // then what each add costs its server in CPU, in turns too, best of three (a machine other work
    // shares moves requests/s more than it moves CPU spent)
    const cpu = WRITE_CASES.map(() => Infinity)
    for (let round = 0; round < 3; round++)
      for (const [i, server] of servers.entries()) {
        const ms = await cpuPerRequest(
          server.process.pid!,
          1000,
          async () => {
            const res = await fetch(`${server.url}/api/memory/items`, {
              method: 'POST',
              headers: { 'content-type': 'application/json' },
              body: JSON.stringify({ scope: 'org', content: `Another fact about the deploy pipeline ${randomUUID()}` })
            })
            if (res.status !== 201) throw new Error(`POST /api/memory/items: ${res.status}`)
            await res.arrayBuffer()
          },
          connections
        )
        cpu[i] = Math.min(cpu[i]!, ms)
      }
    return [
      rows(
        `${label}: adding a fact (POST /api/memory/items), ${connections} connections, best of ${process.env.BENCH_ROUNDS ?? 3} alternating rounds`,
        results,
        results[0]!,
        'before'
      ),
      '',
      '| case | server CPU per add (ms, best of 3 × 1000) | ratio to before |',
      '| --- | ---: | ---: |',
      ...WRITE_CASES.map(([name], i) => `| ${name} | ${cpu[i]!.toFixed(2)} | ${(cpu[i]! / cpu[0]!).toFixed(2)} |`)
    ].join('\n')
  } finally {
    await Promise.all(servers.map((s) => s.stop()))
  }
}

/** BENCH_DATABASES: `pglite`, `postgres` or both (default); BENCH_PARTS: `search`, `write` or both (default). */
export async function benchRetrieval(): Promise<string> {
  const databases = (process.env.BENCH_DATABASES ?? 'pglite,postgres').split(',')
  const parts = (process.env.BENCH_PARTS ?? 'search,write').split(',')
  const out: string[] = []
  for (const part of parts) {
    if (part === 'search') {
      if (databases.includes('pglite')) out.push(await searchBench('PGlite', {}))
      if (databases.includes('postgres'))
        out.push(await withDatabase(PG, (url) => searchBench('PostgreSQL', { DATABASE_URL: url })))
    } else {
      if (databases.includes('pglite')) out.push(await writeBench('PGlite', [{}, {}, {}]))
      if (databases.includes('postgres'))
        out.push(
          await withDatabase(PG, (a) =>
            withDatabase(PG, (b) =>
              withDatabase(PG, (c) =>
                writeBench('PostgreSQL', [{ DATABASE_URL: a }, { DATABASE_URL: b }, { DATABASE_URL: c }])
              )
            )
          )
        )
    }
  }
  return out.join('\n\n')
}
