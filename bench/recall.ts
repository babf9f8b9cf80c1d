// A run's memory recall over a large pool: a 200-word prompt's significant words (what a run
// searches now) next to the first eight words of the same prompt (what it searched before),
// each a new query (MEMORY_SEARCH_CACHE=0). The server is the real service over a seeded pool
// (bench/memory-server.ts); each prompt is an echo run, whose recall frame in the ledger
// holds the server's own time for the retrieval; the eight-word search is the Hub's search
// route with the same prompt (it takes the first eight words), whose answer has its latency.
import { benchPostgres, startServer, withDatabase } from './lib.js'
import { pct } from './model.js'

const FACTS = Number(process.env.BENCH_FACTS ?? 100_000)
const PROMPTS = Number(process.env.BENCH_PROMPTS ?? 200)

// the seeded facts' words (memory-server.ts): common ones, and the two-syllable rare ones
const TOPICS = [
  'deploy',
  'kubernetes',
  'invoice',
  'customer',
  'release',
  'database',
  'backup',
  'staging',
  'payments',
  'latency',
  'incident',
  'runbook',
  'terraform',
  'migration',
  'webhook',
  'billing',
  'rotation',
  'cluster',
  'monitoring',
  'pipeline'
]
const SYLLABLES = ['ka', 'lo', 'mi', 'ne', 'po', 'ru', 'sa', 'ti', 'vo', 'ze', 'bri', 'cal', 'dor', 'fen', 'gil', 'har']
// what a person writes around the subject
const FILLER = (
  'hello there I hope you are doing well today and I wanted to ask you something about what we discussed ' +
  'before because I am not sure whether it still applies to the team so could you please have a look and tell me what ' +
  'you think it would be really helpful if you could also explain why since I need to write this down for the others ' +
  'who were not in the meeting last week and they will probably ask me the same question again soon anyway thanks a lot'
).split(' ')

/** A 200-word prompt: filler, with a few topic words and a rare word, the subject late. */
function prompt(i: number): string {
  const words: string[] = []
  for (let w = 0; w < 200; w++) words.push(FILLER[(i * 7 + w) % FILLER.length]!)
  words[150 + (i % 30)] = TOPICS[i % TOPICS.length]!
  words[160 + (i % 20)] = TOPICS[(i * 3 + 5) % TOPICS.length]!
  words[185] = SYLLABLES[i % SYLLABLES.length]! + SYLLABLES[(i * 5 + 3) % SYLLABLES.length]!
  return words.join(' ')
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- the answers are read field by field below
async function json(url: string, init?: RequestInit): Promise<any> {
  const res = await fetch(url, init)
  if (!res.ok) throw new Error(`${init?.method ?? 'GET'} ${url}: ${res.status} ${await res.text()}`)
  return res.json()
}

async function measure(label: string, env: Record<string, string>): Promise<string> {
  const server = await startServer(
    'bench/memory-server.ts',
    {
      BENCH_FACTS: String(FACTS),
      MEMORY_CAPTURE_WORKER: 'false',
      MEMORY_SEARCH_CACHE: '0',
      ECHO_WORD_DELAY_MS: '0',
      ...env
    },
    600_000
  )
  try {
    const base = server.url
    const eight: number[] = []
    const found = { eight: 0, whole: 0 }
    for (let i = 0; i < PROMPTS; i++) {
      const p = prompt(i)
      const { run } = await json(`${base}/api/runs`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ prompt: p, engine: 'echo' })
      })
      await json(`${base}/api/runs/${run.id}?wait=30`)
      const search = await json(`${base}/api/memory/search?limit=20&q=${encodeURIComponent(p)}`)
      eight.push(search.latencyMs)
      if (search.items.length > 0) found.eight++
    }
    const whole: number[] = []
    let cursor: string | null = null
    do {
      const page: { recalls: Array<{ latencyMs: number; itemIds: string[] }>; nextCursor: string | null } = await json(
        `${base}/api/memory/recalls?limit=200${cursor ? `&cursor=${cursor}` : ''}`
      )
      for (const frame of page.recalls) {
        whole.push(frame.latencyMs)
        if (frame.itemIds.length > 0) found.whole++
      }
      cursor = page.nextCursor
    } while (cursor)
    const row = (name: string, xs: number[], hits: number) =>
      `| ${name} | ${xs.length} | ${pct(xs, 50).toFixed(1)} | ${pct(xs, 95).toFixed(1)} | ${pct(xs, 99).toFixed(1)} | ${hits} |`
    return [
      `### ${label}: ${FACTS.toLocaleString('en')} facts, 200-word prompts, uncached`,
      '',
      '| recall | prompts | p50 ms | p95 ms | p99 ms | prompts that recalled something |',
      '| --- | ---: | ---: | ---: | ---: | ---: |',
      row('the first 8 words (before)', eight, found.eight),
      row('the significant words, any of them (now)', whole, found.whole),
      '',
      `p95 ratio now / before: ${(pct(whole, 95) / pct(eight, 95)).toFixed(2)}`
    ].join('\n')
  } finally {
    await server.stop()
  }
}

export async function benchRecall(): Promise<string> {
  const parts = [await measure('PGlite (embedded)', {})]
  const pg = benchPostgres ?? 'postgres://postgres@127.0.0.1:5432/postgres'
  parts.push(await withDatabase(pg, (url) => measure('Real Postgres 15', { DATABASE_URL: url })))
  return parts.join('\n\n')
}
