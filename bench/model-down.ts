// A model that is down: the org's default model answers 503 to everything. After the first run spent its
// retries, the provider's breaker is open: runs fail at once (model_unavailable) and chat is a 503, with no
// request reaching the provider. Compared with the same runs on echo (a model that always answers at once):
// POST /api/runs, the run's end (POST to its failed or succeeded state) and POST /api/chat, p50 and p99.
// Two ways a model is configured: the deployment's (OPENAI_BASE_URL) and the org's own provider
// (POST /api/providers), each down.
import { createServer } from 'node:http'
import { once } from 'node:events'
import { now, pct } from './model.js'
import { startRunsServer } from './runs.js'

const RUNS = Number(process.env.BENCH_MODEL_DOWN_RUNS ?? 200)
const PARALLEL = 4

interface Row {
  name: string
  post: number[]
  ended: number[]
  chat: number[]
  statuses: Record<string, number>
  chatStatuses: Record<string, number>
  reached: number
}

async function deadModel(): Promise<{ url: string; requests: () => number; close(): Promise<void> }> {
  let requests = 0
  const server = createServer((req, res) => {
    req.resume()
    // its model list answers (an org's provider is added by listing them); every model call is refused
    if (req.url === '/v1/models') {
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ object: 'list', data: [{ id: 'bench-model' }] }))
      return
    }
    requests++
    res.writeHead(503, { 'content-type': 'application/json' })
    res.end(JSON.stringify({ error: { message: 'the model is down', type: 'server_error' } }))
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  return {
    url: `http://127.0.0.1:${(server.address() as { port: number }).port}/v1`,
    requests: () => requests,
    close: () => new Promise((resolve) => server.close(() => resolve()))
  }
}

async function endOf(url: string, id: string): Promise<string> {
  for (;;) {
    const run = ((await (await fetch(`${url}/api/runs/${id}?wait=60`)).json()) as { run: { status: string } }).run
    if (['succeeded', 'failed', 'cancelled'].includes(run.status)) return run.status
  }
}

async function measure(name: string, url: string, reached: () => number): Promise<Row> {
  const row: Row = { name, post: [], ended: [], chat: [], statuses: {}, chatStatuses: {}, reached: 0 }
  // one run first: on the dead model it spends its retries and opens the breaker
  const first = (await (
    await fetch(`${url}/api/runs`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: 'warm up' })
    })
  ).json()) as { run: { id: string } }
  await endOf(url, first.run.id)
  const before = reached()
  let next = 0
  await Promise.all(
    Array.from({ length: PARALLEL }, async () => {
      while (next < RUNS) {
        const i = next++
        const t0 = now()
        const res = await fetch(`${url}/api/runs`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ prompt: `Draft the incident report for INC-${i}.` })
        })
        const t1 = now()
        if (res.status !== 201) throw new Error(`POST /api/runs: ${res.status} ${await res.text()}`)
        const status = await endOf(url, ((await res.json()) as { run: { id: string } }).run.id)
        row.post.push(t1 - t0)
        row.ended.push(now() - t0)
        row.statuses[status] = (row.statuses[status] ?? 0) + 1
        const c0 = now()
        const chat = await fetch(`${url}/api/chat`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ messages: [{ role: 'user', content: 'Is prod healthy?' }] })
        })
        await chat.text()
        row.chat.push(now() - c0)
        row.chatStatuses[chat.status] = (row.chatStatuses[chat.status] ?? 0) + 1
      }
    })
  )
  row.reached = reached() - before
  return row
}

export async function benchModelDown(): Promise<string> {
  const rows: Row[] = []
  const echo = await startRunsServer({ RUN_POLL_MS: '100', ECHO_WORD_DELAY_MS: '0' })
  try {
    rows.push(await measure('echo (baseline: a model that answers at once)', echo.url, () => 0))
  } finally {
    await echo.stop()
  }
  const dead = await deadModel()
  const down = await startRunsServer({
    RUN_POLL_MS: '100',
    OPENAI_BASE_URL: dead.url,
    MODELS: 'bench-model',
    MODEL_RETRY_BASE_MS: '50',
    MODEL_BREAKER_OPEN_MS: '600000'
  })
  try {
    rows.push(await measure('a model that is down (breaker open)', down.url, dead.requests))
  } finally {
    await down.stop()
    await dead.close()
  }
  const deadOrg = await deadModel()
  const orgDown = await startRunsServer({
    RUN_POLL_MS: '100',
    PROVIDER_ALLOW_PRIVATE: 'true',
    MODEL_RETRY_BASE_MS: '50',
    MODEL_BREAKER_OPEN_MS: '600000'
  })
  try {
    // the dev org (loopback, no credentials) adds its provider: its first model is the org's default
    const added = await fetch(`${orgDown.url}/api/providers`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'Down', baseUrl: deadOrg.url, apiKey: 'sk-bench', models: ['bench-model'] })
    })
    if (added.status !== 201) throw new Error(`POST /api/providers: ${added.status} ${await added.text()}`)
    rows.push(await measure("the org's provider is down (breaker open)", orgDown.url, deadOrg.requests))
  } finally {
    await orgDown.stop()
    await deadOrg.close()
  }
  const base = rows[0]!
  const ms = (v: number) => v.toFixed(1)
  return [
    `${RUNS} runs, ${PARALLEL} at a time, each followed by a chat; PGlite. Times in ms (POST to the run's end: \`?wait\` answered).`,
    '',
    '| model | runs ended | chat statuses | POST p50 | POST p99 | run end p50 | run end p99 (ratio) | chat p50 | chat p99 (ratio) | requests that reached the model |',
    '| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
    ...rows.map(
      (r) =>
        `| ${r.name} | ${JSON.stringify(r.statuses)} | ${JSON.stringify(r.chatStatuses)} | ${ms(pct(r.post, 50))} | ${ms(pct(r.post, 99))} | ${ms(pct(r.ended, 50))} | ${ms(pct(r.ended, 99))} (${(pct(r.ended, 99) / pct(base.ended, 99)).toFixed(2)}) | ${ms(pct(r.chat, 50))} | ${ms(pct(r.chat, 99))} (${(pct(r.chat, 99) / pct(base.chat, 99)).toFixed(2)}) | ${r === base ? '-' : r.reached} |`
    )
  ].join('\n')
}
