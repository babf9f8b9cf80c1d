import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import type { FastifyInstance } from 'fastify'
import { Agent, fetch as undiciFetch } from 'undici'
import type { Teardown } from '../helper.js'

/** The app listening on a loopback port; its base URL. */
export async function listening(app: FastifyInstance): Promise<string> {
  await app.listen({ port: 0, host: '127.0.0.1' })
  return `http://127.0.0.1:${(app.server.address() as { port: number }).port}`
}

/** The SDK's own client on /api/mcp, with these headers (a key, a cookie; none: the dev org). */
export async function mcpClient(t: Teardown, base: string, headers: Record<string, string> = {}, sessionId?: string) {
  // its own connections, all cut at the end: the client reconnects its GET stream when an
  // instance closes it, and a connection opened for that would hold the server's close
  const agent = new Agent()
  t.teardown(() => agent.destroy())
  const fetch = ((url: string | URL, init?: RequestInit) =>
    undiciFetch(url, { ...(init as object), dispatcher: agent })) as unknown as typeof globalThis.fetch
  const transport = new StreamableHTTPClientTransport(new URL(`${base}/api/mcp`), {
    requestInit: { headers },
    fetch,
    ...(sessionId ? { sessionId } : {})
  })
  const client = new Client({ name: 'cairn-test', version: '1.0.0' })
  await client.connect(transport)
  t.teardown(() => client.close())
  return { client, transport }
}

/**
 * One raw JSON-RPC message POSTed to /api/mcp with the headers an MCP client sends (JSON,
 * both answer types, the protocol version), `headers` on top.
 */
export function postMessage(base: string, headers: Record<string, string>, body: string, signal?: AbortSignal) {
  return fetch(`${base}/api/mcp`, {
    method: 'POST',
    body,
    ...(signal ? { signal } : {}),
    headers: {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-protocol-version': '2025-11-25',
      ...headers
    }
  })
}

/** A tool's answer: its JSON text parsed, and whether it is an error. */
export async function call(
  client: Client,
  name: string,
  args: Record<string, unknown> = {}
): Promise<{ isError: boolean; body: any }> {
  const result = await client.callTool({ name, arguments: args })
  const content = result.content as Array<{ type: string; text: string }>
  return { isError: result.isError === true, body: JSON.parse(content[0]!.text) }
}
