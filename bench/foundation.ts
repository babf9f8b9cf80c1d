// GET /api/health and GET /api/config against a bare Node http server, same run,
// with a plain Fastify app (no plugins, no hooks) as a reference row. The service runs on
// PGlite and, with BENCH_DATABASE_URL (or DATABASE_URL), also on a fresh Postgres database
// there. All servers listen for the whole run and the cases alternate (lib.interleaved),
// so the ratios compare them under the same machine conditions.
import { benchPostgres, interleaved, startServer, table, withDatabase, type LoadOptions, type Server } from './lib.js'

export async function benchFoundation(): Promise<string> {
  if (!benchPostgres) return measure(null)
  return withDatabase(benchPostgres, (url) => measure(url))
}

async function measure(postgresUrl: string | null): Promise<string> {
  const servers: Server[] = []
  try {
    for (const script of ['bench/bare-server.ts', 'bench/fastify-server.ts']) servers.push(await startServer(script))
    const [bare, fastify] = servers as [Server, Server]
    const cases: LoadOptions[] = [
      { url: `${bare.url}/api/health`, name: 'bare node http (baseline)' },
      { url: `${fastify.url}/api/health`, name: 'plain Fastify, no hooks (reference)' }
    ]
    const services: Array<[string, Record<string, string>]> = [['PGlite', {}]]
    if (postgresUrl) services.unshift(['Postgres', { DATABASE_URL: postgresUrl }])
    for (const [database, env] of services) {
      const cairn = await startServer('bench/cairn-server.ts', env)
      servers.push(cairn)
      cases.push(
        { url: `${cairn.url}/api/health`, name: `GET /api/health (${database})` },
        { url: `${cairn.url}/api/config`, name: `GET /api/config (${database})` }
      )
    }
    const rows = await interleaved(cases)
    const out = table(rows, rows[0]!)
    return postgresUrl ? out : `${out}\n\n(Postgres rows: set BENCH_DATABASE_URL or DATABASE_URL)`
  } finally {
    await Promise.all(servers.map((s) => s.stop()))
  }
}
