import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { IncomingHttpHeaders } from 'node:http'
import t from 'tap'
import { newKeyText } from '../../src/secrets/crypto.js'
import { buildTestApp, createTestDatabase, secondHandle, signUpWithOrg, type Teardown } from '../helper.js'
import { embeddedOnly } from '../passes.js'
import { startOpenAiUpstream } from '../runs/openai-upstream.js'
import { finishedRun, storedEventsOf } from '../runs/run-helpers.js'
import { eventually } from '../runs/sse-client.js'
import { startOtlpReceiver, type ReceivedSpan } from './otlp-receiver.js'

/**
 * A run's trace, as a collector receives it over OTLP/HTTP: started by a request on
 * instance A (which continues its client's trace), its first model call retried after a
 * 429, a recall, a shell call that waits for a person; A dies; the person approves on B,
 * which goes on with the run. One trace from the client's span to the run's end, with
 * the wait for the approval as its own span, and the traceparent sent to the model.
 */

const CLIENT_TRACE = '4bf92f3577b34da6a3ce929d0e0e4736'
const CLIENT_SPAN = '00f067aa0ba902b7'

/** a model that answers 429 once, then asks for a shell call, then answers in words; it keeps each request's headers */
async function scriptedModel(t: Teardown) {
  const requests: IncomingHttpHeaders[] = []
  let chats = 0
  const url = await startOpenAiUpstream(t, {
    models: ['trace-model'],
    onRequest: (req) => {
      if (req.url === '/v1/chat/completions') requests.push(req.headers)
    },
    chat(_body, stream, res) {
      chats++
      if (chats === 1) {
        res.writeHead(429, { 'content-type': 'application/json', 'retry-after': '0' })
        res.end(JSON.stringify({ error: { message: 'slow down' } }))
        return
      }
      const chat = stream()
      if (chats === 2) {
        chat.delta({ role: 'assistant', content: null })
        chat.delta({
          tool_calls: [
            {
              index: 0,
              id: 'call_1',
              type: 'function',
              function: { name: 'shell', arguments: JSON.stringify({ command: 'echo traced' }) }
            }
          ]
        })
        chat.res.write(
          `data: ${JSON.stringify({ id: 'c1', choices: [{ index: 0, delta: {}, finish_reason: 'tool_calls' }] })}\n\n`
        )
        chat.res.write(
          `data: ${JSON.stringify({ id: 'c1', choices: [], usage: { prompt_tokens: 11, completion_tokens: 4 } })}\n\n`
        )
        chat.res.end('data: [DONE]\n\n')
        return
      }
      chat.delta({ content: 'It printed traced.' })
      chat.end({ prompt_tokens: 20, completion_tokens: 5 })
    }
  })
  return { url, requests }
}

t.test('a run started on A and resumed on B after an approval is one trace, continuing its request', async (t) => {
  const receiver = await startOtlpReceiver(t)
  const model = await scriptedModel(t)
  const dir = await mkdtemp(join(tmpdir(), 'cairn-traces-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  const env = {
    OPENAI_BASE_URL: model.url,
    MODELS: 'trace-model',
    MODEL_RETRY_BASE_MS: '1',
    RUN_POLL_MS: '50',
    DATA_DIR: dir,
    SANDBOX_UNCONFINED: 'true',
    RUN_WORKER_CONCURRENCY: '1',
    OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint,
    OTEL_SERVICE_NAME: 'cairn-test'
  }
  const shared = await createTestDatabase(t)
  const logs: Array<Record<string, unknown>> = []
  const a = await buildTestApp(t, { db: shared, env, logs })
  const owner = await signUpWithOrg(a)
  const created = await a.inject({
    method: 'POST',
    url: '/api/runs',
    headers: { cookie: owner.cookie, traceparent: `00-${CLIENT_TRACE}-${CLIENT_SPAN}-01` },
    payload: { prompt: 'print traced', engine: 'openai', model: 'trace-model' }
  })
  t.equal(created.statusCode, 201, created.body)
  const runId: string = created.json().run.id

  const approvalId = await eventually(async () => {
    const events = await storedEventsOf(a, owner.org.id, runId)
    return events.find((e) => e.type === 'run.requires_action')?.data.approvalIds[0] as string | undefined
  }, 30_000)
  t.equal((await a.inject({ method: 'GET', url: '/metrics' })).statusCode, 200)
  const firstWorker = a.runs.worker.instanceId
  // A dies; B starts, and the person decides there
  a.runs.kill()
  const b = await buildTestApp(t, { db: await secondHandle(t, shared, 5), env })
  const decided = await b.inject({
    method: 'POST',
    url: `/api/runs/${runId}/approvals/${approvalId}`,
    headers: { cookie: owner.cookie },
    payload: { decision: 'approve' }
  })
  t.equal(decided.statusCode, 200)
  t.match(await finishedRun(b, owner.cookie, runId), { status: 'succeeded', output: 'It printed traced.' })

  await b.telemetry.flush()
  const byName = (name: string) => receiver.spans.filter((s) => s.name === name)
  const spans = await eventually(async () => {
    await b.telemetry.flush()
    return byName('invoke_agent').length === 2 && byName('chat trace-model').length === 2 ? receiver.spans : undefined
  }, 10_000)
  t.ok(spans, 'the spans arrived')
  t.ok(
    receiver.contentTypes.every((type) => type.startsWith('application/json')),
    'OTLP/HTTP, JSON'
  )

  t.notOk(
    spans.some((s) => s.attributes['http.route'] === '/metrics'),
    'a scrape is no span'
  )
  const request = spans.find((s) => s.name === 'POST /api/runs')!
  t.ok(request, 'the request has its span, named by its route')
  t.match(request, { traceId: CLIENT_TRACE, parentSpanId: CLIENT_SPAN, kind: 2 })
  t.match(request.resource, { 'service.name': 'cairn-test' })

  const agents = byName('invoke_agent').sort((x, y) => x.startMs - y.startMs)
  const [first, second] = agents as [ReceivedSpan, ReceivedSpan]
  for (const agent of agents) {
    t.equal(agent.traceId, CLIENT_TRACE, 'each execution is in the trace of the request that started the run')
    t.equal(agent.parentSpanId, request.spanId, "each execution is the request's child")
    t.match(agent.attributes, {
      'gen_ai.operation.name': 'invoke_agent',
      'gen_ai.provider.name': 'openai',
      'gen_ai.request.model': 'trace-model',
      'cairn.run.id': runId,
      'cairn.org.id': owner.org.id,
      'cairn.run.origin': 'web'
    })
  }
  t.match(first.attributes, {
    'cairn.run.status': 'requires_action',
    'cairn.run.resumed': false,
    'cairn.worker.id': firstWorker
  })
  t.match(second.attributes, {
    'cairn.run.status': 'succeeded',
    'cairn.run.resumed': true,
    'cairn.worker.id': b.runs.worker.instanceId
  })
  t.not(firstWorker, b.runs.worker.instanceId, 'two instances executed it')

  const childrenOf = (span: ReceivedSpan) =>
    spans.filter((s) => s.parentSpanId === span.spanId).sort((x, y) => x.startMs - y.startMs)
  t.same(
    childrenOf(first).map((s) => s.name),
    ['retrieval memory', 'chat trace-model', 'execute_tool shell'],
    'A: the recall, the model call (retried), the tool call that asked'
  )
  t.same(
    childrenOf(second).map((s) => s.name),
    ['execute_tool shell', 'chat trace-model'],
    'B: the approved call, then the model again'
  )

  const recall = childrenOf(first)[0]!
  t.match(recall.attributes, { 'gen_ai.operation.name': 'retrieval', 'cairn.memory.recall.count': 0 })
  t.notOk('gen_ai.retrieval.query.text' in recall.attributes, 'no content without the capture switch')

  const chat = childrenOf(first)[1]!
  t.match(chat, { kind: 3 })
  t.match(chat.attributes, {
    'gen_ai.operation.name': 'chat',
    'gen_ai.provider.name': 'openai',
    'gen_ai.request.model': 'trace-model',
    'gen_ai.usage.input_tokens': 11,
    'gen_ai.usage.output_tokens': 4,
    'gen_ai.response.finish_reasons': ['tool_calls']
  })
  t.notOk('gen_ai.input.messages' in chat.attributes, 'no prompt without the capture switch')
  t.same(
    chat.events.map((e) => [e.name, e.attributes['http.response.status_code'], e.attributes['cairn.retry.attempt']]),
    [['gen_ai.retry', 429, 1]],
    'the retry is an event of the call'
  )
  // every attempt told the model which span it answers
  t.equal(model.requests.length, 3)
  t.same(
    model.requests.slice(0, 2).map((h) => h.traceparent),
    [`00-${CLIENT_TRACE}-${chat.spanId}-01`, `00-${CLIENT_TRACE}-${chat.spanId}-01`],
    'traceparent sent to the provider, on the retry too'
  )
  const secondChat = childrenOf(second)[1]!
  t.equal(model.requests[2]!.traceparent, `00-${CLIENT_TRACE}-${secondChat.spanId}-01`)
  t.match(secondChat.attributes, { 'gen_ai.response.finish_reasons': ['stop'], 'gen_ai.usage.output_tokens': 5 })

  const asked = childrenOf(first)[2]!
  t.match(asked.attributes, {
    'gen_ai.operation.name': 'execute_tool',
    'gen_ai.tool.name': 'shell',
    'gen_ai.tool.call.id': 'call_1',
    'cairn.tool.status': 'pending',
    'cairn.approval.id': approvalId
  })
  const [wait, ...more] = childrenOf(asked)
  t.equal(more.length, 0)
  t.equal(wait?.name, 'await_approval shell', 'the wait for the person is its own span, under the call that asked')
  t.match(wait!.attributes, {
    'cairn.approval.id': approvalId,
    'cairn.approval.status': 'approved',
    'cairn.approval.decided_by': owner.user.id
  })
  t.ok(wait!.startMs >= asked.startMs && wait!.endMs <= second.endMs, 'it lasts from the ask to the decision')
  const ran = childrenOf(second)[0]!
  t.match(ran.attributes, { 'gen_ai.tool.name': 'shell', 'cairn.tool.status': 'ok', 'cairn.approval.id': approvalId })

  // the request's log line carries its span
  const line = logs.find((l) => l.msg === 'request' && l.url === '/api/runs' && l.method === 'POST')
  t.match(line, { trace_id: CLIENT_TRACE, span_id: request.spanId })
})

// what a span records does not depend on the database: the embedded pass only
t.test('with content capture on, prompts and answers are recorded, secrets redacted', embeddedOnly, async (t) => {
  const receiver = await startOtlpReceiver(t)
  const url = await startOpenAiUpstream(t, {
    models: ['trace-model'],
    chat(_body, stream) {
      const chat = stream()
      chat.delta({ content: 'The key is hunter2-secret-value.' })
      chat.end()
    }
  })
  const app = await buildTestApp(t, {
    env: {
      OPENAI_BASE_URL: url,
      MODELS: 'trace-model',
      RUN_POLL_MS: '50',
      OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `${receiver.endpoint}/v1/traces`,
      OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: 'true',
      SECRETS_KEY: newKeyText()
    }
  })
  const owner = await signUpWithOrg(app)
  const secret = await app.inject({
    method: 'PUT',
    url: '/api/secrets/API_KEY',
    headers: { cookie: owner.cookie },
    payload: { value: 'hunter2-secret-value' }
  })
  t.equal(secret.statusCode < 300, true, secret.body)
  const created = await app.inject({
    method: 'POST',
    url: '/api/runs',
    headers: { cookie: owner.cookie },
    payload: { prompt: 'say the key', engine: 'openai', model: 'trace-model', secrets: ['API_KEY'] }
  })
  t.equal(created.statusCode, 201, created.body)
  const runId: string = created.json().run.id
  t.match(await finishedRun(app, owner.cookie, runId), { status: 'succeeded' })
  const chat = await eventually(async () => {
    await app.telemetry.flush()
    return receiver.spans.find((s) => s.name === 'chat trace-model')
  }, 10_000)
  const input = String(chat!.attributes['gen_ai.input.messages'])
  const output = String(chat!.attributes['gen_ai.output.messages'])
  t.match(input, /say the key/, 'the prompt is recorded')
  t.match(output, /The key is \[secret:API_KEY\]\./, "the answer is recorded, the run's secret redacted")
  t.notMatch(output, /hunter2/)
  // a trace of its own: no client span came with the request
  const request = receiver.spans.find((s) => s.name === 'POST /api/runs')!
  t.equal(request.parentSpanId, null)
  t.equal(chat!.traceId, request.traceId)
})
