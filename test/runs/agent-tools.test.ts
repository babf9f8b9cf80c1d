import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { eq } from 'drizzle-orm'
import t from 'tap'
import { newId } from '../../src/db/ids.js'
import { runs } from '../../src/runs/tables.js'
import { toolApprovals } from '../../src/runtime/tables.js'
import artifactsRoutes from '../../src/artifacts/index.js'
import knowledgeRoutes from '../../src/knowledge/index.js'
import skillsRoutes from '../../src/skills/index.js'
import { createTestDatabase, secondHandle, signUpWithOrg, type Teardown } from '../helper.js'
import { buildRunsApp, type RunsGroupOptions } from './group.js'
import { shellCall, startToolModel, type Answer } from './tool-model.js'
import { finishedRun, storedEventsOf } from './run-helpers.js'
import { eventually } from './sse-client.js'

type App = Awaited<ReturnType<typeof buildRunsApp>>

/**
 * Runs that call tools: the runs group with the runtime (its routes: approvals, tool policies),
 * and the groups the tools reach, with the routes the tests read what they did through
 * (artifacts, knowledge drafts, skill proposals).
 */
const buildToolsApp = (t: Teardown, options: Pick<RunsGroupOptions, 'env' | 'db'>) =>
  buildRunsApp(t, {
    ...options,
    knowledge: true,
    runtime: true,
    routes: [artifactsRoutes, knowledgeRoutes, skillsRoutes]
  })

async function setup(t: Teardown, env: Record<string, string> = {}) {
  const upstream = await startToolModel(t)
  const dataDir = await mkdtemp(join(tmpdir(), 'cairn-agent-tools-'))
  t.teardown(() => rm(dataDir, { recursive: true, force: true }))
  const app = await buildToolsApp(t, {
    env: {
      OPENAI_BASE_URL: upstream.url,
      MODELS: 'tool-model',
      RUN_POLL_MS: '50',
      DATA_DIR: dataDir,
      SANDBOX_UNCONFINED: 'true',
      ...env
    }
  })
  const owner = await signUpWithOrg(app)
  return { app, upstream, cookie: owner.cookie, orgId: owner.org.id }
}

async function startRun(app: App, cookie: string, prompt: string): Promise<string> {
  const res = await app.inject({
    method: 'POST',
    url: '/api/runs',
    headers: { cookie },
    payload: { prompt, engine: 'openai' }
  })
  if (res.statusCode !== 201) throw new Error(`create run: ${res.statusCode} ${res.body}`)
  return res.json().run.id
}

const finished = finishedRun
const eventsOf = storedEventsOf

/** The approval a run waits for: the run is read with ?wait= (it answers once the run waits for
 * a person or has ended), so a run that ended instead fails here with its status and error. */
async function pendingApproval(app: App, cookie: string, orgId: string, runId: string) {
  const run = await eventually(async () => {
    const res = await app.inject({ method: 'GET', url: `/api/runs/${runId}?wait=30`, headers: { cookie } })
    const current = res.json().run
    return ['queued', 'running'].includes(current.status) ? null : current
  }, 90_000)
  if (run.status !== 'requires_action')
    throw new Error(`run ${runId} is ${run.status}, not requires_action: ${run.error ?? ''}`)
  return eventually(async () => (await eventsOf(app, orgId, runId)).find((e) => e.type === 'approval.requested')?.data)
}

t.test('an approved shell call runs in the sandbox and its output goes back to the model', async (t) => {
  const { app, upstream, cookie, orgId } = await setup(t)
  // (GET /api/config reporting it is test/runtime/gateway-tools.test.ts's)
  t.not(app.runtime.sandboxes, null, 'the tool gateway is on: runs are offered tools')
  upstream.script.push(shellCall('echo hello-from-sandbox'), { text: 'The sandbox said hello.' })
  const runId = await startRun(app, cookie, 'say hello from the sandbox')

  const requested = await pendingApproval(app, cookie, orgId, runId)
  t.match(requested, { callId: 'call_1', tool: 'shell', arguments: { command: 'echo hello-from-sandbox' } })
  const listed = await app.inject({ method: 'GET', url: `/api/runs/${runId}/approvals`, headers: { cookie } })
  t.equal(listed.statusCode, 200)
  t.match(listed.json().items, [{ id: requested.approvalId, status: 'pending', tool: 'shell', callId: 'call_1' }])
  t.equal(listed.json().items.length, 1)

  const decided = await app.inject({
    method: 'POST',
    url: `/api/runs/${runId}/approvals/${requested.approvalId}`,
    headers: { cookie },
    payload: { decision: 'approve' }
  })
  t.equal(decided.statusCode, 200, decided.body)
  const run = await finished(app, cookie, runId)
  t.equal(run.status, 'succeeded', run.error ?? '')

  const events = await eventsOf(app, orgId, runId)
  const types = events.map((e) => e.type)
  for (const type of [
    'tool.call',
    'approval.requested',
    'approval.resolved',
    'tool.result',
    'message.completed',
    'run.succeeded'
  ])
    t.ok(types.includes(type), type)
  t.ok(types.indexOf('tool.call') < types.indexOf('tool.result'))
  t.match(events.find((e) => e.type === 'tool.call')!.data, {
    callId: 'call_1',
    tool: 'shell',
    arguments: { command: 'echo hello-from-sandbox' }
  })
  const result = events.find((e) => e.type === 'tool.result')!.data
  t.match(result, { callId: 'call_1', status: 'ok', approvalId: requested.approvalId })
  t.match(result.content, /hello-from-sandbox/)
  t.match(events.find((e) => e.type === 'message.completed')!.data, { text: 'The sandbox said hello.' })
  t.ok(
    events.some((e) => e.type === 'message.delta'),
    'text is streamed as deltas'
  )

  // the transcript goes on across the wait: the round stored when the run left its worker, then the rest
  const items = (await app.inject({ method: 'GET', url: `/api/runs/${runId}/messages`, headers: { cookie } })).json()
    .items
  t.same(
    items.map((m: any) => m.role),
    ['user', 'assistant', 'tool', 'assistant']
  )
  t.match(items[1].toolCalls, [{ id: 'call_1', name: 'shell', arguments: '{"command":"echo hello-from-sandbox"}' }])
  t.match(items[2], { toolCallId: 'call_1', name: 'shell', content: /hello-from-sandbox/ })
  t.equal(items[3].content, 'The sandbox said hello.')

  t.equal(upstream.requests.length, 2)
  const first = upstream.requests[0]!.body
  t.same(
    first.tools.map((d: any) => d.function.name),
    [
      'shell',
      'read_file',
      'write_file',
      'list_files',
      'memory_search',
      'write_artifact',
      'knowledge_search',
      'propose_knowledge',
      'propose_skill',
      'remember'
    ]
  )
  const second = upstream.requests[1]!.body.messages
  t.match(second.at(-2), {
    role: 'assistant',
    tool_calls: [
      {
        id: 'call_1',
        type: 'function',
        function: { name: 'shell', arguments: '{"command":"echo hello-from-sandbox"}' }
      }
    ]
  })
  t.match(second.at(-1), { role: 'tool', tool_call_id: 'call_1', content: /hello-from-sandbox/ })
  t.same(
    events.find((e) => e.type === 'run.succeeded')!.data,
    { usage: { promptTokens: 10, completionTokens: 4 } },
    'usage of both model calls'
  )
})

t.test('a denied call answers the model with the denial; the run completes', async (t) => {
  const { app, upstream, cookie, orgId } = await setup(t)
  upstream.script.push(shellCall('rm -rf /tmp/nothing'), { text: 'Understood, I will not.' })
  const runId = await startRun(app, cookie, 'clean up')
  const requested = await pendingApproval(app, cookie, orgId, runId)
  const denied = await app.inject({
    method: 'POST',
    url: `/api/runs/${runId}/approvals/${requested.approvalId}`,
    headers: { cookie },
    payload: { decision: 'deny' }
  })
  t.equal(denied.statusCode, 200, denied.body)
  const run = await finished(app, cookie, runId)
  t.equal(run.status, 'succeeded')
  const result = (await eventsOf(app, orgId, runId)).find((e) => e.type === 'tool.result')!.data
  t.match(result, { status: 'denied', content: /denied/ })
  t.match(upstream.requests[1]!.body.messages.at(-1), { role: 'tool', tool_call_id: 'call_1', content: /denied/ })
  const [row] = await app.db.select().from(toolApprovals).where(eq(toolApprovals.id, requested.approvalId))
  t.equal(row!.status, 'denied')
})

t.test('cancelling a run that waits for approval ends it cancelled and drops the approval', async (t) => {
  const { app, upstream, cookie, orgId } = await setup(t)
  upstream.script.push(shellCall('echo never'), { text: 'unreachable' })
  const runId = await startRun(app, cookie, 'wait for me')
  const requested = await pendingApproval(app, cookie, orgId, runId)
  const cancel = await app.inject({ method: 'POST', url: `/api/runs/${runId}/cancel`, headers: { cookie } })
  t.equal(cancel.statusCode, 200)
  const run = await finished(app, cookie, runId)
  t.equal(run.status, 'cancelled')
  const [row] = await app.db.select().from(toolApprovals).where(eq(toolApprovals.id, requested.approvalId))
  t.equal(row!.status, 'cancelled', 'the approval is no longer pending')
  const listed = (await app.inject({ method: 'GET', url: `/api/runs/${runId}/approvals`, headers: { cookie } })).json()
  t.same(
    listed.items.map((a: { status: string }) => a.status),
    ['cancelled']
  )
  const late = await app.inject({
    method: 'POST',
    url: `/api/runs/${runId}/approvals/${requested.approvalId}`,
    headers: { cookie },
    payload: { decision: 'approve' }
  })
  t.equal(late.statusCode, 409, 'a dropped approval cannot be decided')
  t.equal(upstream.requests.length, 1, 'the model was not asked again')
  const types = (await eventsOf(app, orgId, runId)).map((e) => e.type)
  t.equal(types.at(-1), 'run.cancelled')
  t.notOk(types.includes('run.succeeded'))
})

t.test('policy auto runs the call without approval', async (t) => {
  const { app, upstream, cookie, orgId } = await setup(t)
  const set = await app.inject({
    method: 'PUT',
    url: '/api/tools/policies/shell',
    headers: { cookie },
    payload: { mode: 'auto' }
  })
  t.equal(set.statusCode, 200, set.body)
  upstream.script.push(
    {
      calls: [
        { id: 'a', name: 'shell', arguments: '{"command":"echo one"}' },
        { id: 'b', name: 'list_files', arguments: '{}' }
      ]
    },
    { text: 'done' }
  )
  const runId = await startRun(app, cookie, 'run it')
  const run = await finished(app, cookie, runId)
  t.equal(run.status, 'succeeded', run.error ?? '')
  const events = await eventsOf(app, orgId, runId)
  t.notOk(
    events.some((e) => e.type === 'approval.requested'),
    'no approval was asked'
  )
  t.same(
    events.filter((e) => e.type === 'tool.result').map((e) => [e.data.callId, e.data.status]),
    [
      ['a', 'ok'],
      ['b', 'ok']
    ]
  )
  const messages = upstream.requests[1]!.body.messages
  t.match(messages.slice(-3), [
    { role: 'assistant', tool_calls: [{ id: 'a' }, { id: 'b' }] },
    { role: 'tool', tool_call_id: 'a', content: /one/ },
    { role: 'tool', tool_call_id: 'b' }
  ])
  t.equal((await app.db.select().from(toolApprovals).where(eq(toolApprovals.runId, runId))).length, 0)
})

t.test('policy deny: the tool is never offered, a call naming it anyway is refused and never run', async (t) => {
  const { app, upstream, cookie, orgId } = await setup(t)
  const set = await app.inject({
    method: 'PUT',
    url: '/api/tools/policies/shell',
    headers: { cookie },
    payload: { mode: 'deny' }
  })
  t.equal(set.statusCode, 200, set.body)
  const list = await app.inject({ method: 'GET', url: '/api/tools/policies', headers: { cookie } })
  t.match(
    list.json().items.find((p: { tool: string }) => p.tool === 'shell'),
    { mode: 'deny', isDefault: false }
  )
  const bad = await app.inject({
    method: 'PUT',
    url: '/api/tools/policies/shell',
    headers: { cookie },
    payload: { mode: 'never' }
  })
  t.equal(bad.statusCode, 400, 'a mode outside auto, approve and deny')
  t.equal(bad.json().error, 'validation_failed')
  upstream.script.push({ calls: [{ id: 'a', name: 'shell', arguments: '{"command":"echo ran"}' }] }, { text: 'done' })
  const runId = await startRun(app, cookie, 'run it')
  const run = await finished(app, cookie, runId)
  t.equal(run.status, 'succeeded', run.error ?? '')
  const offered = (upstream.requests[0]!.body.tools as Array<{ function: { name: string } }>).map(
    (d) => d.function.name
  )
  t.notOk(offered.includes('shell'), 'shell is not offered')
  t.ok(offered.includes('list_files'), 'the other tools still are')
  const events = await eventsOf(app, orgId, runId)
  t.notOk(
    events.some((e) => e.type === 'approval.requested' || (e.type === 'tool.result' && e.data.status === 'ok')),
    'nothing ran and nobody was asked'
  )
  const answer = upstream.requests[1]!.body.messages.at(-1)
  t.match(answer, { role: 'tool', tool_call_id: 'a', content: /not available/ })
  t.notMatch(answer.content, /ran/)
  // back to approve: offered again
  await app.inject({ method: 'PUT', url: '/api/tools/policies/shell', headers: { cookie }, payload: { mode: 'auto' } })
  upstream.script.push({ text: 'plain' })
  const next = await startRun(app, cookie, 'again')
  t.equal((await finished(app, cookie, next)).status, 'succeeded')
  t.ok(
    (upstream.requests.at(-1)!.body.tools as Array<{ function: { name: string } }>).some(
      (d) => d.function.name === 'shell'
    )
  )
})

t.test('output cut at its limit ends with a marker the model reads: how much it saw of how much', async (t) => {
  const { app, upstream, cookie, orgId } = await setup(t, { TOOL_OUTPUT_MAX_BYTES: '1024' })
  await app.inject({ method: 'PUT', url: '/api/tools/policies/shell', headers: { cookie }, payload: { mode: 'auto' } })
  await app.inject({
    method: 'PUT',
    url: '/api/tools/policies/read_file',
    headers: { cookie },
    payload: { mode: 'auto' }
  })
  upstream.script.push(
    shellCall('head -c 5000 /dev/zero | tr "\\0" x; head -c 3000 /dev/zero | tr "\\0" y > big.txt', 'a'),
    { calls: [{ id: 'b', name: 'read_file', arguments: '{"path":"big.txt"}' }] },
    shellCall('echo short', 'c'),
    { text: 'done' }
  )
  const runId = await startRun(app, cookie, 'make noise')
  const run = await finished(app, cookie, runId)
  t.equal(run.status, 'succeeded', run.error ?? '')
  const toolMessage = (request: number) => upstream.requests[request]!.body.messages.at(-1)
  const shell = toolMessage(1)
  t.equal(shell.tool_call_id, 'a')
  // "exit code 0\n" and 5000 x: 5012 bytes produced
  const [, shown, total] = /\n\[output truncated: (\d+) of (\d+) bytes\]$/.exec(shell.content) ?? []
  t.equal(total, '5012', `the model read the marker: ${shell.content.slice(-60)}`)
  t.equal(
    Number(shown),
    Buffer.byteLength(shell.content.slice(0, shell.content.lastIndexOf('\n['))),
    'N is what it saw'
  )
  t.ok(Buffer.byteLength(shell.content) <= 1024, 'the marker is within the limit')
  const read = toolMessage(2)
  t.equal(read.tool_call_id, 'b')
  t.match(read.content, /^y+\n\[output truncated: \d+ of 3000 bytes\]$/, 'a file read past the limit says so too')
  t.equal(toolMessage(3).content, 'exit code 0\nshort\n', 'output within the limit has no marker')
  const results = (await eventsOf(app, orgId, runId)).filter((e) => e.type === 'tool.result')
  t.same(
    results.map((e) => e.data.truncated),
    [true, true, false]
  )
  t.match(results[0]!.data.content, /\[output truncated: \d+ of 5012 bytes\]$/, 'the event shows what the model saw')
})

t.test('a model that keeps asking for tools fails the run after OPENAI_MAX_TOOL_ROUNDS', async (t) => {
  const { app, upstream, cookie, orgId } = await setup(t, { OPENAI_MAX_TOOL_ROUNDS: '2' })
  await app.inject({ method: 'PUT', url: '/api/tools/policies/shell', headers: { cookie }, payload: { mode: 'auto' } })
  const runId = await startRun(app, cookie, 'loop forever') // the script is empty: it always asks again
  const run = await finished(app, cookie, runId)
  t.equal(run.status, 'failed')
  t.match(run.error, /tool_rounds_exceeded.*2 rounds/)
  t.equal(upstream.requests.length, 3, 'two rounds of tool results, then the third answer is refused')
  t.equal((await eventsOf(app, orgId, runId)).filter((e) => e.type === 'tool.result').length, 2)
})

t.test('without a sandbox the model is offered no tools', async (t) => {
  const { app, upstream, cookie } = await setup(t, { SANDBOX_PROVIDER: 'none' })
  upstream.script.push({ text: 'plain answer' })
  const runId = await startRun(app, cookie, 'hi')
  t.equal((await finished(app, cookie, runId)).status, 'succeeded')
  t.equal(upstream.requests[0]!.body.tools, undefined)
})

t.test('a cancel on another instance drops the approval the run waits for there', async (t) => {
  const upstream = await startToolModel(t)
  const dataDir = await mkdtemp(join(tmpdir(), 'cairn-agent-tools-'))
  t.teardown(() => rm(dataDir, { recursive: true, force: true }))
  const shared = await createTestDatabase(t)
  const second = await secondHandle(t, shared, 5)
  const env = {
    OPENAI_BASE_URL: upstream.url,
    MODELS: 'tool-model',
    RUN_POLL_MS: '50',
    DATA_DIR: dataDir,
    SANDBOX_UNCONFINED: 'true'
  }
  const a = await buildToolsApp(t, { db: shared, env })
  const b = await buildToolsApp(t, { db: second, env: { ...env, RUN_WORKER_CONCURRENCY: '0' } })
  const { cookie, org } = await signUpWithOrg(b)
  upstream.script.push(shellCall('echo never'), { text: 'unreachable' })
  const runId = await startRun(b, cookie, 'wait on A')
  const requested = await pendingApproval(a, cookie, org.id, runId)
  t.equal((await b.inject({ method: 'POST', url: `/api/runs/${runId}/cancel`, headers: { cookie } })).statusCode, 200)
  const run = await finished(b, cookie, runId)
  t.equal(run.status, 'cancelled')
  const [row] = await b.db.select().from(toolApprovals).where(eq(toolApprovals.id, requested.approvalId))
  t.equal(row!.status, 'cancelled')
  t.equal(upstream.requests.length, 1)
})

t.test("the worker_lost sweep drops the lost run's waiting approvals", async (t) => {
  const app = await buildToolsApp(t, {
    env: { RUN_WORKER_CONCURRENCY: '0', RUN_SWEEP_MS: '3600000', SANDBOX_UNCONFINED: 'true' }
  }) // this test sweeps itself
  const { org } = await signUpWithOrg(app)
  const runId = newId()
  // a run whose (crashed) worker's lease expired while a call waited for a person
  await app.db.insert(runs).values({
    id: runId,
    orgId: org.id,
    rootRunId: runId,
    engine: 'openai',
    prompt: 'x',
    status: 'running',
    origin: 'web',
    startedAt: new Date(Date.now() - 60_000),
    leaseOwner: 'gone',
    leaseExpiresAt: new Date(Date.now() - 1000)
  })
  const approvalId = newId()
  await app.db.insert(toolApprovals).values({
    id: approvalId,
    orgId: org.id,
    runId,
    rootRunId: runId,
    callId: 'c1',
    tool: 'shell',
    arguments: { command: 'true' },
    expiresAt: new Date(Date.now() + 600_000)
  })
  t.equal(await app.runs.sweeper.sweep(), 1)
  const [run] = await app.db.select().from(runs).where(eq(runs.id, runId))
  t.match(run, { status: 'failed', error: 'worker_lost' })
  const [row] = await app.db.select().from(toolApprovals).where(eq(toolApprovals.id, approvalId))
  t.equal(row!.status, 'cancelled')
})

t.test("write_artifact saves the model's file as the run's artifact and streams artifact.created", async (t) => {
  const { app, upstream, cookie, orgId } = await setup(t)
  const write = (content: string, id: string): Answer => ({
    calls: [{ id, name: 'write_artifact', arguments: JSON.stringify({ name: 'plan.md', content }) }]
  })
  upstream.script.push(write('# Plan\n1. write\n', 'w1'), write('# Plan\n1. write\n2. revise\n', 'w2'), {
    text: 'Saved the plan.'
  })
  const runId = await startRun(app, cookie, 'write a plan')
  const run = await finished(app, cookie, runId)
  t.equal(run.status, 'succeeded', run.error ?? '')
  const listed = (await app.inject({ method: 'GET', url: `/api/artifacts?runId=${runId}`, headers: { cookie } })).json()
    .items
  t.equal(listed.length, 1, 'the same name twice in a run is one artifact')
  t.match(listed[0], { name: 'plan.md', contentType: 'text/markdown', version: 2, runId })
  const content = await app.inject({
    method: 'GET',
    url: `/api/artifacts/${listed[0].id}/content`,
    headers: { cookie }
  })
  t.equal(content.body, '# Plan\n1. write\n2. revise\n')
  const events = await eventsOf(app, orgId, runId)
  t.same(
    events.filter((e) => e.type === 'artifact.created').map((e) => e.data),
    [
      { artifactId: listed[0].id, name: 'plan.md', version: 1 },
      { artifactId: listed[0].id, name: 'plan.md', version: 2 }
    ]
  )
  const result = events.find((e) => e.type === 'tool.result' && e.data.callId === 'w1')!.data
  t.match(result, { tool: 'write_artifact', status: 'ok' })
  t.same(JSON.parse(result.content), { artifactId: listed[0].id, name: 'plan.md', version: 1 })
})

t.test("knowledge_search finds the org's knowledge and propose_knowledge leaves a draft made by the run", async (t) => {
  const { app, upstream, cookie, orgId } = await setup(t)
  await app.inject({
    method: 'POST',
    url: '/api/knowledge',
    headers: { cookie },
    payload: { title: 'Release train', body: 'Releases leave every Tuesday at noon.' }
  })
  upstream.script.push(
    { calls: [{ id: 'k1', name: 'knowledge_search', arguments: JSON.stringify({ query: 'when do releases leave' }) }] },
    {
      calls: [
        {
          id: 'k2',
          name: 'propose_knowledge',
          arguments: JSON.stringify({ title: 'Hotfixes', body: 'Hotfixes may leave any day.', tags: ['release'] })
        }
      ]
    },
    { text: 'Releases leave on Tuesdays; I proposed a note on hotfixes.' }
  )
  const runId = await startRun(app, cookie, 'when do releases leave?')
  const run = await finished(app, cookie, runId)
  t.equal(run.status, 'succeeded', run.error ?? '')
  const events = await eventsOf(app, orgId, runId)
  const searched = events.find((e) => e.type === 'tool.result' && e.data.callId === 'k1')!.data
  t.match(searched, { tool: 'knowledge_search', status: 'ok' })
  const hits = JSON.parse(searched.content as string).items
  // the model reads plain text: no <mark> HTML (the console's search shows the marks)
  t.match(hits, [{ kind: 'record', title: 'Release train', snippet: 'Releases leave every Tuesday at noon.' }])
  t.notMatch(searched.content as string, /<\/?mark>|&lt;|&amp;/)
  const proposed = JSON.parse(
    events.find((e) => e.type === 'tool.result' && e.data.callId === 'k2')!.data.content as string
  )
  const drafts = (await app.inject({ method: 'GET', url: '/api/knowledge/drafts', headers: { cookie } })).json().items
  t.match(drafts, [
    {
      id: proposed.draftId,
      title: 'Hotfixes',
      body: 'Hotfixes may leave any day.',
      tags: ['release'],
      runId,
      createdBy: null,
      state: 'open'
    }
  ])
})

t.test('propose_skill leaves an open proposal made by the run, and says why when the file is invalid', async (t) => {
  const { app, upstream, cookie, orgId } = await setup(t)
  const skillMd =
    '---\nname: incident-summary\ndescription: Summarize an incident for the status page\n---\n\nKeep it to three sentences.'
  upstream.script.push(
    { calls: [{ id: 's1', name: 'propose_skill', arguments: JSON.stringify({ skillMd }) }] },
    {
      calls: [{ id: 's2', name: 'propose_skill', arguments: JSON.stringify({ skillMd: '---\nname: Bad Name\n---\n' }) }]
    },
    { text: 'I proposed a skill.' }
  )
  const runId = await startRun(app, cookie, 'learn how we write incident summaries')
  const run = await finished(app, cookie, runId)
  t.equal(run.status, 'succeeded', run.error ?? '')
  const events = await eventsOf(app, orgId, runId)
  const proposed = events.find((e) => e.type === 'tool.result' && e.data.callId === 's1')!.data
  t.match(proposed, { tool: 'propose_skill', status: 'ok' })
  const { proposalId } = JSON.parse(proposed.content as string)
  const proposals = (await app.inject({ method: 'GET', url: '/api/skills/proposals', headers: { cookie } })).json()
    .items
  t.match(proposals, [{ id: proposalId, skillMd, runId, createdBy: null, state: 'open', skillId: null }])
  const refused = events.find((e) => e.type === 'tool.result' && e.data.callId === 's2')!.data
  t.match(JSON.parse(refused.content as string), { refused: /line 2.*lowercase letters/ })
})
