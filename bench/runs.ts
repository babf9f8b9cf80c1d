// Dispatch (POST /api/runs with an Idempotency-Key per request) next to the health
// route, SSE fan-out to 10,000 clients on /api/runs/changes, and cross-instance delivery.
// BENCH_DATABASE_URL (or DATABASE_URL) adds the real-Postgres rows and the cross-instance case.
import { fork, spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { randomUUID } from 'node:crypto'
import { mkdtempSync, rmSync } from 'node:fs'
import { request } from 'node:http'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { benchEnv, benchPostgres, credentials, load, serverNodeArgs, table, withDatabase, type Result } from './lib.js'
import { now, pct } from './model.js'

interface Proc {
  url: string
  child: ChildProcess
  lines: AsyncIterableIterator<string>
  stop(): Promise<void>
}

export async function startRunsServer(env: Record<string, string>): Promise<Proc> {
  const dataDir = mkdtempSync(join(tmpdir(), 'cairn-bench-'))
  const child = spawn(
    process.execPath,
    [...serverNodeArgs(), '--expose-gc', '--import', 'tsx', 'bench/runs-server.ts'],
    {
      env: benchEnv(dataDir, { NODE_ENV: 'development', ...env }),
      stdio: ['ignore', 'pipe', 'inherit']
    }
  )
  const lines = createInterface({ input: child.stdout! })[Symbol.asyncIterator]()
  let url = ''
  for (;;) {
    const { value, done } = await lines.next()
    if (done) throw new Error('runs-server exited before listening')
    const m = /listening on (http:\/\/\S+)/.exec(value)
    if (m) {
      url = m[1]!
      break
    }
  }
  return {
    url,
    child,
    lines,
    async stop() {
      child.kill('SIGTERM')
      if (child.exitCode === null) await once(child, 'exit')
      rmSync(dataDir, { recursive: true, force: true })
    }
  }
}

function post(url: string, body: unknown): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: 'POST', headers: { 'content-type': 'application/json' } }, (res) => {
      let text = ''
      res.on('data', (c) => (text += c))
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }))
    })
    req.on('error', reject)
    req.end(JSON.stringify(body))
  })
}

async function dispatch(label: string, env: Record<string, string>, withHealth = true): Promise<Result[]> {
  const server = await startRunsServer(env)
  const workers =
    env.RUN_WORKER_CONCURRENCY === '0' ? 'no workers: dispatch only' : 'echo runs executing in the same process'
  try {
    const { authorization } = await credentials(server.url)
    const rows = withHealth ? [await load({ url: `${server.url}/api/health`, name: `GET /api/health (${label})` })] : []
    rows.push(
      await load({
        url: `${server.url}/api/runs`,
        name: `POST /api/runs, bearer key + Idempotency-Key (${label}, ${workers})`,
        method: 'POST',
        setupRequest: (req) => ({
          ...req,
          headers: { 'content-type': 'application/json', authorization, 'idempotency-key': randomUUID() },
          body: JSON.stringify({ prompt: 'bench run' })
        })
      })
    )
    return rows
  } finally {
    await server.stop()
  }
}

async function fanout(clients: number, env: Record<string, string>): Promise<string> {
  const server = await startRunsServer({ RUN_WORKER_CONCURRENCY: '0', ...env })
  const heap = async () => {
    server.child.kill('SIGUSR2')
    for (;;) {
      const { value } = await server.lines.next()
      const m = /^heap (\d+) rss (\d+) streams (\d+)/.exec(value)
      if (m) return { heap: Number(m[1]), rss: Number(m[2]), streams: Number(m[3]) }
    }
  }
  const procs: ChildProcess[] = []
  try {
    // warm the route once so its compiled schemas are not counted per connection
    await post(`${server.url}/api/runs`, { prompt: 'warm' })
    const before = await heap()
    const perProc = Math.ceil(clients / 2)
    const done = new Map<string, number[]>()
    for (let i = 0; i < 2; i++) {
      const child = fork('bench/sse-clients.ts', [`${server.url}/api/runs/changes`, String(perProc)], {
        execArgv: ['--import', 'tsx']
      })
      procs.push(child)
      child.on('message', (m: { id?: string; doneAt?: number }) => {
        if (m.id) (done.get(m.id) ?? done.set(m.id, []).get(m.id)!).push(m.doneAt!)
      })
    }
    await Promise.all(procs.map((p) => new Promise<void>((resolve) => p.once('message', () => resolve()))))
    const after = await heap()
    const latencies: number[] = []
    for (let i = 0; i < 30; i++) {
      const t0 = now()
      const res = await post(`${server.url}/api/runs`, { prompt: `fan-out ${i}` })
      const id = JSON.parse(res.body).run.id as string
      const deadline = Date.now() + 10_000
      while ((done.get(id)?.length ?? 0) < procs.length && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 2))
      const times = done.get(id) ?? []
      if (times.length === procs.length) latencies.push(Math.max(...times) - t0)
      await new Promise((r) => setTimeout(r, 100))
    }
    const perConn = (after.heap - before.heap) / after.streams
    return [
      `| clients | delivered runs | p50 ms | p99 ms | max ms | heap per connection | rss per connection |`,
      `| ---: | ---: | ---: | ---: | ---: | ---: | ---: |`,
      `| ${after.streams} | ${latencies.length}/30 | ${pct(latencies, 50).toFixed(1)} | ${pct(latencies, 99).toFixed(1)} | ${Math.max(...latencies).toFixed(1)} | ${(perConn / 1024).toFixed(2)} KB | ${((after.rss - before.rss) / after.streams / 1024).toFixed(2)} KB |`
    ].join('\n')
  } finally {
    for (const p of procs) p.kill()
    await server.stop()
  }
}

async function crossInstance(dbUrl: string): Promise<string> {
  const env = { DATABASE_URL: dbUrl, RUN_WORKER_CONCURRENCY: '0' }
  const a = await startRunsServer(env)
  const b = await startRunsServer(env)
  try {
    const root = JSON.parse((await post(`${a.url}/api/runs`, { prompt: 'thread' })).body).run.id as string
    const latencies: number[] = []
    const got = new Map<string, number>()
    await new Promise<void>((resolve, reject) => {
      const req = request(
        `${b.url}/api/runs/${root}/thread-events`,
        { headers: { accept: 'text/event-stream' } },
        (res) => {
          res.setEncoding('utf8')
          let buffer = ''
          res.on('data', (chunk: string) => {
            const at = now()
            buffer += chunk
            let cut: number
            while ((cut = buffer.indexOf('\n\n')) >= 0) {
              const block = buffer.slice(0, cut)
              buffer = buffer.slice(cut + 2)
              const line = block.split('\n').find((l) => l.startsWith('data: '))
              if (!line) continue
              const event = JSON.parse(line.slice(6)) as { runId: string; createdAt: string }
              got.set(event.runId, at - Date.parse(event.createdAt))
            }
          })
          resolve()
        }
      )
      req.on('error', reject)
      req.end()
    })
    for (let i = 0; i < 200; i++) {
      const id = JSON.parse((await post(`${a.url}/api/runs`, { prompt: `x${i}`, rootRunId: root })).body).run
        .id as string
      const deadline = Date.now() + 5000
      while (!got.has(id) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 1))
      const latency = got.get(id)
      if (latency !== undefined) latencies.push(latency)
      await new Promise((r) => setTimeout(r, 10))
    }
    return [
      '| case | events | p50 ms | p99 ms | max ms |',
      '| --- | ---: | ---: | ---: | ---: |',
      `| stored on A → SSE client on B | ${latencies.length}/200 | ${pct(latencies, 50).toFixed(1)} | ${pct(latencies, 99).toFixed(1)} | ${Math.max(...latencies).toFixed(1)} |`
    ].join('\n')
  } finally {
    await a.stop()
    await b.stop()
  }
}

/** BENCH_RUNS_PARTS picks parts (dispatch, fanout, cross); all by default. */
const parts = new Set((process.env.BENCH_RUNS_PARTS ?? 'dispatch,fanout,cross').split(',').map((p) => p.trim()))

export async function benchRuns(): Promise<string> {
  const pgUrl = benchPostgres
  const clients = Number(process.env.BENCH_SSE_CLIENTS ?? 10_000)
  const out: string[] = []
  if (parts.has('dispatch')) {
    const rows: Result[] = await dispatch('PGlite', {})
    rows.push(...(await dispatch('PGlite', { RUN_WORKER_CONCURRENCY: '0' }, false)))
    if (pgUrl) {
      rows.push(
        ...(await withDatabase(pgUrl, (url) => dispatch('Postgres', { DATABASE_URL: url, DATABASE_POOL_MAX: '40' })))
      )
      rows.push(
        ...(await withDatabase(pgUrl, (url) =>
          dispatch('Postgres', { DATABASE_URL: url, DATABASE_POOL_MAX: '40', RUN_WORKER_CONCURRENCY: '0' }, false)
        ))
      )
    }
    out.push('### Dispatch\n', table(rows, rows[0]!))
  }
  if (parts.has('fanout')) {
    out.push(`\n### Fan-out: ${clients} SSE clients on /api/runs/changes (run creation → last client)\n`)
    out.push(
      pgUrl ? await withDatabase(pgUrl, (url) => fanout(clients, { DATABASE_URL: url })) : await fanout(clients, {})
    )
  }
  if (parts.has('cross')) {
    if (pgUrl) {
      out.push('\n### Cross-instance delivery (two processes, one Postgres)\n')
      out.push(await withDatabase(pgUrl, crossInstance))
    } else out.push('\n(cross-instance: needs BENCH_DATABASE_URL or DATABASE_URL)')
  }
  return out.join('\n')
}
