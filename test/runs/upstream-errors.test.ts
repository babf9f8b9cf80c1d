import t from 'tap'
import { buildTestApp } from '../helper.js'
import { startOpenAiUpstream } from './openai-upstream.js'
import { finishedRun } from './run-helpers.js'

// A provider's refusal is stored as one readable sentence (its status and its message), on the
// OpenAI wire as on Anthropic's, never as the raw JSON body it came in.

t.test("an OpenAI-compatible refusal is stored as the status and the provider's message", async (t) => {
  const refusal = {
    error: {
      message: "This model's maximum context length is 8192 tokens.\nPlease reduce the length of the messages.",
      type: 'invalid_request_error',
      param: 'messages',
      code: 'context_length_exceeded'
    }
  }
  const url = await startOpenAiUpstream(t, {
    models: ['tiny-1'],
    chat(_body, _stream, res) {
      res.writeHead(400, { 'content-type': 'application/json' })
      res.end(JSON.stringify(refusal))
    }
  })
  const app = await buildTestApp(t, { env: { OPENAI_BASE_URL: url, MODELS: 'tiny-1', RUN_POLL_MS: '50' } })
  const created = await app.inject({ method: 'POST', url: '/api/runs', payload: { prompt: 'x', model: 'tiny-1' } })
  t.equal(created.statusCode, 201, created.body)
  const run = await finishedRun(app, '', created.json().run.id)
  t.equal(run.status, 'failed')
  t.equal(
    run.error,
    "upstream_error: HTTP 400: This model's maximum context length is 8192 tokens. Please reduce the length of the messages."
  )
  t.notMatch(run.error, /[{}"\n]/, 'no JSON, one line')
})
