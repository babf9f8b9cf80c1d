// The real service for the runs benchmark: like cairn-server.ts, and on SIGUSR2 it
// collects garbage and prints its heap, so the bench can measure bytes per connection.
import { monitorEventLoopDelay } from 'node:perf_hooks'
import { sql } from 'drizzle-orm'
import { buildApp } from '../src/app.js'
import { DEV_ORG } from '../src/auth/dev-org.js'
import { loadConfig } from '../src/config.js'

const app = await buildApp({ config: loadConfig() })
// BENCH_WAITING_RUNS: that many runs of the dev org waiting for approval (a day from expiry)
const waiting = Number(process.env.BENCH_WAITING_RUNS ?? 0)
if (waiting > 0) {
  await app.db.execute(sql`
    with r as (
      insert into runs (id, org_id, root_run_id, engine, prompt, status, origin, suspended, resume_at)
      select g.id, ${DEV_ORG.id}, g.id, 'openai', 'waiting', 'requires_action', 'api',
             '{"messages":[],"round":0,"calls":[]}'::jsonb, now() + interval '1 day'
      from (select gen_random_uuid()::text as id from generate_series(1, ${waiting})) g
      returning id)
    insert into tool_approvals (id, org_id, run_id, root_run_id, call_id, tool, arguments, expires_at)
    select gen_random_uuid()::text, ${DEV_ORG.id}, id, id, 'c', 'shell', '{}'::jsonb, now() + interval '1 day' from r`)
}
// BENCH_FINISHED_RUNS: that many finished runs of the dev org (GET /metrics with full tables)
const finished = Number(process.env.BENCH_FINISHED_RUNS ?? 0)
if (finished > 0) {
  await app.db.execute(sql`
    insert into runs (id, org_id, root_run_id, engine, prompt, status, origin, created_at, started_at, finished_at)
    select g.id, ${DEV_ORG.id}, g.id, 'echo', 'finished', 'succeeded', 'api', now(), now(), now()
    from (select gen_random_uuid()::text as id from generate_series(1, ${finished})) g`)
  await app.db.execute(sql`analyze runs`)
}
const address = await app.listen({ port: Number(process.env.PORT ?? 0), host: '127.0.0.1', backlog: 4096 })
process.stdout.write(`listening on ${address}\n`)
// the event loop's delay, for benchmarks that load the service (BENCH_LAG=1 prints its p99 on SIGUSR2)
const lag = monitorEventLoopDelay({ resolution: 10 })
lag.enable()
process.on('SIGUSR2', () => {
  if (process.env.BENCH_LAG === '1') {
    process.stdout.write(`lag p99 ${(lag.percentile(99) / 1e6).toFixed(1)} max ${(lag.max / 1e6).toFixed(1)}\n`)
    lag.reset()
    return
  }
  const gc = (globalThis as { gc?: () => void }).gc
  gc?.()
  gc?.()
  const m = process.memoryUsage()
  process.stdout.write(`heap ${m.heapUsed} rss ${m.rss} streams ${app.sse.count}\n`)
})
// SIGHUP: the runs as the database has them (for acceptance next to completion): how many,
// how many finished, queued and running, and the queue wait of those started (p50, p99 ms)
process.on('SIGHUP', () => {
  void app.db
    .execute(
      sql`
    select count(*)::int as total,
           count(*) filter (where status in ('succeeded', 'failed', 'cancelled'))::int as finished,
           count(*) filter (where status = 'queued')::int as queued,
           count(*) filter (where status = 'running')::int as running,
           coalesce(percentile_cont(0.5) within group (order by extract(epoch from started_at - created_at) * 1000), 0)::float8 as wait_p50,
           coalesce(percentile_cont(0.99) within group (order by extract(epoch from started_at - created_at) * 1000), 0)::float8 as wait_p99
    from runs`
    )
    .then((result) => {
      const rows = (Array.isArray(result) ? result : (result as { rows: unknown[] }).rows) as unknown[]
      process.stdout.write(`runs ${JSON.stringify(rows[0])}\n`)
    })
})
process.on('SIGTERM', () => {
  void app.close().then(() => process.exit(0))
})
