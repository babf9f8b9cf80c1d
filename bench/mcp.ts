// MCP: `tools/call memory_search` through /api/mcp next to `GET /api/memory/search`, the
// same query on the same seeded pool (dev org), interleaved in the same run. Target: the
// MCP call within 1.5x the latency of the route. On PGlite, and on Postgres too when
// BENCH_DATABASE_URL (or DATABASE_URL) names a server.
import { benchPostgres, interleaved, startServer, withDatabase, type Result } from './lib.js'

const FACTS = Number(process.env.BENCH_FACTS ?? 10_000)
const QUERY = 'kubernetes deploy'

export async function benchMcp(): Promise<string> {
  const out = [await onDatabase('PGlite', {})]
  if (benchPostgres)
    out.push('', await withDatabase(benchPostgres, (url) => onDatabase('Postgres', { DATABASE_URL: url })))
  else out.push('', '(Postgres: set BENCH_DATABASE_URL or DATABASE_URL)')
  return out.join('\n')
}

async function onDatabase(label: string, env: Record<string, string>): Promise<string> {
  const server = await startServer(
    'bench/memory-server.ts',
    { BENCH_FACTS: String(FACTS), MEMORY_CAPTURE_WORKER: 'false', ...env },
    180_000
  )
  const connections = Number(process.env.BENCH_CONNECTIONS ?? 4)
  try {
    const base = server.url
    const mcpHeaders = {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-protocol-version': '2025-11-25'
    }
    const init = await fetch(`${base}/api/mcp`, {
      method: 'POST',
      headers: mcpHeaders,
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'initialize',
        params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'bench', version: '1' } }
      })
    })
    const session = init.headers.get('mcp-session-id')
    if (init.status !== 200 || !session) throw new Error(`initialize: ${init.status} ${await init.text()}`)
    const headers = { ...mcpHeaders, 'mcp-session-id': session }
    const call = JSON.stringify({
      jsonrpc: '2.0',
      id: 2,
      method: 'tools/call',
      params: { name: 'memory_search', arguments: { query: QUERY } }
    })
    const check = await fetch(`${base}/api/mcp`, { method: 'POST', headers, body: call })
    const answer = (await check.json()) as { result?: { isError?: boolean; content: Array<{ text: string }> } }
    if (!answer.result || answer.result.isError) throw new Error(`tools/call: ${JSON.stringify(answer)}`)
    const results: Result[] = await interleaved([
      {
        url: `${base}/api/memory/search?q=${encodeURIComponent(QUERY)}`,
        name: 'GET /api/memory/search (baseline)',
        connections
      },
      {
        url: `${base}/api/mcp`,
        name: 'POST /api/mcp tools/call memory_search',
        method: 'POST',
        headers,
        body: call,
        connections
      }
    ])
    const [route, mcp] = results as [Result, Result]
    const out = [
      `### MCP memory_search vs the route: ${FACTS.toLocaleString('en')} facts, ${connections} connections (${label})`,
      '',
      '| case | requests/s | p50 ms | p90 ms | p95 ms | p99 ms | non-2xx | errors |',
      '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |'
    ]
    for (const r of results)
      out.push(`| ${r.name} | ${r.rps} | ${r.p50} | ${r.p90} | ${r.p95} | ${r.p99} | ${r.non2xx} | ${r.errors} |`)
    out.push(
      '',
      `latency ratio MCP / route: p50 ${(mcp.p50 / route.p50).toFixed(2)}, p95 ${(mcp.p95 / route.p95).toFixed(2)} (target at most 1.5); throughput ratio route / MCP: ${(route.rps / mcp.rps).toFixed(2)}`
    )
    return out.join('\n')
  } finally {
    await server.stop()
  }
}
