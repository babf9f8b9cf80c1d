import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { DEV_ORG } from '../../src/auth/dev-org.js'
import { newKeyText } from '../../src/secrets/crypto.js'
import { buildTestApp, signUpWithOrg } from '../helper.js'
import { startAnthropicUpstream } from './anthropic-upstream.js'
import { storedEventsOf } from './run-helpers.js'

// Anthropic's Messages API, natively: the deployment's ANTHROPIC_* settings and an org
// provider of kind "anthropic", against a local server that speaks the protocol and
// records every request.

type App = Awaited<ReturnType<typeof buildTestApp>>

const post = async (app: App, payload: Record<string, unknown>, headers: Record<string, string> = {}) =>
  app.inject({ method: 'POST', url: '/api/runs', headers, payload })
const ended = async (app: App, id: string, headers: Record<string, string> = {}) =>
  (await app.inject({ method: 'GET', url: `/api/runs/${id}?wait=30`, headers })).json().run

t.test(
  "the deployment's Anthropic models: the thread, instructions and settings as the Messages API takes them",
  async (t) => {
    const upstream = await startAnthropicUpstream(t)
    const app = await buildTestApp(t, {
      env: { ANTHROPIC_BASE_URL: upstream.url, ANTHROPIC_API_KEY: upstream.key, ANTHROPIC_MODELS: 'claude-test-1' }
    })
    const models = (await app.inject({ method: 'GET', url: '/api/models' })).json().items
    t.same(
      models.find((m: any) => m.id === 'claude-test-1'),
      { id: 'claude-test-1', engine: 'anthropic', providerId: null, default: true },
      'the first ready model is the default'
    )

    upstream.script.push({ text: 'Noted.', usage: { input_tokens: 9, output_tokens: 2 } }, { text: 'Priya.' })
    const first = await ended(app, (await post(app, { prompt: 'My name is Priya' })).json().run.id)
    t.match(
      first,
      {
        status: 'succeeded',
        engine: 'anthropic',
        model: 'claude-test-1',
        output: 'Noted.',
        usage: { inputTokens: 9, outputTokens: 2 }
      },
      'a run naming no model uses it'
    )
    const second = await ended(
      app,
      (
        await post(app, {
          prompt: 'What is my name?',
          rootRunId: first.id,
          instructions: 'Answer in one word.',
          temperature: 0.5,
          maxOutputTokens: 20
        })
      ).json().run.id
    )
    t.equal(second.output, 'Priya.')
    const sent = upstream.requests.filter((r) => r.path === '/v1/messages').at(-1)!
    t.equal(sent.apiKey, upstream.key, 'x-api-key')
    t.ok(sent.version, 'anthropic-version')
    t.equal(sent.authorization, undefined, 'no bearer token')
    t.equal(sent.body.stream, true)
    t.equal(sent.body.system, 'Answer in one word.', 'instructions are the system prompt')
    t.same(
      sent.body.messages,
      [
        { role: 'user', content: 'My name is Priya' },
        { role: 'assistant', content: 'Noted.' },
        { role: 'user', content: 'What is my name?' }
      ],
      'the earlier turn of the thread, then the prompt'
    )
    t.equal(sent.body.max_tokens, 20)
    t.equal(sent.body.temperature, 0.5)
    const firstSent = upstream.requests.filter((r) => r.path === '/v1/messages')[0]!
    t.equal(firstSent.body.max_tokens, 4096, 'the Messages API needs a limit: 4096 when the run sets none')

    upstream.script.push({ text: '{"ok":true}' })
    const schema = { type: 'object', required: ['ok'], properties: { ok: { type: 'boolean' } } }
    const json = await ended(
      app,
      (await post(app, { prompt: 'json', responseFormat: { type: 'json_schema', name: 'ok', schema } })).json().run.id
    )
    t.equal(json.status, 'succeeded')
    t.same(
      upstream.requests.at(-1)!.body.output_config,
      { format: { type: 'json_schema', schema } },
      'structured output as output_config.format'
    )
    upstream.script.push({ text: 'not json' })
    const invalid = await ended(
      app,
      (await post(app, { prompt: 'json', responseFormat: { type: 'json_schema', name: 'ok', schema } })).json().run.id
    )
    t.match(invalid, { status: 'failed', error: /^output_invalid:/ })
  }
)

t.test('Anthropic tool use runs the same tools: tool_use blocks out, tool_result blocks back', async (t) => {
  const upstream = await startAnthropicUpstream(t)
  const dataDir = await mkdtemp(join(tmpdir(), 'cairn-anthropic-'))
  t.teardown(() => rm(dataDir, { recursive: true, force: true }))
  const app = await buildTestApp(t, {
    env: {
      ANTHROPIC_BASE_URL: upstream.url,
      ANTHROPIC_API_KEY: upstream.key,
      DATA_DIR: dataDir,
      SANDBOX_UNCONFINED: 'true',
      RUN_POLL_MS: '50'
    }
  })
  upstream.script.push(
    {
      text: 'Saving.',
      toolUses: [{ id: 'toolu_1', name: 'write_artifact', input: { name: 'plan.md', content: '# Plan\n' } }]
    },
    { text: 'Saved the plan.' }
  )
  const run = await ended(app, (await post(app, { prompt: 'write a plan', model: 'claude-test-1' })).json().run.id)
  t.match(run, { status: 'succeeded', engine: 'anthropic', output: 'Saved the plan.' }, run.error ?? '')
  t.same(run.usage, { inputTokens: 24, outputTokens: 8 }, 'both calls counted')
  const calls = upstream.requests.filter((r) => r.path === '/v1/messages')
  t.equal(calls.length, 2)
  t.ok(
    calls[0]!.body.tools.some((tool: any) => tool.name === 'write_artifact' && tool.input_schema?.type === 'object'),
    'tools as name, description, input_schema'
  )
  const [, assistant, results] = calls[1]!.body.messages
  t.same(assistant, {
    role: 'assistant',
    content: [
      { type: 'text', text: 'Saving.' },
      { type: 'tool_use', id: 'toolu_1', name: 'write_artifact', input: { name: 'plan.md', content: '# Plan\n' } }
    ]
  })
  t.equal(results.role, 'user')
  t.match(results.content, [{ type: 'tool_result', tool_use_id: 'toolu_1', content: /plan\.md/ }])
  const events = await storedEventsOf(app, DEV_ORG.id, run.id)
  t.match(events.find((e) => e.type === 'tool.call')?.data, { callId: 'toolu_1', tool: 'write_artifact' })
  const listed = (await app.inject({ method: 'GET', url: `/api/artifacts?runId=${run.id}` })).json().items
  t.match(listed, [{ name: 'plan.md' }])
})

/** What the Messages API refuses: empty text, a tool_use not answered in the very next user message, a stray result. */
function refusals(messages: any[]): string[] {
  const problems: string[] = []
  messages.forEach((m, i) => {
    const blocks = typeof m.content === 'string' ? [{ type: 'text', text: m.content }] : m.content
    if (blocks.length === 0) problems.push(`message ${i} is empty`)
    for (const b of blocks) if (b.type === 'text' && b.text === '') problems.push(`message ${i} has empty text`)
    const uses = blocks.filter((b: any) => b.type === 'tool_use').map((b: any) => b.id)
    if (uses.length > 0) {
      const next = messages[i + 1]
      const answered = new Set(
        Array.isArray(next?.content)
          ? next.content.filter((b: any) => b.type === 'tool_result').map((b: any) => b.tool_use_id)
          : []
      )
      for (const id of uses) if (!answered.has(id)) problems.push(`tool_use ${id} of message ${i} has no result next`)
    }
    const results = blocks.filter((b: any) => b.type === 'tool_result').map((b: any) => b.tool_use_id)
    const before = i > 0 && Array.isArray(messages[i - 1].content) ? messages[i - 1].content : []
    for (const id of results)
      if (!before.some((b: any) => b.type === 'tool_use' && b.id === id))
        problems.push(`tool_result ${id} of message ${i} has no call`)
  })
  const ids = messages
    .flatMap((m) => (Array.isArray(m.content) ? m.content : []))
    .filter((b: any) => b.type === 'tool_use')
  if (new Set(ids.map((b: any) => b.id)).size !== ids.length) problems.push('two tool_use blocks share an id')
  return problems
}

t.test(
  'a thread replays earlier tool use on the Anthropic wire: text before the call, each result right after it',
  async (t) => {
    const upstream = await startAnthropicUpstream(t)
    const dataDir = await mkdtemp(join(tmpdir(), 'cairn-anthropic-'))
    t.teardown(() => rm(dataDir, { recursive: true, force: true }))
    const app = await buildTestApp(t, {
      env: {
        ANTHROPIC_BASE_URL: upstream.url,
        ANTHROPIC_API_KEY: upstream.key,
        DATA_DIR: dataDir,
        SANDBOX_UNCONFINED: 'true',
        RUN_POLL_MS: '50'
      }
    })
    const input = { name: 'plan.md', content: '# Plan\n' }
    const turn = async (prompt: string, rootRunId?: string) => {
      const run = await ended(app, (await post(app, { prompt, model: 'claude-test-1', rootRunId })).json().run.id)
      t.equal(run.status, 'succeeded', run.error ?? prompt)
      return run
    }
    const calls = () => upstream.requests.filter((r) => r.path === '/v1/messages')
    upstream.script.push(
      { text: 'Saving.', toolUses: [{ id: 'toolu_1', name: 'write_artifact', input }] },
      { text: 'Saved the plan.' }
    )
    const first = await turn('write a plan')
    const result = calls()[1]!.body.messages.at(-1)
    // a second turn whose call has the same id (the model's ids are its own business)
    upstream.script.push({ toolUses: [{ id: 'toolu_1', name: 'write_artifact', input }] }, { text: 'Saved again.' })
    await turn('save it again', first.id)
    upstream.script.push({ text: 'plan.md, twice.' })
    const third = await turn('what did you save?', first.id)
    const sent = calls()[4]!.body.messages
    t.same(sent.slice(0, 4), [
      { role: 'user', content: 'write a plan' },
      {
        role: 'assistant',
        content: [
          { type: 'text', text: 'Saving.' },
          { type: 'tool_use', id: 'toolu_1', name: 'write_artifact', input }
        ]
      },
      result,
      { role: 'assistant', content: 'Saved the plan.' }
    ])
    t.match(sent.slice(4), [
      { role: 'user', content: 'save it again' },
      { role: 'assistant', content: [{ type: 'tool_use', name: 'write_artifact', input }] },
      { role: 'user', content: [{ type: 'tool_result', content: /plan\.md/ }] },
      { role: 'assistant', content: 'Saved again.' },
      { role: 'user', content: 'what did you save?' }
    ])
    t.equal(sent.length, 9)
    t.same(refusals(sent), [], 'a request the Messages API takes')
    const started = (await storedEventsOf(app, DEV_ORG.id, third.id)).find((e) => e.type === 'run.started')!
    t.match(started.data, { contextTurns: 2, droppedTurns: 0, shortenedResults: 0 })
    // the text written before the call is in the transcript
    const items = (await app.inject({ method: 'GET', url: `/api/runs/${first.id}/messages` })).json().items
    t.match(items, [
      { role: 'user', content: 'write a plan' },
      { role: 'assistant', content: 'Saving.', toolCalls: [{ id: 'toolu_1', name: 'write_artifact' }] },
      { role: 'tool', toolCallId: 'toolu_1', name: 'write_artifact', content: result.content[0].content },
      { role: 'assistant', content: 'Saved the plan.' }
    ])
    t.same(JSON.parse(items[1].toolCalls[0].arguments), input)
  }
)

t.test(
  'Anthropic faults: 429 with retry-after and 529-free 5xx are retried; 4xx is final and says what the API said',
  async (t) => {
    const upstream = await startAnthropicUpstream(t)
    const app = await buildTestApp(t, {
      env: { ANTHROPIC_BASE_URL: upstream.url, ANTHROPIC_API_KEY: upstream.key, MODEL_RETRY_BASE_MS: '10' }
    })
    upstream.script.push(
      {
        status: 429,
        headers: { 'retry-after': '0' },
        body: { type: 'error', error: { type: 'rate_limit_error', message: 'slow down' } }
      },
      { status: 503, body: { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } } },
      { text: 'at last' }
    )
    const run = await ended(app, (await post(app, { prompt: 'try', model: 'claude-test-1' })).json().run.id)
    t.match(run, { status: 'succeeded', output: 'at last' })
    const retries = (await storedEventsOf(app, DEV_ORG.id, run.id))
      .filter((e) => e.type === 'model.retry')
      .map((e) => e.data)
    t.match(retries, [
      { attempt: 1, status: 429, waitMs: 0 },
      { attempt: 2, status: 503 }
    ])
    upstream.script.push({
      status: 400,
      body: { type: 'error', error: { type: 'invalid_request_error', message: 'prompt is too long' } }
    })
    const bad = await ended(app, (await post(app, { prompt: 'too long', model: 'claude-test-1' })).json().run.id)
    t.match(bad, { status: 'failed' })
    t.equal(
      bad.error,
      'upstream_error: HTTP 400: prompt is too long (invalid_request_error)',
      "one sentence: the status and the provider's message, not its raw JSON"
    )

    // an opening without content, then a cut, an overloaded_error event, a 529: each tried again, saying why
    upstream.script.push(
      { fault: 'cut' },
      { fault: 'error' },
      { status: 529, body: { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } } },
      { text: 'after the storm' }
    )
    const calls = upstream.requests.length
    const stormy = await ended(app, (await post(app, { prompt: 'storm', model: 'claude-test-1' })).json().run.id)
    t.match(stormy, { status: 'succeeded', output: 'after the storm' })
    t.equal(upstream.requests.length - calls, 4, 'four calls')
    t.match(
      (await storedEventsOf(app, DEV_ORG.id, stormy.id)).filter((e) => e.type === 'model.retry').map((e) => e.data),
      [
        { attempt: 1, status: null, reason: 'the stream ended before any content' },
        { attempt: 2, status: null, reason: /overloaded_error/ },
        { attempt: 3, status: 529, reason: /HTTP 529/ }
      ]
    )
    // an empty answer (no text block at all) never breaks the thread: the next turn leaves it out
    upstream.script.push({ text: '' }, { text: 'still here' })
    const empty = await ended(app, (await post(app, { prompt: 'run the tool', model: 'claude-test-1' })).json().run.id)
    t.match(empty, { status: 'succeeded', output: '' })
    const next = await ended(
      app,
      (await post(app, { prompt: 'and now?', model: 'claude-test-1', rootRunId: empty.id })).json().run.id
    )
    t.match(next, { status: 'succeeded', output: 'still here' })
    t.same(
      upstream.requests.at(-1)!.body.messages,
      [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'run the tool' },
            { type: 'text', text: 'and now?' }
          ]
        }
      ],
      'no empty assistant message; the two user turns as one message'
    )

    // the same faults every time: the run fails once its retries are spent, naming the provider and the cause
    upstream.script.push({ fault: 'error' }, { fault: 'error' }, { fault: 'error' }, { fault: 'error' })
    const spent = await ended(app, (await post(app, { prompt: 'storm', model: 'claude-test-1' })).json().run.id)
    t.match(spent, {
      status: 'failed',
      error:
        /^model_unavailable: the Anthropic API at 127\.0\.0\.1:\d+ could not be reached \(tried 4 times\): .*overloaded_error/
    })
  }
)

t.test(
  'an org provider of kind anthropic: checked at /v1/models with x-api-key, its models run on the anthropic engine with its key',
  async (t) => {
    const upstream = await startAnthropicUpstream(t, { models: ['claude-org-1'] })
    const app = await buildTestApp(t, {
      env: { PROVIDER_ALLOW_PRIVATE: 'true', SECRETS_KEY: newKeyText(), RUN_POLL_MS: '50' }
    })
    const { cookie } = await signUpWithOrg(app)
    const refused = await app.inject({
      method: 'POST',
      url: '/api/providers',
      headers: { cookie },
      payload: { name: 'A', kind: 'gemini', baseUrl: upstream.url, apiKey: 'k' }
    })
    t.equal(refused.statusCode, 400)
    t.equal(refused.json().error, 'validation_failed')
    const wrongKey = await app.inject({
      method: 'POST',
      url: '/api/providers',
      headers: { cookie },
      payload: { name: 'Wrong', kind: 'anthropic', baseUrl: upstream.url, apiKey: 'sk-wrong' }
    })
    t.match(wrongKey.json().provider, {
      kind: 'anthropic',
      ready: false,
      lastError: /refused the API key \(HTTP 401 from GET \/v1\/models\)/
    })
    const created = await app.inject({
      method: 'POST',
      url: '/api/providers',
      headers: { cookie },
      payload: { name: 'Claude', kind: 'anthropic', baseUrl: upstream.url, apiKey: upstream.key }
    })
    t.equal(created.statusCode, 201, created.body)
    const provider = created.json().provider
    t.match(provider, { kind: 'anthropic', ready: true, models: ['claude-org-1'], lastError: null })
    t.equal(upstream.requests.find((r) => r.path === '/v1/models' && r.apiKey === upstream.key)?.method, 'GET')
    const listed = (await app.inject({ method: 'GET', url: '/api/models', headers: { cookie } })).json().items
    t.match(
      listed.find((m: any) => m.id === 'claude-org-1'),
      { engine: 'anthropic', providerId: provider.id }
    )
    const openai = (await app.inject({ method: 'GET', url: '/api/providers', headers: { cookie } }))
      .json()
      .items.find((p: any) => p.name === 'Wrong')
    t.equal(openai.kind, 'anthropic')

    upstream.script.push({ text: 'Hello from the org.' })
    const run = await ended(app, (await post(app, { prompt: 'hi', model: 'claude-org-1' }, { cookie })).json().run.id, {
      cookie
    })
    t.match(
      run,
      { status: 'succeeded', engine: 'anthropic', model: 'claude-org-1', output: 'Hello from the org.' },
      run.error ?? ''
    )
    t.equal(upstream.requests.at(-1)!.apiKey, upstream.key, "the provider's own key")
    const named = await ended(
      app,
      (await post(app, { prompt: 'hi', engine: 'anthropic', model: 'claude-org-1' }, { cookie })).json().run.id,
      { cookie }
    )
    t.equal(named.status, 'succeeded', 'engine: anthropic names it too')
    const mismatched = await post(app, { prompt: 'hi', engine: 'openai', model: 'claude-org-1' }, { cookie })
    t.equal(mismatched.statusCode, 400, 'not through the other engine')
  }
)
