// MCP run start: how long from `POST /api/runs` to the run's first model request, for an org
// with one connected MCP server that hangs (accepts the connection, never answers) next to an
// org with none, runs of the two interleaved on the same service (PGlite). The hanging server
// fails once (at its creation here) and is then skipped until the background check. Also the
// one run start that meets a server going down (it answered when created, then hangs): that
// one waits for MCP_TIMEOUT_MS at most, all servers together. Target: within 5% of none.
import { createServer, type IncomingMessage, type Server as HttpServer } from 'node:http'
import { credentials, startServer } from './lib.js'

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 40)
const TIMEOUT_MS = 5000

/** A local OpenAI-compatible model: answers "ok" at once, and says when each prompt's request arrived. */
async function startModel() {
  const arrived = new Map<string, (at: number) => void>()
  const server = createServer(async (req, res) => {
    if (req.url === '/v1/models') {
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ object: 'list', data: [{ id: 'bench-model', object: 'model' }] }))
      return
    }
    const body = JSON.parse(await text(req)) as { messages: Array<{ role: string; content: unknown }> }
    const prompt = String([...body.messages].reverse().find((m) => m.role === 'user')?.content ?? '')
    for (const [key, resolve] of arrived) if (prompt.includes(key)) resolve(performance.now())
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    const chunk = (delta: object, finish: string | null) =>
      `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 0, model: 'bench-model', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`
    res.end(`${chunk({ role: 'assistant', content: 'ok' }, null)}${chunk({}, 'stop')}data: [DONE]\n\n`)
  })
  await listen(server)
  return {
    url: `${urlOf(server)}/v1`,
    server,
    /** resolves when a request carrying `key` in its prompt arrives */
    next: (key: string) => new Promise<number>((resolve) => arrived.set(key, resolve))
  }
}

/** An MCP server that never answers (until `answering` is set, it is a plain MCP server's 404: enough to fail). */
async function startHanging() {
  const held: Array<() => void> = []
  const server = createServer((_req, res) => {
    held.push(() => res.destroy())
  })
  await listen(server)
  return { url: `${urlOf(server)}/mcp`, server, held }
}

const text = async (req: IncomingMessage) => {
  const parts: Buffer[] = []
  for await (const part of req) parts.push(part as Buffer)
  return Buffer.concat(parts).toString('utf8')
}
const listen = (server: HttpServer) => new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
const urlOf = (server: HttpServer) => `http://127.0.0.1:${(server.address() as { port: number }).port}`
const pct = (xs: number[], p: number) =>
  [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!

export async function benchMcpRunStart(): Promise<string> {
  const model = await startModel()
  const hanging = await startHanging()
  const cairn = await startServer('bench/cairn-server.ts', {
    OPENAI_BASE_URL: model.url,
    MODELS: 'bench-model',
    PROVIDER_ALLOW_PRIVATE: 'true',
    MCP_TIMEOUT_MS: String(TIMEOUT_MS),
    SANDBOX_UNCONFINED: 'true'
  })
  try {
    const none = await credentials(cairn.url)
    const down = await credentials(cairn.url)
    const json = { 'content-type': 'application/json' }
    const created = await fetch(`${cairn.url}/api/mcp-servers`, {
      method: 'POST',
      headers: { ...json, cookie: down.cookie },
      body: JSON.stringify({ name: 'hangs', url: hanging.url })
    })
    if (created.status !== 201) throw new Error(`create: ${created.status} ${await created.text()}`)
    const start = async (who: { authorization: string }, key: string) => {
      const arrival = model.next(key)
      const t0 = performance.now()
      const res = await fetch(`${cairn.url}/api/runs`, {
        method: 'POST',
        headers: { ...json, authorization: who.authorization },
        body: JSON.stringify({ prompt: `run ${key}`, engine: 'openai' })
      })
      if (res.status !== 201) throw new Error(`run: ${res.status} ${await res.text()}`)
      return (await arrival) - t0
    }
    // warm-up
    for (let i = 0; i < 3; i++) {
      await start(none, `warm-none-${i}`)
      await start(down, `warm-down-${i}`)
    }
    const a: number[] = []
    const b: number[] = []
    for (let i = 0; i < ROUNDS; i++) {
      if (i % 2 === 0) {
        a.push(await start(none, `none-${i}`))
        b.push(await start(down, `down-${i}`))
      } else {
        b.push(await start(down, `down-${i}`))
        a.push(await start(none, `none-${i}`))
      }
    }
    // a server that answered and then hangs: the one run start that meets it
    const third = await credentials(cairn.url)
    const model2 = await startModelProxy()
    const goingDown = await fetch(`${cairn.url}/api/mcp-servers`, {
      method: 'POST',
      headers: { ...json, cookie: third.cookie },
      body: JSON.stringify({ name: 'goes-down', url: model2.url })
    })
    const firstMeet = goingDown.status === 201 ? await start(third, 'meets-it') : NaN
    const afterMeet = goingDown.status === 201 ? await start(third, 'after-it') : NaN
    model2.server.closeAllConnections()
    model2.server.close()
    const mean = (xs: number[]) => xs.reduce((s, x) => s + x, 0) / xs.length
    const row = (name: string, xs: number[]) =>
      `| ${name} | ${xs.length} | ${mean(xs).toFixed(1)} | ${pct(xs, 50).toFixed(1)} | ${pct(xs, 95).toFixed(1)} | ${pct(xs, 99).toFixed(1)} |`
    return [
      `### Run start (POST /api/runs to the first model request) with one hanging MCP server, MCP_TIMEOUT_MS=${TIMEOUT_MS} (PGlite)`,
      '',
      '| case | runs | mean ms | p50 ms | p95 ms | p99 ms |',
      '| --- | ---: | ---: | ---: | ---: | ---: |',
      row('no MCP server (baseline)', a),
      row('one MCP server hanging (known down)', b),
      '',
      `ratio hanging / none: mean ${(mean(b) / mean(a)).toFixed(3)}, p50 ${(pct(b, 50) / pct(a, 50)).toFixed(3)} (target at most 1.05)`,
      `a server that answered when created and then hangs: the run start that meets it ${firstMeet.toFixed(0)} ms (bounded by MCP_TIMEOUT_MS), the next ${afterMeet.toFixed(0)} ms`
    ].join('\n')
  } finally {
    await cairn.stop()
    for (const cut of hanging.held) cut()
    hanging.server.closeAllConnections()
    hanging.server.close()
    model.server.closeAllConnections()
    model.server.close()
  }
}

/**
 * An MCP server (stateless, the SDK's) that lists one tool for its first connection and hangs
 * on every request after it.
 */
async function startModelProxy() {
  const { Server } = await import('@modelcontextprotocol/sdk/server/index.js')
  const { StreamableHTTPServerTransport } = await import('@modelcontextprotocol/sdk/server/streamableHttp.js')
  const { ListToolsRequestSchema } = await import('@modelcontextprotocol/sdk/types.js')
  let answered = false
  const server = createServer(async (req, res) => {
    if (answered && req.method === 'POST') {
      const body = await text(req)
      // the first connection's own requests (its initialized notification, its tools/list) go through
      if (!/"method":"(notifications\/initialized|tools\/list)"/.test(body)) return
      return serve(req, res, JSON.parse(body))
    }
    return serve(req, res, req.method === 'POST' ? JSON.parse(await text(req)) : undefined)
  })
  async function serve(req: IncomingMessage, res: import('node:http').ServerResponse, body: unknown) {
    const mcp = new Server({ name: 'goes-down', version: '1' }, { capabilities: { tools: {} } })
    mcp.setRequestHandler(ListToolsRequestSchema, async () => {
      answered = true
      return { tools: [{ name: 'lookup', description: 'looks up', inputSchema: { type: 'object', properties: {} } }] }
    })
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true })
    res.on('close', () => void mcp.close())
    await mcp.connect(transport)
    await transport.handleRequest(req, res, body)
  }
  await listen(server)
  return { url: `${urlOf(server)}/mcp`, server }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  process.stdout.write(`${await benchMcpRunStart()}\n`)
  process.exit(0)
}
