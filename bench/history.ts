// A run in a long thread: the time from its claim (started_at, the claim's transaction) to
// the first byte of its request at the model, with the thread's earlier turns (their
// transcripts: each turn a shell call printing 2,000 characters, its result and an answer;
// BENCH_HISTORY_TOOLS=0 for prompt and answer only) read, measured and trimmed in the
// claim's own statement. Against the same measure for a thread's first run
// (no history), in the same run, on PGlite and (BENCH_DATABASE_URL or DATABASE_URL) Postgres.
import { benchPostgres, credentials, startServer, withDatabase } from './lib.js'
import { pct, startBenchModel } from './model.js'

const TURNS = Number(process.env.BENCH_HISTORY_TURNS ?? 200)
const PROBES = Number(process.env.BENCH_HISTORY_PROBES ?? 100)
const TOOLS = process.env.BENCH_HISTORY_TOOLS !== '0'

/**
 * A local OpenAI-compatible model: notes when each request began to arrive, by its last message, and answers at once.
 */
async function startModel(): Promise<{ url: string; arrivals: Map<string, number>; close(): Promise<void> }> {
  const arrivals = new Map<string, number>()
  const model = await startBenchModel(({ messages }, arrived) => {
    const last = messages[messages.length - 1]! as { role: string; content: string | null }
    arrivals.set(last.content ?? '', arrived)
    // a turn of the thread asks for a command first; its result comes back as a tool message
    if (TOOLS && last.role === 'user' && (last.content ?? '').startsWith('turn ')) {
      const call = {
        index: 0,
        id: `call_${arrivals.size}`,
        type: 'function',
        function: { name: 'shell', arguments: JSON.stringify({ command: "head -c 2000 /dev/zero | tr '\\0' r" }) }
      }
      return [{ delta: { role: 'assistant', content: null, tool_calls: [call] }, finish: 'tool_calls' }]
    }
    return [{ delta: { content: 'noted: '.padEnd(200, 'x') }, finish: 'stop' }]
  })
  return { ...model, arrivals }
}

async function measure(label: string, env: Record<string, string>): Promise<string[]> {
  const model = await startModel()
  // (a loaded machine can take over a minute to start the server: BENCH_READY_TIMEOUT_MS)
  const server = await startServer(
    'bench/cairn-server.ts',
    {
      ...env,
      OPENAI_BASE_URL: model.url,
      MODELS: 'bench-model',
      SANDBOX_UNCONFINED: 'true'
    },
    Number(process.env.BENCH_READY_TIMEOUT_MS ?? 60_000)
  )
  try {
    const { authorization, cookie } = await credentials(server.url)
    // the shell runs without asking a person
    const policy = await fetch(`${server.url}/api/tools/policies/shell`, {
      method: 'PUT',
      headers: { cookie, 'content-type': 'application/json' },
      body: JSON.stringify({ mode: 'auto' })
    })
    if (!policy.ok) throw new Error(`shell policy: ${policy.status}`)
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
    // the thread: TURNS succeeded runs of about 500 bytes each (prompt and answer), with a 2,000-character tool result
    const root = await run(`turn 0 ${'p'.repeat(300)}`)
    if (root.status !== 'succeeded') throw new Error(`turn 0: ${root.status}`)
    for (let i = 1; i < TURNS; i++) await run(`turn ${i} ${'p'.repeat(300)}`, root.id)
    if (TOOLS) {
      const transcript = await fetch(`${server.url}/api/runs/${root.id}/messages`, { headers })
      const { items } = (await transcript.json()) as { items: Array<{ role: string; content: string }> }
      if (!items.some((m) => m.role === 'tool' && m.content.includes('r'.repeat(2000))))
        throw new Error(`the thread's turns did not call the shell: ${JSON.stringify(items).slice(0, 300)}`)
    }
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
    return [
      row("a thread's first run (baseline)", fresh, fresh),
      row(`a run after ${TURNS}+ ${TOOLS ? 'tool-using ' : ''}turns`, long, fresh)
    ]
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
