// Issue 2: GET /api/health and GET /api/config against a bare Node http server, same run,
// with a plain Fastify app (no plugins, no hooks) as a reference row. All servers listen
// for the whole run and the cases alternate (lib.interleaved), so the ratios compare them
// under the same machine conditions.
import { interleaved, startServer, table, type Server } from './lib.js'

export async function benchFoundation(): Promise<string> {
  const servers: Server[] = []
  try {
    for (const script of ['bench/bare-server.ts', 'bench/fastify-server.ts', 'bench/cairn-server.ts']) servers.push(await startServer(script))
    const [bare, fastify, cairn] = servers as [Server, Server, Server]
    const rows = await interleaved([
      { url: `${bare.url}/api/health`, name: 'bare node http (baseline)' },
      { url: `${fastify.url}/api/health`, name: 'plain Fastify, no hooks (reference)' },
      { url: `${cairn.url}/api/health`, name: 'GET /api/health' },
      { url: `${cairn.url}/api/config`, name: 'GET /api/config' }
    ])
    return table(rows, rows[0]!)
  } finally {
    await Promise.all(servers.map((s) => s.stop()))
  }
}
