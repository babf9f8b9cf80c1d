import { and, eq } from 'drizzle-orm'
import t from 'tap'
import { memoryCaptures, memoryItems } from '../../src/memory/tables.js'
import { runs } from '../../src/runs/tables.js'
import { buildTestApp, mintKey, signUpWithOrg, type Teardown } from '../helper.js'
import { finishedRun, storedEventsOf } from '../runs/run-helpers.js'
import { eventually } from '../runs/sse-client.js'
import { startToolModel, type Answer } from '../runs/tool-model.js'
import { FAST } from './helpers.js'

// Memory with a real model: the remember tool, extraction, recall from the whole prompt,
// facts added by hand. A local OpenAI-compatible model answers from a script and records
// every request it gets.

type App = Awaited<ReturnType<typeof buildTestApp>>

async function setup(t: Teardown, env: Record<string, string> = {}) {
  const model = await startToolModel(t)
  const app = await buildTestApp(t, {
    env: { ...FAST, OPENAI_BASE_URL: model.url, MODELS: 'tool-model', RUN_POLL_MS: '50', ...env }
  })
  const owner = await signUpWithOrg(app)
  return { app, model, cookie: owner.cookie, orgId: owner.org.id, userId: owner.user.id }
}

const remember = (content: string, scope?: 'org' | 'personal', id = 'r1'): Answer => ({
  calls: [{ id, name: 'remember', arguments: JSON.stringify(scope ? { content, scope } : { content }) }]
})

async function startRun(
  app: App,
  headers: Record<string, string>,
  prompt: string,
  extra: Record<string, unknown> = {}
) {
  const res = await app.inject({
    method: 'POST',
    url: '/api/runs',
    headers,
    payload: { prompt, model: 'tool-model', ...extra }
  })
  if (res.statusCode !== 201) throw new Error(`create run: ${res.statusCode} ${res.body}`)
  return res.json().run.id as string
}

/** The pool's facts once the run's capture is delivered. */
const delivered = (app: App, orgId: string, runId: string) =>
  eventually(async () => {
    const [row] = await app.db
      .select()
      .from(memoryCaptures)
      .where(and(eq(memoryCaptures.orgId, orgId), eq(memoryCaptures.runId, runId)))
    return row?.state === 'delivered' ? row : null
  })

const browse = async (app: App, cookie: string, scope: 'org' | 'personal' = 'org') =>
  (await app.inject({ method: 'GET', url: `/api/memory/browse?scope=${scope}`, headers: { cookie } }))
    .json()
    .items.map((i: { content: string }) => i.content)

t.test('remember: the model keeps facts, org and personal, delivered when the run ends', async (t) => {
  const { app, model, cookie, orgId } = await setup(t)
  model.script.push(
    {
      calls: [
        { id: 'r1', name: 'remember', arguments: '{"content":"Our on-call rotation changes every Monday"}' },
        { id: 'r2', name: 'remember', arguments: '{"content":"Priya prefers short answers","scope":"personal"}' }
      ]
    },
    { text: 'Noted, I will remember both.' }
  )
  const runId = await startRun(
    app,
    { cookie },
    'Remember that our on-call rotation changes every Monday, and that I like short answers.'
  )
  const run = await finishedRun(app, cookie, runId)
  t.equal(run.status, 'succeeded', run.error ?? '')
  // the tool is offered with its schema, and answered
  const offered = model.requests[0]!.body.tools.find((d: any) => d.function.name === 'remember')
  t.match(offered, {
    type: 'function',
    function: { parameters: { required: ['content'], additionalProperties: false } }
  })
  const results = model.requests[1]!.body.messages.filter((m: any) => m.role === 'tool')
  t.match(JSON.parse(results[0].content), { remembered: true, scope: 'org' })
  t.match(JSON.parse(results[1].content), { remembered: true, scope: 'personal' })

  const capture = await delivered(app, orgId, runId)
  t.match(capture, { itemCount: 2, addedCount: 2, mergedCount: 0 })
  t.same(await browse(app, cookie), ['Our on-call rotation changes every Monday'])
  t.same(
    await browse(app, cookie, 'personal'),
    ['Priya prefers short answers'],
    "the personal fact is in the person's own pool"
  )
  const events = await storedEventsOf(app, orgId, runId)
  t.match(
    events.filter((e) => e.type === 'tool.result').map((e) => e.data),
    [
      { tool: 'remember', status: 'ok' },
      { tool: 'remember', status: 'ok' }
    ]
  )
  t.match(events.find((e) => e.type === 'memory.captured')?.data, { runId, itemCount: 2 })
  const [row] = await app.db.select({ remembered: runs.remembered }).from(runs).where(eq(runs.id, runId))
  t.same(row!.remembered, [
    { content: 'Our on-call rotation changes every Monday', scope: 'org' },
    { content: 'Priya prefers short answers', scope: 'personal' }
  ])

  // the same fact again, from another run: merged, not stored twice
  model.script.push(remember('our ON-CALL rotation changes every monday  '), { text: 'ok' })
  const again = await startRun(app, { cookie }, 'again')
  t.equal((await finishedRun(app, cookie, again)).status, 'succeeded')
  t.match(await delivered(app, orgId, again), { itemCount: 1, addedCount: 0, mergedCount: 1 })
  t.equal((await app.db.select().from(memoryItems).where(eq(memoryItems.orgId, orgId))).length, 2)
  const listed = (await app.inject({ method: 'GET', url: '/api/memory/captures', headers: { cookie } })).json().captures
  t.match(
    listed.find((c: { runId: string }) => c.runId === again),
    { addedCount: 0, mergedCount: 1 }
  )
})

t.test("remember: personal needs the run's real user; invalid calls and memory off keep nothing", async (t) => {
  const { app, model, cookie, orgId } = await setup(t)
  const key = await mintKey(app, cookie)
  model.script.push(
    remember('The key run likes tea', 'personal'),
    { calls: [{ id: 'bad', name: 'remember', arguments: '{"content":""}' }] },
    { text: 'done' }
  )
  const runId = await startRun(app, { authorization: key.authorization }, 'remember something personal')
  t.equal((await finishedRun(app, cookie, runId)).status, 'succeeded')
  const results = (await storedEventsOf(app, orgId, runId)).filter((e) => e.type === 'tool.result').map((e) => e.data)
  t.match(results[0], { tool: 'remember', status: 'error', content: /sign-in required/ })
  t.match(results[1], { tool: 'remember', status: 'error', content: /invalid arguments/ })
  t.equal(
    (await app.db.select().from(memoryCaptures).where(eq(memoryCaptures.runId, runId))).length,
    0,
    'nothing to capture'
  )

  await app.inject({ method: 'PUT', url: '/api/memory/settings', headers: { cookie }, payload: { enabled: false } })
  model.script.push(remember('Kept while memory is off?'), { text: 'done' })
  const asked = model.requests.length
  const off = await startRun(app, { cookie }, 'remember this')
  t.equal((await finishedRun(app, cookie, off)).status, 'succeeded')
  const offeredWhileOff = model.requests[asked]!.body.tools.map((d: any) => d.function.name)
  t.notOk(offeredWhileOff.includes('remember'), `remember is not offered while memory is off: ${offeredWhileOff}`)
  t.ok(offeredWhileOff.includes('shell'), 'the other tools are')
  // a model that calls it anyway (it saw it in an earlier turn) is told, and nothing is kept
  t.match((await storedEventsOf(app, orgId, off)).find((e) => e.type === 'tool.result')?.data, {
    status: 'error',
    content: /memory is off/
  })

  // memory on again: offered again
  await app.inject({ method: 'PUT', url: '/api/memory/settings', headers: { cookie }, payload: { enabled: true } })
  model.script.push({ text: 'on again' })
  const on = await startRun(app, { cookie }, 'hello again')
  t.equal((await finishedRun(app, cookie, on)).status, 'succeeded')
  t.ok(
    model.requests.at(-1)!.body.tools.some((d: any) => d.function.name === 'remember'),
    'remember is offered while memory is on'
  )

  // a run whose tools leave remember out is not offered it
  model.script.push({ text: 'no tools here' })
  const subset = await startRun(app, { cookie }, 'hello', { tools: ['memory_search'] })
  t.equal((await finishedRun(app, cookie, subset)).status, 'succeeded')
  t.same(
    model.requests.at(-1)!.body.tools.map((d: any) => d.function.name),
    ['memory_search']
  )
})

t.test('remember: a run cancelled after it remembered still delivers its facts', async (t) => {
  const { app, model, cookie, orgId } = await setup(t)
  let release!: () => void
  const held = new Promise<void>((resolve) => {
    release = resolve
  })
  model.script.push(remember('Deploys freeze on Fridays'), { text: 'never sent', after: held })
  const runId = await startRun(app, { cookie }, 'remember the freeze, then think long')
  // the fact is kept on the run, then the run is cancelled while the model thinks
  await eventually(async () => (await storedEventsOf(app, orgId, runId)).some((e) => e.type === 'tool.result'))
  t.equal((await app.inject({ method: 'POST', url: `/api/runs/${runId}/cancel`, headers: { cookie } })).statusCode, 200)
  t.equal((await finishedRun(app, cookie, runId)).status, 'cancelled')
  release()
  await delivered(app, orgId, runId)
  t.same(await browse(app, cookie), ['Deploys freeze on Fridays'])
})

t.test('extraction: one json_object call after a succeeded run; a bad answer is an event, not a failure', async (t) => {
  const { app, model, cookie, orgId } = await setup(t)
  t.same(
    (await app.inject({ method: 'GET', url: '/api/memory/settings', headers: { cookie } })).json().extract,
    false,
    'off by default'
  )
  const put = await app.inject({
    method: 'PUT',
    url: '/api/memory/settings',
    headers: { cookie },
    payload: { enabled: true, extract: true }
  })
  t.equal(put.statusCode, 200)
  t.match(put.json(), { enabled: true, extract: true })
  // {enabled} alone leaves extraction as it is
  t.match(
    (
      await app.inject({ method: 'PUT', url: '/api/memory/settings', headers: { cookie }, payload: { enabled: true } })
    ).json(),
    { extract: true }
  )

  const facts = [
    'Priya leads the platform team',
    'x'.repeat(501),
    ...Array.from({ length: 12 }, (_, i) => `Fact number ${i}`)
  ]
  model.script.push({ text: 'Hi Priya, nice to meet the platform lead.' }, { text: JSON.stringify({ facts }) })
  const runId = await startRun(app, { cookie }, 'My name is Priya and I lead the platform team.')
  const run = await finishedRun(app, cookie, runId)
  t.equal(run.status, 'succeeded')
  t.equal(run.output, 'Hi Priya, nice to meet the platform lead.', 'the output is the answer, not the extraction')
  const extraction = model.requests[1]!.body
  t.same(extraction.response_format, { type: 'json_object' })
  t.notOk(extraction.tools, 'no tools for the extraction call')
  t.match(extraction.messages.at(-1).content, /My name is Priya[\s\S]*Hi Priya, nice to meet/)
  const capture = await delivered(app, orgId, runId)
  t.equal(capture.itemCount, 10, 'at most 10 facts, none longer than 500 characters')
  t.same((capture.facts as string[]).slice(0, 2), ['Priya leads the platform team', 'Fact number 0'])
  t.same(run.usage, { inputTokens: 10, outputTokens: 4 }, 'the extraction call is metered with the run')

  model.script.push({ text: 'Sure.' }, { text: 'not json at all' })
  const bad = await startRun(app, { cookie }, 'Another message')
  t.equal((await finishedRun(app, cookie, bad)).status, 'succeeded', 'a failed extraction never fails the run')
  const events = await storedEventsOf(app, orgId, bad)
  t.match(events.find((e) => e.type === 'memory.extract_failed')?.data, { error: /JSON object/ })
  t.same(events.at(-1)!.type, 'run.succeeded')

  model.script.push({ text: 'Fine.' })
  const down = await startRun(app, { cookie }, 'A third message')
  // the script is empty: the extraction call is answered with a tool call, not JSON
  t.equal((await finishedRun(app, cookie, down)).status, 'succeeded')
  t.ok((await storedEventsOf(app, orgId, down)).some((e) => e.type === 'memory.extract_failed'))
})

t.test('extraction in a thread sees the earlier turns, so a fact keeps its subject', async (t) => {
  const { app, model, cookie } = await setup(t)
  await app.inject({
    method: 'PUT',
    url: '/api/memory/settings',
    headers: { cookie },
    payload: { enabled: true, extract: true }
  })
  model.script.push({ text: 'Noted.' }, { text: JSON.stringify({ facts: ['The pager tool is called Beacon'] }) })
  const first = await startRun(app, { cookie }, 'Our pager tool is called Beacon.')
  t.equal((await finishedRun(app, cookie, first)).status, 'succeeded')
  const alone = model.requests[1]!.body.messages
  t.notMatch(alone.at(-1).content, /Earlier in this conversation/, 'a first turn has no context')
  model.script.push(
    { text: 'Got it.' },
    { text: JSON.stringify({ facts: ['Beacon pages the on-call every 5 minutes'] }) }
  )
  const second = await startRun(app, { cookie }, 'It pages the on-call every 5 minutes.', { rootRunId: first })
  t.equal((await finishedRun(app, cookie, second)).status, 'succeeded')
  const asked = model.requests[3]!.body
  t.same(asked.response_format, { type: 'json_object' })
  // (the OpenAI wire's line asking for JSON comes first, then the extraction's own instructions)
  t.match(
    asked.messages.filter((m: { role: string }) => m.role === 'system').map((m: { content: string }) => m.content),
    [/JSON/, /use the earlier turns to say what it refers to/]
  )
  t.equal(
    asked.messages.at(-1).content,
    'Earlier in this conversation:\nPerson: Our pager tool is called Beacon.\n\nAssistant: Noted.\n\n' +
      'The latest exchange:\nPerson: It pages the on-call every 5 minutes.\n\nAssistant: Got it.'
  )
})

t.test('extraction of a run that went on after a decision sees the earlier turns like a fresh run', async (t) => {
  const { app, model, cookie } = await setup(t)
  await app.inject({
    method: 'PUT',
    url: '/api/memory/settings',
    headers: { cookie },
    payload: { enabled: true, extract: true }
  })
  model.script.push({ text: 'Noted.' }, { text: JSON.stringify({ facts: ['The pager tool is called Beacon'] }) })
  const first = await startRun(app, { cookie }, 'Our pager tool is called Beacon.')
  t.equal((await finishedRun(app, cookie, first)).status, 'succeeded')
  // the second turn asks for a call a person must decide: the run leaves its worker, then goes on
  model.script.push(
    { calls: [{ id: 'call_wait', name: 'shell', arguments: '{"command":"date"}' }] },
    { text: 'Got it.' },
    { text: JSON.stringify({ facts: ['Beacon pages the on-call every 5 minutes'] }) }
  )
  const second = await startRun(app, { cookie }, 'It pages the on-call every 5 minutes.', { rootRunId: first })
  const pending = await eventually(async () => {
    const res = await app.inject({ method: 'GET', url: `/api/runs/${second}/approvals`, headers: { cookie } })
    return res.json().items.find((a: { status: string }) => a.status === 'pending') as { id: string } | undefined
  })
  const decided = await app.inject({
    method: 'POST',
    url: `/api/runs/${second}/approvals/${pending.id}`,
    headers: { cookie },
    payload: { decision: 'deny' }
  })
  t.equal(decided.statusCode, 200)
  const ended = await finishedRun(app, cookie, second)
  t.equal(ended.status, 'succeeded', ended.error ?? '')
  const asked = model.requests.at(-1)!.body
  t.same(asked.response_format, { type: 'json_object' }, 'the last call is the extraction')
  t.equal(
    asked.messages.at(-1).content,
    'Earlier in this conversation:\nPerson: Our pager tool is called Beacon.\n\nAssistant: Noted.\n\n' +
      'The latest exchange:\nPerson: It pages the on-call every 5 minutes.\n\nAssistant: Got it.',
    "the resumed run's extraction was given the thread's earlier turn"
  )
})

t.test(
  "recall: the whole prompt's significant words, at most MEMORY_RECALL_LIMIT facts, in one system message",
  async (t) => {
    const { app, model, cookie, orgId } = await setup(t, { MEMORY_RECALL_LIMIT: '2' })
    for (const content of [
      'The staging database is refreshed nightly',
      'Kubernetes upgrades happen in March',
      'Lunch is at noon',
      'The staging cluster runs Kubernetes 1.30'
    ]) {
      t.equal(
        (await app.inject({ method: 'POST', url: '/api/memory/items', headers: { cookie }, payload: { content } }))
          .statusCode,
        201
      )
    }
    // the subject comes late in a long prompt: the first eight words say nothing
    const prompt =
      'Hello, could you please help me with something that I have been wondering about for a while now: when is the staging database refreshed?'
    model.script.push({ text: 'Nightly.' })
    const runId = await startRun(app, { cookie }, prompt)
    t.equal((await finishedRun(app, cookie, runId)).status, 'succeeded')
    const system = model.requests[0]!.body.messages.filter((m: any) => m.role === 'system')
    t.equal(system.length, 1, 'one system message')
    t.match(system[0].content, /The staging database is refreshed nightly/)
    t.equal(system[0].content.split('\n- ').length - 1, 2, 'MEMORY_RECALL_LIMIT facts')
    t.notMatch(system[0].content, /Lunch/)
    const recalled = (await storedEventsOf(app, orgId, runId)).find((e) => e.type === 'memory.recalled')!.data
    t.match(recalled, { count: 2 })
    t.notMatch(recalled.query, /\b(could|please|with|that)\b/, 'stop words are left out')
    t.match(recalled.query, /staging/)
    t.match(recalled.query, /database/)
    t.match(recalled.query, /refreshed/)
  }
)

t.test('POST /api/memory/items: a person adds a fact; the same rules as PATCH', async (t) => {
  const { app, cookie, userId } = await setup(t)
  const added = await app.inject({
    method: 'POST',
    url: '/api/memory/items',
    headers: { cookie },
    payload: { content: '  The VPN is at vpn.example.com  ' }
  })
  t.equal(added.statusCode, 201)
  const { item } = added.json()
  t.match(item, { content: 'The VPN is at vpn.example.com', sourceScope: 'org', background: false, sourceRunId: null })
  t.same(Object.keys(item).sort(), [
    'background',
    'content',
    'createdAt',
    'embedding',
    'id',
    'sourceRunId',
    'sourceScope',
    'updatedAt'
  ])
  const history = (
    await app.inject({ method: 'GET', url: `/api/memory/item/${item.id}/history`, headers: { cookie } })
  ).json().history
  t.match(history, [{ kind: 'created', content: 'The VPN is at vpn.example.com' }])
  const twice = await app.inject({
    method: 'POST',
    url: '/api/memory/items',
    headers: { cookie },
    payload: { content: 'the vpn is at VPN.example.com' }
  })
  t.equal(twice.statusCode, 409, 'the pool holds it already')
  t.equal(twice.json().error, 'conflict')
  // a corrected fact's history names the person, not their id
  const corrected = await app.inject({
    method: 'PATCH',
    url: `/api/memory/item/${item.id}`,
    headers: { cookie },
    payload: { content: 'The VPN is at vpn2.example.com' }
  })
  t.equal(corrected.statusCode, 200, corrected.body)
  const named = (
    await app.inject({ method: 'GET', url: `/api/memory/item/${item.id}/history`, headers: { cookie } })
  ).json().history
  t.match(named, [
    { kind: 'created', changedBy: userId, changedByName: 'Test User' },
    { kind: 'updated', changedBy: userId, changedByName: 'Test User', content: 'The VPN is at vpn2.example.com' }
  ])

  const personal = await app.inject({
    method: 'POST',
    url: '/api/memory/items',
    headers: { cookie },
    payload: { scope: 'personal', content: 'I am on call this week' }
  })
  t.equal(personal.statusCode, 201)
  t.equal(personal.json().item.sourceScope, 'personal')
  t.same(await browse(app, cookie, 'personal'), ['I am on call this week'])
  for (const scope of ['team', 'persnal', 'ORG', '']) {
    const typo = await app.inject({
      method: 'POST',
      url: '/api/memory/items',
      headers: { cookie },
      payload: { scope, content: 'my private note' }
    })
    t.equal(typo.statusCode, 400, `scope ${JSON.stringify(scope)} is refused`)
    t.match(typo.json(), { error: 'validation_failed', details: [{ path: '/body/scope' }] })
  }
  t.notOk((await browse(app, cookie, 'org')).includes('my private note'), 'nothing was written into the shared pool')

  // the dev org (no real user) fails closed on personal; a key cannot write memory
  const dev = await app.inject({
    method: 'POST',
    url: '/api/memory/items',
    payload: { scope: 'personal', content: 'x' }
  })
  t.equal(dev.statusCode, 403)
  t.equal(dev.json().error, 'sign-in required')
  const key = await mintKey(app, cookie)
  t.equal(
    (
      await app.inject({
        method: 'POST',
        url: '/api/memory/items',
        headers: { authorization: key.authorization },
        payload: { content: 'from a key' }
      })
    ).statusCode,
    401,
    'keys never write memory'
  )
  for (const payload of [
    {},
    { content: '' },
    { content: '   ' },
    { content: 'x'.repeat(4001) },
    { content: 'ok', extra: 1 }
  ]) {
    const bad = await app.inject({ method: 'POST', url: '/api/memory/items', headers: { cookie }, payload })
    t.equal(bad.statusCode, 400, JSON.stringify(payload).slice(0, 40))
  }
  await app.inject({ method: 'PUT', url: '/api/memory/settings', headers: { cookie }, payload: { enabled: false } })
  const off = await app.inject({
    method: 'POST',
    url: '/api/memory/items',
    headers: { cookie },
    payload: { content: 'while off' }
  })
  t.equal(off.statusCode, 403)
  t.equal(off.json().error, 'memory disabled')
  t.same((await app.inject({ method: 'GET', url: '/api/memory/browse', headers: { cookie } })).json().items, [])
})
