import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { eq } from 'drizzle-orm'
import t from 'tap'
import { runs } from '../../src/runs/tables.js'
import { toolApprovals } from '../../src/runtime/tables.js'
import {
  addMember,
  createTestDatabase,
  mintKey,
  secondHandle,
  signUp,
  signUpWithOrg,
  type Teardown
} from '../helper.js'
import platformRoutes from '../../src/platform/index.js'
import { buildRunsApp, type RunsGroupOptions } from './group.js'
import { finishedRun, storedEventsOf } from './run-helpers.js'
import { eventually } from './sse-client.js'
import { shellCall, startToolModel, type ToolModel } from './tool-model.js'

/**
 * Approvals that free the worker: a run whose tool call needs a person's decision stores
 * its conversation, moves to `requires_action` and leaves its worker; once every call is
 * decided (or its approval expires) any worker goes on from the stored state, executing no
 * call twice and never asking the model the same round again.
 */

type App = Awaited<ReturnType<typeof buildRunsApp>>

/** Runs that call tools: the runs group with the runtime; the platform routes for the dashboard's counts. */
const buildToolsApp = (t: Teardown, options: Pick<RunsGroupOptions, 'env' | 'db'>) =>
  buildRunsApp(t, { ...options, runtime: true, routes: [platformRoutes] })

/** a shell command that counts its own executions in the thread's workspace */
const COUNTED = 'echo ran >> ran.txt; echo "executions: $(wc -l < ran.txt)"'

async function dataDir(t: Teardown): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'cairn-approvals-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  return dir
}

function envFor(model: ToolModel, dir: string, more: Record<string, string> = {}) {
  return {
    OPENAI_BASE_URL: model.url,
    MODELS: 'tool-model',
    RUN_POLL_MS: '50',
    DATA_DIR: dir,
    SANDBOX_UNCONFINED: 'true',
    RUN_WORKER_CONCURRENCY: '1',
    ...more
  }
}

async function setup(t: Teardown, more: Record<string, string> = {}) {
  const model = await startToolModel(t)
  const app = await buildToolsApp(t, { env: envFor(model, await dataDir(t), more) })
  const owner = await signUpWithOrg(app)
  return { app, model, cookie: owner.cookie, orgId: owner.org.id }
}

/** Instance A of two on one database (its owner signed up there); `next()` starts instance B. */
async function firstOfTwo(t: Teardown) {
  const model = await startToolModel(t)
  const dir = await dataDir(t)
  const shared = await createTestDatabase(t)
  const a = await buildToolsApp(t, { db: shared, env: envFor(model, dir) })
  const owner = await signUpWithOrg(a)
  const next = async (more: Record<string, string> = {}) =>
    buildToolsApp(t, { db: await secondHandle(t, shared, 5), env: envFor(model, dir, more) })
  return { model, a, next, cookie: owner.cookie, org: owner.org }
}

async function startRun(app: App, cookie: string, payload: Record<string, unknown>): Promise<string> {
  const res = await app.inject({ method: 'POST', url: '/api/runs', headers: { cookie }, payload })
  if (res.statusCode !== 201) throw new Error(`create run: ${res.statusCode} ${res.body}`)
  return res.json().run.id
}

const getRun = async (app: App, cookie: string, id: string) =>
  (await app.inject({ method: 'GET', url: `/api/runs/${id}`, headers: { cookie } })).json().run

/** the data of the run's `run.requires_action` event once it is stored */
const waiting = (app: App, orgId: string, runId: string, nth = 1) =>
  eventually(
    async () =>
      (await storedEventsOf(app, orgId, runId)).filter((e) => e.type === 'run.requires_action')[nth - 1]?.data,
    30_000
  )

const decide = (app: App, cookie: string, runId: string, approvalId: string, decision: 'approve' | 'deny') =>
  app.inject({
    method: 'POST',
    url: `/api/runs/${runId}/approvals/${approvalId}`,
    headers: { cookie },
    payload: { decision }
  })

t.test(
  'a run waiting for approval leaves its worker, shows requires_action and goes on from where it stopped',
  async (t) => {
    const { app, model, cookie, orgId } = await setup(t)
    model.script.push(shellCall(COUNTED), { text: 'The command ran once.' })
    const runId = await startRun(app, cookie, { prompt: 'run the counter', engine: 'openai' })

    const { approvalIds } = await waiting(app, orgId, runId)
    t.equal(approvalIds.length, 1, 'the event names the pending approval')
    const [approval] = await app.db.select().from(toolApprovals).where(eq(toolApprovals.id, approvalIds[0]))
    t.match(approval, { runId, status: 'pending', tool: 'shell', callId: 'call_1' })
    const run = await getRun(app, cookie, runId)
    t.match(run, {
      status: 'requires_action',
      output: null,
      finishedAt: null,
      usage: { inputTokens: 5, outputTokens: 2 }
    })
    t.equal(app.runs.worker.activeCount, 0, 'no worker slot is held')
    const [row] = await app.db.select().from(runs).where(eq(runs.id, runId))
    t.match(row, { leaseOwner: null, leaseExpiresAt: null })
    t.ok(row!.suspended, 'the conversation is stored with the run')

    // the one worker slot serves other runs meanwhile
    const other = await startRun(app, cookie, { prompt: 'echo me', engine: 'echo' })
    t.equal((await finishedRun(app, cookie, other)).status, 'succeeded', 'another run executed while this one waited')

    // the list, the wait and the dashboard know the status
    const listed = (
      await app.inject({ method: 'GET', url: '/api/runs?status=requires_action', headers: { cookie } })
    ).json()
    t.same(
      listed.items.map((r: { id: string }) => r.id),
      [runId]
    )
    const started = Date.now()
    const waited = await app.inject({ method: 'GET', url: `/api/runs/${runId}?wait=30`, headers: { cookie } })
    t.equal(waited.json().run.status, 'requires_action', 'a wait answers at once: the run needs a person')
    t.ok(Date.now() - started < 20_000)
    const dash = (await app.inject({ method: 'GET', url: '/api/dashboard', headers: { cookie } })).json()
    t.equal(dash.runs.byStatus.requires_action, 1)
    t.equal(dash.activeRuns, 1)
    t.equal(model.requests.length, 1)

    t.equal((await decide(app, cookie, runId, approvalIds[0], 'approve')).statusCode, 200)
    const done = await finishedRun(app, cookie, runId)
    t.match(done, { status: 'succeeded', output: 'The command ran once.', usage: { inputTokens: 10, outputTokens: 4 } })
    const events = await storedEventsOf(app, orgId, runId)
    const types = events.map((e) => e.type)
    t.same(
      types.filter((type) => type.startsWith('run.')),
      ['run.queued', 'run.started', 'run.requires_action', 'run.started', 'run.succeeded']
    )
    t.match(events.filter((e) => e.type === 'run.started')[1]!.data, { resumed: true })
    t.equal(types.filter((type) => type === 'tool.call').length, 1, 'the call was recorded once')
    const results = events.filter((e) => e.type === 'tool.result')
    t.equal(results.length, 1)
    t.match(results[0]!.data, {
      callId: 'call_1',
      status: 'ok',
      approvalId: approvalIds[0],
      content: /executions: 1\n/
    })

    t.equal(model.requests.length, 2, 'the round that asked for the tool was not asked again')
    const second = model.requests[1]!.body.messages
    t.match(second.at(-2), { role: 'assistant', tool_calls: [{ id: 'call_1', function: { name: 'shell' } }] })
    t.match(second.at(-1), { role: 'tool', tool_call_id: 'call_1', content: /executions: 1/ })
    t.equal(second.filter((m: { role: string }) => m.role === 'user').length, 1)
    const [after] = await app.db.select().from(runs).where(eq(runs.id, runId))
    t.match(after, { suspended: null, resumeAt: null })
  }
)

t.test(
  'calls of one round: those needing a decision are asked together, the rest run after them in order, a denial reaches the model',
  async (t) => {
    const { app, model, cookie, orgId } = await setup(t)
    model.script.push(
      {
        calls: [
          { id: 'a', name: 'shell', arguments: JSON.stringify({ command: 'echo first >> order.txt; cat order.txt' }) },
          { id: 'b', name: 'write_file', arguments: JSON.stringify({ path: 'b.txt', content: 'second' }) },
          { id: 'c', name: 'shell', arguments: JSON.stringify({ command: 'echo third >> order.txt' }) }
        ]
      },
      { text: 'done' }
    )
    await app.inject({
      method: 'PUT',
      url: '/api/tools/policies/write_file',
      headers: { cookie },
      payload: { mode: 'auto' }
    })
    const runId = await startRun(app, cookie, { prompt: 'three calls', engine: 'openai' })
    const { approvalIds } = await waiting(app, orgId, runId)
    t.equal(approvalIds.length, 2, 'both shell calls are asked at once')
    let events = await storedEventsOf(app, orgId, runId)
    t.same(
      events.filter((e) => e.type === 'tool.call').map((e) => e.data.callId),
      ['a', 'c'],
      'the auto call after a waiting one has not run'
    )

    t.equal((await decide(app, cookie, runId, approvalIds[0], 'approve')).statusCode, 200)
    // one decision of two: the run still waits
    t.equal((await getRun(app, cookie, runId)).status, 'requires_action')
    const [row] = await app.db.select().from(runs).where(eq(runs.id, runId))
    t.equal(row!.status, 'requires_action')
    t.equal((await decide(app, cookie, runId, approvalIds[1], 'deny')).statusCode, 200)

    const done = await finishedRun(app, cookie, runId)
    t.equal(done.status, 'succeeded', done.error ?? '')
    events = await storedEventsOf(app, orgId, runId)
    t.same(
      events.filter((e) => e.type === 'tool.result').map((e) => [e.data.callId, e.data.status]),
      [
        ['a', 'ok'],
        ['b', 'ok'],
        ['c', 'denied']
      ]
    )
    const messages = model.requests[1]!.body.messages
    t.match(messages.slice(-3), [
      { role: 'tool', tool_call_id: 'a', content: /first/ },
      { role: 'tool', tool_call_id: 'b' },
      { role: 'tool', tool_call_id: 'c', content: 'the call was denied by a person' }
    ])
    t.equal(model.requests.length, 2)
  }
)

t.test("only the run's own person or an org admin decides its tool calls; another member gets 403", async (t) => {
  const { app, model, cookie: ownerCookie, orgId } = await setup(t)
  const person = async (role: 'admin' | 'member') => {
    const user = await signUp(app)
    await addMember(app, ownerCookie, orgId, user.user.email, role)
    return user.cookie
  }
  const [starter, colleague, admin] = [await person('member'), await person('member'), await person('admin')]
  const pendingOf = async (cookie: string) => {
    model.script.push(shellCall(COUNTED), { text: 'done' })
    const runId = await startRun(app, cookie, { prompt: 'run the counter', engine: 'openai' })
    const { approvalIds } = await waiting(app, orgId, runId)
    return { runId, approvalId: approvalIds[0] as string }
  }

  const first = await pendingOf(starter)
  for (const decision of ['approve', 'deny'] as const) {
    const refused = await decide(app, colleague, first.runId, first.approvalId, decision)
    t.equal(refused.statusCode, 403, `another member may not ${decision}`)
    t.same(refused.json(), {
      error: 'forbidden',
      message: 'only the person who started the run, or an organization owner or admin, may decide its tool calls'
    })
  }
  const [still] = await app.db.select().from(toolApprovals).where(eq(toolApprovals.id, first.approvalId))
  t.match(still, { status: 'pending', decidedBy: null }, 'nothing was decided')
  t.equal((await getRun(app, colleague, first.runId)).status, 'requires_action', 'the member still sees the run')
  const byAdmin = await decide(app, admin, first.runId, first.approvalId, 'approve')
  t.equal(byAdmin.statusCode, 200, 'an org admin decides any run of the org')
  t.equal((await finishedRun(app, starter, first.runId)).status, 'succeeded')

  const second = await pendingOf(starter)
  const own = await decide(app, starter, second.runId, second.approvalId, 'deny')
  t.equal(own.statusCode, 200, 'the person who started the run decides its calls')
  t.equal(own.json().approval.status, 'denied')
  t.equal((await finishedRun(app, starter, second.runId)).status, 'succeeded')
})

t.test(
  "an org's API key lists and decides a run's calls, recorded as key:<key id>; another org's key gets 404",
  async (t) => {
    const { app, model, cookie, orgId } = await setup(t)
    const key = await mintKey(app, cookie)
    const other = await signUpWithOrg(app)
    const otherKey = await mintKey(app, other.cookie)
    model.script.push(shellCall(COUNTED), { text: 'done' })
    const runId = await startRun(app, cookie, { prompt: 'run the counter', engine: 'openai' })
    const { approvalIds } = await waiting(app, orgId, runId)
    const approvalId = approvalIds[0] as string

    const listed = await app.inject({
      method: 'GET',
      url: `/api/runs/${runId}/approvals`,
      headers: { authorization: key.authorization }
    })
    t.equal(listed.statusCode, 200, listed.body)
    t.match(listed.json(), { items: [{ id: approvalId, status: 'pending', tool: 'shell' }], nextCursor: null })
    for (const url of [`/api/runs/${runId}/approvals`, `/api/runs/${runId}/approvals/${approvalId}`]) {
      const theirs = await app.inject({
        method: url.endsWith(approvalId) ? 'POST' : 'GET',
        url,
        headers: { authorization: otherKey.authorization },
        ...(url.endsWith(approvalId) ? { payload: { decision: 'approve' } } : {})
      })
      t.equal(theirs.statusCode, 404, `another org's key: ${url}`)
      t.same(theirs.json(), { error: 'not_found', message: 'no such run in this organization' })
    }
    const [untouched] = await app.db.select().from(toolApprovals).where(eq(toolApprovals.id, approvalId))
    t.match(untouched, { status: 'pending', decidedBy: null })

    const decided = await app.inject({
      method: 'POST',
      url: `/api/runs/${runId}/approvals/${approvalId}`,
      headers: { authorization: key.authorization },
      payload: { decision: 'approve' }
    })
    t.equal(decided.statusCode, 200, decided.body)
    t.match(decided.json().approval, { id: approvalId, status: 'approved', decidedBy: `key:${key.id}` })
    t.equal((await finishedRun(app, cookie, runId)).status, 'succeeded')
    const resolved = (await storedEventsOf(app, orgId, runId)).find((e) => e.type === 'approval.resolved')
    t.match(resolved?.data, { approvalId, status: 'approved', decidedBy: `key:${key.id}` })
    const again = await app.inject({
      method: 'POST',
      url: `/api/runs/${runId}/approvals/${approvalId}`,
      headers: { authorization: key.authorization },
      payload: { decision: 'deny' }
    })
    t.equal(again.statusCode, 409, 'a decided call stays decided')
  }
)

t.test(
  '?wait answers at once while a call waits for a person, and waits for the run to go on once every call is decided',
  async (t) => {
    const { model, a, next, cookie, org } = await firstOfTwo(t)
    model.script.push(
      {
        calls: [
          { id: 'a', name: 'shell', arguments: JSON.stringify({ command: 'echo a' }) },
          { id: 'b', name: 'shell', arguments: JSON.stringify({ command: 'echo b' }) }
        ]
      },
      { text: 'both ran' }
    )
    const runId = await startRun(a, cookie, { prompt: 'two calls', engine: 'openai' })
    const { approvalIds } = await waiting(a, org.id, runId)
    t.equal(approvalIds.length, 2)
    a.runs.kill()
    // an instance that runs nothing: a decided run stays requires_action until a worker takes it
    const b = await next({ RUN_WORKER_CONCURRENCY: '0' })
    const wait = (seconds: number) =>
      b.inject({ method: 'GET', url: `/api/runs/${runId}?wait=${seconds}`, headers: { cookie } })

    t.equal((await decide(b, cookie, runId, approvalIds[0], 'approve')).statusCode, 200)
    t.equal((await wait(60)).json().run.status, 'requires_action', 'one call still waits for a person: at once')

    t.equal((await decide(b, cookie, runId, approvalIds[1], 'approve')).statusCode, 200)
    const long = wait(60)
    const short = wait(1)
    const first = await Promise.race([long.then(() => 'long'), short.then(() => 'short')])
    t.equal(first, 'short', 'the long wait still waits: no worker has taken the run')
    t.equal((await short).json().run.status, 'requires_action', 'as it is when the seconds pass')

    await next()
    const done = (await long).json().run
    t.match(done, { status: 'succeeded', output: 'both ran' }, 'the wait answered when the run ended')
  }
)

t.test('an approval nobody decides expires: the run goes on and the model hears the call expired', async (t) => {
  const { app, model, cookie, orgId } = await setup(t, { TOOL_APPROVAL_TIMEOUT_MS: '1000' })
  model.script.push(shellCall(COUNTED), { text: 'nobody answered' })
  const runId = await startRun(app, cookie, { prompt: 'wait for nobody', engine: 'openai' })
  const { approvalIds } = await waiting(app, orgId, runId)
  const done = await finishedRun(app, cookie, runId)
  t.equal(done.status, 'succeeded', done.error ?? '')
  const [approval] = await app.db.select().from(toolApprovals).where(eq(toolApprovals.id, approvalIds[0]))
  t.equal(approval!.status, 'expired')
  t.match(model.requests[1]!.body.messages.at(-1), {
    role: 'tool',
    tool_call_id: 'call_1',
    content: 'the call expired without a decision'
  })
  const events = await storedEventsOf(app, orgId, runId)
  t.same(
    events.filter((e) => e.type === 'approval.expired').map((e) => e.data),
    [{ approvalId: approvalIds[0], callId: 'call_1', tool: 'shell' }],
    'one approval.expired event names the call'
  )
  t.match(events.find((e) => e.type === 'tool.result')!.data, {
    callId: 'call_1',
    status: 'expired',
    content: 'the call expired without a decision'
  })
  t.notOk(
    events.some((e) => e.type === 'approval.resolved'),
    'nobody decided it'
  )
  const late = await decide(app, cookie, runId, approvalIds[0], 'approve')
  t.equal(late.statusCode, 409)
})

t.test(
  "cancel ends a waiting run at once; the thread's next run may start; reject and interrupt see it as busy",
  async (t) => {
    const { app, model, cookie, orgId } = await setup(t, { RUN_WORKER_CONCURRENCY: '1' })
    model.script.push(shellCall('echo never'))
    const first = await startRun(app, cookie, { prompt: 'first', engine: 'openai' })
    const { approvalIds } = await waiting(app, orgId, first)

    const refused = await app.inject({
      method: 'POST',
      url: '/api/runs',
      headers: { cookie },
      payload: { prompt: 'next', engine: 'echo', rootRunId: first, multitask: 'reject' }
    })
    t.equal(refused.statusCode, 409)
    t.equal(refused.json().error, 'thread_busy')
    const queued = await startRun(app, cookie, { prompt: 'after it', engine: 'echo', rootRunId: first })
    // runs of one thread never overlap: the next waits for the waiting one
    await new Promise((resolve) => setTimeout(resolve, 300))
    t.equal((await getRun(app, cookie, queued)).status, 'queued')

    const cancel = await app.inject({ method: 'POST', url: `/api/runs/${first}/cancel`, headers: { cookie } })
    t.equal(cancel.statusCode, 200)
    t.equal(cancel.json().run.status, 'cancelled', 'cancelled in the answer itself')
    const [approval] = await app.db.select().from(toolApprovals).where(eq(toolApprovals.id, approvalIds[0]))
    t.equal(approval!.status, 'cancelled')
    const events = await storedEventsOf(app, orgId, first)
    t.match(events.at(-1), { type: 'run.cancelled', data: { reason: 'cancelled while waiting for approval' } })
    t.equal((await finishedRun(app, cookie, queued)).status, 'succeeded', 'the thread goes on')
    t.equal(model.requests.length, 1)

    // interrupt: a waiting run of the thread is cancelled as interrupted, its approval dropped
    model.script.push(shellCall('echo never'))
    const waitingRun = await startRun(app, cookie, { prompt: 'wait again', engine: 'openai', rootRunId: first })
    const again = await waiting(app, orgId, waitingRun)
    const interrupting = await startRun(app, cookie, {
      prompt: 'now',
      engine: 'echo',
      rootRunId: first,
      multitask: 'interrupt'
    })
    t.match(await finishedRun(app, cookie, waitingRun), { status: 'cancelled', error: 'interrupted' })
    const [dropped] = await app.db.select().from(toolApprovals).where(eq(toolApprovals.id, again.approvalIds[0]))
    t.equal(dropped!.status, 'cancelled')
    t.equal((await finishedRun(app, cookie, interrupting)).status, 'succeeded')
  }
)

t.test('one worker keeps executing other runs while 50 runs wait for people', async (t) => {
  const { app, cookie, orgId } = await setup(t, { RUN_WORKER_CONCURRENCY: '1' })
  // the model's empty script asks for a shell call every time: each run waits
  const waitingRuns: string[] = []
  for (let i = 0; i < 50; i++) waitingRuns.push(await startRun(app, cookie, { prompt: `wait ${i}`, engine: 'openai' }))
  await eventually(async () => {
    const rows = await app.db.select({ status: runs.status }).from(runs).where(eq(runs.orgId, orgId))
    return rows.filter((r) => r.status === 'requires_action').length === 50
  }, 60_000)
  const echoes: string[] = []
  for (let i = 0; i < 5; i++) echoes.push(await startRun(app, cookie, { prompt: `echo ${i}`, engine: 'echo' }))
  for (const id of echoes) t.equal((await finishedRun(app, cookie, id)).status, 'succeeded')
  const counted = (
    await app.inject({ method: 'GET', url: '/api/runs?status=requires_action&limit=100', headers: { cookie } })
  ).json()
  t.equal(counted.items.length, 50, 'all 50 still wait')
})

t.test('a decision made on instance B resumes a run that left instance A, after A died', async (t) => {
  const { model, a, next, cookie, org } = await firstOfTwo(t)
  model.script.push(shellCall(COUNTED), { text: 'resumed elsewhere' })
  const runId = await startRun(a, cookie, { prompt: 'start on A', engine: 'openai' })
  const { approvalIds } = await waiting(a, org.id, runId)
  // A dies (nothing more of it runs or writes); B starts only now
  a.runs.kill()
  const c = await next()
  t.equal((await decide(c, cookie, runId, approvalIds[0], 'approve')).statusCode, 200)
  const done = await finishedRun(c, cookie, runId)
  t.match(done, { status: 'succeeded', output: 'resumed elsewhere' })
  const results = (await storedEventsOf(c, org.id, runId)).filter((e) => e.type === 'tool.result')
  t.equal(results.length, 1)
  t.match(results[0]!.data.content, /executions: 1\n/)
  t.equal(model.requests.length, 2)
})

t.test("a run handed back after a tool call ran goes on from that call's result on the next instance", async (t) => {
  const { model, a, next, cookie, org } = await firstOfTwo(t)
  t.equal(
    (
      await a.inject({
        method: 'PUT',
        url: '/api/tools/policies/shell',
        headers: { cookie },
        payload: { mode: 'auto' }
      })
    ).statusCode,
    200
  )
  let answer!: () => void
  const held = new Promise<void>((resolve) => (answer = resolve))
  t.teardown(() => answer())
  // the call runs at once; the model's next answer is held until A has stopped
  model.script.push(shellCall(COUNTED), { text: 'never heard', after: held }, { text: 'went on' })
  const runId = await startRun(a, cookie, { prompt: 'count, then think', engine: 'openai' })
  await eventually(async () => model.requests.length === 2)
  await a.close()
  answer()
  const [row] = await a.db.select().from(runs).where(eq(runs.id, runId))
  t.equal(row!.status, 'queued', 'handed back')

  const b = await next()
  const done = await finishedRun(b, cookie, runId)
  t.match(done, { status: 'succeeded', output: 'went on' })
  const events = await storedEventsOf(b, org.id, runId)
  const results = events.filter((e) => e.type === 'tool.result')
  t.equal(results.length, 1, 'the call was not executed again')
  t.match(results[0]!.data.content, /executions: 1\n/)
  t.match(events.filter((e) => e.type === 'run.queued').at(-1), { data: { requeued: true } })
  t.match(events.filter((e) => e.type === 'run.started').at(-1), { data: { resumed: true } })
  t.equal(model.requests.length, 3)
  t.match(model.requests[2]!.body.messages.at(-1), { role: 'tool', tool_call_id: 'call_1', content: /executions: 1/ })
  t.equal(
    model.requests[2]!.body.messages.filter((m: { role: string }) => m.role === 'assistant').length,
    1,
    'the round that asked is in the conversation once'
  )
})
