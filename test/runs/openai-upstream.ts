import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import { once } from 'node:events'
import type { Teardown } from '../helper.js'

export interface ChatStream {
  /** one `chat.completion.chunk` with this delta */
  delta(delta: unknown): void
  /** the usage chunk and `[DONE]` */
  end(usage?: { prompt_tokens: number; completion_tokens: number }): void
  /** an `error` chunk in the stream (as OpenAI-compatible servers send when they fail mid-answer), then the end */
  error(message: string, type?: string): void
  readonly res: ServerResponse
}

export interface UpstreamOptions {
  models: string[]
  /** every request, before it is answered (its body parsed, or null) */
  onRequest?(req: IncomingMessage, body: any): void
  /**
   * Answers one `/chat/completions` request. Return without calling `stream()` to answer
   * some other way (an error status, or never).
   */
  chat(body: any, stream: () => ChatStream, res: ServerResponse): Promise<void> | void
}

/**
 * A local OpenAI-compatible server speaking the real protocol: `GET /v1/models` and
 * streaming `POST /v1/chat/completions` (server-sent `data:` chunks, then `[DONE]`).
 * Returns its base URL (`…/v1`); it stops with the test.
 */
export async function startOpenAiUpstream(t: Teardown, o: UpstreamOptions): Promise<string> {
  const server = createServer(async (req: IncomingMessage, res: ServerResponse) => {
    let raw = ''
    for await (const chunk of req) raw += chunk
    const body = raw ? JSON.parse(raw) : null
    o.onRequest?.(req, body)
    if (req.url === '/v1/models') {
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ object: 'list', data: o.models.map((id) => ({ id })) }))
      return
    }
    if (req.url !== '/v1/chat/completions') {
      res.writeHead(404).end()
      return
    }
    const stream = (): ChatStream => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      return {
        res,
        delta: (delta) =>
          void res.write(
            `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', choices: [{ index: 0, delta }] })}\n\n`
          ),
        error(message, type = 'server_error') {
          res.end(`data: ${JSON.stringify({ error: { message, type } })}\n\n`)
        },
        end(usage = { prompt_tokens: 7, completion_tokens: 3 }) {
          res.write(
            `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] })}\n\n`
          )
          res.write(`data: ${JSON.stringify({ id: 'c1', choices: [], usage })}\n\n`)
          res.end('data: [DONE]\n\n')
        }
      }
    }
    await o.chat(body, stream, res)
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(() => {
    server.closeAllConnections()
    server.close()
  })
  return `http://127.0.0.1:${(server.address() as { port: number }).port}/v1`
}
