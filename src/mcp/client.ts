// Cairn as an MCP client: one short connection per use (list the tools, or call one), over
// the SDK's Streamable HTTP client transport and the providers' guarded fetch.
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport, StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import type { ProviderFetch } from '../providers/address-guard.js'
import { refusalIn } from '../providers/address-guard.js'
import type { ListedTool } from './tables.js'
import { traceHeaders } from '../telemetry/tracing.js'

export interface McpTarget {
  url: string
  headers: Record<string, string>
}

const CLIENT_INFO = { name: 'cairn', version: '1.0.0' }
/** how long ending a session (its DELETE) may take */
const SESSION_END_MS = 1000

/** The first meaningful sentence of a failure: an address refused, a status, a message. */
export function connectionError(err: unknown): string {
  const refused = refusalIn(err)
  if (refused) return `${refused.message}; MCP servers may not be reached there`
  const e = err as Error
  // the SDK's transport error carries the HTTP status apart from its message
  if (err instanceof StreamableHTTPError && typeof err.code === 'number' && err.code >= 100 && err.code < 600) {
    const said = err.message.replace(/^Streamable HTTP error: (Error POSTing to endpoint: )?/, '').trim()
    return `the server answered ${err.code}${said === '' ? '' : `: ${said}`}`.replace(/\s+/g, ' ').slice(0, 300)
  }
  let cause: unknown = e?.cause
  while (cause instanceof Error && cause.cause instanceof Error) cause = cause.cause
  const text =
    cause instanceof Error && cause.message !== '' ? `${e.message}: ${cause.message}` : String(e?.message ?? err)
  return text.replace(/\s+/g, ' ').slice(0, 300)
}

/** Connects, does `work`, and ends the session (best effort) whatever happened. */
async function withClient<T>(
  fetch: ProviderFetch,
  target: McpTarget,
  signal: AbortSignal,
  timeoutMs: number,
  work: (client: Client) => Promise<T>
): Promise<T> {
  const transport = new StreamableHTTPClientTransport(new URL(target.url), {
    fetch: fetch as never,
    // the server may continue the run's trace (docs/observability.md)
    requestInit: { headers: { ...target.headers, ...traceHeaders() } },
    // one request at a time: no reconnecting streams to leave behind
    reconnectionOptions: {
      maxRetries: 0,
      initialReconnectionDelay: 1000,
      maxReconnectionDelay: 1000,
      reconnectionDelayGrowFactor: 1
    }
  })
  const client = new Client(CLIENT_INFO)
  try {
    await client.connect(transport, { signal, timeout: timeoutMs })
    return await work(client)
  } finally {
    // ending the session is a courtesy: a server that stopped answering does not hold us
    await Promise.race([
      transport.terminateSession().catch(() => {}),
      new Promise((resolve) => setTimeout(resolve, SESSION_END_MS).unref())
    ])
    await client.close().catch(() => {})
  }
}

/** The server's tools (every page of tools/list), within `timeoutMs` and until `cut` aborts. */
export async function listTools(
  fetch: ProviderFetch,
  target: McpTarget,
  timeoutMs: number,
  cut?: AbortSignal
): Promise<ListedTool[]> {
  const signal = cut ? AbortSignal.any([cut, AbortSignal.timeout(timeoutMs)]) : AbortSignal.timeout(timeoutMs)
  return withClient(fetch, target, signal, timeoutMs, async (client) => {
    const tools: ListedTool[] = []
    let cursor: string | undefined
    for (let page = 0; page < 20; page++) {
      const listed = await client.listTools(cursor === undefined ? undefined : { cursor }, {
        signal,
        timeout: timeoutMs
      })
      for (const tool of listed.tools) {
        tools.push({
          name: tool.name,
          description: tool.description ?? null,
          inputSchema: JSON.parse(JSON.stringify(tool.inputSchema)) as Record<string, unknown>
        })
      }
      cursor = listed.nextCursor
      if (!cursor) break
    }
    return tools
  })
}

/** Calls one tool: its content as text, and whether the server said it failed. */
export async function callTool(
  fetch: ProviderFetch,
  target: McpTarget,
  name: string,
  args: Record<string, unknown>,
  signal: AbortSignal,
  timeoutMs: number
): Promise<{ ok: boolean; content: string }> {
  const combined = AbortSignal.any([signal, AbortSignal.timeout(timeoutMs)])
  return withClient(fetch, target, combined, timeoutMs, async (client) => {
    const result = await client.callTool({ name, arguments: args }, undefined, { signal: combined, timeout: timeoutMs })
    return {
      ok: result.isError !== true,
      content: contentText(result as { content?: unknown; structuredContent?: unknown })
    }
  })
}

/** A tool result's content as the text a model reads: its text parts, and what the others are. */
function contentText(result: { content?: unknown; structuredContent?: unknown }): string {
  const parts = Array.isArray(result.content) ? (result.content as Array<Record<string, unknown>>) : []
  const texts = parts.map((part) => {
    if (part.type === 'text' && typeof part.text === 'string') return part.text
    if (part.type === 'resource' && part.resource && typeof (part.resource as { text?: unknown }).text === 'string')
      return (part.resource as { text: string }).text
    if (part.type === 'resource_link') return `[resource ${String(part.uri)}]`
    return `[${String(part.type)}${typeof part.mimeType === 'string' ? ` ${part.mimeType}` : ''}]`
  })
  if (texts.length === 0 && result.structuredContent !== undefined) return JSON.stringify(result.structuredContent)
  return texts.join('\n')
}
