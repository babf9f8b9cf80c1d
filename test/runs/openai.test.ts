import { once } from 'node:events'
import { createServer } from 'node:http'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { and, eq } from 'drizzle-orm'
import t from 'tap'
import { DEV_ORG } from '../../src/auth/dev-org.js'
import { runMessages, runs } from '../../src/runs/tables.js'
import { storeContextSizes } from '../../src/runs/transcripts.js'
import { buildTestApp, signUpWithOrg } from '../helper.js'
import { startOpenAiUpstream } from './openai-upstream.js'
import { storedEventsOf } from './run-helpers.js'
import { eventually, SseClient } from './sse-client.js'
import { startToolModel } from './tool-model.js'

interface Upstream {
  url: string
  requests: Array<{ path: string; auth: string | undefined; body: any }>
  mode: 'ok' | 'error' | 'hang' | 'slow'
  aborted: number
  /** faults for the next calls, in order, before `mode` answers: an opening role chunk, then a cut or an error */
  faults: Array<'role-then-cut' | 'role-then-error' | 'empty'>
}

/** The upstream of these tests: two models, and a chat answer per `mode`. */
async function startUpstream(t: import('tap').Test): Promise<Upstream> {
  const state: Upstream = { url: '', requests: [], mode: 'ok', aborted: 0, faults: [] }
  state.url = await startOpenAiUpstream(t, {
    models: ['tiny-1', 'tiny-2'],
    onRequest: (req, body) => void state.requests.push({ path: req.url ?? '', auth: req.headers.authorization, body }),
    async chat(_body, stream, res) {
      const fault = state.faults.shift()
      if (fault) {
        const chat = stream()
        chat.delta({ role: 'assistant', content: '' })
        if (fault === 'role-then-error') chat.error('The server is overloaded')
        else if (fault === 'empty') chat.end()
        else res.end()
        return
      }
      if (state.mode === 'error') {
        res.writeHead(500, { 'content-type': 'application/json' })
        res.end(JSON.stringify({ error: { message: 'model overloaded' } }))
        return
      }
      if (state.mode === 'hang') return // never answers
      const chat = stream()
      res.on('close', () => {
        if (!res.writableFinished) state.aborted++
      })
      const pieces = state.mode === 'slow' ? Array.from({ length: 200 }, (_, i) => `t${i} `) : ['Hel', 'lo', ' there']
      for (const piece of pieces) {
        if (res.destroyed) return
        chat.delta({ content: piece })
        if (state.mode === 'slow') await new Promise((r) => setTimeout(r, 20))
      }
      chat.end({ prompt_tokens: 7, completion_tokens: 3 })
    }
  })
  return state
}

const finished = async (app: Awaited<ReturnType<typeof buildTestApp>>, id: string) =>
  eventually(async () => {
    const run = (await app.inject({ method: 'GET', url: `/api/runs/${id}` })).json().run
    return ['succeeded', 'failed', 'cancelled'].includes(run.status) ? run : null
  })

t.test('openai engine: streams deltas, lists models, fails clearly', async (t) => {
  const upstream = await startUpstream(t)
  const app = await buildTestApp(t, {
    env: {
      OPENAI_BASE_URL: upstream.url,
      OPENAI_API_KEY: 'sk-test',
      MODELS: 'tiny-1,tiny-2',
      RUN_POLL_MS: '50',
      OPENAI_TIMEOUT_MS: '500'
    }
  })
  const config = (await app.inject({ method: 'GET', url: '/api/config' })).json()
  t.same(
    config.engines.map((e: { id: string }) => e.id),
    ['echo', 'openai']
  )
  t.same(
    config.models.filter((m: { engine: string }) => m.engine === 'openai').map((m: { id: string }) => m.id),
    ['tiny-1', 'tiny-2']
  )

  const run = (
    await app.inject({ method: 'POST', url: '/api/runs', payload: { prompt: 'say hello', model: 'tiny-2' } })
  ).json().run
  t.match(run, { engine: 'openai', model: 'tiny-2' })
  const done = await finished(app, run.id)
  t.equal(done.status, 'succeeded')
  const call = upstream.requests.find((r) => r.path === '/v1/chat/completions')!
  t.equal(call.auth, 'Bearer sk-test')
  t.match(call.body, { model: 'tiny-2', stream: true, messages: [{ role: 'user', content: 'say hello' }] })
  const events = await app.db.query.runEvents.findMany({
    where: (e, { eq }) => eq(e.runId, run.id),
    orderBy: (e, { asc }) => asc(e.id)
  })
  t.same(
    events.filter((e) => e.type === 'message.delta').map((e) => e.data.text),
    ['Hel', 'lo', ' there']
  )
  t.same(events.find((e) => e.type === 'message.completed')!.data, { text: 'Hello there' })
  t.same(events.at(-1)!.data, { usage: { promptTokens: 7, completionTokens: 3 } })

  // an opening without content, then a cut or an error chunk: tried again, saying why
  upstream.faults.push('role-then-cut', 'role-then-error')
  const before = upstream.requests.length
  const retried = await finished(
    app,
    (await app.inject({ method: 'POST', url: '/api/runs', payload: { prompt: 'x', model: 'tiny-1' } })).json().run.id
  )
  t.match(retried, { status: 'succeeded', output: 'Hello there' })
  t.equal(upstream.requests.length - before, 3)
  const retries = await app.db.query.runEvents.findMany({
    where: (e, { and, eq }) => and(eq(e.runId, retried.id), eq(e.type, 'model.retry')),
    orderBy: (e, { asc }) => asc(e.id)
  })
  t.match(
    retries.map((e) => e.data),
    [
      { attempt: 1, status: null, reason: 'the stream ended before any content' },
      { attempt: 2, status: null, reason: /overloaded/ }
    ]
  )

  // an empty answer never breaks the thread: the next turn leaves it out
  upstream.faults.push('empty')
  const empty = await finished(
    app,
    (await app.inject({ method: 'POST', url: '/api/runs', payload: { prompt: 'quiet', model: 'tiny-1' } })).json().run
      .id
  )
  t.match(empty, { status: 'succeeded', output: '' })
  const after = await finished(
    app,
    (
      await app.inject({
        method: 'POST',
        url: '/api/runs',
        payload: { prompt: 'and now?', model: 'tiny-1', rootRunId: empty.id }
      })
    ).json().run.id
  )
  t.match(after, { status: 'succeeded', output: 'Hello there' })
  t.same(upstream.requests.at(-1)!.body.messages, [
    { role: 'user', content: 'quiet' },
    { role: 'user', content: 'and now?' }
  ])

  // structured output as OpenAI means it: json_object asks for JSON in words; json_schema is strict when it can be
  const lastChat = () => upstream.requests.filter((r) => r.path === '/v1/chat/completions').at(-1)!.body
  await finished(
    app,
    (
      await app.inject({
        method: 'POST',
        url: '/api/runs',
        payload: { prompt: 'facts?', model: 'tiny-1', responseFormat: { type: 'json_object' } }
      })
    ).json().run.id
  )
  t.match(lastChat(), {
    response_format: { type: 'json_object' },
    messages: [
      { role: 'system', content: 'Answer with one JSON object and nothing else.' },
      { role: 'user', content: 'facts?' }
    ]
  })
  const strictSchema = {
    type: 'object',
    properties: { answer: { type: 'string' }, items: { type: 'array', items: { type: 'string' } } },
    required: ['answer', 'items'],
    additionalProperties: false
  }
  for (const [schema, strict] of [
    [strictSchema, true],
    [{ type: 'object', properties: { answer: { type: 'string' } } }, undefined],
    [{ ...strictSchema, required: ['answer'] }, undefined]
  ] as const) {
    await finished(
      app,
      (
        await app.inject({
          method: 'POST',
          url: '/api/runs',
          payload: { prompt: 'shape?', model: 'tiny-1', responseFormat: { type: 'json_schema', name: 'shape', schema } }
        })
      ).json().run.id
    )
    t.same(lastChat().response_format, {
      type: 'json_schema',
      json_schema: { name: 'shape', schema, ...(strict ? { strict } : {}) }
    })
  }

  upstream.mode = 'error'
  const bad = (
    await app.inject({ method: 'POST', url: '/api/runs', payload: { prompt: 'x', engine: 'openai' } })
  ).json().run
  const failed = await finished(app, bad.id)
  t.equal(failed.status, 'failed')
  t.match(
    failed.error,
    /^model_unavailable: the OpenAI-compatible API at 127\.0\.0\.1:\d+ could not be reached \(tried 4 times\): HTTP 500: model overloaded$/
  )

  upstream.mode = 'hang'
  const hung = (
    await app.inject({ method: 'POST', url: '/api/runs', payload: { prompt: 'x', engine: 'openai' } })
  ).json().run
  const timedOut = await finished(app, hung.id)
  t.equal(timedOut.status, 'failed')
  t.match(timedOut.error, /^upstream_timeout/)
})

t.test(
  'a configured model that cannot be reached is still the default: runs and chat fail naming it, never echo',
  async (t) => {
    // a port nothing listens on
    const closed = createServer().listen(0, '127.0.0.1')
    await once(closed, 'listening')
    const port = (closed.address() as { port: number }).port
    closed.close()
    const app = await buildTestApp(t, {
      env: {
        OPENAI_BASE_URL: `http://127.0.0.1:${port}/v1`,
        MODELS: 'tiny-1',
        RUN_POLL_MS: '50',
        MODEL_RETRY_BASE_MS: '1',
        MODEL_BREAKER_OPEN_MS: '60000'
      }
    })
    const config = (await app.inject({ method: 'GET', url: '/api/config' })).json()
    t.same(
      config.models.map((m: { id: string }) => m.id),
      ['echo'],
      'the catalog lists what answers now'
    )
    t.same((await app.inject({ method: 'GET', url: '/api/models/default' })).json(), {
      model: 'tiny-1',
      source: 'deployment'
    })
    const named = await app.inject({ method: 'POST', url: '/api/runs', payload: { prompt: 'x', model: 'tiny-1' } })
    t.equal(named.statusCode, 201, 'a configured model that is down is not refused as unknown')
    const failed = await finished(app, named.json().run.id)
    t.match(failed, {
      status: 'failed',
      output: null,
      error:
        /^model_unavailable: the OpenAI-compatible API at 127\.0\.0\.1:\d+ could not be reached \(tried 4 times\): nothing accepts connections there \(connection refused\)$/
    })
    const events = await app.db.query.runEvents.findMany({
      where: (e, { eq }) => eq(e.runId, failed.id),
      orderBy: (e, { asc }) => asc(e.id)
    })
    t.same(
      events.filter((e) => e.type === 'model.retry').map((e) => e.data.attempt),
      [1, 2, 3]
    )

    // the breaker is open now: the next run and chat fail at once, without a request
    const unnamed = await app.inject({ method: 'POST', url: '/api/runs', payload: { prompt: 'Is prod healthy?' } })
    t.match(unnamed.json().run, { engine: 'openai', model: 'tiny-1' })
    const fast = await finished(app, unnamed.json().run.id)
    t.match(fast, {
      status: 'failed',
      output: null,
      error:
        /^model_unavailable: the OpenAI-compatible API at 127\.0\.0\.1:\d+ could not be reached: nothing accepts connections there \(connection refused\) \(no request is sent to it for \d+ s\)$/
    })
    const chat = await app.inject({
      method: 'POST',
      url: '/api/chat',
      payload: { messages: [{ role: 'user', content: 'Is prod healthy?' }] }
    })
    t.equal(chat.statusCode, 503)
    t.equal(chat.json().error, 'model_unavailable')
    t.match(
      chat.json().message,
      /^model_unavailable: the OpenAI-compatible API at 127\.0\.0\.1:\d+ could not be reached/
    )
    t.ok(Number(chat.headers['retry-after']) >= 1, 'Retry-After')

    const unknown = await app.inject({ method: 'POST', url: '/api/runs', payload: { prompt: 'x', model: 'tiny-9' } })
    t.equal(unknown.statusCode, 400, 'a model nothing configures is still refused')
    t.equal(unknown.json().error, 'engine_unavailable')
  }
)

t.test('chat streams tokens then done; offline it echoes; a disconnect aborts upstream', async (t) => {
  const upstream = await startUpstream(t)
  const app = await buildTestApp(t, {
    env: { OPENAI_BASE_URL: upstream.url, MODELS: 'tiny-1', RUN_WORKER_CONCURRENCY: '0' }
  })
  await app.listen({ port: 0, host: '127.0.0.1' })
  const base = `http://127.0.0.1:${(app.server.address() as { port: number }).port}`
  const body = JSON.stringify({ messages: [{ role: 'user', content: 'hi' }] })
  const chat = await SseClient.open(`${base}/api/chat`, { method: 'POST', body })
  await chat.until((c) => c.ended)
  t.equal(chat.status, 200)
  t.match(chat.headers['content-type'], /^text\/event-stream/)
  t.same(
    chat.events('token').map((f) => chat.json(f).text),
    ['Hel', 'lo', ' there']
  )
  t.same(chat.json(chat.events('done')[0]!), { model: 'tiny-1', usage: { inputTokens: 7, outputTokens: 3 } })

  const echo = await SseClient.open(`${base}/api/chat`, {
    method: 'POST',
    body: JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: 'one two three' }] })
  })
  await echo.until((c) => c.ended)
  t.same(
    echo.events('token').map((f) => echo.json(f).text),
    ['one', ' two', ' three']
  )
  t.same(echo.json(echo.events('done')[0]!).usage, { inputTokens: 3, outputTokens: 3 })

  upstream.mode = 'slow'
  const slow = await SseClient.open(`${base}/api/chat`, { method: 'POST', body })
  await slow.until((c) => c.events('token').length >= 3)
  slow.close()
  await eventually(async () => upstream.aborted === 1)
  t.equal(upstream.aborted, 1, 'the upstream request was aborted')

  for (const payload of [
    '{"messages":[]}',
    '{"messages":[{"role":"root","content":"x"}]}',
    '{"messages":[{"role":"user","content":"x"}],"origin":"web"}',
    '{bad',
    '{"messages":[{"role":"user","content":"x"}],"model":"nope"}'
  ]) {
    const res = await app.inject({
      method: 'POST',
      url: '/api/chat',
      headers: { 'content-type': 'application/json' },
      payload
    })
    t.equal(res.statusCode, 400, payload)
    t.type(res.json().error, 'string')
  }
})

/** A model that calls tools (write_artifact needs no decision) and an app that runs them, in the dev org. */
async function toolThread(t: import('tap').Test, env: Record<string, string> = {}) {
  const model = await startToolModel(t)
  const dataDir = await mkdtemp(join(tmpdir(), 'cairn-transcripts-'))
  t.teardown(() => rm(dataDir, { recursive: true, force: true }))
  const app = await buildTestApp(t, {
    env: {
      OPENAI_BASE_URL: model.url,
      MODELS: 'tool-model',
      DATA_DIR: dataDir,
      SANDBOX_UNCONFINED: 'true',
      RUN_POLL_MS: '50',
      ...env
    }
  })
  const turn = async (prompt: string, rootRunId?: string) => {
    const created = await app.inject({ method: 'POST', url: '/api/runs', payload: { prompt, rootRunId } })
    const run = (await app.inject({ method: 'GET', url: `/api/runs/${created.json().run.id}?wait=30` })).json().run
    t.equal(run.status, 'succeeded', run.error ?? prompt.slice(0, 40))
    return run
  }
  const started = async (runId: string) =>
    (await storedEventsOf(app, DEV_ORG.id, runId)).find((e) => e.type === 'run.started')!.data
  /** what a request sent after its system messages */
  const conversation = (i: number) => model.requests[i]!.body.messages.filter((m: any) => m.role !== 'system')
  return { app, model, turn, started, conversation }
}

const PLAN_ARGS = JSON.stringify({ name: 'plan.md', content: '# Plan\n' })

t.test('a thread replays its transcripts: tool calls with their results, in order (OpenAI wire)', async (t) => {
  const { app, model, turn, started, conversation } = await toolThread(t)
  model.script.push({ calls: [{ id: 'call_a', name: 'write_artifact', arguments: PLAN_ARGS }] }, { text: 'Saved.' })
  const first = await turn('write a plan')
  // the tool result as the model saw it in the first run's second call
  const result = conversation(1).at(-1)
  t.match(result, { role: 'tool', tool_call_id: 'call_a', content: /plan\.md/ })
  model.script.push({ text: 'It was plan.md.' })
  const second = await turn('what did you save?', first.id)
  t.same(conversation(2), [
    { role: 'user', content: 'write a plan' },
    {
      role: 'assistant',
      content: null,
      tool_calls: [{ id: 'call_a', type: 'function', function: { name: 'write_artifact', arguments: PLAN_ARGS } }]
    },
    { role: 'tool', tool_call_id: 'call_a', content: result.content },
    { role: 'assistant', content: 'Saved.' },
    { role: 'user', content: 'what did you save?' }
  ])
  t.match(await started(second.id), { contextTurns: 1, droppedTurns: 0, shortenedResults: 0 })

  // the transcript, through the API (and in the thread)
  const messages = await app.inject({ method: 'GET', url: `/api/runs/${first.id}/messages` })
  t.equal(messages.statusCode, 200)
  t.same(messages.json().items, [
    { role: 'user', content: 'write a plan' },
    { role: 'assistant', content: '', toolCalls: [{ id: 'call_a', name: 'write_artifact', arguments: PLAN_ARGS }] },
    { role: 'tool', content: result.content, toolCallId: 'call_a', name: 'write_artifact' },
    { role: 'assistant', content: 'Saved.' }
  ])
  const thread = (await app.inject({ method: 'GET', url: `/api/threads/${first.id}` })).json()
  t.same(
    thread.runs.map((r: any) => r.messages),
    [messages.json().items, (await app.inject({ method: 'GET', url: `/api/runs/${second.id}/messages` })).json().items]
  )
  t.same(thread.runs[1].messages, [
    { role: 'user', content: 'what did you save?' },
    { role: 'assistant', content: 'It was plan.md.' }
  ])
  // another org's run is no run at all
  const stranger = await signUpWithOrg(app)
  const foreign = await app.inject({
    method: 'GET',
    url: `/api/runs/${first.id}/messages`,
    headers: { cookie: stranger.cookie }
  })
  t.equal(foreign.statusCode, 404)
  t.equal(foreign.json().error, 'not_found')
  const unknown = await app.inject({ method: 'GET', url: '/api/runs/01900000-0000-7000-8000-000000000000/messages' })
  t.equal(unknown.statusCode, 404)
})

t.test('MODEL_CONTEXT_TOKENS: long tool results are shortened first, then the oldest turns dropped', async (t) => {
  // 1,000 tokens: 3,000 bytes for the earlier turns, the instructions and the prompt
  const { app, model, turn, started, conversation } = await toolThread(t, { MODEL_CONTEXT_TOKENS: '1000' })
  model.script.push({ calls: [{ id: 'call_a', name: 'write_artifact', arguments: PLAN_ARGS }] }, { text: 'Saved.' })
  const first = await turn('write a plan')
  // its size, as later runs are sent it, was stored when it ended: their claims read no message to measure it
  const [sized] = await app.db.select().from(runs).where(eq(runs.id, first.id))
  t.ok(sized!.contextBytes! > 0 && sized!.contextShortBytes! <= sized!.contextBytes!, 'the turn has its sizes')
  // the stored result stands for a tool that printed 5,000 characters
  await app.db
    .update(runMessages)
    .set({ content: 'r'.repeat(5000) })
    .where(and(eq(runMessages.runId, first.id), eq(runMessages.role, 'tool')))
  // (and its size, as the run would have stored it when it ended with that result)
  await storeContextSizes(app.db, first.id)
  model.script.push({ text: 'ok two' })
  await turn('turn two', first.id)
  model.script.push({ text: 'ok three' })
  const third = await turn('turn three', first.id)
  // the whole history (over 5,000 bytes) does not fit; with the result shortened it does
  t.match(await started(third.id), { contextTurns: 2, droppedTurns: 0, shortenedResults: 1 })
  const sent = conversation(3)
  t.same(
    sent.map((m: any) => m.role),
    ['user', 'assistant', 'tool', 'assistant', 'user', 'assistant', 'user']
  )
  t.equal(sent[2].content, `${'r'.repeat(1000)}\n[result shortened: 1000 of 5000 characters]`)
  t.equal(sent[2].tool_call_id, sent[1].tool_calls[0].id, 'the pair stays whole')
  // a long turn later, even the shortened first turn does not fit: it is dropped whole, pair and all
  model.script.push({ text: 'ok four' })
  await turn(`four ${'y'.repeat(1900)}`, first.id)
  model.script.push({ text: 'ok five' })
  const fifth = await turn('turn five', first.id)
  t.match(await started(fifth.id), { contextTurns: 3, droppedTurns: 1, shortenedResults: 0 })
  const last = conversation(5)
  t.same(last[0], { role: 'user', content: 'turn two' })
  t.notOk(
    last.some((m: any) => m.role === 'tool' || m.tool_calls),
    'no call or result is left without its other half'
  )
  // the transcript itself keeps the result whole
  const items = (await app.inject({ method: 'GET', url: `/api/runs/${first.id}/messages` })).json().items
  t.equal(items[2].content.length, 5000)
})
