// Not part of the product: a stand-in OpenAI-compatible model for check-stack.mjs. A user
// message "shell: CMD" is answered with one `shell` tool call running CMD; the tool's
// result is answered with the text "ran: RESULT". Streams as OpenAI does.
import { createServer } from 'node:http'

createServer(async (req, res) => {
  let raw = ''
  for await (const chunk of req) raw += chunk
  if (req.url === '/v1/models')
    return void res
      .writeHead(200, { 'content-type': 'application/json' })
      .end(JSON.stringify({ object: 'list', data: [{ id: 'tool-model' }] }))
  if (req.url !== '/v1/chat/completions') return void res.writeHead(404).end()
  const body = JSON.parse(raw)
  const last = body.messages.at(-1)
  const text = (m) => (typeof m.content === 'string' ? m.content : (m.content ?? []).map((p) => p.text ?? '').join(''))
  res.writeHead(200, { 'content-type': 'text/event-stream' })
  const send = (delta, finish = null) =>
    res.write(
      `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`
    )
  const command = last.role === 'user' ? /^shell: (.*)$/s.exec(text(last).trim())?.[1] : undefined
  if (command) {
    send({
      role: 'assistant',
      content: null,
      tool_calls: [
        {
          index: 0,
          id: `call_${Date.now()}`,
          type: 'function',
          function: { name: 'shell', arguments: JSON.stringify({ command }) }
        }
      ]
    })
    send({}, 'tool_calls')
  } else {
    send({ role: 'assistant', content: last.role === 'tool' ? `ran: ${text(last)}` : `heard: ${text(last)}` })
    send({}, 'stop')
  }
  res.write(`data: ${JSON.stringify({ id: 'c1', choices: [], usage: { prompt_tokens: 5, completion_tokens: 2 } })}\n\n`)
  res.end('data: [DONE]\n\n')
}).listen(8000, '0.0.0.0')
