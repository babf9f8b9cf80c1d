// 5,000 enabled automations due in the same minute, fired by two instances on one
// Postgres database. Every one must fire exactly once; lateness is firedAt - scheduledFor.
import postgres from 'postgres'
import { newId } from '../src/db/ids.js'
import { benchPostgres, credentials, load, startServer, withDatabase } from './lib.js'

const json = { 'content-type': 'application/json' }
const percentile = (sorted: number[], p: number) =>
  sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!

async function dueTogether(databaseUrl: string, workers: string): Promise<string> {
  const count = Number(process.env.BENCH_AUTOMATIONS ?? 5000)
  const env = { DATABASE_URL: databaseUrl, RUN_WORKER_CONCURRENCY: workers }
  const a = await startServer('bench/cairn-server.ts', env)
  const b = await startServer('bench/cairn-server.ts', env)
  const sql = postgres(databaseUrl, { max: 2, onnotice: () => {} })
  try {
    const { cookie } = await credentials(a.url)
    const first = await fetch(`${a.url}/api/automations`, {
      method: 'POST',
      headers: { ...json, cookie },
      body: JSON.stringify({ name: 'probe', cron: '0 0 1 1 *', target: { prompt: 'x' } })
    })
    const probe = ((await first.json()) as { automation: { id: string } }).automation
    const orgId = (await sql<Array<{ org_id: string }>>`select org_id from automations where id = ${probe.id}`)[0]!
      .org_id
    // the next minute at least 8 s away: both instances are idle when it comes
    const tick = new Date(Math.ceil((Date.now() + 8000) / 60_000) * 60_000)
    const ids: string[] = []
    for (let i = 0; i < count; i += 1000) {
      const rows = Array.from({ length: Math.min(1000, count - i) }, (_, j) => {
        const id = newId()
        ids.push(id)
        return {
          id,
          org_id: orgId,
          name: `bench ${i + j}`,
          cron: '* * * * *',
          timezone: 'UTC',
          target: sql.json({ prompt: `automation ${i + j}` }),
          next_fire_at: tick
        }
      })
      await sql`insert into automations ${sql(rows)}`
    }
    await sql`analyze automations`
    // an observer's view too: when the last fire became visible (polled every 25 ms)
    const deadline = tick.getTime() + 120_000
    let fired = 0
    let allVisibleAt = Number.NaN
    while (Date.now() < deadline) {
      fired = Number(
        (await sql<Array<{ n: string }>>`select count(*) as n from automation_fires where scheduled_for = ${tick}`)[0]!
          .n
      )
      if (fired >= count) {
        allVisibleAt = Date.now() - tick.getTime()
        break
      }
      await new Promise((r) => setTimeout(r, 25))
    }
    const late = (
      await sql<Array<{ ms: number }>>`
      select extract(epoch from (fired_at - scheduled_for)) * 1000 as ms from automation_fires where scheduled_for = ${tick} order by 1`
    ).map((r) => Number(r.ms))
    const runs = Number(
      (
        await sql<Array<{ n: string }>>`
      select count(*) as n from runs where origin = 'automation' and metadata->>'scheduledFor' = ${tick.toISOString()}`
      )[0]!.n
    )
    const distinct = Number(
      (
        await sql<Array<{ n: string }>>`
      select count(distinct metadata->>'automationId') as n from runs where origin = 'automation' and metadata->>'scheduledFor' = ${tick.toISOString()}`
      )[0]!.n
    )
    const health = await load({ url: `${a.url}/api/health`, name: 'GET /api/health', connections: 10 })
    return [
      `### ${count.toLocaleString('en')} automations due at ${tick.toISOString()}, two instances, Postgres, RUN_WORKER_CONCURRENCY=${workers}`,
      '',
      '| fired | runs | automations with a run | lateness p50 ms | p95 ms | p99 ms | max ms |',
      '| ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
      `| ${late.length} | ${runs} | ${distinct} | ${percentile(late, 50).toFixed(0)} | ${percentile(late, 95).toFixed(0)} | ${percentile(late, 99).toFixed(0)} | ${late.at(-1)!.toFixed(0)} |`,
      '',
      `Lateness is \`firedAt - scheduledFor\`, \`firedAt\` being the scheduler's time when it wrote the fire's batch (500 per transaction). An observer polling every 25 ms saw all ${count.toLocaleString('en')} fires committed ${allVisibleAt} ms after the tick.`,
      `Same run, after the fire: GET /api/health ${health.rps} req/s, p99 ${health.p99} ms.`,
      late.length === count && runs === count && distinct === count
        ? 'Every automation fired exactly once.'
        : '**Not every automation fired exactly once.**'
    ].join('\n')
  } finally {
    await sql.end()
    await Promise.all([a.stop(), b.stop()])
  }
}

export async function benchAutomations(): Promise<string> {
  if (!benchPostgres) return 'The automations bench needs Postgres: set BENCH_DATABASE_URL or DATABASE_URL.'
  const parts: string[] = []
  for (const workers of (process.env.BENCH_WORKERS ?? '0,4').split(','))
    parts.push(await withDatabase(benchPostgres, (url) => dueTogether(url, workers)))
  return parts.join('\n\n')
}
