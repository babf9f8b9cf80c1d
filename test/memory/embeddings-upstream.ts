import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import { once } from 'node:events'
import { embedOffline } from '../../src/retrieval/embedders/offline.js'
import type { Teardown } from '../helper.js'

export interface EmbeddingsUpstream {
  /** the base URL (`…/v1`) */
  url: string
  /** every `/v1/embeddings` body received, in order, with when it arrived */
  requests: Array<{ model: string; input: string[]; authorization: string | undefined; at: number }>
  /** the calls made with `holdKey`, held open and never answered (their instance dies in them) */
  held: Array<{ input: string[]; res: ServerResponse }>
  /** the next `n` embedding requests answer this status (a provider that fails, then recovers) */
  failNext(n: number, status?: number): void
}

/**
 * A local OpenAI-compatible embeddings server: `POST /v1/embeddings` answers the built-in
 * offline embedder's vectors (so meaning is real), each model a different rotation of them
 * (`models` names which it serves: another model's vectors must never be compared), and
 * `GET /v1/models` lists them. It records what it received and can fail on request; a call
 * made with `holdKey` (a bearer key) is held open instead of answered.
 */
export async function startEmbeddingsUpstream(
  t: Teardown,
  models: string[],
  options: { holdKey?: string } = {}
): Promise<EmbeddingsUpstream> {
  const requests: EmbeddingsUpstream['requests'] = []
  const held: EmbeddingsUpstream['held'] = []
  let failing = 0
  let failStatus = 503
  const server = createServer(async (req: IncomingMessage, res: ServerResponse) => {
    let raw = ''
    for await (const chunk of req) raw += chunk
    const reply = (status: number, body: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json' })
      res.end(JSON.stringify(body))
    }
    if (req.method === 'GET' && req.url === '/v1/models')
      return reply(200, { object: 'list', data: models.map((id) => ({ id, object: 'model' })) })
    if (req.method !== 'POST' || req.url !== '/v1/embeddings') return reply(404, { error: { message: 'not found' } })
    const body = JSON.parse(raw) as { model: string; input: string | string[] }
    const input = Array.isArray(body.input) ? body.input : [body.input]
    requests.push({ model: body.model, input, authorization: req.headers.authorization, at: Date.now() })
    if (options.holdKey !== undefined && req.headers.authorization === `Bearer ${options.holdKey}`) {
      held.push({ input, res })
      return
    }
    if (failing > 0) {
      failing--
      return reply(failStatus, { error: { message: 'the embedding service is overloaded', type: 'server_error' } })
    }
    const shift = models.indexOf(body.model)
    if (shift < 0) return reply(404, { error: { message: `The model ${body.model} does not exist` } })
    reply(200, {
      object: 'list',
      model: body.model,
      data: input.map((text, index) => {
        const v = embedOffline(text)
        // a different model: the same meaning in other coordinates
        return { object: 'embedding', index, embedding: v.map((_, i) => v[(i + shift * 7) % v.length]!) }
      }),
      usage: { prompt_tokens: input.length, total_tokens: input.length }
    })
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(async () => {
    for (const h of held) h.res.destroy()
    server.closeAllConnections()
    await new Promise<void>((resolve) => server.close(() => resolve()))
  })
  const { port } = server.address() as { port: number }
  return {
    url: `http://127.0.0.1:${port}/v1`,
    requests,
    held,
    failNext(n, status = 503) {
      failing = n
      failStatus = status
    }
  }
}
