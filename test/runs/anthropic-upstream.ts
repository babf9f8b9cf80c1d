import { once } from 'node:events'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { Teardown } from '../helper.js'

/** One answer of the model: text, tool calls, or an HTTP error (status, body, headers). */
export type AnthropicAnswer =
  | { text: string; usage?: { input_tokens: number; output_tokens: number } }
  | { toolUses: Array<{ id: string; name: string; input: Record<string, unknown> }>; text?: string }
  | { status: number; body: unknown; headers?: Record<string, string> }
  /**
   * A stream that fails after `message_start` and before any content: `cut` ends the connection, `error` sends an
   * `error` event (`overloaded_error` unless another type is named), as the API does when it is overloaded mid-stream
   */
  | { fault: 'cut' | 'error'; errorType?: string }

export interface AnthropicUpstream {
  /** the base URL a deployment or provider names (no /v1: the SDK adds it) */
  url: string
  key: string
  models: string[]
  /** every request: method, path, the headers that matter, the body */
  requests: Array<{
    method: string
    path: string
    apiKey: string | undefined
    version: string | undefined
    authorization: string | undefined
    body: any
  }>
  /** answers in order; when empty, "ok" */
  script: AnthropicAnswer[]
}

/**
 * A local server speaking Anthropic's Messages API as documented: `GET /v1/models` (a
 * page: data, has_more, first_id, last_id) and streamed `POST /v1/messages` (message_start,
 * content_block_start/delta/stop with text_delta and input_json_delta, message_delta with
 * stop_reason and usage, message_stop). It checks `x-api-key` and `anthropic-version`
 * (a wrong key is a 401 with Anthropic's error body), records every request, and stops
 * with the test.
 */
export async function startAnthropicUpstream(
  t: Teardown,
  options: { key?: string; models?: string[] } = {}
): Promise<AnthropicUpstream> {
  const state: AnthropicUpstream = {
    url: '',
    key: options.key ?? 'sk-ant-test-0123456789',
    models: options.models ?? ['claude-test-1'],
    requests: [],
    script: []
  }
  const server = createServer(async (req: IncomingMessage, res: ServerResponse) => {
    let raw = ''
    for await (const chunk of req) raw += chunk
    const body = raw ? JSON.parse(raw) : null
    const path = (req.url ?? '').split('?')[0]!
    const header = (name: string) => req.headers[name] as string | undefined
    state.requests.push({
      method: req.method ?? '',
      path,
      apiKey: header('x-api-key'),
      version: header('anthropic-version'),
      authorization: header('authorization'),
      body
    })
    const json = (status: number, value: unknown, headers: Record<string, string> = {}) => {
      res.writeHead(status, { 'content-type': 'application/json', ...headers })
      res.end(JSON.stringify(value))
    }
    const error = (status: number, type: string, message: string) =>
      json(status, { type: 'error', error: { type, message } })
    if (!header('anthropic-version'))
      return error(400, 'invalid_request_error', 'anthropic-version: header is required')
    if (header('x-api-key') !== state.key) return error(401, 'authentication_error', 'invalid x-api-key')
    if (req.method === 'GET' && path === '/v1/models') {
      const data = state.models.map((id) => ({
        id,
        type: 'model',
        display_name: id,
        created_at: '2026-01-01T00:00:00Z'
      }))
      return json(200, { data, has_more: false, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null })
    }
    if (req.method !== 'POST' || path !== '/v1/messages')
      return error(404, 'not_found_error', `Not found: ${req.method} ${path}`)
    if (typeof body?.max_tokens !== 'number') return error(400, 'invalid_request_error', 'max_tokens: Field required')
    if (!state.models.includes(body.model)) return error(404, 'not_found_error', `model: ${String(body.model)}`)
    const answer = state.script.shift() ?? { text: 'ok' }
    if ('status' in answer) return json(answer.status, answer.body, answer.headers)
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' })
    const send = (type: string, data: Record<string, unknown>) =>
      res.write(`event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`)
    const usage = 'usage' in answer && answer.usage ? answer.usage : { input_tokens: 12, output_tokens: 4 }
    send('message_start', {
      message: {
        id: 'msg_test',
        type: 'message',
        role: 'assistant',
        model: body.model,
        content: [],
        stop_reason: null,
        stop_sequence: null,
        usage: { input_tokens: usage.input_tokens, output_tokens: 1 }
      }
    })
    if ('fault' in answer) {
      if (answer.fault === 'error') {
        const type = answer.errorType ?? 'overloaded_error'
        send('error', {
          error: { type, message: type === 'overloaded_error' ? 'Overloaded' : 'Internal server error' }
        })
      }
      res.end()
      return
    }
    let index = 0
    const text = 'text' in answer ? answer.text : undefined
    if (text) {
      send('content_block_start', { index, content_block: { type: 'text', text: '' } })
      for (const piece of text.match(/.{1,4}/gs) ?? [])
        send('content_block_delta', { index, delta: { type: 'text_delta', text: piece } })
      send('content_block_stop', { index })
      index++
    }
    const toolUses = 'toolUses' in answer ? answer.toolUses : []
    for (const use of toolUses) {
      send('content_block_start', { index, content_block: { type: 'tool_use', id: use.id, name: use.name, input: {} } })
      const args = JSON.stringify(use.input)
      const half = Math.floor(args.length / 2)
      send('content_block_delta', { index, delta: { type: 'input_json_delta', partial_json: args.slice(0, half) } })
      send('content_block_delta', { index, delta: { type: 'input_json_delta', partial_json: args.slice(half) } })
      send('content_block_stop', { index })
      index++
    }
    send('message_delta', {
      delta: { stop_reason: toolUses.length > 0 ? 'tool_use' : 'end_turn', stop_sequence: null },
      usage: { output_tokens: usage.output_tokens }
    })
    send('message_stop', {})
    res.end()
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(() => {
    server.closeAllConnections()
    server.close()
  })
  state.url = `http://127.0.0.1:${(server.address() as { port: number }).port}`
  return state
}
