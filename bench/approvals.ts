// Approvals that free the worker: echo dispatch (runs executing in the same process) with
// and without 1,000 runs waiting in requires_action, and the time from a person's decision
// to the model receiving the resumed request, on one instance and across two (Postgres).
// A local OpenAI-compatible model asks for one write_file call per run, then answers.
import { randomUUID } from 'node:crypto'
import { now, pct, startBenchModel } from './model.js'
import { benchPostgres, credentials, load, startServer, table, withDatabase, type Result, type Server } from './lib.js'

/**
 * The model: a write_file call for a fresh prompt, a text answer once it has the call's result; when each resumed
 * request arrived, by prompt.
 */
async function startModel(): Promise<{ url: string; resumedAt: Map<string, number>; close(): Promise<void> }> {
  const resumedAt = new Map<string, number>()
  const model = await startBenchModel(({ messages }, arrived) => {
    if (messages.at(-1)?.role !== 'tool') {
      return [
        {
          delta: {
            role: 'assistant',
            content: null,
            tool_calls: [
              {
                index: 0,
                id: 'w1',
                type: 'function',
                function: { name: 'write_file', arguments: '{"path":"note.txt","content":"hi"}' }
              }
            ]
          },
          finish: 'tool_calls'
        }
      ]
    }
    resumedAt.set(messages.find((m) => m.role === 'user')?.content ?? '', arrived)
    return [{ delta: { role: 'assistant', content: 'written' }, finish: 'stop' }]
  })
  return { ...model, resumedAt }
}

/** The runs benchmark's server (bench/runs-server.ts) with the dev org for loopback callers and unconfined tools. */
const startRunsServer = (env: Record<string, string>) =>
  startServer('bench/runs-server.ts', { NODE_ENV: 'development', SANDBOX_UNCONFINED: 'true', ...env })

interface Answer {
  run: { id: string; status: string }
  items: Array<{ id: string; status: string }>
}

async function json(url: string, init: RequestInit = {}): Promise<Answer> {
  const res = await fetch(url, { ...init, headers: { 'content-type': 'application/json', ...init.headers } })
  return res.json() as Promise<Answer>
}

/** Echo dispatch next to `waiting` runs in requires_action (bench/runs-server.ts makes them). */
async function dispatchBeside(label: string, waiting: number, env: Record<string, string>): Promise<Result> {
  const server = await startRunsServer({ ...env, BENCH_WAITING_RUNS: String(waiting) })
  try {
    const { authorization } = await credentials(server.url)
    return await load({
      url: `${server.url}/api/runs`,
      name: `POST /api/runs, echo runs executing, ${waiting} runs waiting for approval (${label})`,
      method: 'POST',
      setupRequest: (req) => ({
        ...req,
        headers: { 'content-type': 'application/json', authorization, 'idempotency-key': randomUUID() },
        body: JSON.stringify({ prompt: 'bench run' })
      })
    })
  } finally {
    await server.stop()
  }
}

/**
 * Decision (POST on `decider`) → the model receives the resumed request, for `n` runs started on `starter`, one at a
 * time.
 */
async function decisionLatency(
  starter: Server,
  decider: Server,
  model: { resumedAt: Map<string, number> },
  n: number
): Promise<number[]> {
  const latencies: number[] = []
  for (let i = 0; i < n; i++) {
    const prompt = `approve ${i} ${randomUUID()}`
    const { run } = await json(`${starter.url}/api/runs`, {
      method: 'POST',
      body: JSON.stringify({ prompt, engine: 'openai' })
    })
    let approvalId: string | undefined
    while (!approvalId) {
      const { items } = await json(`${starter.url}/api/runs/${run.id}/approvals`)
      approvalId = items.find((a) => a.status === 'pending')?.id
      if (!approvalId) await new Promise((r) => setTimeout(r, 2))
    }
    // the run has left its worker once its status says so
    for (;;) {
      const { run: current } = await json(`${starter.url}/api/runs/${run.id}`)
      if (current.status === 'requires_action') break
      await new Promise((r) => setTimeout(r, 2))
    }
    const sent = now()
    await json(`${decider.url}/api/runs/${run.id}/approvals/${approvalId}`, {
      method: 'POST',
      body: JSON.stringify({ decision: 'approve' })
    })
    const deadline = Date.now() + 10_000
    while (!model.resumedAt.has(prompt) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 1))
    const at = model.resumedAt.get(prompt)
    if (at !== undefined) latencies.push(at - sent)
  }
  return latencies
}

async function resumeLatency(dbUrl: string, n: number): Promise<string> {
  const model = await startModel()
  const env = { DATABASE_URL: dbUrl, OPENAI_BASE_URL: model.url, MODELS: 'bench-model' }
  const a = await startRunsServer(env)
  const b = await startRunsServer(env)
  try {
    await decisionLatency(a, a, model, 10) // warm up
    const one = await decisionLatency(a, a, model, n)
    const two = await decisionLatency(a, b, model, n)
    const row = (label: string, values: number[]) =>
      `| ${label} | ${values.length}/${n} | ${pct(values, 50).toFixed(1)} | ${pct(values, 99).toFixed(1)} | ${Math.max(...values).toFixed(1)} |`
    return [
      '| decision → resumed model request | runs | p50 ms | p99 ms | max ms |',
      '| --- | ---: | ---: | ---: | ---: |',
      row('decided on the instance that ran it', one),
      row('decided on another instance', two)
    ].join('\n')
  } finally {
    await a.stop()
    await b.stop()
    await model.close()
  }
}

export async function benchApprovals(): Promise<string> {
  const out: string[] = []
  const rows: Result[] = [await dispatchBeside('PGlite', 0, {}), await dispatchBeside('PGlite', 1000, {})]
  if (benchPostgres) {
    rows.push(
      await withDatabase(benchPostgres, (url) =>
        dispatchBeside('Postgres', 0, { DATABASE_URL: url, DATABASE_POOL_MAX: '40' })
      )
    )
    rows.push(
      await withDatabase(benchPostgres, (url) =>
        dispatchBeside('Postgres', 1000, { DATABASE_URL: url, DATABASE_POOL_MAX: '40' })
      )
    )
  }
  out.push('### Dispatch beside runs waiting for approval\n', table(rows, rows[0]!))
  if (benchPostgres) {
    out.push('\n### Decision to resumed model request (Postgres)\n')
    out.push(await withDatabase(benchPostgres, (url) => resumeLatency(url, Number(process.env.BENCH_APPROVALS ?? 300))))
  } else out.push('\n(decision latency: needs BENCH_DATABASE_URL or DATABASE_URL)')
  return out.join('\n')
}
