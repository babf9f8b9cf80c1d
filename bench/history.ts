// A run in a long thread: the time from its claim (started_at, the claim's transaction) to
// the first byte of its request at the model, with the thread's earlier turns read and
// trimmed in the claim's own statement. Against the same measure for a thread's first run
// (no history), in the same run, on PGlite and (BENCH_DATABASE_URL or DATABASE_URL) Postgres.
import { benchPostgres, credentials, startServer, withDatabase } from './lib.js'
import { pct, startBenchModel } from './model.js'

const TURNS = Number(process.env.BENCH_HISTORY_TURNS ?? 200)
const PROBES = Number(process.env.BENCH_HISTORY_PROBES ?? 100)

/**
 * A local OpenAI-compatible model: notes when each request began to arrive, by its last message, and answers at once.
 */
async function startModel(): Promise<{ url: string; arrivals: Map<string, number>; close(): Promise<void> }> {
  const arrivals = new Map<string, number>()
  const model = await startBenchModel(({ messages }, arrived) => {
    arrivals.set(messages[messages.length - 1]!.content ?? '', arrived)
    return [{ delta: { content: 'noted: '.padEnd(200, 'x') }, finish: 'stop' }]
  })
  return { ...model, arrivals }
}

async function measure(label: string, env: Record<string, string>): Promise<string[]> {
  const model = await startModel()
  const server = await startServer('bench/cairn-server.ts', {
    ...env,
    OPENAI_BASE_URL: model.url,
    MODELS: 'bench-model'
  })
  try {
    const { authorization } = await credentials(server.url)
    const headers = { authorization, 'content-type': 'application/json' }
    const run = async (prompt: string, rootRunId?: string) => {
      const created = await fetch(`${server.url}/api/runs`, {
        method: 'POST',
        headers,
        body: JSON.stringify({ prompt, ...(rootRunId ? { rootRunId } : {}) })
      })
      const { run } = (await created.json()) as { run: { id: string } }
      const ended = await fetch(`${server.url}/api/runs/${run.id}?wait=60`, { headers })
      return ((await ended.json()) as { run: { id: string; status: string; startedAt: string } }).run
    }
    const delay = (prompt: string, startedAt: string) => model.arrivals.get(prompt)! - Date.parse(startedAt)
    // the thread: TURNS succeeded runs of about 500 bytes each (prompt and answer)
    const root = await run(`turn 0 ${'p'.repeat(300)}`)
    for (let i = 1; i < TURNS; i++) await run(`turn ${i} ${'p'.repeat(300)}`, root.id)
    const fresh: number[] = []
    const long: number[] = []
    for (let i = 0; i < PROBES; i++) {
      const first = await run(`fresh ${i}`)
      fresh.push(delay(`fresh ${i}`, first.startedAt))
      const probe = await run(`probe ${i}`, root.id)
      if (probe.status !== 'succeeded') throw new Error(`probe ${i}: ${probe.status}`)
      long.push(delay(`probe ${i}`, probe.startedAt))
    }
    const row = (name: string, values: number[], base: number[]) =>
      `| ${label} | ${name} | ${pct(values, 50).toFixed(1)} | ${pct(values, 99).toFixed(1)} | ${(pct(values, 99) / pct(base, 99)).toFixed(2)} |`
    return [row("a thread's first run (baseline)", fresh, fresh), row(`a run after ${TURNS}+ turns`, long, fresh)]
  } finally {
    await server.stop()
    await model.close()
  }
}

export async function benchHistory(): Promise<string> {
  const rows = [
    '| database | case | claim → first byte at the model, p50 ms | p99 ms | p99 ratio to baseline |',
    '| --- | --- | ---: | ---: | ---: |'
  ]
  rows.push(...(await measure('PGlite', {})))
  if (benchPostgres)
    rows.push(...(await withDatabase(benchPostgres, (url) => measure('Postgres', { DATABASE_URL: url }))))
  return rows.join('\n')
}
