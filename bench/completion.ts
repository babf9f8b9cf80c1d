// Acceptance next to completion: 20 clients start echo runs for 10 s (POST /api/runs with a
// key and an Idempotency-Key) while the same instance executes them. Reports runs accepted per
// second, runs finished per second during the load, how long the queue took to drain after it,
// and the queue wait (started - created) p50 and p99 of every run. Then fairness: org A has at
// least 10,000 runs queued (the least seen while org B's runs are timed is reported) and others
// executing; how long each of five runs of org B, one after another, waits to start. BENCH_DATABASE_URL (or
// DATABASE_URL) adds the Postgres rows.
import { randomUUID } from 'node:crypto'
import autocannon from 'autocannon'
import { benchPostgres, credentials, withDatabase } from './lib.js'
import { now, pct } from './model.js'
import { startRunsServer } from './runs.js'
import { EnvSchema } from '../src/config.js'

/** org A's queued runs while org B's runs are timed */
const FAIR_QUEUED = 10_000
const QUEUE_DEFAULT = (EnvSchema.properties.RUN_QUEUE_MAX_PER_ORG as unknown as { default: number }).default

type Server = Awaited<ReturnType<typeof startRunsServer>>
interface Counts {
  total: number
  finished: number
  queued: number
  running: number
  wait_p50: number
  wait_p99: number
}

async function counts(server: Server): Promise<Counts> {
  server.child.kill('SIGHUP')
  for (;;) {
    const { value, done } = await server.lines.next()
    if (done) throw new Error('the service exited')
    if (value.startsWith('runs ')) return JSON.parse(value.slice(5)) as Counts
  }
}

const flood = (url: string, authorization: string, opts: { seconds?: number; amount?: number }) =>
  new Promise<autocannon.Result>((resolve, reject) => {
    autocannon(
      {
        url: `${url}/api/runs`,
        method: 'POST',
        connections: 20,
        ...(opts.amount ? { amount: opts.amount } : { duration: opts.seconds ?? 10 }),
        requests: [
          {
            setupRequest: ((req: Record<string, unknown>) => ({
              ...req,
              headers: { 'content-type': 'application/json', authorization, 'idempotency-key': randomUUID() },
              body: JSON.stringify({ prompt: 'bench run' })
            })) as never
          }
        ]
      },
      (err, result) => (err ? reject(err) : resolve(result))
    )
  })

async function drained(server: Server): Promise<Counts> {
  for (;;) {
    const c = await counts(server)
    if (c.queued === 0 && c.running === 0) return c
    await new Promise((resolve) => setTimeout(resolve, 250))
  }
}

async function completion(database: string, limit: string, env: Record<string, string>): Promise<string> {
  const server = await startRunsServer({ ...env, RUN_QUEUE_MAX_PER_ORG: limit })
  try {
    const { authorization } = await credentials(server.url)
    const seconds = Number(process.env.BENCH_SECONDS ?? 10)
    const started = now()
    const result = await flood(server.url, authorization, { seconds })
    const loadMs = now() - started
    const atEnd = await counts(server)
    const end = await drained(server)
    const drainS = (now() - started - loadMs) / 1000
    const accepted = atEnd.total / (loadMs / 1000)
    const finished = atEnd.finished / (loadMs / 1000)
    const refused = result.statusCodeStats?.['429']?.count ?? 0
    if (result.errors > 0 || result.non2xx !== refused)
      throw new Error(`${result.non2xx} non-2xx (${refused} 429), ${result.errors} errors`)
    return `| ${database} | ${limit} | ${atEnd.total} | ${refused} | ${accepted.toFixed(0)} | ${finished.toFixed(0)} | ${(finished / accepted).toFixed(2)} | ${drainS.toFixed(1)} | ${end.wait_p50.toFixed(0)} | ${end.wait_p99.toFixed(0)} |`
  } finally {
    await server.stop()
  }
}

async function fairness(database: string, env: Record<string, string>): Promise<string> {
  const server = await startRunsServer(env)
  try {
    const a = await credentials(server.url)
    const b = await credentials(server.url)
    // org A's runs execute while they are accepted: flood until at least 10,000 of them wait
    while ((await counts(server)).queued < FAIR_QUEUED) await flood(server.url, a.authorization, { amount: 2_000 })
    const waits: number[] = []
    let queuedA = Infinity
    for (let i = 0; i < 5; i++) {
      queuedA = Math.min(queuedA, (await counts(server)).queued)
      const res = await fetch(`${server.url}/api/runs`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: b.authorization },
        body: JSON.stringify({ prompt: `org B ${i}` })
      })
      const id = ((await res.json()) as { run: { id: string } }).run.id
      for (;;) {
        const run = (
          (await (
            await fetch(`${server.url}/api/runs/${id}?wait=30`, { headers: { authorization: b.authorization } })
          ).json()) as { run: { status: string; createdAt: string; startedAt: string | null } }
        ).run
        if (run.startedAt) {
          waits.push(Date.parse(run.startedAt) - Date.parse(run.createdAt))
          break
        }
      }
    }
    queuedA = Math.min(queuedA, (await counts(server)).queued)
    return `| ${database} | ${queuedA} | ${pct(waits, 50).toFixed(0)} | ${Math.max(...waits).toFixed(0)} |`
  } finally {
    await server.stop()
  }
}

export async function benchCompletion(): Promise<string> {
  const rows: string[] = []
  const fair: string[] = []
  // the default queue limit, and none (every request accepted: how far completion falls behind)
  const limits = (process.env.BENCH_QUEUE_LIMITS ?? `${QUEUE_DEFAULT},0`).split(',')
  for (const limit of limits) rows.push(await completion('PGlite', limit, {}))
  if (process.env.BENCH_FAIRNESS !== '0') fair.push(await fairness('PGlite', {}))
  if (benchPostgres) {
    for (const limit of limits)
      rows.push(
        await withDatabase(benchPostgres, (url) =>
          completion('Postgres 15', limit, { DATABASE_URL: url, DATABASE_POOL_MAX: '40' })
        )
      )
    if (process.env.BENCH_FAIRNESS !== '0')
      fair.push(
        await withDatabase(benchPostgres, (url) =>
          fairness('Postgres 15', { DATABASE_URL: url, DATABASE_POOL_MAX: '40' })
        )
      )
  }
  return [
    'Echo runs started by 20 clients for 10 s (key + Idempotency-Key) and executed by the same instance (default RUN_WORKER_CONCURRENCY), with the default queue limit and with none (0):',
    '',
    '| database | RUN_QUEUE_MAX_PER_ORG | runs accepted | refused (429) | accepted/s | finished/s during the load | finished / accepted | s to drain after | queue wait p50 ms | queue wait p99 ms |',
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
    ...rows,
    '',
    "Another org's run while org A has at least 10,000 runs queued (five runs of org B, one after another):",
    '',
    '| database | org A runs queued (least seen) | org B start wait p50 ms | max ms |',
    '| --- | ---: | ---: | ---: |',
    ...fair
  ].join('\n')
}
