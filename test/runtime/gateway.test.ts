import { existsSync } from 'node:fs'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { eq } from 'drizzle-orm'
import t from 'tap'
import { DEV_ORG, DEV_USER } from '../../src/auth/dev-org.js'
import { organizations } from '../../src/auth/tables.js'
import { newId } from '../../src/db/ids.js'
import { toolApprovals, toolCallAttempts } from '../../src/runtime/tables.js'
import { createTestDatabase } from '../helper.js'
import { buildRuntimeApp } from './group.js'
import { eventRecorder, fakeRuns, gatewaySetup } from './fakes.js'

const ORG = DEV_ORG.id

/** Each test gets its own run and thread, on one app for the file unless it asks for its own. */
const setup = gatewaySetup(t)

t.test('a shell call that needs approval is stored pending, is approved through the route and then runs', async (t) => {
  const { app, events, runId, threadId } = await setup()
  const args = JSON.stringify({ command: 'echo approved-output' })
  const asked = await app.runtime.gateway.execute({
    orgId: ORG,
    runId,
    callId: 'call-1',
    name: 'shell',
    arguments: args
  })
  t.match(asked, { callId: 'call-1', tool: 'shell', status: 'pending', content: '' }, 'answered at once: nothing waits')
  const approvalId = asked.approvalId!
  const requested = events.of(runId).find((e) => e.type === 'approval.requested')!
  t.match(requested.data, {
    approvalId,
    callId: 'call-1',
    tool: 'shell',
    arguments: { command: 'echo approved-output' }
  })

  const list = await app.inject({ method: 'GET', url: `/api/runs/${runId}/approvals` })
  t.equal(list.statusCode, 200)
  t.same(list.json().nextCursor, null)
  t.match(list.json().items, [
    {
      id: approvalId,
      runId,
      rootRunId: threadId,
      callId: 'call-1',
      tool: 'shell',
      status: 'pending',
      decidedBy: null,
      decidedAt: null
    }
  ])
  t.same(
    events.of(runId).map((e) => e.type),
    ['tool.call', 'approval.requested'],
    'nothing ran yet'
  )

  const decided = await app.inject({
    method: 'POST',
    url: `/api/runs/${runId}/approvals/${approvalId}`,
    payload: { decision: 'approve' }
  })
  t.equal(decided.statusCode, 200)
  t.match(decided.json().approval, { id: approvalId, status: 'approved', decidedBy: DEV_USER.id })

  const result = await app.runtime.gateway.execute({
    orgId: ORG,
    runId,
    callId: 'call-1',
    name: 'shell',
    arguments: args,
    approvalId
  })
  t.match(result, { callId: 'call-1', tool: 'shell', status: 'ok', truncated: false, approvalId })
  t.match(result.content, /^exit code 0\napproved-output\n$/)
  t.same(
    events.of(runId).map((e) => e.type),
    ['tool.call', 'approval.requested', 'approval.resolved', 'tool.result'],
    'the call is recorded once'
  )
  t.ok(
    events.of(runId).every((e) => e.orgId === ORG),
    "the events are the run's, in its org"
  )
  t.match(events.of(runId).at(-1)!.data, { callId: 'call-1', status: 'ok', content: result.content })

  const again = await app.inject({
    method: 'POST',
    url: `/api/runs/${runId}/approvals/${approvalId}`,
    payload: { decision: 'deny' }
  })
  t.equal(again.statusCode, 409, 'deciding twice is a conflict')
  t.same(again.json(), { error: 'conflict', message: 'the approval is already approved' })
  const [row] = await app.db.select().from(toolApprovals).where(eq(toolApprovals.id, approvalId))
  t.equal(row!.status, 'approved', 'the first decision stands')
})

t.test('a denied call does not run; the model is told a person denied it', async (t) => {
  const { app, events, runId, workspace } = await setup()
  const call = { orgId: ORG, runId, callId: 'c1', name: 'shell', arguments: { command: 'touch ran.txt' } }
  const asked = await app.runtime.gateway.execute(call)
  const res = await app.inject({
    method: 'POST',
    url: `/api/runs/${runId}/approvals/${asked.approvalId}`,
    payload: { decision: 'deny' }
  })
  t.equal(res.statusCode, 200)
  t.equal(res.json().approval.status, 'denied')
  const result = await app.runtime.gateway.execute({ ...call, approvalId: asked.approvalId! })
  t.match(result, { status: 'denied', content: 'the call was denied by a person' })
  t.notOk(existsSync(join(workspace, 'ran.txt')), 'the command never ran')
  t.match(events.of(runId).at(-1), { type: 'tool.result', data: { status: 'denied' } })
})

t.test('cancelling the run drops its pending call', async (t) => {
  const { app, runId } = await setup()
  const call = { orgId: ORG, runId, callId: 'c1', name: 'write_file', arguments: { path: 'a.txt', content: 'x' } }
  const asked = await app.runtime.gateway.execute(call)
  t.equal(await app.runtime.gateway.cancelRun(ORG, runId), 1)
  const result = await app.runtime.gateway.execute({ ...call, approvalId: asked.approvalId! })
  t.equal(result.status, 'cancelled')
  const [row] = await app.db.select().from(toolApprovals).where(eq(toolApprovals.id, asked.approvalId!))
  t.equal(row!.status, 'cancelled')
  const late = await app.inject({
    method: 'POST',
    url: `/api/runs/${runId}/approvals/${asked.approvalId}`,
    payload: { decision: 'approve' }
  })
  t.equal(late.statusCode, 409)
  t.equal(late.json().error, 'conflict')
})

t.test('an approval nobody decides expires, and is answered as expired without a decision', async (t) => {
  const { app, runId } = await setup({ t, env: { TOOL_APPROVAL_TIMEOUT_MS: '1000' } })
  const call = { orgId: ORG, runId, callId: 'c1', name: 'shell', arguments: { command: 'true' } }
  const asked = await app.runtime.gateway.execute(call)
  const [pending] = await app.db.select().from(toolApprovals).where(eq(toolApprovals.id, asked.approvalId!))
  // its time is a due time: nothing polls it; the run's worker asks again once it has passed
  while (Date.now() <= pending!.expiresAt.getTime())
    await new Promise((resolve) => setTimeout(resolve, pending!.expiresAt.getTime() - Date.now() + 5))
  const result = await app.runtime.gateway.execute({ ...call, approvalId: asked.approvalId! })
  t.match(result, { status: 'expired', content: 'the call expired without a decision' })
  const [row] = await app.db.select().from(toolApprovals).where(eq(toolApprovals.runId, runId))
  t.equal(row!.status, 'expired')
})

t.test('a decision made on another instance is the one the call goes by', async (t) => {
  const dataDir = await mkdtemp(join(tmpdir(), 'cairn-gateway-'))
  t.teardown(() => rm(dataDir, { recursive: true, force: true }))
  const db = await createTestDatabase(t)
  const runs = fakeRuns()
  const events = eventRecorder()
  const env = { DATA_DIR: dataDir, SANDBOX_UNCONFINED: 'true' }
  const a = await buildRuntimeApp(t, { db, env, runtime: { runs, events } })
  const b = await buildRuntimeApp(t, { db, env, runtime: { runs, events: eventRecorder() } })
  const runId = newId()
  runs.add(ORG, runId)
  const call = { orgId: ORG, runId, callId: 'c1', name: 'shell', arguments: { command: 'echo from-a' } }
  const asked = await a.runtime.gateway.execute(call)
  const res = await b.inject({
    method: 'POST',
    url: `/api/runs/${runId}/approvals/${asked.approvalId}`,
    payload: { decision: 'approve' }
  })
  t.equal(res.statusCode, 200)
  const result = await a.runtime.gateway.execute({ ...call, approvalId: asked.approvalId! })
  t.equal(result.status, 'ok')
  t.match(result.content, /from-a/)
})

t.test('approval routes: other orgs, unknown ids and bad input', async (t) => {
  const { app, runs, runId } = await setup()
  const otherOrg = newId()
  await app.db.insert(organizations).values({ id: otherOrg, name: 'Other', slug: `other-${otherOrg.slice(-8)}` })
  const foreignRun = newId()
  runs.add(otherOrg, foreignRun)
  const asked = await app.runtime.gateway.execute({
    orgId: otherOrg,
    runId: foreignRun,
    name: 'shell',
    arguments: { command: 'echo foreign' }
  })
  t.equal(asked.status, 'pending')
  const foreignApproval = asked.approvalId!

  const cases: Array<[string, string, unknown, number, string]> = [
    ['GET', `/api/runs/${foreignRun}/approvals`, undefined, 404, 'not_found'],
    ['POST', `/api/runs/${foreignRun}/approvals/${foreignApproval}`, { decision: 'approve' }, 404, 'not_found'],
    ['POST', `/api/runs/${runId}/approvals/${foreignApproval}`, { decision: 'approve' }, 404, 'not_found'],
    ['POST', `/api/runs/${runId}/approvals/${newId()}`, { decision: 'approve' }, 404, 'not_found'],
    ['POST', `/api/runs/${runId}/approvals/${newId()}`, { decision: 'maybe' }, 400, 'validation_failed'],
    [
      'POST',
      `/api/runs/${runId}/approvals/${newId()}`,
      { decision: 'approve', orgId: otherOrg },
      400,
      'server_owned_field'
    ],
    ['POST', `/api/runs/${runId}/approvals/${newId()}`, {}, 400, 'validation_failed'],
    ['POST', `/api/runs/${runId}/approvals/${newId()}`, [], 400, 'validation_failed'],
    ['POST', `/api/runs/${runId}/approvals/'%20or%201=1`, { decision: 'approve' }, 400, 'validation_failed'],
    ['GET', `/api/runs/${'x'.repeat(65)}/approvals`, undefined, 400, 'validation_failed'],
    ['GET', `/api/runs/${runId}/approvals?limit=0`, undefined, 400, 'validation_failed'],
    ['GET', `/api/runs/${runId}/approvals?limit=500`, undefined, 400, 'validation_failed'],
    ['PUT', '/api/tools/policies/rm_rf', { mode: 'auto' }, 400, 'validation_failed'],
    ['PUT', '/api/tools/policies/shell', { mode: 'never' }, 400, 'validation_failed'],
    ['PUT', '/api/tools/policies/shell', { mode: 'auto', orgId: otherOrg }, 400, 'server_owned_field']
  ]
  for (const [method, url, payload, status, error] of cases) {
    const res = await app.inject({
      method: method as 'GET',
      url,
      ...(payload === undefined ? {} : { payload: payload as object })
    })
    t.equal(res.statusCode, status, `${method} ${url} ${JSON.stringify(payload)}`)
    t.equal(res.json().error, error)
  }
  const malformed = await app.inject({
    method: 'POST',
    url: `/api/runs/${runId}/approvals/${foreignApproval}`,
    headers: { 'content-type': 'application/json' },
    payload: '{"decision":'
  })
  t.equal(malformed.statusCode, 400)
  t.equal(malformed.json().error, 'invalid_json')
  const huge = await app.inject({
    method: 'PUT',
    url: '/api/tools/policies/shell',
    headers: { 'content-type': 'application/json' },
    payload: JSON.stringify({ mode: 'x'.repeat(2 * 1024 * 1024) })
  })
  t.equal(huge.statusCode, 413)

  const [row] = await app.db.select().from(toolApprovals).where(eq(toolApprovals.id, foreignApproval))
  t.equal(row!.status, 'pending', "the other org's approval is untouched")
  const mine = await app.inject({ method: 'GET', url: `/api/runs/${runId}/approvals` })
  t.same(mine.json(), { items: [], nextCursor: null }, "lists never show another org's rows")
  t.equal(await app.runtime.gateway.cancelRun(otherOrg, foreignRun), 1)
  const [dropped] = await app.db.select().from(toolApprovals).where(eq(toolApprovals.id, foreignApproval))
  t.equal(dropped!.status, 'cancelled')
})

t.test('approvals are paged', async (t) => {
  const { app, runId } = await setup()
  for (const n of [1, 2, 3])
    t.equal(
      (
        await app.runtime.gateway.execute({
          orgId: ORG,
          runId,
          callId: `c${n}`,
          name: 'shell',
          arguments: { command: 'true' }
        })
      ).status,
      'pending'
    )
  const first = await app.inject({ method: 'GET', url: `/api/runs/${runId}/approvals?limit=2` })
  t.equal(first.json().items.length, 2)
  t.type(first.json().nextCursor, 'string')
  const second = await app.inject({
    method: 'GET',
    url: `/api/runs/${runId}/approvals?limit=2&cursor=${first.json().nextCursor}`
  })
  t.equal(second.json().items.length, 1)
  t.equal(second.json().nextCursor, null)
  const ids = [...first.json().items, ...second.json().items].map((a: { callId: string }) => a.callId).sort()
  t.same(ids, ['c1', 'c2', 'c3'])
  t.equal(await app.runtime.gateway.cancelRun(ORG, runId), 3)
  const rows = await app.db.select().from(toolApprovals).where(eq(toolApprovals.runId, runId))
  t.same(
    rows.map((r) => r.status),
    ['cancelled', 'cancelled', 'cancelled']
  )
})

t.test(
  'a call found started and never ended is not run again: answered as interrupted, once; an ended one gives its answer back',
  async (t) => {
    const { app, events, runId } = await setup()
    const gateway = app.runtime.gateway
    // its instance stopped under it: the start is stored, the end never was
    await app.db.insert(toolCallAttempts).values({ orgId: ORG, runId, round: 2, callId: 'c-int', approvalId: null })
    const call = { orgId: ORG, runId, callId: 'c-int', round: 2, name: 'list_files', arguments: '{}' }
    const interrupted = {
      status: 'interrupted',
      content: 'the call was interrupted by a restart and may have partly run'
    }
    t.match(await gateway.execute(call), interrupted)
    t.same(
      events.of(runId).map((e) => [e.type, e.data.status]),
      [['tool.result', 'interrupted']],
      'no tool.call again: it was announced where it started'
    )
    t.match(await gateway.execute(call), interrupted, 'asked again (a second hand-back), the same answer')
    t.equal(events.of(runId).length, 1, 'told once')

    // the same id in another round is another call: it runs
    const ran = await gateway.execute({ ...call, round: 3 })
    t.match(ran, { status: 'ok' })
    const [row] = await app.db.select().from(toolCallAttempts).where(eq(toolCallAttempts.round, 3))
    t.match(row, { runId, callId: 'c-int', status: 'ok', content: ran.content })
    t.ok(row!.endedAt, 'its end is stored')
    // its result was lost before the run stored it: the stored answer, not a second run
    t.same(await gateway.execute({ ...call, round: 3 }), ran)
    t.same(
      events
        .of(runId)
        .slice(1)
        .map((e) => e.type),
      ['tool.call', 'tool.result']
    )
  }
)
