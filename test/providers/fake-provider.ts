import { once } from 'node:events'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { Teardown } from '../helper.js'

export interface FakeRequest {
  method: string
  path: string
  authorization: string | undefined
  /** the x-cairn-outbound header: the mark of a request the service made */
  outbound: string | undefined
  body: any
}

export interface FakeProvider {
  /** the API base a provider is created with: `http://127.0.0.1:<port>/v1` */
  baseUrl: string
  port: number
  /** the key it accepts as `Authorization: Bearer <key>` */
  key: string
  models: string[]
  /** how `GET /v1/models` answers: the list, or text that is not JSON */
  modelsMode: 'ok' | 'not-json'
  /** every request it got, in order */
  requests: FakeRequest[]
  /** the text a chat answer streams, in these pieces */
  reply: string[]
  usage: { prompt_tokens: number; completion_tokens: number }
}

/**
 * A local OpenAI-compatible server speaking the real protocol, with a key it checks:
 * `GET /v1/models` and streaming `POST /v1/chat/completions` (`data:` chunks, the usage
 * chunk when `stream_options.include_usage` asks for it, then `[DONE]`). A wrong or
 * missing key is a 401 with OpenAI's error body (which quotes the key it got, as OpenAI's
 * does, partly); any other path is a 404. It stops with the test.
 */
export async function startFakeProvider(
  t: Teardown,
  options: { key?: string; models?: string[] } = {}
): Promise<FakeProvider> {
  const state: FakeProvider = {
    baseUrl: '',
    port: 0,
    key: options.key ?? 'sk-fake-provider-key-0123456789',
    models: options.models ?? ['fake-small', 'fake-large'],
    modelsMode: 'ok',
    requests: [],
    reply: ['Hello', ' from', ' the', ' fake', ' provider'],
    usage: { prompt_tokens: 11, completion_tokens: 5 }
  }
  const server = createServer(async (req: IncomingMessage, res: ServerResponse) => {
    let raw = ''
    for await (const chunk of req) raw += chunk
    let body: any = null
    try {
      body = raw ? JSON.parse(raw) : null
    } catch {
      body = raw
    }
    const path = (req.url ?? '').split('?')[0]!
    state.requests.push({
      method: req.method ?? '',
      path,
      authorization: req.headers.authorization,
      outbound: req.headers['x-cairn-outbound'] as string | undefined,
      body
    })
    const json = (status: number, value: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json' })
      res.end(JSON.stringify(value))
    }
    const route = `${req.method} ${path}`
    if (route !== 'GET /v1/models' && route !== 'POST /v1/chat/completions') {
      return json(404, {
        error: {
          message: `Unknown request URL: ${req.method} ${path}`,
          type: 'invalid_request_error',
          code: 'unknown_url'
        }
      })
    }
    if (req.headers.authorization !== `Bearer ${state.key}`) {
      const got = (req.headers.authorization ?? '').replace(/^Bearer /, '')
      return json(401, {
        error: {
          message: `Incorrect API key provided: ${got}.`,
          type: 'invalid_request_error',
          code: 'invalid_api_key'
        }
      })
    }
    if (route === 'GET /v1/models') {
      if (state.modelsMode === 'not-json') {
        res.writeHead(200, { 'content-type': 'text/html' })
        return res.end('<html><body>a web page, not an API</body></html>')
      }
      return json(200, {
        object: 'list',
        data: state.models.map((id) => ({ id, object: 'model', created: 1700000000, owned_by: 'fake' }))
      })
    }
    if (!state.models.includes(body?.model)) {
      return json(404, {
        error: {
          message: `The model \`${String(body?.model)}\` does not exist`,
          type: 'invalid_request_error',
          code: 'model_not_found'
        }
      })
    }
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' })
    const chunk = (value: unknown) => res.write(`data: ${JSON.stringify(value)}\n\n`)
    const base = { id: 'chatcmpl-fake', object: 'chat.completion.chunk', created: 1700000000, model: body.model }
    chunk({ ...base, choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }] })
    for (const piece of state.reply)
      chunk({ ...base, choices: [{ index: 0, delta: { content: piece }, finish_reason: null }] })
    chunk({ ...base, choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] })
    if (body.stream_options?.include_usage === true)
      chunk({
        ...base,
        choices: [],
        usage: { ...state.usage, total_tokens: state.usage.prompt_tokens + state.usage.completion_tokens }
      })
    res.end('data: [DONE]\n\n')
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(() => {
    server.closeAllConnections()
    server.close()
  })
  state.port = (server.address() as { port: number }).port
  state.baseUrl = `http://127.0.0.1:${state.port}/v1`
  return state
}
