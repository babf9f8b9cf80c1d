import { existsSync } from 'node:fs'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { eq } from 'drizzle-orm'
import t from 'tap'
import { DEV_ORG, DEV_USER } from '../../src/auth/dev-org.js'
import { organizations } from '../../src/auth/tables.js'
import { newId } from '../../src/db/ids.js'
import type { MemorySearch } from '../../src/runtime/ports.js'
import { toolApprovals } from '../../src/runtime/tables.js'
import { buildTestApp, createTestDatabase, type EnvOverrides, type Teardown } from '../helper.js'
import { eventRecorder, fakeRuns } from './fakes.js'

const ORG = DEV_ORG.id

async function setup(t: Teardown, env: EnvOverrides = {}, memory?: MemorySearch) {
  const dataDir = await mkdtemp(join(tmpdir(), 'cairn-gateway-'))
  t.teardown(() => rm(dataDir, { recursive: true, force: true }))
  const runs = fakeRuns()
  const events = eventRecorder()
  const app = await buildTestApp(t, { env: { DATA_DIR: dataDir, TOOL_APPROVAL_POLL_MS: '50', ...env }, runtime: { runs, events, ...(memory ? { memory } : {}) } })
  const runId = newId()
  const threadId = newId()
  runs.add(ORG, runId, threadId)
  return { app, runs, events, runId, threadId, dataDir, workspace: join(dataDir, 'sandboxes', ORG, threadId) }
}

t.test('a shell call that needs approval waits, is approved through the route and returns its output', async (t) => {
  const { app, events, runId, threadId } = await setup(t)
  const call = app.runtime.gateway.execute({ orgId: ORG, runId, callId: 'call-1', name: 'shell', arguments: JSON.stringify({ command: 'echo approved-output' }) })
  const requested = await events.next('approval.requested')
  const approvalId = requested.data.approvalId as string
  t.match(requested.data, { callId: 'call-1', tool: 'shell', arguments: { command: 'echo approved-output' } })

  const list = await app.inject({ method: 'GET', url: `/api/runs/${runId}/approvals` })
  t.equal(list.statusCode, 200)
  t.same(list.json().nextCursor, null)
  t.match(list.json().items, [{ id: approvalId, runId, rootRunId: threadId, callId: 'call-1', tool: 'shell', status: 'pending', decidedBy: null, decidedAt: null }])
  t.same(events.events.map((e) => e.type), ['tool.call', 'approval.requested'], 'nothing ran yet')

  const decided = await app.inject({ method: 'POST', url: `/api/runs/${runId}/approvals/${approvalId}`, payload: { decision: 'approve' } })
  t.equal(decided.statusCode, 200)
  t.match(decided.json().approval, { id: approvalId, status: 'approved', decidedBy: DEV_USER.id })

  const result = await call
  t.match(result, { callId: 'call-1', tool: 'shell', status: 'ok', truncated: false, approvalId })
  t.match(result.content, /^exit code 0\napproved-output\n$/)
  t.same(events.events.map((e) => e.type), ['tool.call', 'approval.requested', 'approval.resolved', 'tool.result'])
  t.ok(events.events.every((e) => e.orgId === ORG && e.runId === runId), 'events belong to the run')
  t.match(events.events.at(-1)!.data, { callId: 'call-1', status: 'ok', content: result.content })

  const again = await app.inject({ method: 'POST', url: `/api/runs/${runId}/approvals/${approvalId}`, payload: { decision: 'deny' } })
  t.equal(again.statusCode, 409, 'deciding twice is a conflict')
  t.same(again.json(), { error: 'conflict', message: 'the approval is already approved' })
  const [row] = await app.db.select().from(toolApprovals).where(eq(toolApprovals.id, approvalId))
  t.equal(row!.status, 'approved', 'the first decision stands')
})

t.test('a denied call does not run', async (t) => {
  const { app, events, runId, workspace } = await setup(t)
  const call = app.runtime.gateway.execute({ orgId: ORG, runId, name: 'shell', arguments: { command: 'touch ran.txt' } })
  const { data } = await events.next('approval.requested')
  const res = await app.inject({ method: 'POST', url: `/api/runs/${runId}/approvals/${data.approvalId}`, payload: { decision: 'deny' } })
  t.equal(res.statusCode, 200)
  t.equal(res.json().approval.status, 'denied')
  const result = await call
  t.equal(result.status, 'denied')
  t.notOk(existsSync(join(workspace, 'ran.txt')), 'the command never ran')
  t.match(events.events.at(-1), { type: 'tool.result', data: { status: 'denied' } })
})

t.test('cancelling the run drops its waiting call', async (t) => {
  const { app, events, runId } = await setup(t)
  const call = app.runtime.gateway.execute({ orgId: ORG, runId, name: 'write_file', arguments: { path: 'a.txt', content: 'x' } })
  const { data } = await events.next('approval.requested')
  t.equal(await app.runtime.gateway.cancelRun(ORG, runId), 1)
  const result = await call
  t.equal(result.status, 'cancelled')
  const [row] = await app.db.select().from(toolApprovals).where(eq(toolApprovals.id, data.approvalId as string))
  t.equal(row!.status, 'cancelled')
  const late = await app.inject({ method: 'POST', url: `/api/runs/${runId}/approvals/${data.approvalId}`, payload: { decision: 'approve' } })
  t.equal(late.statusCode, 409)
  t.equal(late.json().error, 'conflict')
})

t.test('cancelling the run stops a running command', async (t) => {
  const { app, runId } = await setup(t)
  await app.inject({ method: 'PUT', url: '/api/tools/policies/shell', payload: { mode: 'auto' } })
  const call = app.runtime.gateway.execute({ orgId: ORG, runId, name: 'shell', arguments: { command: 'echo started > started.txt; sleep 60' } })
  const deadline = Date.now() + 10_000
  while (app.runtime.sandboxes!.size === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20))
  await new Promise((r) => setTimeout(r, 200))
  await app.runtime.gateway.cancelRun(ORG, runId)
  const result = await call
  t.equal(result.status, 'cancelled')
})

t.test('an approval nobody decides expires', async (t) => {
  const { app, runId } = await setup(t, { TOOL_APPROVAL_TIMEOUT_MS: '1000' })
  const result = await app.runtime.gateway.execute({ orgId: ORG, runId, name: 'shell', arguments: { command: 'true' } })
  t.equal(result.status, 'expired')
  const [row] = await app.db.select().from(toolApprovals).where(eq(toolApprovals.runId, runId))
  t.equal(row!.status, 'expired')
})

t.test('policy auto runs at once; output is bounded', async (t) => {
  const { app, events, runId } = await setup(t, { TOOL_OUTPUT_MAX_BYTES: '1024' })
  const set = await app.inject({ method: 'PUT', url: '/api/tools/policies/shell', payload: { mode: 'auto' } })
  t.equal(set.statusCode, 200)
  t.match(set.json(), { tool: 'shell', mode: 'auto', isDefault: false })
  const result = await app.runtime.gateway.execute({ orgId: ORG, runId, name: 'shell', arguments: { command: 'head -c 100000 /dev/zero | tr "\\0" x' } })
  t.equal(result.status, 'ok')
  t.equal(result.approvalId, null)
  t.equal(result.truncated, true)
  t.ok(Buffer.byteLength(result.content) <= 1024, 'the content is within the bound')
  t.match(result.content, /^exit code 0\nxxxx/)
  t.same(events.events.map((e) => e.type), ['tool.call', 'tool.result'], 'no approval')
  t.ok(Buffer.byteLength(events.events[1]!.data.content as string) <= 1024, 'the recorded result is bounded too')
  t.equal((await app.db.select().from(toolApprovals)).length, 0)

  const policies = await app.inject({ method: 'GET', url: '/api/tools/policies' })
  t.equal(policies.statusCode, 200)
  const byTool = Object.fromEntries(policies.json().items.map((p: { tool: string; mode: string; isDefault: boolean }) => [p.tool, [p.mode, p.isDefault]]))
  t.same(byTool, {
    shell: ['auto', false], read_file: ['auto', true], write_file: ['approve', true], list_files: ['auto', true], memory_search: ['auto', true]
  })
})

t.test('file tools and memory_search run through the gateway', async (t) => {
  const searched: string[] = []
  const memory: MemorySearch = {
    async search(run, query, limit) {
      searched.push(`${run.orgId}:${run.rootRunId}:${query}:${limit}`)
      return [{ id: 'm1', content: 'the sky is blue', score: 0.9 }]
    }
  }
  const { app, runId, threadId } = await setup(t, {}, memory)
  await app.inject({ method: 'PUT', url: '/api/tools/policies/write_file', payload: { mode: 'auto' } })
  const gw = app.runtime.gateway
  t.match(await gw.execute({ orgId: ORG, runId, name: 'write_file', arguments: { path: 'docs/a.md', content: '# hi' } }), { status: 'ok', content: 'wrote 4 bytes to docs/a.md' })
  t.match(await gw.execute({ orgId: ORG, runId, name: 'read_file', arguments: '{"path":"docs/a.md"}' }), { status: 'ok', content: '# hi' })
  const listed = await gw.execute({ orgId: ORG, runId, name: 'list_files', arguments: {} })
  t.same(JSON.parse(listed.content), { entries: [{ name: 'docs', type: 'dir', size: 0 }] })
  t.match(await gw.execute({ orgId: ORG, runId, name: 'read_file', arguments: { path: '../../etc/passwd' } }), { status: 'error', content: /\.\./ })
  const found = await gw.execute({ orgId: ORG, runId, name: 'memory_search', arguments: { query: 'sky' } })
  t.same(JSON.parse(found.content), { items: [{ id: 'm1', content: 'the sky is blue', score: 0.9 }] })
  t.same(searched, [`${ORG}:${threadId}:sky:10`])

  // bad calls answer an error result and run nothing
  t.match(await gw.execute({ orgId: ORG, runId, name: 'rm_rf', arguments: {} }), { status: 'error', content: /unknown tool/ })
  t.match(await gw.execute({ orgId: ORG, runId, name: 'shell', arguments: '{not json' }), { status: 'error', content: /not a JSON object/ })
  t.match(await gw.execute({ orgId: ORG, runId, name: 'shell', arguments: { command: 'true', extra: 1 } }), { status: 'error', content: /invalid arguments/ })
  t.match(await gw.execute({ orgId: ORG, runId: newId(), name: 'shell', arguments: { command: 'true' } }), { status: 'error', content: /run does not exist/ })
  t.equal((await app.db.select().from(toolApprovals)).length, 0, 'no approval was asked for a bad call')

  const defs = gw.definitions()
  t.same(defs.map((d) => d.function.name), ['shell', 'read_file', 'write_file', 'list_files', 'memory_search'])
  t.match(defs[0], { type: 'function', function: { parameters: { type: 'object', required: ['command'], additionalProperties: false } } })
  t.equal(JSON.stringify(defs).includes('Symbol'), false)
})

t.test('a decision made on another instance wakes the waiting call', async (t) => {
  const dataDir = await mkdtemp(join(tmpdir(), 'cairn-gateway-'))
  t.teardown(() => rm(dataDir, { recursive: true, force: true }))
  const db = await createTestDatabase(t)
  const runs = fakeRuns()
  const events = eventRecorder()
  const env = { DATA_DIR: dataDir, TOOL_APPROVAL_POLL_MS: '50' }
  const a = await buildTestApp(t, { db, env, runtime: { runs, events } })
  const b = await buildTestApp(t, { db, env, runtime: { runs, events: eventRecorder() } })
  const runId = newId()
  runs.add(ORG, runId)
  const call = a.runtime.gateway.execute({ orgId: ORG, runId, name: 'shell', arguments: { command: 'echo from-a' } })
  const { data } = await events.next('approval.requested')
  const res = await b.inject({ method: 'POST', url: `/api/runs/${runId}/approvals/${data.approvalId}`, payload: { decision: 'approve' } })
  t.equal(res.statusCode, 200)
  const result = await call
  t.equal(result.status, 'ok')
  t.match(result.content, /from-a/)
})

t.test('approval routes: other orgs, unknown ids and bad input', async (t) => {
  const { app, runs, events, runId } = await setup(t)
  const otherOrg = newId()
  await app.db.insert(organizations).values({ id: otherOrg, name: 'Other', slug: `other-${otherOrg.slice(-8)}` })
  const foreignRun = newId()
  runs.add(otherOrg, foreignRun)
  const call = app.runtime.gateway.execute({ orgId: otherOrg, runId: foreignRun, name: 'shell', arguments: { command: 'echo foreign' } })
  const { data } = await events.next('approval.requested')
  const foreignApproval = data.approvalId as string

  const cases: Array<[string, string, unknown, number, string]> = [
    ['GET', `/api/runs/${foreignRun}/approvals`, undefined, 404, 'not_found'],
    ['POST', `/api/runs/${foreignRun}/approvals/${foreignApproval}`, { decision: 'approve' }, 404, 'not_found'],
    ['POST', `/api/runs/${runId}/approvals/${foreignApproval}`, { decision: 'approve' }, 404, 'not_found'],
    ['POST', `/api/runs/${runId}/approvals/${newId()}`, { decision: 'approve' }, 404, 'not_found'],
    ['POST', `/api/runs/${runId}/approvals/${newId()}`, { decision: 'maybe' }, 400, 'validation_failed'],
    ['POST', `/api/runs/${runId}/approvals/${newId()}`, { decision: 'approve', orgId: otherOrg }, 400, 'validation_failed'],
    ['POST', `/api/runs/${runId}/approvals/${newId()}`, {}, 400, 'validation_failed'],
    ['POST', `/api/runs/${runId}/approvals/${newId()}`, [], 400, 'validation_failed'],
    ['POST', `/api/runs/${runId}/approvals/'%20or%201=1`, { decision: 'approve' }, 400, 'validation_failed'],
    ['GET', `/api/runs/${'x'.repeat(65)}/approvals`, undefined, 400, 'validation_failed'],
    ['GET', `/api/runs/${runId}/approvals?limit=0`, undefined, 400, 'validation_failed'],
    ['GET', `/api/runs/${runId}/approvals?limit=500`, undefined, 400, 'validation_failed'],
    ['PUT', '/api/tools/policies/rm_rf', { mode: 'auto' }, 400, 'validation_failed'],
    ['PUT', '/api/tools/policies/shell', { mode: 'never' }, 400, 'validation_failed'],
    ['PUT', '/api/tools/policies/shell', { mode: 'auto', orgId: otherOrg }, 400, 'validation_failed']
  ]
  for (const [method, url, payload, status, error] of cases) {
    const res = await app.inject({ method: method as 'GET', url, ...(payload === undefined ? {} : { payload: payload as object }) })
    t.equal(res.statusCode, status, `${method} ${url} ${JSON.stringify(payload)}`)
    t.equal(res.json().error, error)
  }
  const malformed = await app.inject({ method: 'POST', url: `/api/runs/${runId}/approvals/${foreignApproval}`, headers: { 'content-type': 'application/json' }, payload: '{"decision":' })
  t.equal(malformed.statusCode, 400)
  t.equal(malformed.json().error, 'invalid_json')
  const huge = await app.inject({ method: 'PUT', url: '/api/tools/policies/shell', headers: { 'content-type': 'application/json' }, payload: JSON.stringify({ mode: 'x'.repeat(2 * 1024 * 1024) }) })
  t.equal(huge.statusCode, 413)

  const [row] = await app.db.select().from(toolApprovals).where(eq(toolApprovals.id, foreignApproval))
  t.equal(row!.status, 'pending', 'the other org\'s approval is untouched')
  const mine = await app.inject({ method: 'GET', url: `/api/runs/${runId}/approvals` })
  t.same(mine.json(), { items: [], nextCursor: null }, 'lists never show another org\'s rows')
  await app.runtime.gateway.cancelRun(otherOrg, foreignRun)
  t.equal((await call).status, 'cancelled')
})

t.test('approvals are paged', async (t) => {
  const { app, events, runId } = await setup(t)
  const calls = [1, 2, 3].map((n) => app.runtime.gateway.execute({ orgId: ORG, runId, callId: `c${n}`, name: 'shell', arguments: { command: 'true' } }))
  while (events.events.filter((e) => e.type === 'approval.requested').length < 3) await events.next('approval.requested').then(() => new Promise((r) => setTimeout(r, 10)))
  const first = await app.inject({ method: 'GET', url: `/api/runs/${runId}/approvals?limit=2` })
  t.equal(first.json().items.length, 2)
  t.type(first.json().nextCursor, 'string')
  const second = await app.inject({ method: 'GET', url: `/api/runs/${runId}/approvals?limit=2&cursor=${first.json().nextCursor}` })
  t.equal(second.json().items.length, 1)
  t.equal(second.json().nextCursor, null)
  const ids = [...first.json().items, ...second.json().items].map((a: { callId: string }) => a.callId).sort()
  t.same(ids, ['c1', 'c2', 'c3'])
  await app.runtime.gateway.cancelRun(ORG, runId)
  t.same((await Promise.all(calls)).map((r) => r.status), ['cancelled', 'cancelled', 'cancelled'])
})

t.test('/api/config shows the sandbox provider and the gateway capability', async (t) => {
  const { app } = await setup(t)
  const body = (await app.inject({ method: 'GET', url: '/api/config' })).json()
  t.equal(body.sandbox.provider, 'local')
  t.equal(body.capabilities.toolGateway, true)

  const none = await buildTestApp(t, { env: { SANDBOX_PROVIDER: 'none' }, runtime: { runs: fakeRuns() } })
  const off = (await none.inject({ method: 'GET', url: '/api/config' })).json()
  t.equal(off.sandbox.provider, 'none')
  t.equal(off.capabilities.toolGateway, false)
  const unwired = await buildTestApp(t, { env: { SANDBOX_PROVIDER: 'local' } })
  t.equal((await unwired.inject({ method: 'GET', url: '/api/config' })).json().capabilities.toolGateway, false, 'no runs group wired: no gateway')
})
