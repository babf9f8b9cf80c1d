// A skill run next to a plain run (bearer key and an Idempotency-Key per request,
// interleaved on one server), and moving a task in a column of 10,000 tasks on Postgres.
import { randomUUID } from 'node:crypto'
import { generateNKeysBetween } from 'fractional-indexing'
import postgres from 'postgres'
import { Agent, request } from 'node:http'
import { newId } from '../src/db/ids.js'
import { benchPostgres, credentials, interleaved, load, startServer, table, withDatabase } from './lib.js'

const json = { 'content-type': 'application/json' }

async function dispatchCases(label: string, env: Record<string, string>): Promise<string> {
  // dispatch only: the runs pile up queued, so both cases measure the request, not the engine
  const server = await startServer('bench/cairn-server.ts', { RUN_WORKER_CONCURRENCY: '0', ...env })
  try {
    const { cookie, authorization } = await credentials(server.url)
    const created = await fetch(`${server.url}/api/skills`, {
      method: 'POST',
      headers: { ...json, cookie },
      body: JSON.stringify({
        name: 'bench-skill',
        description: 'A benchmark skill',
        instructions: 'Summarize the input in one sentence.'
      })
    })
    const skillId = ((await created.json()) as { skill: { id: string } }).skill.id
    const keyed = (body: string) => (req: Record<string, unknown>) => ({
      ...req,
      headers: { ...json, authorization, 'idempotency-key': randomUUID() },
      body
    })
    const results = await interleaved([
      {
        name: `POST /api/runs (baseline, ${label})`,
        url: `${server.url}/api/runs`,
        method: 'POST',
        setupRequest: keyed(JSON.stringify({ prompt: 'Summarize the input in one sentence.\n\nbench input' }))
      },
      {
        name: `POST /api/skills/:id/run (${label})`,
        url: `${server.url}/api/skills/${skillId}/run`,
        method: 'POST',
        setupRequest: keyed(JSON.stringify({ input: 'bench input' }))
      }
    ])
    return table(results, results[0]!)
  } finally {
    await server.stop()
  }
}

function post(
  url: string,
  headers: Record<string, string>,
  body: string,
  agent: Agent
): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: 'POST', headers, agent }, (res) => {
      let text = ''
      res.setEncoding('utf8')
      res.on('data', (chunk: string) => (text += chunk))
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text }))
    })
    req.on('error', reject)
    req.end(body)
  })
}

const percentile = (sorted: number[], p: number) =>
  sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!

/**
 * Moves in one column of 10,000 tasks: `clients` concurrent movers, each owning its own
 * tasks (so it knows their revisions), each move above or below a random task of the
 * column or to its end. Latencies are measured per request by the client.
 */
async function moveCase(databaseUrl: string): Promise<string> {
  const server = await startServer('bench/cairn-server.ts', { DATABASE_URL: databaseUrl, RUN_WORKER_CONCURRENCY: '0' })
  const sql = postgres(databaseUrl, { max: 2, onnotice: () => {} })
  const tasks = Number(process.env.BENCH_TASKS ?? 10_000)
  const movers = (process.env.BENCH_MOVERS ?? '1,4,10').split(',').map(Number)
  const clients = Math.max(...movers)
  const seconds = Number(process.env.BENCH_SECONDS ?? 8)
  const agent = new Agent({ keepAlive: true, maxSockets: clients })
  try {
    const { cookie } = await credentials(server.url)
    const project = (
      (await (
        await fetch(`${server.url}/api/projects`, {
          method: 'POST',
          headers: { ...json, cookie },
          body: JSON.stringify({ name: 'bench board' })
        })
      ).json()) as { project: { id: string } }
    ).project
    const first = (
      (await (
        await fetch(`${server.url}/api/tasks`, {
          method: 'POST',
          headers: { ...json, cookie },
          body: JSON.stringify({ title: 'task 0', projectId: project.id })
        })
      ).json()) as { task: { id: string; position: string } }
    ).task
    const orgId = (await sql<Array<{ org_id: string }>>`select org_id from tasks where id = ${first.id}`)[0]!.org_id
    const keys = generateNKeysBetween(first.position, null, tasks - 1)
    const ids = [first.id]
    for (let i = 0; i < keys.length; i += 1000) {
      const rows = keys.slice(i, i + 1000).map((position, j) => ({
        id: newId(),
        org_id: orgId,
        project_id: project.id,
        title: `task ${i + j + 1}`,
        status: 'todo',
        position
      }))
      ids.push(...rows.map((r) => r.id))
      await sql`insert into tasks ${sql(rows)}`
    }
    await sql`analyze tasks`
    const revision = new Map(ids.map((id) => [id, 1]))
    const move = async (id: string, anchor: string, how: number) => {
      const body = {
        status: 'todo',
        revision: revision.get(id),
        ...(how === 0 ? { before: anchor } : how === 1 ? { after: anchor } : {})
      }
      const started = performance.now()
      const { status, text } = await post(
        `${server.url}/api/tasks/${id}/move`,
        { ...json, cookie },
        JSON.stringify(body),
        agent
      )
      const ms = performance.now() - started
      if (status !== 200) throw new Error(`move: ${status} ${text}`)
      revision.set(id, (JSON.parse(text) as { task: { revision: number } }).task.revision)
      return ms
    }
    const run = async (forMs: number, active: number) => {
      const latencies: number[] = []
      const until = performance.now() + forMs
      await Promise.all(
        Array.from({ length: active }, async (_, c) => {
          // mover c owns the tasks whose index is c modulo clients; anchors are any other task
          while (performance.now() < until) {
            const id = ids[c + clients * Math.floor(Math.random() * Math.floor(ids.length / clients))]!
            let anchor = ids[Math.floor(Math.random() * ids.length)]!
            if (anchor === id) anchor = ids[(ids.indexOf(id) + 1) % ids.length]!
            latencies.push(await move(id, anchor, Math.floor(Math.random() * 3)))
          }
        })
      )
      return latencies.sort((a, b) => a - b)
    }
    await run(2000, clients)
    const rowsOut: string[] = []
    let moves = 0
    for (const active of movers) {
      const latencies = await run(seconds * 1000, active)
      moves += latencies.length
      rowsOut.push(
        `| POST /api/tasks/:id/move, ${active} concurrent mover${active === 1 ? '' : 's'} | ${Math.round(latencies.length / seconds)} | ${percentile(latencies, 50).toFixed(1)} | ${percentile(latencies, 95).toFixed(1)} | ${percentile(latencies, 99).toFixed(1)} | ${latencies.at(-1)!.toFixed(1)} |`
      )
    }
    const health = await load({ url: `${server.url}/api/health`, name: 'GET /api/health', connections: clients })
    const longest = (await sql<Array<{ longest: number }>>`select max(length(position))::int as longest from tasks`)[0]!
      .longest
    return [
      `### Moving a task in a column of ${tasks.toLocaleString('en')} tasks (Postgres)`,
      '',
      '| case | moves/s | p50 ms | p95 ms | p99 ms | max ms |',
      '| --- | ---: | ---: | ---: | ---: | ---: |',
      ...rowsOut,
      `| GET /api/health (same run, autocannon, ${clients} connections) | ${health.rps} | | | ${health.p99} | |`,
      '',
      `Longest position key after ${moves.toLocaleString('en')} measured moves: ${longest} characters.`
    ].join('\n')
  } finally {
    agent.destroy()
    await sql.end()
    await server.stop()
  }
}

export async function benchSkills(): Promise<string> {
  const parts = [await dispatchCases('PGlite', {})]
  if (benchPostgres) {
    parts.push(await withDatabase(benchPostgres, (url) => dispatchCases('Postgres', { DATABASE_URL: url })))
    parts.push(await withDatabase(benchPostgres, moveCase))
  } else {
    parts.push('The move case needs Postgres: set BENCH_DATABASE_URL or DATABASE_URL.')
  }
  return parts.join('\n\n')
}
