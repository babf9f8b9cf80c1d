// The transport of a pooled MCP server that answers one JSON-RPC request at a time for
// /api/mcp (src/mcp/index.ts), without the SDK's Streamable HTTP transport around it.
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js'
import type {
  JSONRPCErrorResponse,
  JSONRPCMessage,
  JSONRPCRequest,
  JSONRPCResultResponse,
  MessageExtraInfo,
  RequestId
} from '@modelcontextprotocol/sdk/types.js'

export type JsonRpcAnswer = JSONRPCResultResponse | JSONRPCErrorResponse

/**
 * A server stays connected to one of these for its whole life: connecting a server to the
 * SDK's HTTP transport for every request and closing it after, with the Web request and
 * response around it, was about a quarter of the CPU of serving a call.
 * It hands the server one request and resolves with the server's answer to it. What else the
 * server sends while it works (progress, logging, requests to the client) is dropped, as the
 * SDK's transport drops it when it answers in JSON rather than as an event stream.
 */
export class RequestTransport implements Transport {
  onclose?: () => void
  onerror?: (error: Error) => void
  onmessage?: (message: JSONRPCMessage, extra?: MessageExtraInfo) => void
  private waiting: { id: RequestId; resolve: (answer: JsonRpcAnswer | undefined) => void } | undefined
  private closed = false

  async start(): Promise<void> {}

  async send(message: JSONRPCMessage): Promise<void> {
    const waiting = this.waiting
    if (waiting && 'id' in message && message.id === waiting.id && ('result' in message || 'error' in message)) {
      this.waiting = undefined
      waiting.resolve(message)
    }
  }

  /** Ends the connection: the server aborts what it was doing, and a pending answer is undefined. */
  async close(): Promise<void> {
    if (this.closed) return
    this.closed = true
    const waiting = this.waiting
    this.waiting = undefined
    waiting?.resolve(undefined)
    this.onclose?.()
  }

  /** The server's answer to `request` (one at a time); undefined when the connection closed first. */
  answer(request: JSONRPCRequest, extra: MessageExtraInfo): Promise<JsonRpcAnswer | undefined> {
    if (this.closed) return Promise.resolve(undefined)
    if (this.waiting) throw new Error('a request is already being answered on this transport')
    return new Promise((resolve) => {
      this.waiting = { id: request.id, resolve }
      this.onmessage?.(request, extra)
    })
  }
}
