// GET /api/usage for a year over an org with BENCH_RUNS (default 1,000,000)
// finished runs, ungrouped and grouped, next to /api/health in the same run, on real
// Postgres and on PGlite. The dev org answers loopback callers as its admin.
import { benchPostgres, load, startServer, table, withDatabase, type Result } from './lib.js'

async function usageBench(label: string, env: Record<string, string>): Promise<string> {
  const server = await startServer('bench/usage-server.ts', { RUN_WORKER_CONCURRENCY: '0', ...env }, 30 * 60_000)
  const connections = Number(process.env.BENCH_CONNECTIONS ?? 4)
  try {
    const to = new Date().toISOString().slice(0, 10)
    const from = new Date(Date.now() - 364 * 86_400_000).toISOString().slice(0, 10)
    const year = `${server.url}/api/usage?from=${from}&to=${to}&tz=Europe/Berlin`
    const results: Result[] = [
      await load({ url: `${server.url}/api/health`, name: 'GET /api/health (baseline)', connections })
    ]
    results.push(await load({ url: year, name: 'a year, by day', connections }))
    results.push(await load({ url: `${year}&groupBy=engine`, name: 'a year, by day and engine', connections }))
    results.push(
      await load({
        url: `${year}&groupBy=engine,model,user`,
        name: 'a year, by day, engine, model and user',
        connections
      })
    )
    results.push(
      await load({
        url: `${server.url}/api/usage?tz=Asia/Kolkata`,
        name: 'the last 30 days (default), a +05:30 zone',
        connections
      })
    )
    results.push(await load({ url: `${server.url}/api/dashboard`, name: 'GET /api/dashboard', connections }))
    const p95 = [
      '| case | p90 ms | p95 ms | p97.5 ms |',
      '| --- | ---: | ---: | ---: |',
      ...results.map((r) => `| ${r.name} | ${r.p90} | ${r.p95} | ${r.p975} |`)
    ]
    return `${label}: ${Number(process.env.BENCH_RUNS ?? 1_000_000).toLocaleString('en')} finished runs, ${connections} connections\n\n${table(results, results[0]!)}\n\n${p95.join('\n')}`
  } finally {
    await server.stop()
  }
}

export async function benchUsage(): Promise<string> {
  const parts: string[] = []
  const only = process.env.BENCH_USAGE_PARTS?.split(',') ?? ['postgres', 'pglite']
  const pg = benchPostgres ?? 'postgres://postgres@127.0.0.1:5432/postgres'
  if (only.includes('postgres'))
    parts.push(await withDatabase(pg, (url) => usageBench('Real Postgres 15', { DATABASE_URL: url })))
  if (only.includes('pglite')) parts.push(await usageBench('PGlite (embedded)', {}))
  return parts.join('\n\n')
}
