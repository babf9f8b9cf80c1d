import { createServer } from 'node:http'
import { Server } from '@modelcontextprotocol/sdk/server/index.js'
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js'
import { CallToolRequestSchema, ListToolsRequestSchema } from '@modelcontextprotocol/sdk/types.js'
import type { Teardown } from '../helper.js'

export interface LocalMcp {
  url: string
  /** every call of `record`: its arguments and the headers it came with */
  calls: Array<{ args: Record<string, unknown>; headers: Record<string, string | string[] | undefined> }>
  /**
   * What became of each call of `slow`, in order: `started`, then `aborted` (its request
   * was cut or cancelled before it answered) or `answered`
   */
  slow: string[]
  /** how it answers: as an MCP server, not at all (every request hangs until it closes), or 503 */
  mode: 'ok' | 'hang' | 'fail'
  /** the HTTP requests it received, in whatever mode */
  requests: number
  /** each request it left hanging: when it came, and when the client gave up on it (null while open) */
  hung: Array<{ at: number; closedAt: number | null }>
  close(): Promise<void>
}

export interface LocalMcpOptions {
  /** tools listed after its own three (names a model API would refuse, a name twice) */
  extraTools?: string[]
}

/**
 * A local MCP server built with the SDK (stateless Streamable HTTP): `record` (answers what it was given, and records
 * it), `fail` (answers an error), `slow` (answers once `release` is called, unless its request is aborted first).
 */
export async function startLocalMcp(
  t: Teardown,
  options: LocalMcpOptions = {}
): Promise<LocalMcp & { release(): void }> {
  const calls: LocalMcp['calls'] = []
  const slow: string[] = []
  let release: () => void = () => {}
  const released = new Promise<void>((resolve) => (release = resolve))
  const http = createServer(async (req, res) => {
    local.requests++
    if (local.mode === 'hang') {
      const hang = { at: Date.now(), closedAt: null as number | null }
      local.hung.push(hang)
      res.on('close', () => (hang.closedAt = Date.now()))
      return
    }
    if (local.mode === 'fail') {
      res.writeHead(503, { 'content-type': 'text/plain' }).end('down for maintenance')
      return
    }
    const server = new Server({ name: 'local', version: '1.0.0' }, { capabilities: { tools: {} } })
    server.setRequestHandler(ListToolsRequestSchema, async () => ({
      tools: [
        {
          name: 'record',
          description: 'records a note',
          inputSchema: { type: 'object', properties: { note: { type: 'string' } }, required: ['note'] }
        },
        { name: 'fail', description: 'always fails', inputSchema: { type: 'object', properties: {} } },
        { name: 'slow', description: 'answers late', inputSchema: { type: 'object', properties: {} } },
        ...(options.extraTools ?? []).map((name) => ({
          name,
          description: `the extra tool ${name}`,
          inputSchema: { type: 'object' as const, properties: {} }
        }))
      ]
    }))
    server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
      if (request.params.name === 'record') {
        calls.push({ args: request.params.arguments ?? {}, headers: req.headers })
        return { content: [{ type: 'text', text: `recorded: ${String(request.params.arguments?.note)}` }] }
      }
      if (request.params.name === 'slow') {
        slow.push('started')
        // the SDK aborts a handler when its request's connection closes or the client cancels it
        const aborted = new Promise<void>((resolve) =>
          extra.signal.addEventListener('abort', () => resolve(), { once: true })
        )
        await Promise.race([released, aborted])
        slow.push(extra.signal.aborted ? 'aborted' : 'answered')
        return { content: [{ type: 'text', text: 'slow done' }] }
      }
      return { isError: true, content: [{ type: 'text', text: 'the ticket system is down' }] }
    })
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true })
    res.on('close', () => void server.close())
    await server.connect(transport)
    await transport.handleRequest(req, res)
  })
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve))
  const close = () =>
    new Promise<void>((resolve) => {
      http.closeAllConnections()
      http.close(() => resolve())
    })
  t.teardown(close)
  const local = {
    url: `http://127.0.0.1:${(http.address() as { port: number }).port}/mcp`,
    calls,
    slow,
    mode: 'ok' as LocalMcp['mode'],
    requests: 0,
    hung: [] as LocalMcp['hung'],
    close,
    release: () => release()
  }
  return local
}
